//go:build linux

package safety

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/filestore"
	"github.com/baton-go/baton/kubestore"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
	"k8s.io/client-go/rest"
)

// The contender process: the test binary started with roleEnv=contender
// and its configuration in these variables.
const (
	envID             = "BATON_SAFETY_ID"              // contender id, "c1"
	envRegister       = "BATON_SAFETY_REGISTER"        // register server URL
	envBackend        = "BATON_SAFETY_BACKEND"         // file, redis, redlock, etcd, lease, configmap, crd, naive
	envTarget         = "BATON_SAFETY_TARGET"          // directory, comma-separated addresses, endpoint or API URL
	envNS             = "BATON_SAFETY_NS"              // Kubernetes namespace
	envLock           = "BATON_SAFETY_LOCK"            // lock name
	envTTL            = "BATON_SAFETY_TTL"             // lease duration
	envRate           = "BATON_SAFETY_RATE"            // clock rate (1 = real time)
	envSeed           = "BATON_SAFETY_CSEED"           // this contender's seed
	envSkew           = "BATON_SAFETY_SKEW"            // naive lock: offset of its wall clock
	envSettle         = "BATON_SAFETY_SETTLE"          // naive lock: the sleep before the read-back
	envIdle           = "BATON_SAFETY_IDLE"            // pause after a tenure before locking again
	envClientDefaults = "BATON_SAFETY_CLIENT_DEFAULTS" // "true": the store client's default timeouts
	envRetryForbidden = "BATON_SAFETY_RETRY_FORBIDDEN" // "true": lock again after a permission refusal
	envPoll           = "BATON_SAFETY_POLL"            // "1": lock by polling TryLock instead of Lock
	envSem            = "BATON_SAFETY_SEMAPHORE"       // "1": lock through a baton.Semaphore of limit 1
	envFair           = "BATON_SAFETY_FAIR"            // "1": etcd in fair mode (the default); else plain mode, etcdstore.WithFair(false)
	envChurn          = "BATON_SAFETY_CHURN"           // "1": etcd, file: the Store also finds other locks held, then released (see seenChurn)
	envQueued         = "BATON_SAFETY_QUEUED"          // "1": report "queued" at a Lock call's second refused attempt (see queuedReporter)
	envSeen           = "BATON_SAFETY_SEEN"            // "1": report "seen" for each claim an attempt found held (see seenReporter)
	envRemove         = "BATON_SAFETY_REMOVE"          // "1": remove the lock's record after each tenure, as schedule does (backend.Remover)
	envCut            = "BATON_SAFETY_CUT"             // a polling contender gives half its TryLock calls a deadline drawn from [0, this): acquires cut short (batonLocker.try)
	envUser           = "BATON_SAFETY_USER"            // Kubernetes: the user its requests impersonate, one of its own (kubeRBACEnv); "": the API proxy's admin
	envCAFile         = "BATON_SAFETY_CAFILE"          // Redis over TLS, etcd: the CA bundle trusted, read again when it changes (redisstore.WithTLSFiles, etcdstore.Config.CAFile); "": none
)

// pace is the pause between two read-modify-write rounds of a holder; it
// bounds the history's size, it synchronises nothing.
const pace = 15 * time.Millisecond

// tenure bounds how many rounds a holder does before it unlocks on its
// own, so that the lock changes hands without faults too.
const tenureMin, tenureMax = 30, 80

// longOneIn: one tenure in longOneIn is long instead: it lasts between
// 1.5 and 2.5 TTLs, past several renewals and the renew deadline, so that
// renewing (and, under a fault, stepping down) is exercised. holdMax
// bounds a tenure the register asked to hold (writeResp.Hold) in TTLs.
const (
	longOneIn = 4
	holdMax   = 3
)

// pollEvery is how often a polling contender (envPoll) calls TryLock, plus
// up to as much jitter.
const pollEvery = 25 * time.Millisecond

