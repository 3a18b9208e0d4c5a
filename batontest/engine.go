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
)

// The subtests in this file run the backend under baton's engine
// (baton.Mutex and baton.Lease), as applications use it.

// testExclusiveMutex: 16 Mutexes on 16 clients, two goroutines each, take
// turns with Lock and Unlock. At most one lease is ever inside the
// critical section, each sees a larger token than the one before, and
// every contender gets its turns.
func (s *suite) testExclusiveMutex(t *testing.T) {
	e := s.setup(t)
	const (
		key       = "exclusive-mutex"
		clients   = 16
		perClient = 2
		rounds    = 2
	)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var (
		inside   atomic.Int32
		last     atomic.Uint64
		acquired atomic.Int64
		wg       sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		cancel()
	}
	for i := range clients {
		m := e.newMutex(e.client(), key, fmt.Sprintf("mutex-%02d", i), s.fastRetry())
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
					if in := inside.Add(1); in > 1 {
						fail("%d holders at once: %q got token %d while another held the lock", in, m.Identity(), l.Token())
					}
					if prev := last.Swap(l.Token()); l.Token() <= prev {
						fail("%q got token %d after a holder with token %d; tokens must strictly increase", m.Identity(), l.Token(), prev)
					}
					if err := l.Err(); err != nil {
						fail("the lease of %q (token %d) ended right after Lock returned: %v", m.Identity(), l.Token(), err)
					}
					runtime.Gosched()
					inside.Add(-1)
					if err := l.Unlock(e.ctx); err != nil {
						fail("Unlock by %q (token %d): %v", m.Identity(), l.Token(), err)
						return
					}
					acquired.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if err := e.ctx.Err(); err != nil {
		t.Fatalf("after %d of %d acquisitions: %v", acquired.Load(), clients*perClient*rounds, context.Cause(e.ctx))
	}
	if got, want := acquired.Load(), int64(clients*perClient*rounds); !t.Failed() && got != want {
		t.Errorf("%d acquisitions, want %d", got, want)
	}
}

// testWakeOnRelease: with a Watcher backend, a contender waiting in
// Mutex.Lock acquires as soon as the holder unlocks, well before its next
// retry would fire.
func (s *suite) testWakeOnRelease(t *testing.T) {
	e := s.setup(t)
	const key = "wake-on-release"
	a, b := e.client(), e.client()
	if _, ok := b.(baton.Watcher); !ok {
		t.Skip("the backend does not implement baton.Watcher; waiters poll every RetryPeriod")
	}
	retry := s.slowRetry()
	holder := e.newMutex(a, key, "waker-a", retry)
	heldOpt, held := signal(baton.EventHeld)
	waiter := e.newMutex(b, key, "waker-b", retry, heldOpt)

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
	r := p.await(t)
	if r.err != nil {
		t.Fatalf("the waiter's Lock: %v", r.err)
	}
	if d := r.at.Sub(unlocked); d >= retry/2 {
		t.Errorf("the waiter acquired %v after Unlock returned; a watch should wake it at once, well before its retry period %v", d, retry)
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
	waiter := e.newMutex(b, key, "waiter-b", s.slowRetry(), heldOpt)

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
	r := p.await(t)
	if d := r.at.Sub(canceled); d > prompt {
		t.Errorf("Lock returned %v after its context was canceled; want within %v (retry period %v)", d, prompt, s.slowRetry())
	}
	if r.lease != nil {
		t.Fatalf("Lock acquired a lock that %q holds", "holder-a")
	}
	if !errors.Is(r.err, context.Canceled) {
		t.Errorf("Lock canceled while waiting: %v; want an error matching context.Canceled", r.err)
	}
	if errors.Is(r.err, context.Canceled) && !errors.Is(r.err, baton.ErrHeld) {
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

	sent := time.Now()
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
	firstValid := l.ValidUntil()
	if lo, hi := sent.Add(ttl-margin(ttl)), returned.Add(ttl-margin(ttl)); firstValid.Before(lo) || firstValid.After(hi) {
		t.Errorf("ValidUntil is %v after Lock was called; want TTL %v minus margin %v after the acquire was sent, between %v (call) and %v (return)",
			firstValid.Sub(sent), ttl, margin(ttl), lo.Sub(sent), hi.Sub(sent))
	}

	// Hold past the TTL: only renewals can keep the lock that long.
	hold := time.NewTimer(time.Until(sent.Add(ttl + ttl/10)))
	defer hold.Stop()
	select {
	case <-l.Done():
		t.Fatalf("the lease ended %v after the acquire, within its TTL %v: %v", time.Since(sent), ttl, context.Cause(l.Context()))
	case <-e.ctx.Done():
		t.Fatal(context.Cause(e.ctx))
	case <-hold.C:
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the lease ended: %v", err)
	}
	if renewals.Load() == 0 {
		t.Errorf("no renewal observed while holding the lease for %v (TTL %v)", time.Since(sent), ttl)
	}
	if !l.ValidUntil().After(firstValid) {
		t.Errorf("ValidUntil did not move forward while holding past the TTL (still %v after the acquire)", firstValid.Sub(sent))
	}
	_, err = b.TryAcquire(e.ctx, key, request("lease-b", ttl))
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
