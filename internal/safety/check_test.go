//go:build linux

package safety

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// result is what one scenario measured: a row of the report.
type result struct {
	backend, fault string
	variant        string // see scenario.variant
	ops            int    // operations on the fenced register (reads and writes)
	acquisitions   int
	faults         int
	staleWrites    int // fenced writes refused: stale writes attempted
	staleReads     int // fenced reads refused
	staleAccepted  int // must be 0
	plainLost      int // lost updates on the unfenced counter
	plainStale     int // writes with an older holder's token the unfenced counter took
	twoHolders     int // pairs of tenures interleaved on the unfenced counter
	takeovers      []time.Duration
	margins        []time.Duration // partition: from the holder's step-down to the successor's acquisition
	linearizable   string
	elapsed        time.Duration

	// What the harness did, for the checks that depend on it.
	disturbed []disturbance   // faults that may end a tenure early
	paused    map[string]bool // tenures (terms) stopped by SIGSTOP: their late writes overlap by design
	// waiterStops are the waiters stopped by faultStopWait.
	waiterStops []waiterStop
	// incomplete: a wait timed out; the checker reports what the history
	// shows, not what the scenario failed to produce.
	incomplete bool
	// faultsTracked: the harness recorded in disturbed every fault that
	// may end a tenure (harness.run does), so checkEnds applies.
	faultsTracked bool

	overlaps   int // pairs of tenures interleaved on the registers, paused tenures aside: must be 0
	lostExcl   int // lost updates on the unfenced counter not caused by a paused holder: must be 0
	liveLate   int // writes whose holder saw its lease live after its ValidUntil: must be 0
	deadBorn   int // acquisitions reported past their own renew deadline (beyond liveSlack): must be 0
	earlyTakes int // acquisitions before a predecessor that was still working had reached its ValidUntil: must be 0
	badEnds    int // tenures that ended by a step-down, a loss or a refused token without a fault on their contender: must be 0
	ends       map[string]int
}

// disturbance is a fault that may end the tenures of contender c (every
// contender if c is "") between from and to (the test's clock): a pause, a
// cut, a store restart, throttling, the lock object's deletion.
type disturbance struct {
	c        string
	from, to time.Duration
	what     string
}

// disturbedAt reports whether a fault may have ended c's tenure at t.
func (r *result) disturbedAt(c string, t time.Duration) bool {
	for _, d := range r.disturbed {
		if (d.c == "" || d.c == c) && t >= d.from && t <= d.to {
			return true
		}
	}
	return false
}

// reporter is the part of *testing.T the checker uses, so that its own
// test can catch what it reports.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// tolerated reports the exclusion checks (two holders at once, an early
// takeover, a lost update) of a row whose store is known not to keep its
// leases under the row's fault, for the reason why: they are logged, not
// failures. The fencing checks (no stale write accepted, no token twice,
// linearizable) stay errors.
type tolerated struct {
	reporter
	why string
}

func (r tolerated) Errorf(format string, args ...any) {
	r.Helper()
	r.Logf("tolerated (%s): "+format, append([]any{r.why}, args...)...)
}