// locker is what a contender locks with: a baton.Mutex, or the naive lock.
type locker interface {
	lock(ctx context.Context) (held, error)
}

// held is one tenure: its context ends when the holder believes it lost
// the lock.
type held interface {
	token() uint64
	context() context.Context
	unlock(ctx context.Context) error
	// validUntil is the lease's ValidUntil (zero: none).
	validUntil() time.Time
}

// batonLocker locks with Lock (a Mutex's, or a Semaphore's Acquire), or
// (poll) by calling TryLock every pollEvery: a contender that keeps asking
// the store about a live claim, where Lock would wait for a release notice
// or the claim's expiry.
type batonLocker struct {
	lockFn, tryFn func(context.Context) (*baton.Lease, error)
	poll          bool
	rng           *rand.Rand
	// remove, if set, removes the lock's record (envRemove).
	remove func(context.Context)
	// cut, if positive, bounds each TryLock by a deadline drawn from
	// [0, cut) (envCut), and onCut is told of each attempt it ended.
	cut   time.Duration
	onCut func()
}

func (b batonLocker) lock(ctx context.Context) (held, error) {
	if !b.poll {
		l, err := b.lockFn(ctx)
		if err != nil {
			return nil, err
		}
		return batonHeld{l}, nil
	}
	for {
		l, err := b.try(ctx)
		if err == nil {
			return batonHeld{l}, nil
		}
		for _, perm := range []error{backend.ErrInvalidName, backend.ErrInvalidOptions, backend.ErrCorruptRecord, backend.ErrForbidden} {
			if errors.Is(err, perm) {
				return nil, err
			}
		}
		if b.remove != nil && errors.Is(err, backend.ErrHeld) {
			b.remove(ctx) // refused, unless the holder released since
		}
		if err := sleepCtx(ctx, pollEvery+time.Duration(b.rng.Int64N(int64(pollEvery)))); err != nil {
			return nil, err
		}
	}
}

// try makes one TryLock attempt. In a cut row (envCut) every other
// attempt, at random, gets a deadline that ends it at a random point:
// before the request is sent, while the store runs it, or before its
// answer is read, as a caller's short deadline does. A store that wrote
// the claim all the same must release it (an owner-checked release:
// redisstore and kubestore do so) without touching anyone else's claim.
// The other attempts have none, so that the lock goes on within the
// row's liveness bound however slow the store is that day.
func (b batonLocker) try(ctx context.Context) (*baton.Lease, error) {
	if b.cut <= 0 || b.rng.IntN(2) == 0 {
		return b.tryFn(ctx)
	}
	actx, cancel := context.WithTimeout(ctx, time.Duration(b.rng.Int64N(int64(b.cut))))
	defer cancel()
	l, err := b.tryFn(actx)
	if err != nil && actx.Err() != nil && ctx.Err() == nil {
		b.onCut()
	}
	return l, err
}

// remover returns the remove function of a removal row's contender: it
// removes the lock's record through rm, as package schedule does after
// each slot, and reports "removed" to c if the store deleted it. A
// refusal (the lock is held, or a waiter waits) is the usual answer, and
// is not reported.
func remover(rm backend.Remover, name string, c *client) func(context.Context) {
	return func(ctx context.Context) {
		switch err := rm.Remove(ctx, name); {
		case err == nil:
			c.event("removed", 0, nil)
		case errors.Is(err, backend.ErrHeld), ctx.Err() != nil:
		default:
			c.event("error", 0, fmt.Errorf("remove: %w", err))
		}
	}
}

// removeAfter removes the lock's record after a tenure, if lk is a
// removal row's.
func removeAfter(ctx context.Context, lk locker) {
	if b, ok := lk.(batonLocker); ok && b.remove != nil {
		b.remove(ctx)
	}
}

