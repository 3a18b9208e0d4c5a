// Package batontest is the conformance suite for backend.Backend
// implementations, in the spirit of testing/fstest: a backend's tests call
// Run, and Run checks the behaviour that baton's engine relies on.
//
//	func TestConformance(t *testing.T) {
//		batontest.Run(t, batontest.Harness{
//			Open: func(t *testing.T) func(t *testing.T) backend.Backend {
//				srv := startServer(t) // a fresh store, stopped by t.Cleanup
//				return func(t *testing.T) backend.Backend { return srv.NewClient(t) }
//			},
//		})
//	}
//
// # What is checked
//
// The contract documented in package backend (Backend, Watcher, Lister,
// ForceReleaser, WaiterWatcher, Remover, LossNotifier): exclusivity under many concurrent
// contenders (through the raw Backend, through baton.Mutex, and per slot
// through baton.Semaphore); fencing tokens that are positive and strictly
// increase across holders, releases, expiry takeovers and new clients;
// ownership by holder and nonce for renew and release; expiry after the
// TTL (no takeover before TTL minus the safety margin, no renew after it);
// Get and List; watch wake-ups; context cancellation; lock-name
// validation; a Lease kept alive past its TTL by renewals; and a
// Semaphore's slots (filled, refused when full, handed to a waiter).
//
// Optional capabilities are tested when the backend (the value returned by
// connect) implements them, and their subtests are skipped otherwise:
// backend.Watcher (Watch, WakeOnRelease), backend.Lister (List),
// backend.ForceReleaser (ForceRelease), backend.WaiterWatcher,
// backend.Remover (Remove), backend.LossNotifier and io.Closer (every operation refused after
// Close with backend.ErrClosed). Every
// other failure to reach or use the store fails the test.
//
// # Timing
//
// Most checks need no waiting. The subtests whose subject is the store's own
// expiry wait for Harness.TTL in real time, polling with bounded deadlines;
// a Lease is held for 2.2 times Harness.TTL. Run first runs the contention
// subtests (which burn CPU) on their own, then every other subtest in
// parallel, so that a run takes a few times Harness.TTL (about 4s for an
// in-memory store with the default TTL, with -race). The parallel subtests
// start only when the test function that called Run returns (see
// testing.T.Parallel), so call Run last. They mostly wait, so on a machine
// with few CPUs a higher -parallel than the default GOMAXPROCS shortens
// the run to about its longest subtest.
//
// The suite holds on a slow, busy machine. Its bounds on how soon
// something happens are seconds where the event takes milliseconds. The
// contention subtests stop after their count of acquisitions or a time
// budget, whichever comes first, and then require a minimum. A lease lost
// because the machine was too slow to renew it is counted, not failed:
// exclusivity is judged on each holder's own validity, not on a count of
// holders inside the critical section. A run that a slow store made
// inconclusive is repeated, a few times at most.
//
// # Goroutine leaks
//
// The suite ends every goroutine it starts (contenders, leases, watches)
// before its subtests finish, but it cannot check the backend's goroutines
// from inside a test. Packages that call Run should verify that nothing
// leaks with go.uber.org/goleak in their TestMain:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
package batontest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
)

// Harness describes how to reach a backend under test.
type Harness struct {
	// Open prepares a fresh, empty store (or an isolated namespace in one)
	// for one subtest and returns a function that connects a new client to
	// it. Clients of one store share state as separate processes would.
	// Open registers its own cleanup with t.Cleanup. Open and connect are
	// called from the subtest's goroutine and may call t.Fatal.
	Open func(t *testing.T) (connect func(t *testing.T) backend.Backend)
	// TTL is the lease duration used where the suite waits for expiry in
	// real time. Default 1s, which is also the minimum (baton.MinTTL).
	// Subtests that run a baton.Mutex use twice this TTL.
	TTL time.Duration
}