// checkHistory checks the recorded history of one scenario; see the
// package documentation for what each check means.
func checkHistory(t reporter, be *backendEnv, sc scenario, ops []op, evs []event, res *result) {
	t.Helper()
	res.ops = len(ops)
	excl := t
	if sc.storeOverlap != "" {
		excl = tolerated{t, sc.storeOverlap}
	}

	// 1. The fenced register never accepted a stale token, and never
	//    refused a current one: accepted tokens never go down.
	var top uint64
	var accepted int
	for _, o := range ops {
		switch {
		case o.OK && o.Tok < top:
			res.staleAccepted++
			t.Errorf("stale op accepted: %+v after token %d", o, top)
		case o.OK:
			top = o.Tok
			accepted++
		case o.Tok >= top:
			t.Errorf("op with the current token refused: %+v (largest accepted %d)", o, top)
		case o.Write:
			res.staleWrites++
		default:
			res.staleReads++
		}
		if o.Write {
			if o.PLost {
				res.plainLost++
			}
			if o.PStale {
				res.plainStale++
			}
		}
	}
	// 2. Never two holders in one interval as the register sees them: the
	//    accepted operations of each token form one contiguous run, each
	//    run belongs to one tenure, and no increment was lost.
	type span struct {
		first, last int
		term        string
	}
	spans := map[uint64]*span{}
	reused := map[uint64]int{} // ops of a second tenure per token (reported twice)
	var order []uint64
	for _, o := range ops {
		if !o.OK {
			continue
		}
		s, ok := spans[o.Tok]
		if !ok {
			spans[o.Tok] = &span{first: o.Seq, last: o.Seq, term: o.Term}
			order = append(order, o.Tok)
			continue
		}
		if s.term != o.Term {
			if reused[o.Tok]++; reused[o.Tok] <= 2 {
				t.Errorf("token %d used by two tenures: %s and %s (op %d)", o.Tok, s.term, o.Term, o.Seq)
			}
		}
		s.last = o.Seq
	}
	for i := 1; i < len(order); i++ {
		a, b := spans[order[i-1]], spans[order[i]]
		if b.first < a.last {
			t.Errorf("two holders at once on the fenced register: token %d (ops %d..%d) and token %d (ops %d..%d)",
				order[i-1], a.first, a.last, order[i], b.first, b.last)
		}
	}
	for _, o := range ops {
		if o.Write && o.OK && o.FIn != o.FBefore+1 {
			t.Errorf("lost update on the fenced register: op %d wrote %d over %d", o.Seq, o.FIn, o.FBefore)
		}
	}

	// 3. Tokens strictly increase per lock, as acquired: unique, and an
	//    acquisition that started after another was reported has a larger
	//    token.
	type acq struct {
		c        string
		tok      uint64
		locking  time.Duration
		acquired time.Duration
	}
	var acqs []acq
	lockingAt := map[string]time.Duration{}
	seen := map[uint64]string{}
	for _, e := range evs {
		switch e.Kind {
		case "locking":
			lockingAt[e.C] = e.At
		case "acquired":
			if other, dup := seen[e.Tok]; dup {
				t.Errorf("token %d granted twice: to %s and %s", e.Tok, other, e.C)
			}
			seen[e.Tok] = e.C
			acqs = append(acqs, acq{e.C, e.Tok, lockingAt[e.C], e.At})
		case "error":
			t.Errorf("contender %s reported an error: %s", e.C, e.Err)
		}
	}
	res.acquisitions = len(acqs)
	for _, y := range acqs {
		for _, x := range acqs {
			if x.acquired < y.locking && y.tok <= x.tok {
				t.Errorf("token order: %s acquired token %d at %v, and %s, which started locking later (%v), got %d",
					x.c, x.tok, x.acquired, y.c, y.locking, y.tok)
			}
		}
	}

	// What the unfenced counter saw: pairs of tenures whose operations
	// interleave (two holders at once, as a resource that does not check
	// tokens sees them).
	res.twoHolders = countInterleavings(ops)

	// 3a. Never two holders at once as the registers see them, refused
	//     operations included: no two tenures interleave and no increment
	//     of the unfenced counter is lost, except where a paused holder's
	//     late write (refused by the fenced register) is involved.
	checkOverlaps(excl, ops, res)

	// 3b. Validity: a holder never sees its lease live after its
	//     ValidUntil; nobody acquires while a holder that has not stopped
	//     is still within its ValidUntil; a tenure ends by a step-down, a
	//     loss or a refused token only under a fault on its contender.
	tens := tenuresOf(evs)
	checkValidity(t, excl, be.ttl, ops, tens, res)
	checkEnds(t, tens, res)

	// 4. The fenced register's history is linearizable for a register
	//    that accepts an operation only if its token is at least the
	//    largest accepted.
	res.linearizable = checkLinearizable(t, ops)

	// 5. What the faults must show: a paused holder did try to write with
	//    its old token (and the unfenced counter took it); without a pause
	//    the holder stopped before anyone else started, so even the
	//    unfenced counter saw no older holder's write.
	switch sc.fault {
	case faultStopAny:
		// A pause at a random instant may or may not fall between a read
		// and its write: stale writes may come, none may be accepted.
	case faultStopWait:
		// Only a tenure the stop caught holding (paused) may write late.
		for _, o := range ops {
			if o.Write && o.PStale && !res.paused[o.Term] {
				excl.Errorf("write by %s (tenure %s, token %d) with an older token reached the unfenced counter: a waiter stopped and resumed worked on a stale grant", o.C, o.Term, o.Tok)
			}
		}
	case faultStop:
		if res.staleWrites < sc.rounds && !res.incomplete {
			t.Errorf("%d stale writes attempted, want at least one per pause (%d)", res.staleWrites, sc.rounds)
		}
	default:
		if res.plainStale > 0 {
			excl.Errorf("%d writes by an older holder reached the unfenced counter: a holder kept working after a successor started", res.plainStale)
		}
	}
	if res.staleAccepted > 0 {
		t.Errorf("%d stale writes accepted", res.staleAccepted)
	}
	if res.incomplete && res.staleWrites < sc.rounds && sc.fault == faultStop {
		t.Logf("(the scenario stopped early: fewer stale writes than pauses is not reported separately)")
	}
	t.Logf("%s / %s: %d ops, %d acquisitions, %d faults, %d stale writes refused (%d reads), %d accepted; unfenced: %d lost updates, %d stale writes; takeovers %v; step-down to takeover %v; %s; tenure ends %v",
		be.name, sc.fault, res.ops, res.acquisitions, res.faults, res.staleWrites, res.staleReads, res.staleAccepted,
		res.plainLost, res.plainStale, roundAll(res.takeovers), roundAll(res.margins), res.linearizable, res.ends)
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// The porcupine model: a fenced register.
type regState struct {
	max uint64
	val int64
}

type regIn struct {
	write bool
	tok   uint64
	val   int64
}

type regOut struct {
	ok  bool
	val int64
}

var fencedModel = porcupine.Model{
	Init: func() any { return regState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(regState), input.(regIn), output.(regOut)
		if in.tok < s.max {
			return !out.ok, s
		}
		if in.write {
			return out.ok, regState{in.tok, in.val}
		}
		return out.ok && out.val == s.val, regState{in.tok, s.val}
	},
	Equal: func(a, b any) bool { return a == b },
	DescribeOperation: func(input, output any) string {
		in, out := input.(regIn), output.(regOut)
		if in.write {
			return fmt.Sprintf("write(%d, tok %d) -> %v", in.val, in.tok, out.ok)
		}
		return fmt.Sprintf("read(tok %d) -> %v %d", in.tok, out.ok, out.val)
	},
}

// checkLinearizable checks the fenced register's history with porcupine,
// using the call and return times the register recorded.
func checkLinearizable(t reporter, ops []op) string {
	t.Helper()
	hist := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		in := regIn{write: o.Write, tok: o.Tok, val: o.FIn}
		out := regOut{ok: o.OK, val: o.FOut}
		id, _ := strconv.Atoi(strings.TrimPrefix(o.C, "c"))
		hist = append(hist, porcupine.Operation{ClientId: id, Input: in, Output: out, Call: int64(o.Call), Return: int64(o.Ret)})
	}
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(fencedModel, hist, time.Minute)
	took := time.Since(start).Round(time.Millisecond)
	switch res {
	case porcupine.Ok:
		return fmt.Sprintf("linearizable (%d ops, checked in %v)", len(hist), took)
	case porcupine.Illegal:
		t.Errorf("the fenced register's history (%d ops) is not linearizable", len(hist))
		return "NOT linearizable"
	default:
		t.Errorf("porcupine gave no answer within a minute on %d ops", len(hist))
		return "unknown"
	}
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// checkOverlaps counts the pairs of tenures whose operations (accepted or
// refused) interleave, and the unfenced counter's lost updates, leaving
// out what a paused holder's late write explains; both must be 0.
func checkOverlaps(t reporter, ops []op, res *result) {
	t.Helper()
	type span struct{ first, last int }
	spans := map[string]*span{}
	var terms []string
	for _, o := range ops {
		if s, ok := spans[o.Term]; ok {
			s.last = o.Seq
		} else {
			spans[o.Term] = &span{o.Seq, o.Seq}
			terms = append(terms, o.Term)
		}
	}
	for i, a := range terms {
		for _, b := range terms[i+1:] {
			sa, sb := spans[a], spans[b]
			if sa.first < sb.last && sb.first < sa.last && !res.paused[a] && !res.paused[b] {
				res.overlaps++
				if res.overlaps <= 3 {
					t.Errorf("two holders at once: tenures %s (ops %d..%d) and %s (ops %d..%d) interleave on the registers",
						a, sa.first, sa.last, b, sb.first, sb.last)
				}
			}
		}
	}
	// A lost update is excused only if the write is a paused holder's,
	// or a paused holder's write came between this write and the read
	// it goes with.
	lastOp := map[string]int{} // term -> seq of its previous op
	var pausedWrites []int
	for _, o := range ops {
		prev, hasPrev := lastOp[o.Term]
		lastOp[o.Term] = o.Seq
		if !o.Write {
			continue
		}
		if res.paused[o.Term] {
			pausedWrites = append(pausedWrites, o.Seq)
			continue
		}
		if !o.PLost {
			continue
		}
		excused := false
		for _, w := range pausedWrites {
			if hasPrev && w > prev && w < o.Seq {
				excused = true
			}
		}
		if !excused {
			res.lostExcl++
			if res.lostExcl <= 3 {
				t.Errorf("lost update on the unfenced counter: op %d (tenure %s, token %d) overwrote an increment it had not read, with no paused holder involved", o.Seq, o.Term, o.Tok)
			}
		}
	}
	if res.overlaps > 3 || res.lostExcl > 3 {
		t.Errorf("in all: %d pairs of tenures interleaved, %d lost updates", res.overlaps, res.lostExcl)
	}
}

// tenure is one acquisition as the contender reported it.
type tenure struct {
	c, term string
	tok     uint64
	acq     time.Duration // the contender's clock reading just after Lock returned (test's clock)
	vu0     time.Duration // its ValidUntil then (0: none)
	vu      time.Duration // the largest ValidUntil it reported (0: none)
	end     *event        // its "releasing" event, if it came
}

// tenuresOf rebuilds the tenures from the events: a contender's n-th
// "acquired" is its tenure c/n (its term), ended by the "releasing" that
// follows it.
func tenuresOf(evs []event) []*tenure {
	var out []*tenure
	cur := map[string]*tenure{}
	count := map[string]int{}
	for i := range evs {
		e := &evs[i]
		switch e.Kind {
		case "acquired":
			count[e.C]++
			tn := &tenure{c: e.C, term: fmt.Sprintf("%s/%d", e.C, count[e.C]), tok: e.Tok, acq: e.CAt, vu0: e.VUAt, vu: e.VUAt}
			if e.CAt == 0 {
				tn.acq = e.At
			}
			cur[e.C] = tn
			out = append(out, tn)
		case "releasing":
			if tn := cur[e.C]; tn != nil && tn.end == nil {
				tn.end = e
				tn.vu = max(tn.vu, e.VUAt)
			}
		}
	}
	return out
}

// liveSlack is how long after its ValidUntil a holder may still see its
// lease's context live before the checker reports it: the keeper ends the
// context at the renew deadline, a third of the TTL before ValidUntil,
// from a timer; on a machine so loaded that the timer's goroutine waits
// longer than that, the context ends late. A holder that never steps down
// goes on for seconds. 250 ms held on a quiet machine; with a second test
// run beside the suite (2 cores) a keeper was seen 603 ms late, so the
// slack is 1 s.
const liveSlack = time.Second

// stoppedWaiting reports whether waiter c was stopped (faultStopWait)
// between from and to: an acquisition it reported then may come late
// because the stop, not the engine, delayed its report.
func (r *result) stoppedWaiting(c string, from, to time.Duration) bool {
	for _, ws := range r.waiterStops {
		if ws.c == c && ws.at >= from && ws.at <= to {
			return true
		}
	}
	return false
}

// checkValidity checks the holders' ValidUntil, on the machine's
// monotonic clock (the contenders are processes on this machine): a write
// whose holder saw its lease live after its ValidUntil, an acquisition
// reported past its renew deadline, and an acquisition while another
// holder, not yet stopped, was within its ValidUntil. A holder that
// reported the end of its tenure before the acquisition had stopped; one
// killed, paused or still working had not.
func checkValidity(t, excl reporter, ttl time.Duration, ops []op, tens []*tenure, res *result) {
	t.Helper()
	byTerm := map[string]*tenure{}
	for _, tn := range tens {
		byTerm[tn.term] = tn
	}
	for _, o := range ops {
		if !o.HasVU {
			continue
		}
		if tn := byTerm[o.Term]; tn != nil {
			tn.vu = max(tn.vu, o.VU)
		}
		// (A paused holder may see its lease live on resuming, before
		// its keeper has run: the pause, not the engine, explains it.)
		if o.Live > o.VU+liveSlack && !res.paused[o.Term] {
			res.liveLate++
			if res.liveLate <= 3 {
				t.Errorf("tenure %s (token %d) saw its lease live at %v, %v after its ValidUntil %v, and wrote (op %d)",
					o.Term, o.Tok, o.Live, (o.Live - o.VU).Round(time.Millisecond), o.VU, o.Seq)
			}
		}
	}
	// A lease handed out past its renew deadline (a grant that came long
	// after its request was sent) is live until its keeper first runs,
	// with less than the deadline's margin before ValidUntil: the engine
	// must refuse such a grant, not count on the keeper. The deadline is
	// the engine's default, 2/3 of the TTL after the send time that
	// ValidUntil counts from (TTL minus the margin before it).
	for _, tn := range tens {
		deadline := tn.vu0 - (ttl - engineMargin(ttl)) + ttl*2/3
		if tn.vu0 != 0 && tn.acq > deadline+liveSlack && !res.paused[tn.term] && !res.stoppedWaiting(tn.c, tn.vu0-ttl, tn.acq) {
			res.deadBorn++
			if res.deadBorn <= 3 {
				t.Errorf("tenure %s (token %d) was acquired at %v, %v after its renew deadline %v (ValidUntil %v): a grant that came too late was handed out",
					tn.term, tn.tok, tn.acq, (tn.acq - deadline).Round(time.Millisecond), deadline, tn.vu0)
			}
		}
	}
	for _, b := range tens {
		for _, a := range tens {
			if a == b || a.vu == 0 || a.acq >= b.acq || a.end != nil && a.end.CAt <= b.acq {
				continue
			}
			if a.vu > b.acq {
				res.earlyTakes++
				if res.earlyTakes <= 3 {
					excl.Errorf("early takeover: %s acquired token %d at %v while %s (token %d), not yet stopped, was valid until %v (%v later)",
						b.term, b.tok, b.acq, a.term, a.tok, a.vu, (a.vu - b.acq).Round(time.Millisecond))
				}
			}
		}
	}
}

// checkEnds checks why each tenure ended: by its own unlock or the end of
// the scenario, or, only while a fault hit its contender, by a loss, a
// refused token or an unreachable register. A step-down is only logged
// when no fault explains it: on a busy machine a holder's renewals can
// miss the renew deadline, and stepping down then is the engine keeping
// its promise, not breaking one (exclusivity is checked elsewhere).
func checkEnds(t reporter, tens []*tenure, res *result) {
	t.Helper()
	res.ends = map[string]int{}
	for _, tn := range tens {
		if tn.end == nil {
			continue
		}
		cause := tn.end.Cause
		res.ends[cause]++
		switch {
		case !res.faultsTracked, cause == causeDone, cause == causeTerm, cause == "":
			continue
		}
		if !res.disturbedAt(tn.c, tn.end.At) {
			if cause == causeStepDown {
				t.Logf("tenure %s (token %d) stepped down at %v with no fault on its contender (a slow machine?): %s", tn.term, tn.tok, tn.end.At, tn.end.Err)
				continue
			}
			res.badEnds++
			t.Errorf("tenure %s (token %d) ended by %q at %v with no fault on its contender then (%s)", tn.term, tn.tok, cause, tn.end.At, tn.end.Err)
		}
	}
}