// queuedReporter reports "queued" once per Lock call, at its second
// refused attempt: a waiting attempt that a store refused has its place
// among the store's waiters (Redis keeps it one TTL past the attempt), so
// a release can hand the lock to it, and the engine makes its second
// attempt once its watch is open, so the waiter then hears a handoff.
// stopWaiter stops such a waiter.
type queuedReporter struct {
	c       *client
	refused atomic.Int32 // refusals since the Lock call began
}

// arm starts counting a Lock call's refusals; a nil reporter does nothing.
func (q *queuedReporter) arm() {
	if q != nil {
		q.refused.Store(0)
	}
}

func (q *queuedReporter) Observe(e baton.Event) {
	if e.Kind == baton.EventHeld && q.refused.Add(1) == 2 {
		q.c.event("queued", 0, nil)
	}
}

// seenReporter reports "seen", with the claim's token, the first time an
// attempt of this process finds a claim held: the store then knows the
// claim as it was at that read (faultCut waits for every contender's).
type seenReporter struct {
	c    *client
	last atomic.Uint64 // token of the claim last reported
}

func (s *seenReporter) Observe(e baton.Event) {
	if e.Kind == baton.EventHeld && e.Token != 0 && s.last.Swap(e.Token) != e.Token {
		s.c.event("seen", e.Token, nil)
	}
}

type batonHeld struct{ l *baton.Lease }

func (h batonHeld) validUntil() time.Time            { return h.l.ValidUntil() }
func (h batonHeld) token() uint64                    { return h.l.Token() }
func (h batonHeld) context() context.Context         { return h.l.Context() }
func (h batonHeld) unlock(ctx context.Context) error { return h.l.Unlock(ctx) }

// client talks to the register server.
type client struct {
	id, base string
	hc       *http.Client
	trace    bool // BATON_SAFETY_TRACE: log every request to stderr
}

func (c *client) post(path string, in, out any) (err error) {
	if c.trace {
		start := time.Now()
		fmt.Fprintf(os.Stderr, "%s trace: %s %+v\n", start.Format("15:04:05.000000"), path, in)
		defer func() {
			fmt.Fprintf(os.Stderr, "%s trace: %s done in %v: %+v %v\n", time.Now().Format("15:04:05.000000"), path, time.Since(start), out, err)
		}()
	}
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	// No lease context here on purpose: a holder that was paused must
	// still reach the resource with its old token, the case fencing is for.
	resp, err := c.hc.Post(c.base+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s: %s", path, resp.Status, b)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (c *client) event(kind string, tok uint64, err error) {
	c.send(eventReq{C: c.id, Kind: kind, Tok: tok, Mono: monoNow()}, err)
}

func (c *client) send(ev eventReq, err error) {
	if err != nil {
		ev.Err = err.Error()
	}
	if perr := c.post("/event", ev, nil); perr != nil {
		fmt.Fprintf(os.Stderr, "contender %s: reporting %s: %v\n", c.id, ev.Kind, perr)
	}
}

// monoVU returns h's ValidUntil as a CLOCK_MONOTONIC reading (0 if it has
// none), and the reading now: the lease's clock runs at rate times real
// time, so the time left is scaled back to real time.
//
// The lease's clock and CLOCK_MONOTONIC are read back to back; if the
// process was descheduled in between (more than a millisecond), they are
// read again, so that a busy machine does not move ValidUntil late. The
// earlier reading is used: if anything, ValidUntil and now come out early.
func monoVU(h held, clk baton.Clock, rate float64) (vu, now int64) {
	v := h.validUntil()
	var c time.Time
	for range 10 {
		now = monoNow()
		c = clk.Now()
		if monoNow()-now < int64(time.Millisecond) {
			break
		}
	}
	if v.IsZero() {
		return 0, now
	}
	return now + int64(float64(v.Sub(c))/rate), now
}

func contenderMain() int {
	id := os.Getenv(envID)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("contender", id)
	c := &client{id: id, base: os.Getenv(envRegister), hc: &http.Client{Timeout: 30 * time.Second},
		trace: os.Getenv("BATON_SAFETY_TRACE") != ""}
	cseed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	rng := rand.New(rand.NewPCG(cseed, 0x5afe))

	if err := checkWallShift(); err != nil {
		fmt.Fprintf(os.Stderr, "contender %s: %v\n", id, err)
		c.event("error", 0, err)
		return 2
	}
	inner, err := contenderClock()
	if err != nil {
		fmt.Fprintf(os.Stderr, "contender %s: %v\n", id, err)
		c.event("error", 0, err)
		return 2
	}
	clk := &jumpClock{Clock: inner}
	defer watchJumps(ctx, clk, c)()
	var queued *queuedReporter
	var obs []baton.Observer
	if os.Getenv(envQueued) == "1" {
		queued = &queuedReporter{c: c}
		obs = append(obs, queued)
	}
	if os.Getenv(envSeen) == "1" {
		obs = append(obs, &seenReporter{c: c})
	}
	lk, closeFn, err := openLocker(ctx, c, logger, clk, obs...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "contender %s: %v\n", id, err)
		c.event("error", 0, err)
		return 2
	}
	defer closeFn()
	idle, _ := time.ParseDuration(os.Getenv(envIdle))

	rate, _ := strconv.ParseFloat(os.Getenv(envRate), 64)
	if rate <= 0 {
		rate = 1
	}
	ttl, _ := time.ParseDuration(os.Getenv(envTTL))
	t := &tenures{c: c, rng: rng, clk: clk, rate: rate, ttl: ttl, id: id}
	retryForbidden := os.Getenv(envRetryForbidden) == "true"
	for n := 1; ctx.Err() == nil; n++ {
		c.event("locking", 0, nil)
		queued.arm()
		h, err := lk.lock(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if retryForbidden && errors.Is(err, backend.ErrForbidden) {
				fmt.Fprintf(os.Stderr, "contender %s: %v; locking again in %v\n", id, err, 2*ttl/15)
				if sleepCtx(ctx, 2*ttl/15) != nil {
					break
				}
				continue
			}
			c.event("error", 0, err)
			return 3
		}
		t.run(ctx, h, fmt.Sprintf("%s/%d", id, n))
		removeAfter(ctx, lk)
		if idle > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(idle):
			}
		}
	}
	return 0
}

