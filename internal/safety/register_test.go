//go:build linux

package safety

import (
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The register server: the protected resources and the history.
//
// It serves two resources to the contenders: a fenced register (every read
// and write carries the holder's token and is refused if the token is
// smaller than the largest seen, as fence.Register does; reads count too,
// so a newer holder's read fences an older holder's write) and an unfenced
// counter (it accepts everything and only records, for comparison, what a
// resource that does not check tokens would have suffered). A read serves
// both; so does a write. Contenders also report their lock events here.
//
// Every operation is recorded with its call and return times on the test's
// monotonic clock (handler entry, and after the register's state changed),
// and the register's state is guarded by one mutex, so the recorded order
// (Seq) is the order in which the register applied the operations.
//
// With pg set (pgfence_test.go), PostgreSQL decides the fenced
// operations instead: each is a transaction through fence.SQLGuard.Exec,
// run under the register's mutex, so that Seq is also PostgreSQL's order
// of them and the register records its decisions, not its own.

// readReq and writeReq are the contenders' requests.
type readReq struct {
	C    string `json:"c"`    // contender id
	Term string `json:"term"` // the contender's tenure: "c1/3"
	Tok  uint64 `json:"tok"`
}

type readResp struct {
	OK bool  `json:"ok"` // the fenced read was accepted
	F  int64 `json:"f"`  // fenced value (if OK)
	P  int64 `json:"p"`  // unfenced value
}

type writeReq struct {
	C    string `json:"c"`
	Term string `json:"term"`
	Tok  uint64 `json:"tok"`
	F    int64  `json:"f"`  // new fenced value
	P    int64  `json:"p"`  // new unfenced value
	PExp int64  `json:"pe"` // the unfenced value read before
	// Live is when (CLOCK_MONOTONIC, ns) the holder last saw its lease's
	// context live before this write: at the start of the round. VU is
	// the lease's ValidUntil at that moment, on the same clock (0: the
	// lock has none, the naive lock).
	Live int64 `json:"live,omitempty"`
	VU   int64 `json:"vu,omitempty"`
}

type writeResp struct {
	OK bool `json:"ok"`
	// Hold asks the holder to keep its lease until the lease's context
	// ends (bounded by holdMax): set for the tenure a fault hit, so that
	// the engine's own reaction (a step-down, a loss) ends it.
	Hold bool `json:"hold,omitempty"`
	// End asks the holder to end its tenure after this write (unless it
	// was asked to hold): see register.endTenure.
	End bool `json:"end,omitempty"`
	// Unhold asks a holder that was asked to hold to end its tenure after
	// this write: the row has waited out what the hold was for (see
	// register.unhold).
	Unhold bool `json:"unhold,omitempty"`
}

// eventReq is a lock event reported by a contender.
type eventReq struct {
	C    string `json:"c"`
	Kind string `json:"kind"` // locking, queued, acquired, releasing, released, stale, error, jumped
	Tok  uint64 `json:"tok"`
	Err  string `json:"err,omitempty"`
	// Cause is why a tenure ended ("releasing" only): one of the cause*
	// constants.
	Cause string `json:"cause,omitempty"`
	// Mono is the contender's CLOCK_MONOTONIC reading (ns) when the event
	// happened (for "acquired": just after Lock returned); VU the lease's
	// ValidUntil on the same clock ("acquired", "releasing"; 0: none).
	Mono int64 `json:"mono,omitempty"`
	VU   int64 `json:"vu,omitempty"`
}

// Why a tenure ended, as the contender reports it.
const (
	causeDone     = "done"     // it did its rounds and unlocked
	causeStepDown = "stepdown" // the context ended with ErrStepDown
	causeLost     = "lost"     // the context ended with ErrLost, not ErrStepDown
	causeStale    = "stale"    // the fenced register refused its token
	causeError    = "error"    // the register could not be reached
	causeTerm     = "term"     // SIGTERM: the scenario ended
)

// op is one recorded operation on the registers.
type op struct {
	Seq     int
	C, Term string
	Write   bool
	Tok     uint64
	// Call and Ret are on the test's clock, since the scenario started:
	// handler entry, and the moment the op was applied. Ret is taken
	// under the register's lock, so it never decreases along Seq (Call
	// may): scan the history backwards by Ret, never by Call.
	Call, Ret time.Duration
	OK        bool  // fenced op accepted
	FIn       int64 // write: the value written
	FOut      int64 // read: the value returned (if OK)
	FBefore   int64 // the fenced value before the op
	PStale    bool  // unfenced write with a token below the largest the counter saw
	PLost     bool  // unfenced write that overwrote an increment it had not read
	// Live and VU (writes of a lock with a ValidUntil; else HasVU is
	// false): the writer's report, on the test's clock (see writeReq).
	Live, VU time.Duration
	HasVU    bool
}

// event is one recorded lock event.
type event struct {
	eventReq
	At time.Duration // when the register received it
	// CAt and VUAt are Mono and VU on the test's clock (zero if not
	// reported).
	CAt, VUAt time.Duration
}

// trap fires inside the register's handler, under its lock, when an
// operation matches: it is how faults hit the holder at a chosen point of
// its read-modify-write (after its read, before its write) reproducibly.
type trap struct {
	onRead    bool // fire on a read (else on an accepted write)
	minWrites int  // ... by the holder of the largest token, once it has this many accepted writes
	// hold: from then on, the holder's write replies ask it to keep its
	// lease until the lease's context ends (writeResp.Hold).
	hold bool
	fire func(c, term string, tok uint64, at time.Duration)
	// ready, if set, must also hold for the write's contender and token;
	// it sees the events so far and the register's time, under its lock.
	ready func(evs []event, now time.Duration, c string, tok uint64) bool
}

// register is the server and the history.
type register struct {
	t     testing.TB
	start time.Time
	// startMono is CLOCK_MONOTONIC at start: the contenders run on this
	// machine, so their readings convert to the test's clock (mono).
	startMono int64
	srv       *http.Server
	ln        net.Listener
	done      chan struct{}

	mu       sync.Mutex
	fMax     uint64 // largest token the fenced register accepted
	fVal     int64
	pVal     int64
	pMaxTok  uint64         // largest token the unfenced counter was shown
	writesAt map[uint64]int // accepted fenced writes per token
	ops      []op
	events   []event
	trap     *trap
	holds    map[uint64]bool // tokens whose holders are asked to hold (writeResp.Hold)
	unheld   map[uint64]bool // tokens whose holds the row ended (writeResp.Unhold)
	ending   bool            // the next accepted write of the largest token is answered End
	changed  chan struct{}   // closed and replaced at every change
	// noFence makes the "fenced" register accept every token (for the
	// test that shows what the checker catches without fencing).
	noFence bool
	// pg, if set, keeps the fenced register in PostgreSQL and has it
	// decide every fenced operation through fence.SQLGuard
	// (pgfence_test.go); fMax and fVal then only mirror what it decided.
	pg *pgRegister
}

func newRegister(t testing.TB) *register {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &register{t: t, start: time.Now(), startMono: monoNow(), ln: ln, done: make(chan struct{}),
		writesAt: map[uint64]int{}, holds: map[uint64]bool{}, unheld: map[uint64]bool{}, changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /read", r.serveRead)
	mux.HandleFunc("POST /write", r.serveWrite)
	mux.HandleFunc("POST /event", r.serveEvent)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = r.srv.Close()
		<-r.done
	})
	return r
}