// Run runs the conformance suite against the backend h describes, as
// subtests of t.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Open == nil {
		t.Fatal("batontest: Harness.Open is nil")
	}
	if h.TTL == 0 {
		h.TTL = baton.MinTTL
	}
	if h.TTL < baton.MinTTL {
		t.Fatalf("batontest: Harness.TTL %v is shorter than baton.MinTTL %v", h.TTL, baton.MinTTL)
	}
	s := &suite{h: h}

	// The contention subtests keep every CPU busy. They run first, on their
	// own, so that they do not delay the subtests that measure time.
	t.Run("Exclusive", func(t *testing.T) {
		t.Run("TryAcquire", s.testExclusiveTryAcquire)
		t.Run("Mutex", s.testExclusiveMutex)
		t.Run("Semaphore", s.testExclusiveSemaphore)
	})

	for _, st := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"Acquire", s.testAcquire},
		{"TokensIncrease", s.testTokensIncrease},
		{"NotOwner", s.testNotOwner},
		{"RenewExtends", s.testRenewExtends},
		{"RenewAfterExpiry", s.testRenewAfterExpiry},
		{"TakeoverAfterTTL", s.testTakeoverAfterTTL},
		{"Get", s.testGet},
		{"List", s.testList},
		{"Watch", s.testWatch},
		{"WakeOnRelease", s.testWakeOnRelease},
		{"CancelWhileWaiting", s.testCancelWhileWaiting},
		{"InvalidNames", s.testInvalidNames},
		{"ValidNames", s.testValidNames},
		{"CanceledContext", s.testCanceledContext},
		{"Lease", s.testLease},
		{"Semaphore", s.testSemaphore},
		{"ForceRelease", s.testForceRelease},
		{"WaiterWatcher", s.testWaiterWatcher},
		{"Remove", s.testRemove},
		{"LossNotifier", s.testLossNotifier},
		{"Closed", s.testClosed},
	} {
		t.Run(st.name, st.f)
	}
}

// prompt is how soon an operation called with a context that has already
// ended must return. Such a call costs microseconds on an idle machine
// (a context check); the bound leaves room for a busy machine's scheduling
// delays and a garbage collection under -race, and still catches a call
// that waits for a client timeout or a retry.
const prompt = 2 * time.Second

// eventTimeout bounds the wait for something that should happen soon but
// whose latency depends on the store (a watch event, a lease keeper). It is
// a failure bound, not a sleep.
const eventTimeout = 10 * time.Second

type suite struct{ h Harness }

// longTTL is a TTL that no subtest waits for: claims made with it end by
// release, never by expiry, even on a slow machine.
func (s *suite) longTTL() time.Duration { return max(30*time.Second, 10*s.h.TTL) }

// workBudget is how long a contention subtest keeps contending: it stops
// after its number of acquisitions or after this long, whichever comes
// first, and then asserts a minimum number of acquisitions. On an idle
// machine the count ends it (in well under a second with an in-memory
// store); on a busy one the budget does, well before the subtest's own
// deadline (see setup).
func (s *suite) workBudget() time.Duration { return 20*time.Second + 5*s.h.TTL }

// margin is the engine's default safety margin for ttl.
func margin(ttl time.Duration) time.Duration { return baton.DefaultSafetyMargin(ttl) }

// pollInterval is how often the suite polls the store while waiting for an
// expiry.
func (s *suite) pollInterval() time.Duration { return s.h.TTL / 50 }

// env is one subtest's store and context.
type env struct {
	t       *testing.T
	s       *suite
	connect func(t *testing.T) backend.Backend
	// ctx ends when the subtest ends or its time budget runs out.
	ctx context.Context
}

// setup marks t parallel and opens a fresh store for it.
func (s *suite) setup(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	connect := s.h.Open(t)
	if connect == nil {
		t.Fatal("batontest: Harness.Open returned a nil connect function")
	}
	ctx, cancel := context.WithTimeoutCause(t.Context(), 30*time.Second+10*s.h.TTL,
		errors.New("batontest: the subtest ran out of time"))
	t.Cleanup(cancel)
	return &env{t: t, s: s, connect: connect, ctx: ctx}
}

// client connects a new client to the subtest's store.
func (e *env) client() backend.Backend {
	e.t.Helper()
	b := e.connect(e.t)
	if b == nil {
		e.t.Fatal("batontest: connect returned a nil Backend")
	}
	return b
}

// request returns a request for holder with a fresh nonce.
func request(holder string, ttl time.Duration) backend.Request {
	return backend.Request{Holder: holder, Nonce: baton.NewNonce(), TTL: ttl}
}

// acquire takes key for req on b and checks the grant, or fails the test.
func (e *env) acquire(b backend.Backend, key string, req backend.Request) backend.Grant {
	e.t.Helper()
	g, err := b.TryAcquire(e.ctx, key, req)
	if err != nil {
		e.t.Fatalf("TryAcquire(%q) for %q: %v", key, req.Holder, err)
	}
	checkGrant(e.t, "TryAcquire", g, key, req)
	return g
}

// checkGrant checks that g is a grant of key to req's owner.
func checkGrant(t *testing.T, op string, g backend.Grant, key string, req backend.Request) {
	t.Helper()
	if g.Key != key || g.Holder != req.Holder || g.Nonce != req.Nonce {
		t.Fatalf("%s(%q) for %q/%q returned a grant of %q to %q/%q", op, key, req.Holder, req.Nonce, g.Key, g.Holder, g.Nonce)
	}
	if g.Token == 0 {
		t.Fatalf("%s(%q) returned token 0; tokens must be positive (0 means no token)", op, key)
	}
}