// tenures runs a contender's tenures.
type tenures struct {
	c    *client
	rng  *rand.Rand
	clk  baton.Clock
	rate float64
	ttl  time.Duration
	id   string
}

// run is one tenure: read-modify-write rounds until it has done its
// rounds (or, for a long or held tenure, its time), the lease's context
// ends, the register refuses its token or the scenario ends; then it
// reports why and unlocks.
func (t *tenures) run(ctx context.Context, h held, term string) {
	c, tok := t.c, h.token()
	vu, now := monoVU(h, t.clk, t.rate)
	c.send(eventReq{C: t.id, Kind: "acquired", Tok: tok, Mono: now, VU: vu}, nil)
	rounds := tenureMin + t.rng.IntN(tenureMax-tenureMin+1)
	var until time.Time
	if t.rng.IntN(longOneIn) == 0 {
		rounds, until = math.MaxInt, time.Now().Add(t.ttl*3/2+time.Duration(t.rng.Int64N(int64(t.ttl))))
	}
	cause := causeDone
	held := false // the register asked it to hold (writeResp.Hold)
	for i := 0; ; i++ {
		if i >= rounds || !until.IsZero() && time.Now().After(until) {
			break
		}
		// The moment the holder last saw its lease live, and its
		// validity then: what the checker compares.
		vu, live := monoVU(h, t.clk, t.rate)
		if h.context().Err() != nil || ctx.Err() != nil {
			break
		}
		// Read both, then write both: a pause between the two halves is
		// where a stale write comes from.
		var rd readResp
		if err := c.post("/read", readReq{C: t.id, Term: term, Tok: tok}, &rd); err != nil {
			fmt.Fprintf(os.Stderr, "contender %s: read: %v\n", t.id, err)
			cause = causeError
			break
		}
		if !rd.OK {
			c.event("stale", tok, errors.New("read refused"))
			cause = causeStale
			if held {
				awaitEnd(ctx, h, until)
			}
			break
		}
		var wr writeResp
		if err := c.post("/write", writeReq{C: t.id, Term: term, Tok: tok, F: rd.F + 1, P: rd.P + 1, PExp: rd.P, Live: live, VU: vu}, &wr); err != nil {
			fmt.Fprintf(os.Stderr, "contender %s: write: %v\n", t.id, err)
			cause = causeError
			break
		}
		if !wr.OK {
			c.event("stale", tok, errors.New("write refused"))
			cause = causeStale
			if held {
				awaitEnd(ctx, h, until)
			}
			break
		}
		// The first reply that asks it to hold sets its end, for a long
		// tenure too, whose own end may be moments away.
		if wr.Hold && !held {
			rounds, until = math.MaxInt, time.Now().Add(holdMax*t.ttl)
		}
		held = held || wr.Hold
		if wr.Unhold || wr.End && !held {
			break
		}
		select {
		case <-h.context().Done():
		case <-ctx.Done():
		case <-time.After(pace):
		}
	}
	// The context's end explains the loop's end even when a refused
	// token or an unreachable register came first: the step-down or the
	// loss is what the checker judges.
	switch err := context.Cause(h.context()); {
	case ctx.Err() != nil:
		cause = causeTerm
	case errors.Is(err, baton.ErrStepDown):
		cause = causeStepDown
	case err != nil:
		cause = causeLost
	}
	vu, now = monoVU(h, t.clk, t.rate)
	c.send(eventReq{C: t.id, Kind: "releasing", Tok: tok, Cause: cause, Mono: now, VU: vu}, context.Cause(h.context()))
	uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := h.unlock(uctx)
	cancel()
	c.event("released", tok, err)
}