func (r *register) url() string { return "http://" + r.ln.Addr().String() }

func (r *register) now() time.Duration { return time.Since(r.start) }

// mono converts a contender's CLOCK_MONOTONIC reading to the test's clock.
func (r *register) mono(ns int64) time.Duration { return time.Duration(ns - r.startMono) }

// monoNow reads CLOCK_MONOTONIC, the clock of Go's monotonic readings on
// Linux, shared by every process on the machine.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux
	}
	return ts.Nano()
}

// fresh reports whether trap tr may fire on the tenure of tok: a trap that
// asks its holder to hold does not fire on a tenure an earlier round's trap
// already asked to, whose hold (holdMax TTLs from then) may be about to
// end on its own, which a row would take for the engine's reaction to its
// fault. r.mu is held.
func (r *register) fresh(tr *trap, tok uint64) bool { return !tr.hold || !r.holds[tok] }

// hold asks the holder of tok to keep its lease until its context ends.
func (r *register) hold(tok uint64) {
	r.mu.Lock()
	r.holds[tok] = true
	r.mu.Unlock()
}

// unhold asks the holder of tok, asked to hold, to end its tenure after
// its next accepted write, as a tenure that was never asked to hold ends
// on its own: for a row whose fault needs the hold only for a while.
func (r *register) unhold(tok uint64) {
	r.mu.Lock()
	r.unheld[tok] = true
	r.mu.Unlock()
}