// renew renews g on b and checks the result, or fails the test.
func (e *env) renew(b backend.Backend, g backend.Grant) backend.Grant {
	e.t.Helper()
	ng, err := b.Renew(e.ctx, g)
	if err != nil {
		e.t.Fatalf("Renew(%q) by its holder %q (token %d): %v", g.Key, g.Holder, g.Token, err)
	}
	checkGrant(e.t, "Renew", ng, g.Key, backend.Request{Holder: g.Holder, Nonce: g.Nonce})
	if ng.Token != g.Token {
		e.t.Fatalf("Renew(%q) changed the token from %d to %d; a renew keeps the token", g.Key, g.Token, ng.Token)
	}
	return ng
}

// release releases g on b, or fails the test.
func (e *env) release(b backend.Backend, g backend.Grant) {
	e.t.Helper()
	if err := b.Release(e.ctx, g); err != nil {
		e.t.Fatalf("Release(%q) by its holder %q (token %d): %v", g.Key, g.Holder, g.Token, err)
	}
}

// get reads key's record on b, or fails the test.
func (e *env) get(b backend.Backend, key string) backend.Record {
	e.t.Helper()
	r, err := b.Get(e.ctx, key)
	if err != nil {
		e.t.Fatalf("Get(%q): %v", key, err)
	}
	if r.Key != key {
		e.t.Fatalf("Get(%q) returned the record of %q", key, r.Key)
	}
	return r
}

// checkHeld checks that err reports key held by holder with token, with a
// RetryAfter no longer than ttl. It reports failures with t.Errorf and
// returns the *HeldError, or nil.
func checkHeld(t *testing.T, op string, err error, key, holder string, token uint64, ttl time.Duration) *backend.HeldError {
	t.Helper()
	if err == nil {
		t.Errorf("%s succeeded while %q holds %q (token %d); want an error matching ErrHeld", op, holder, key, token)
		return nil
	}
	if !errors.Is(err, backend.ErrHeld) {
		t.Errorf("%s: error %q does not match ErrHeld", op, err)
		return nil
	}
	var held *backend.HeldError
	if !errors.As(err, &held) {
		t.Errorf("%s: error %q does not unwrap to *backend.HeldError", op, err)
		return nil
	}
	if held.Key != key || held.Holder != holder || held.Token != token {
		t.Errorf("%s: HeldError{Key: %q, Holder: %q, Token: %d}, want {%q, %q, %d}",
			op, held.Key, held.Holder, held.Token, key, holder, token)
	}
	if held.RetryAfter < 0 || held.RetryAfter > ttl {
		t.Errorf("%s: HeldError.RetryAfter = %v, want at most the holder's TTL %v", op, held.RetryAfter, ttl)
	}
	return held
}

// checkLost checks that err matches ErrLost.
func checkLost(t *testing.T, op string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s succeeded; want an error matching ErrLost", op)
	case !errors.Is(err, backend.ErrLost):
		t.Errorf("%s: error %q does not match ErrLost", op, err)
	}
}

// sleepUntil waits until when. The suite uses it only where the passing of
// time is the subject (a TTL running out, a lease held past its TTL).
func (e *env) sleepUntil(when time.Time) {
	e.t.Helper()
	timer := time.NewTimer(time.Until(when))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-e.ctx.Done():
		e.t.Fatalf("waiting until %v: %v", when.Format(time.StampMilli), context.Cause(e.ctx))
	}
}

// quiet discards the engine's log output.
var quiet = baton.WithLogger(slog.New(slog.DiscardHandler))

// mutexTTL is the TTL of every Mutex the suite runs: twice the harness TTL,
// so that renew deadline, retry period and safety margin all fit.
func (s *suite) mutexTTL() time.Duration { return 2 * s.h.TTL }

// newMutex returns a Mutex on b for key with identity id, a TTL of
// mutexTTL, a renew deadline of 3/4 of it, and the given retry period.
func (e *env) newMutex(b backend.Backend, key, id string, retry time.Duration, opts ...baton.Option) *baton.Mutex {
	e.t.Helper()
	return e.newMutexTTL(b, key, id, e.s.mutexTTL(), retry, opts...)
}

// newWaitingMutex returns a Mutex on b for key with identity id, a TTL of
// longTTL, a renew deadline of 3/4 of it and a retry period of slowRetry.
// The subtests whose subject is how soon a waiting Lock reacts (to a
// release, to its context ending) use it for every Mutex involved: a Lock
// that reacted only at its next retry, or when the holder's claim could
// first end, would then be late by seconds, which no busy machine
// explains.
func (e *env) newWaitingMutex(b backend.Backend, key, id string, opts ...baton.Option) *baton.Mutex {
	e.t.Helper()
	return e.newMutexTTL(b, key, id, e.s.longTTL(), e.s.slowRetry(), opts...)
}