// awaitEnd waits, in a tenure asked to hold whose token the register
// refused, until the lease's context ends (or until, or the scenario's
// end), without another operation: the engine's own verdict on the
// lease, not the register's refusal, then ends the tenure, so the
// harness sees when the holder learnt of a fault that a successor's
// token revealed first.
func awaitEnd(ctx context.Context, h held, until time.Time) {
	wait := time.Until(until)
	if until.IsZero() || wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-h.context().Done():
	case <-ctx.Done():
	case <-t.C:
	}
}

// etcdTarget is the etcd client configuration of target, an endpoint
// URL, which may carry a user and password (http://user:pass@host:port,
// etcdACLEnv's contenders): etcd takes those apart from the endpoint.
func etcdTarget(target string) (etcdstore.Config, error) {
	cfg := etcdstore.Config{Endpoints: []string{target}, DialTimeout: 5 * time.Second}
	u, err := url.Parse(target)
	if err != nil || u.User == nil {
		return cfg, err
	}
	cfg.Username = u.User.Username()
	cfg.Password, _ = u.User.Password()
	u.User = nil
	cfg.Endpoints = []string{u.String()}
	return cfg, nil
}

// openLocker opens the backend named by the environment.
func openLocker(ctx context.Context, c *client, logger *slog.Logger, clk baton.Clock, obs ...baton.Observer) (locker, func(), error) {
	id := c.id
	ttl, err := time.ParseDuration(os.Getenv(envTTL))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v", envTTL, err)
	}
	target, name := os.Getenv(envTarget), os.Getenv(envLock)
	opts := []baton.Option{baton.WithTTL(ttl), baton.WithIdentity(id), baton.WithClock(clk), baton.WithLogger(logger)}
	if len(obs) > 0 {
		opts = append(opts, baton.WithObserver(baton.Observers(obs...)))
	}
	noClose := func() {}
	var b backend.Backend
	closeFn := noClose
	switch backend := os.Getenv(envBackend); backend {
	case "file":
		st, err := filestore.New(target)
		if err != nil {
			return nil, nil, err
		}
		b = st
		if os.Getenv(envChurn) == "1" {
			other, err := filestore.New(target)
			if err != nil {
				return nil, nil, err
			}
			closeFn = seenChurn(ctx, st, other, noClose, name, id, ttl)
		}
	case "redis", "redlock":
		urls := []string{target} // a topology's URL (redis+sentinel://), as it is
		var opts []redisstore.Option
		if !strings.Contains(target, "://") {
			urls = nil
			for _, a := range strings.Split(target, ",") {
				urls = append(urls, "redis://"+a)
			}
			// Short timeouts, so that a partition shows as failed calls
			// rather than calls that wait for the engine's deadline.
			if os.Getenv(envClientDefaults) != "true" {
				opts = append(opts, redisstore.WithClientOptions(func(o *redis.Options) {
					o.DialTimeout = 300 * time.Millisecond
					o.ReadTimeout = 300 * time.Millisecond
					o.WriteTimeout = 300 * time.Millisecond
				}))
			}
		}
		if ca := os.Getenv(envCAFile); ca != "" {
			// As the CLI's --cacert does.
			opts = append(opts, redisstore.WithTLSFiles(ca, "", ""))
		}
		st, closer, err := redisstore.OpenURLs(urls, opts...)
		if err != nil {
			return nil, nil, err
		}
		b, closeFn = st, func() { _ = closer.Close() }
	case "etcd":
		cfg, err := etcdTarget(target)
		if err != nil {
			return nil, nil, err
		}
		cfg.CAFile = os.Getenv(envCAFile)
		open := func() (*etcdstore.Store, error) {
			return etcdstore.OpenStore(ctx, cfg, etcdstore.WithLogger(logger), etcdstore.WithFair(os.Getenv(envFair) == "1"))
		}
		st, err := open()
		if err != nil {
			return nil, nil, err
		}
		b, closeFn = st, func() { _ = st.Close() }
		if os.Getenv(envChurn) == "1" {
			other, err := open()
			if err != nil {
				closeFn()
				return nil, nil, err
			}
			stop := seenChurn(ctx, st, other, func() { _ = other.Close() }, name, id, ttl)
			closeFn = func() { stop(); _ = st.Close() }
		}
	case "lease", "configmap", "crd":
		// The API proxy authenticates as the admin, who may impersonate
		// anyone: the API server authorizes the request as the user.
		cfg := &rest.Config{Host: target, Timeout: 10 * time.Second,
			Impersonate: rest.ImpersonationConfig{UserName: os.Getenv(envUser)}}
		ns := os.Getenv(envNS)
		var err error
		switch backend {
		case "lease":
			b, err = kubestore.NewLeaseForConfig(cfg, ns, kubestore.WithClock(clk))
		case "configmap":
			b, err = kubestore.NewConfigMapForConfig(cfg, ns, kubestore.WithClock(clk))
		default:
			b, err = kubestore.NewDistributedLockForConfig(cfg, ns, kubestore.WithClock(clk))
		}
		if err != nil {
			return nil, nil, err
		}
	case "naive":
		skew, _ := time.ParseDuration(os.Getenv(envSkew))
		settle, _ := time.ParseDuration(os.Getenv(envSettle))
		nl, err := newNaiveLock(&rest.Config{Host: target, Timeout: 10 * time.Second}, os.Getenv(envNS), name, id, ttl, skew, settle)
		if err != nil {
			return nil, nil, err
		}
		return nl, noClose, nil
	default:
		return nil, nil, fmt.Errorf("unknown backend %q", backend)
	}
	if file := os.Getenv(envGrantPause); file != "" {
		b = pauseGrants(b, file, ttl)
	}
	lk := batonLocker{poll: os.Getenv(envPoll) == "1", rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))}
	if v := os.Getenv(envCut); v != "" {
		cut, err := time.ParseDuration(v)
		if err != nil || cut <= 0 {
			closeFn()
			return nil, nil, fmt.Errorf("%s=%q: want a positive duration", envCut, v)
		}
		lk.cut, lk.onCut = cut, func() { c.event("cut", 0, nil) }
	}
	if os.Getenv(envRemove) == "1" {
		rm, ok := b.(backend.Remover)
		if !ok {
			closeFn()
			return nil, nil, fmt.Errorf("%s: the %s backend does not implement backend.Remover", envRemove, os.Getenv(envBackend))
		}
		lk.remove = remover(rm, name, c)
	}
	if os.Getenv(envSem) == "1" {
		// A Semaphore of limit 1 is one slot lock (name.slot-0): the
		// register judges it as any lock, through the Semaphore's own
		// acquiring and waiting.
		s, err := baton.NewSemaphore(b, name, 1, opts...)
		if err != nil {
			closeFn()
			return nil, nil, err
		}
		lk.lockFn, lk.tryFn = s.Acquire, s.TryAcquire
		return lk, closeFn, nil
	}
	m, err := baton.NewMutex(b, name, opts...)
	if err != nil {
		closeFn()
		return nil, nil, err
	}
	lk.lockFn, lk.tryFn = m.Lock, m.TryLock
	return lk, closeFn, nil
}

