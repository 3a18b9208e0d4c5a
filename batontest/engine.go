package batontest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
)

// The subtests in this file run the backend under baton's engine
// (baton.Mutex and baton.Lease), as applications use it.

// testExclusiveMutex: 16 Mutexes on 16 clients, two goroutines each, take
// turns with Lock and Unlock, two rounds each or until the work budget runs
// out. No two leases are ever valid inside the critical section at once, a
// lease with a larger token starts only after every lease with a smaller
// token has left, and there are at least as many acquisitions as
// clients.
//
// A lease lost on the way is counted, not failed: on a busy machine a
// holder may miss its renew deadline and step down (ErrStepDown), or find
// its claim expired after its validity ended. A store that calls a claim
// lost before the holder's validity ended fails the test.
func (s *suite) testExclusiveMutex(t *testing.T) {
	e := s.setup(t)
	const (
		key       = "exclusive-mutex"
		clients   = 16
		perClient = 2
		rounds    = 2
	)
	ctx, cancel := context.WithTimeout(e.ctx, s.workBudget())
	defer cancel()
	var (
		held     tenures
		acquired atomic.Int64
		lost     atomic.Int64
		lostAt   sync.Map // token -> time.Time of the EventLost
		wg       sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		cancel()
	}
	onLost := baton.WithObserver(baton.ObserverFunc(func(ev baton.Event) {
		if ev.Kind == baton.EventLost {
			lostAt.LoadOrStore(ev.Token, time.Now())
		}
	}))
	began := time.Now()
	for i := range clients {
		m := e.newMutex(e.client(), key, fmt.Sprintf("mutex-%02d", i), s.fastRetry(), onLost)
		for range perClient {
			wg.Go(func() {
				for range rounds {
					l, err := m.Lock(ctx)
					if err != nil {
						if ctx.Err() == nil {
							fail("Lock by %q: %v", m.Identity(), err)
						}
						return
					}
					start := time.Now()
					runtime.Gosched()
					left := time.Now()
					err = l.Unlock(e.ctx)
					held.add(m.Identity(), l.Token(), start, left, l.ValidUntil())
					acquired.Add(1)
					switch {
					case err == nil:
					case errors.Is(err, baton.ErrStepDown):
						lost.Add(1) // no renew succeeded in time: a slow machine
					case errors.Is(err, backend.ErrLost):
						at := time.Now()
						if v, ok := lostAt.Load(l.Token()); ok {
							at = v.(time.Time)
						}
						if at.Before(l.ValidUntil()) {
							fail("the lease of %q (token %d) was reported lost %v before its validity ended: %v",
								m.Identity(), l.Token(), l.ValidUntil().Sub(at), err)
							return
						}
						lost.Add(1) // expired in the store after its validity ended
					default:
						fail("Unlock by %q (token %d): %v", m.Identity(), l.Token(), err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	held.check(t)
	if n := lost.Load(); n > 0 {
		t.Logf("%d of %d leases were lost before Unlock (stepped down or expired): a busy machine", n, acquired.Load())
	}
	e.checkWork(acquired.Load(), clients*perClient*rounds, clients, held.holders(), time.Since(began))
}

// testWakeOnRelease: with a Watcher backend, a contender waiting in
// Mutex.Lock acquires as soon as the holder unlocks, well before its next
// retry would fire.
func (s *suite) testWakeOnRelease(t *testing.T) {
	e := s.setup(t)
	const key = "wake-on-release"
	a, b := e.client(), e.client()
	if _, ok := b.(backend.Watcher); !ok {
		t.Skip("the backend does not implement backend.Watcher; waiters poll every RetryPeriod")
	}
	holder := e.newWaitingMutex(a, key, "waker-a")
	heldOpt, held := signal(baton.EventHeld)
	waiter := e.newWaitingMutex(b, key, "waker-b", heldOpt)

	l, err := holder.Lock(e.ctx)
	if err != nil {
		t.Fatalf("Lock by %q: %v", holder.Identity(), err)
	}
	unlockAtCleanup(t, l)
	p := e.lockAsync(e.ctx, waiter)
	select {
	case <-held: // the waiter tried, found the lock held, and now waits
	case <-p.done:
		t.Fatalf("the waiter's Lock returned while the lock was held: lease %v, err %v", p.res.lease != nil, p.res.err)
	case <-time.After(eventTimeout):
		t.Fatalf("the waiter did not try to acquire within %v", eventTimeout)
	}

	if err := l.Unlock(e.ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	unlocked := time.Now()
	r := p.await(t, s.reactBound())
	if r.err != nil {
		t.Fatalf("the waiter's Lock: %v", r.err)
	}
	if d := r.at.Sub(unlocked); d >= s.reactBound() {
		t.Errorf("the waiter acquired %v after Unlock returned; a watch should wake it at once, well before its retry period %v "+
			"or the end of the holder's TTL %v", d, s.slowRetry(), s.longTTL())
	}
	if r.lease.Token() <= l.Token() {
		t.Errorf("the waiter got token %d after token %d", r.lease.Token(), l.Token())
	}
	if err := r.lease.Unlock(e.ctx); err != nil {
		t.Errorf("Unlock by the waiter: %v", err)
	}
}

// testCancelWhileWaiting: Mutex.Lock waiting for a held lock returns
// promptly when its context is canceled, with an error that matches both
// context.Canceled and ErrHeld and names the holder.
func (s *suite) testCancelWhileWaiting(t *testing.T) {
	e := s.setup(t)
	const key = "cancel-while-waiting"
	a, b := e.client(), e.client()
	ttl := s.longTTL()
	g := e.acquire(a, key, request("holder-a", ttl))
	heldOpt, held := signal(baton.EventHeld)
	waiter := e.newWaitingMutex(b, key, "waiter-b", heldOpt)

	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	p := e.lockAsync(ctx, waiter)
	select {
	case <-held:
	case <-p.done:
		t.Fatalf("Lock returned while the lock was held: lease %v, err %v", p.res.lease != nil, p.res.err)
	case <-time.After(eventTimeout):
		t.Fatalf("the waiter did not try to acquire within %v", eventTimeout)
	}
	cancel()
	canceled := time.Now()
	r := p.await(t, s.reactBound())
	if d := r.at.Sub(canceled); d > s.reactBound() {
		t.Errorf("Lock returned %v after its context was canceled; want within %v (retry period %v)", d, s.reactBound(), s.slowRetry())
	}
	if r.lease != nil {
		t.Fatalf("Lock acquired a lock that %q holds", "holder-a")
	}
	if !errors.Is(r.err, context.Canceled) {
		t.Errorf("Lock canceled while waiting: %v; want an error matching context.Canceled", r.err)
	}
	if errors.Is(r.err, context.Canceled) && !errors.Is(r.err, backend.ErrHeld) {
		// The backend did report the holder (the waiter observed EventHeld);
		// the error lost it on the way out.
		t.Errorf("Lock canceled while waiting: %q matches context.Canceled but not ErrHeld, although the waiter's "+
			"attempt had found the lock held: the engine retried after the context ended (the watch channel "+
			"closing with the context, or the retry timer, won the race with ctx.Done) and dropped the HeldError", r.err)
	} else {
		checkHeld(t, "Lock canceled while waiting", r.err, key, "holder-a", g.Token, ttl)
	}

	if rec := e.get(a, key); rec.Holder != "holder-a" || rec.Token != g.Token || !rec.Held() {
		t.Errorf("after the canceled Lock, Get = holder %q, token %d, held %v; want %q, %d, true", rec.Holder, rec.Token, rec.Held(), "holder-a", g.Token)
	}
	e.release(a, g)
}

// testLease: a Lease from baton.Mutex carries the store's token, keeps the
// lock past its TTL by renewing, and frees it on Unlock, ending its context
// with ErrReleased.
func (s *suite) testLease(t *testing.T) {
	e := s.setup(t)
	const key = "lease"
	a, b := e.client(), e.client()
	ttl := s.mutexTTL()
	var renewals atomic.Int64
	counter := baton.WithObserver(baton.ObserverFunc(func(ev baton.Event) {
		if ev.Kind == baton.EventRenewed {
			renewals.Add(1)
		}
	}))
	m := e.newMutex(a, key, "lease-a", s.fastRetry(), counter)

	// A busy machine can delay renewals past the renew deadline, and the
	// holder then steps down (ErrStepDown), as it must; that is retried a
	// few times. Any other end of the lease fails the test.
	const attempts = 3
	var (
		l          *baton.Lease
		sent       time.Time
		firstValid time.Time
	)
	for try := 1; l == nil; try++ {
		renewals.Store(0)
		var stepDown error
		l, sent, firstValid, stepDown = e.holdPastTTL(m, b)
		if stepDown != nil {
			if try == attempts {
				t.Fatalf("the lease stepped down before its TTL ran out in each of %d attempts; the last: %v", attempts, stepDown)
			}
			t.Logf("attempt %d: the lease stepped down (a busy machine?): %v", try, stepDown)
		}
	}
	if renewals.Load() == 0 {
		t.Errorf("no renewal observed while holding the lease for %v (TTL %v)", time.Since(sent), ttl)
	}
	if !l.ValidUntil().After(firstValid) {
		t.Errorf("ValidUntil did not move forward while holding past the TTL (still %v after the acquire)", firstValid.Sub(sent))
	}
	_, err := b.TryAcquire(e.ctx, key, request("lease-b", ttl))
	checkHeld(t, "TryAcquire by another client after the first TTL", err, key, m.Identity(), l.Token(), ttl)
	other := e.newMutex(b, key, "lease-b", s.fastRetry())
	_, err = other.TryLock(e.ctx)
	checkHeld(t, "Mutex.TryLock by another client after the first TTL", err, key, m.Identity(), l.Token(), ttl)

	if err := l.Unlock(e.ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	select {
	case <-l.Done():
	default:
		t.Errorf("Done is not closed after Unlock returned")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, baton.ErrReleased) {
		t.Errorf("after Unlock the context's cause is %v, want ErrReleased", cause)
	}
	if err := l.Err(); !errors.Is(err, baton.ErrReleased) {
		t.Errorf("after Unlock Err() = %v, want ErrReleased", err)
	}
	if rec := e.get(b, key); rec.Held() || rec.Token != l.Token() {
		t.Errorf("after Unlock Get = holder %q, token %d, held %v; want free with token %d", rec.Holder, rec.Token, rec.Held(), l.Token())
	}
	l2, err := other.TryLock(e.ctx)
	if err != nil {
		t.Fatalf("TryLock by another client after Unlock: %v", err)
	}
	unlockAtCleanup(t, l2)
	if l2.Token() <= l.Token() {
		t.Errorf("the next lease got token %d after token %d", l2.Token(), l.Token())
	}
	if err := l2.Unlock(e.ctx); err != nil {
		t.Errorf("Unlock of the second lease: %v", err)
	}
}

// holdPastTTL locks m and holds the lease a tenth of its TTL past the TTL,
// which only renewals can do, checking the lease and the record (read on
// b) on the way. It returns the lease, the time Lock was called and the
// lease's first ValidUntil; or, if the holder stepped down on the way, the
// step-down error, after unlocking.
func (e *env) holdPastTTL(m *baton.Mutex, b backend.Backend) (l *baton.Lease, sent, firstValid time.Time, stepDown error) {
	t := e.t
	t.Helper()
	key, ttl := m.Name(), e.s.mutexTTL()
	sent = time.Now()
	l, err := m.Lock(e.ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	returned := time.Now()
	unlockAtCleanup(t, l)
	if l.Name() != key || l.Holder() != m.Identity() {
		t.Errorf("lease name %q, holder %q; want %q, %q", l.Name(), l.Holder(), key, m.Identity())
	}
	rec := e.get(b, key)
	if rec.Holder != m.Identity() || rec.Token != l.Token() || !rec.Held() {
		t.Errorf("Get = holder %q, token %d, held %v; want the lease's %q, %d, true", rec.Holder, rec.Token, rec.Held(), m.Identity(), l.Token())
	}
	// The acquire was sent between the call and the return of Lock (after
	// any watch the engine set up first), and validity counts from then.
	firstValid = l.ValidUntil()
	if lo, hi := sent.Add(ttl-margin(ttl)), returned.Add(ttl-margin(ttl)); firstValid.Before(lo) || firstValid.After(hi) {
		t.Errorf("ValidUntil is %v after Lock was called; want TTL %v minus margin %v after the acquire was sent, between %v (call) and %v (return)",
			firstValid.Sub(sent), ttl, margin(ttl), lo.Sub(sent), hi.Sub(sent))
	}

	hold := time.NewTimer(time.Until(sent.Add(ttl + ttl/10)))
	defer hold.Stop()
	select {
	case <-l.Done():
	case <-e.ctx.Done():
		t.Fatal(context.Cause(e.ctx))
	case <-hold.C:
	}
	switch err := l.Err(); {
	case err == nil:
		return l, sent, firstValid, nil
	case errors.Is(err, baton.ErrStepDown):
		_ = l.Unlock(e.ctx) // reports the loss; the claim expires in the store
		return nil, sent, firstValid, err
	default:
		t.Fatalf("the lease ended %v after the acquire, within %v of its TTL %v: %v", time.Since(sent), ttl/10, ttl, err)
		return nil, sent, firstValid, nil
	}
}