func (e *env) newMutexTTL(b backend.Backend, key, id string, ttl, retry time.Duration, opts ...baton.Option) *baton.Mutex {
	e.t.Helper()
	m, err := baton.NewMutex(b, key, append([]baton.Option{
		baton.WithIdentity(id),
		baton.WithTTL(ttl),
		baton.WithRenewDeadline(ttl * 3 / 4),
		baton.WithRetryPeriod(retry),
		quiet,
	}, opts...)...)
	if err != nil {
		e.t.Fatalf("NewMutex: %v", err)
	}
	return m
}

// fastRetry is the retry period of newMutex's contenders: 5% of the Mutex
// TTL (100ms with the default harness TTL). slowRetry is newWaitingMutex's:
// 45% of longTTL (13.5s with the default harness TTL).
func (s *suite) fastRetry() time.Duration { return s.mutexTTL() / 20 }
func (s *suite) slowRetry() time.Duration { return s.longTTL() * 9 / 20 }

// reactBound is how soon a waiting Lock must react to a release or to its
// context ending: half of slowRetry, so at least 6.75s, against the few
// milliseconds a reaction takes on an idle machine and well under a second
// on a busy one; without the reaction the Lock would wait for its retry.
func (s *suite) reactBound() time.Duration { return s.slowRetry() / 2 }

// unlockAtCleanup makes sure l is unlocked when the test ends, so that its
// keeper goroutine does not outlive the test even if the test failed early.
// Unlock is idempotent.
func unlockAtCleanup(t *testing.T, l *baton.Lease) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
		defer cancel()
		_ = l.Unlock(ctx)
	})
}

// signal returns an Observer option that reports events of kind on the
// returned channel, dropping those that arrive while one is pending.
func signal(kind baton.EventKind) (baton.Option, <-chan baton.Event) {
	ch := make(chan baton.Event, 1)
	return baton.WithObserver(baton.ObserverFunc(func(ev baton.Event) {
		if ev.Kind == kind {
			select {
			case ch <- ev:
			default:
			}
		}
	})), ch
}

// lockResult is what a Mutex.Lock run in its own goroutine returned, and
// when it returned.
type lockResult struct {
	lease *baton.Lease
	err   error
	at    time.Time
}

// pendingLock is a Mutex.Lock running in its own goroutine. res is set
// before done is closed.
type pendingLock struct {
	done chan struct{}
	res  lockResult
}

// lockAsync runs m.Lock(ctx) in a goroutine. ctx must end when the test
// ends (derive it from env.ctx): the test's cleanup waits for Lock to
// return and unlocks what it returned.
func (e *env) lockAsync(ctx context.Context, m *baton.Mutex) *pendingLock {
	p := &pendingLock{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		l, err := m.Lock(ctx)
		p.res = lockResult{l, err, time.Now()}
	}()
	e.t.Cleanup(func() {
		<-p.done
		if p.res.lease != nil {
			ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
			defer cancel()
			_ = p.res.lease.Unlock(ctx)
		}
	})
	return p
}

// await waits for Lock to return, failing the test after limit.
func (p *pendingLock) await(t *testing.T, limit time.Duration) lockResult {
	t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		t.Fatalf("Mutex.Lock did not return within %v", limit)
	}
	return p.res
}

// errPanicked is what noPanic returns for a call that panicked.
var errPanicked = errors.New("batontest: the call panicked")

// noPanic calls f and reports a panic as a test failure (returning
// errPanicked).
func noPanic(t *testing.T, op string, f func() error) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", op, r)
			err = errPanicked
		}
	}()
	return f()
}

// call is one named operation on a backend, for checkPrompt.
type call struct {
	name string
	f    func() error
}

// checkPrompt runs each call, which must return within prompt with an error
// matching want; when names the situation in messages ("after Close").
func checkPrompt(t *testing.T, when string, want error, calls []call) {
	t.Helper()
	for _, c := range calls {
		start := time.Now()
		err := noPanic(t, c.name, c.f)
		if d := time.Since(start); d > prompt {
			t.Errorf("%s %s took %v; want at most %v", c.name, when, d, prompt)
		}
		if err != errPanicked && !errors.Is(err, want) {
			t.Errorf("%s %s: %v; want an error matching %v", c.name, when, err, want)
		}
	}
}

// describe formats a lock name for messages, abbreviating long ones.
func describe(name string) string {
	if len(name) > 20 {
		return fmt.Sprintf("%q... (%d bytes)", name[:12], len(name))
	}
	return fmt.Sprintf("%q", name)
}