// contenderClock is real time, or a clock drifting at the rate the
// environment gives.
func contenderClock() (baton.Clock, error) {
	s := os.Getenv(envRate)
	if s == "" {
		return baton.SystemClock(), nil
	}
	rate, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", envRate, err)
	}
	if rate == 1 {
		return baton.SystemClock(), nil
	}
	return newDriftClock(rate), nil
}

// driftClock is a monotonic clock that runs at rate times real time: its
// Now keeps Go's monotonic reading (base.Add), so durations between its
// readings are scaled by rate, and its timers fire after d/rate.
type driftClock struct {
	base time.Time
	rate float64
}

func newDriftClock(rate float64) *driftClock { return &driftClock{base: time.Now(), rate: rate} }

func (c *driftClock) Now() time.Time {
	return c.base.Add(time.Duration(float64(time.Since(c.base)) * c.rate))
}
func (c *driftClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *driftClock) real(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.rate)
}
func (c *driftClock) NewTimer(d time.Duration) baton.Timer {
	return driftTimer{time.NewTimer(c.real(d))}
}
func (c *driftClock) AfterFunc(d time.Duration, f func()) baton.Timer {
	return driftTimer{time.AfterFunc(c.real(d), f)}
}

type driftTimer struct{ t *time.Timer }