// notify wakes every waiter; r.mu is held.
func (r *register) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func decode(w http.ResponseWriter, req *http.Request, v any) bool {
	if err := json.NewDecoder(req.Body).Decode(v); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (r *register) serveRead(w http.ResponseWriter, req *http.Request) {
	var in readReq
	if !decode(w, req, &in) {
		return
	}
	call := r.now()
	r.mu.Lock()
	o := op{Seq: len(r.ops), C: in.C, Term: in.Term, Tok: in.Tok, Call: call, FBefore: r.fVal}
	var out readResp
	ok, f, err := r.fencedRead(in.Tok)
	if err != nil {
		r.mu.Unlock()
		r.undecided(w, "read", in.Term, in.Tok, err)
		return
	}
	if ok {
		r.fMax = max(r.fMax, in.Tok)
		o.OK, o.FOut = true, f
		out.OK, out.F = true, f
	}
	out.P = r.pVal
	r.pMaxTok = max(r.pMaxTok, in.Tok)
	o.Ret = r.now()
	r.ops = append(r.ops, o)
	if tr := r.trap; tr != nil && tr.onRead && o.OK && in.Tok == r.fMax && r.writesAt[in.Tok] >= tr.minWrites && r.fresh(tr, in.Tok) {
		r.trap = nil
		r.holds[in.Tok] = r.holds[in.Tok] || tr.hold
		tr.fire(in.C, in.Term, in.Tok, r.now())
	}
	r.notify()
	r.mu.Unlock()
	reply(w, out)
}

func (r *register) serveWrite(w http.ResponseWriter, req *http.Request) {
	var in writeReq
	if !decode(w, req, &in) {
		return
	}
	call := r.now()
	r.mu.Lock()
	o := op{Seq: len(r.ops), C: in.C, Term: in.Term, Tok: in.Tok, Write: true, Call: call, FIn: in.F, FBefore: r.fVal}
	if in.VU != 0 {
		o.Live, o.VU, o.HasVU = r.mono(in.Live), r.mono(in.VU), true
	}
	ok, before, err := r.fencedWrite(o.Seq, in.Tok, in.F)
	if err != nil {
		r.mu.Unlock()
		r.undecided(w, "write", in.Term, in.Tok, err)
		return
	}
	if ok {
		r.fMax, r.fVal = max(r.fMax, in.Tok), in.F
		o.OK, o.FBefore = true, before
		r.writesAt[in.Tok]++
	}
	// The unfenced counter takes every write; it only records what went
	// wrong.
	o.PStale = in.Tok < r.pMaxTok
	o.PLost = in.PExp != r.pVal
	r.pVal = in.P
	r.pMaxTok = max(r.pMaxTok, in.Tok)
	o.Ret = r.now()
	r.ops = append(r.ops, o)
	if tr := r.trap; tr != nil && !tr.onRead && o.OK && r.writesAt[in.Tok] >= tr.minWrites && r.fresh(tr, in.Tok) &&
		(tr.ready == nil || tr.ready(r.events, r.now(), in.C, in.Tok)) {
		r.trap = nil
		r.holds[in.Tok] = r.holds[in.Tok] || tr.hold
		tr.fire(in.C, in.Term, in.Tok, r.now())
	}
	hold, unhold := r.holds[in.Tok], o.OK && r.unheld[in.Tok]
	end := r.ending && o.OK && in.Tok == r.fMax
	r.ending = r.ending && !end
	r.notify()
	r.mu.Unlock()
	reply(w, writeResp{OK: o.OK, Hold: hold, End: end, Unhold: unhold})
}

// fencedRead decides a fenced read with tok, and returns the value it
// read if it accepted it: in memory, or by PostgreSQL (r.pg). r.mu is
// held.
func (r *register) fencedRead(tok uint64) (bool, int64, error) {
	if r.pg != nil {
		return r.pg.read(tok)
	}
	return tok >= r.fMax || r.noFence, r.fVal, nil
}

// fencedWrite decides the fenced write of val with tok, op seq of the
// history, and returns whether it was accepted and, if so, the value it
// overwrote. r.mu is held.
func (r *register) fencedWrite(seq int, tok uint64, val int64) (bool, int64, error) {
	if r.pg != nil {
		return r.pg.write(seq, tok, val)
	}
	return tok >= r.fMax || r.noFence, r.fVal, nil
}

// undecided fails the row for a fenced operation (kind) that PostgreSQL
// did not decide, and answers the contender with the error.
func (r *register) undecided(w http.ResponseWriter, kind, term string, tok uint64, err error) {
	r.t.Errorf("the fenced %s of %s with token %d was not decided: %v", kind, term, tok, err)
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

// endTenure asks the holder of the largest token to end its tenure at its
// next accepted write, so that the lock changes hands soon (stopWaiter).
func (r *register) endTenure() {
	r.mu.Lock()
	r.ending = true
	r.mu.Unlock()
}

func (r *register) serveEvent(w http.ResponseWriter, req *http.Request) {
	var in eventReq
	if !decode(w, req, &in) {
		return
	}
	ev := event{eventReq: in, At: r.now()}
	if in.Mono != 0 {
		ev.CAt = r.mono(in.Mono)
	}
	if in.VU != 0 {
		ev.VUAt = r.mono(in.VU)
	}
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.notify()
	r.mu.Unlock()
	reply(w, struct{}{})
}

// setTrap arms tr (replacing any armed trap).
func (r *register) setTrap(tr *trap) {
	r.mu.Lock()
	r.trap = tr
	r.mu.Unlock()
}

// snapshot is a read-only view of the register's state for await.
type snapshot struct {
	fMax     uint64
	writesAt map[uint64]int
	ops      []op
	events   []event
}

// await waits until cond holds on the register's state, or fails the test
// after timeout naming what it waited for.
func (r *register) await(what string, timeout time.Duration, cond func(s *snapshot) bool) {
	r.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		s := &snapshot{fMax: r.fMax, writesAt: r.writesAt, ops: r.ops, events: r.events}
		ok, changed := cond(s), r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			r.t.Fatalf("waited %v for %s", timeout, what)
		}
	}
}

// awaitQuiet waits until cond holds or timeout passes, and reports which.
func (r *register) awaitQuiet(timeout time.Duration, cond func(s *snapshot) bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		s := &snapshot{fMax: r.fMax, writesAt: r.writesAt, ops: r.ops, events: r.events}
		ok, changed := cond(s), r.changed
		r.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		}
	}
}

// history returns a copy of the recorded operations and events.
func (r *register) history() ([]op, []event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]op(nil), r.ops...), append([]event(nil), r.events...)
}

// holderTok returns the largest token the fenced register accepted.
func (r *register) holderTok() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fMax
}