func (t driftTimer) C() <-chan time.Time { return t.t.C }
func (t driftTimer) Stop() bool          { return t.t.Stop() }

// seenChurn makes st find locks held by another Store (other), each then
// released: "<name>.churn-<id>-<n>", churnBurst of them at once, then one
// every 20 ms. st records each claim it sees, and prunes those records
// once it has seen more than a few hundred (etcdstore's seenprune.go,
// filestore's seen.go), so its prunes run during the scenario, beside the
// lock under test. It returns a function that stops the churn and closes
// other with closeOther.
// churnBurst is how many locks seenChurn shows st at its start: more than
// a prune's threshold, so that the first prune runs early.
const churnBurst = 300

func seenChurn(ctx context.Context, st, other backend.Backend, closeOther func(), name, id string, ttl time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			if n >= churnBurst {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			} else if ctx.Err() != nil {
				return
			}
			lock := fmt.Sprintf("%s.churn-%s-%d", name, id, n)
			g, err := other.TryAcquire(ctx, lock, backend.Request{Holder: id + "-other", Nonce: baton.NewNonce(), TTL: ttl})
			if err != nil {
				continue // the scenario's faults may reach these requests too
			}
			_, _ = st.TryAcquire(ctx, lock, backend.Request{Holder: id, Nonce: baton.NewNonce(), TTL: ttl})
			_ = other.Release(ctx, g)
		}
	}()
	return func() { cancel(); <-done; closeOther() }
}
