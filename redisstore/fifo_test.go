package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
)

// watching opens a watch on key for the rest of the test, which makes the
// Store's refused attempts join the FIFO of waiters.
func watching(t *testing.T, s *redisstore.Store, key string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := s.Watch(ctx, key); err != nil {
		t.Fatal(err)
	}
}

func heldBy(t *testing.T, err error) *backend.HeldError {
	t.Helper()
	var held *backend.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("got %v, want ErrHeld", err)
	}
	return held
}

// TestFIFOHandover: a release reserves the lock for the longest-waiting
// waiter; a newcomer and the releaser are refused until it took it.
func TestFIFOHandover(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key = "fifo"
	a, b, c, d := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	for _, s := range []*redisstore.Store{a, b, c} {
		watching(t, s, key)
	}
	ga, err := a.TryAcquire(ctx, key, request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// b, then c, queue up.
	_, err = b.TryAcquire(ctx, key, request("b", time.Minute))
	heldBy(t, err)
	_, err = c.TryAcquire(ctx, key, request("c", time.Minute))
	heldBy(t, err)
	if err := a.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		s    *redisstore.Store
		name string
	}{{d, "d"}, {c, "c"}, {a, "a"}} {
		_, err := x.s.TryAcquire(ctx, key, request(x.name, time.Minute))
		if h := heldBy(t, err); h.Holder != "b" || h.RetryAfter <= 0 || h.RetryAfter > redisstore.DefaultHandoverWindow {
			t.Errorf("%s while reserved for b: %+v; want held by b for at most the window", x.name, h)
		}
	}
	gb, err := b.TryAcquire(ctx, key, request("b", time.Minute))
	if err != nil {
		t.Fatalf("b, for which the lock is reserved: %v", err)
	}
	if gb.Token <= ga.Token {
		t.Errorf("b's token %d, want above %d", gb.Token, ga.Token)
	}
	if err := b.Release(ctx, gb); err != nil {
		t.Fatal(err)
	}
	// c waited before a re-queued.
	_, err = a.TryAcquire(ctx, key, request("a", time.Minute))
	if h := heldBy(t, err); h.Holder != "c" {
		t.Errorf("after b released the lock is reserved for %q, want c", h.Holder)
	}
	gc, err := c.TryAcquire(ctx, key, request("c", time.Minute))
	if err != nil {
		t.Fatalf("c: %v", err)
	}
	if err := c.Release(ctx, gc); err != nil {
		t.Fatal(err)
	}
	if _, err := a.TryAcquire(ctx, key, request("a", time.Minute)); err != nil {
		t.Errorf("a, the last waiter: %v", err)
	}
}

// TestFIFOReservationExpires: a reservation for a waiter that never comes
// back ends after the window; then anyone can acquire.
func TestFIFOReservationExpires(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key = "fifo-expiry"
	const window = 100 * time.Millisecond
	a := newStore(t, srv.Addr(), prefix)
	gone := windowStore(t, srv.Addr(), prefix, window)
	watching(t, gone, key)
	ga, err := a.TryAcquire(ctx, key, request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_, err = gone.TryAcquire(ctx, key, request("gone", time.Minute))
	heldBy(t, err)
	// a's Store releases with its own (default) window; use the short one.
	short := windowStore(t, srv.Addr(), prefix, window)
	if err := short.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		_, err := a.TryAcquire(ctx, key, request("a", time.Minute))
		if err == nil {
			break
		}
		h := heldBy(t, err)
		if h.Holder != "gone" {
			t.Fatalf("held by %q, want the reservation for gone", h.Holder)
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the reservation did not expire")
		}
		time.Sleep(h.RetryAfter) // the server's expiry of the reservation is the subject
	}
	if d := time.Since(start); d > window+time.Second {
		t.Errorf("acquired %v after the release; the window is %v", d, window)
	}
}

// TestFIFONoStarvation: contenders that unlock and lock again in tight
// loops take turns.
func TestFIFONoStarvation(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 60*time.Second)
	prefix := uniquePrefix()
	const (
		key    = "fifo-loop"
		n      = 4
		rounds = 30
	)
	var (
		mu      sync.Mutex
		counts  [n]int
		atFirst []int
		wg      sync.WaitGroup
	)
	for i := range n {
		m, err := baton.NewMutex(newStore(t, srv.Addr(), prefix), key, baton.WithIdentity(fmt.Sprintf("loop-%d", i)), quiet)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for r := range rounds {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				mu.Lock()
				counts[i]++
				if r == rounds-1 && atFirst == nil {
					atFirst = counts[:]
					atFirst = append([]int(nil), atFirst...)
				}
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("Unlock: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i, c := range atFirst {
		if c < rounds/2 {
			t.Errorf("when the first contender had locked %d times, contender %d had locked only %d times: %v", rounds, i, c, atFirst)
		}
	}
	t.Logf("acquisitions when the first contender was done: %v", atFirst)
}

// TestFIFOQueuesWaitingAttempt: an attempt marked Waiting (a blocking Lock)
// takes its place at once, before any watch is open, while a one-shot
// attempt without a watch is never waited for.
func TestFIFOQueuesWaitingAttempt(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key = "fifo-waiting"
	a, b, c := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	ga, err := a.TryAcquire(ctx, key, request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.TryAcquire(ctx, key, request("c", time.Minute)) // one-shot: not queued
	heldBy(t, err)
	wait := request("b", time.Minute)
	wait.Waiting = true
	_, err = b.TryAcquire(ctx, key, wait)
	heldBy(t, err)
	if err := a.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		s    *redisstore.Store
		name string
	}{{c, "c"}, {a, "a"}} {
		_, err := x.s.TryAcquire(ctx, key, request(x.name, time.Minute))
		if h := heldBy(t, err); h.Holder != "b" {
			t.Errorf("%s after the release: held by %q, want reserved for b, the waiting contender", x.name, h.Holder)
		}
	}
	if _, err := b.TryAcquire(ctx, key, wait); err != nil {
		t.Fatalf("b, for which the lock is reserved: %v", err)
	}
}

// TestWatchWaiterWakesOnlyItsTurn: a waiter's watch is not woken by an
// acquisition, nor at once by a release reserved for another waiter; it is
// woken when that reservation ends, and at once by a release reserved for
// it. A plain watch is woken by all of them.
func TestWatchWaiterWakesOnlyItsTurn(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key = "watch-waiter"
	const window = 300 * time.Millisecond
	a, b, c := windowStore(t, srv.Addr(), prefix, window), windowStore(t, srv.Addr(), prefix, window), windowStore(t, srv.Addr(), prefix, window)
	plain, err := c.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := b.WatchWaiter(ctx, key, "b")
	if err != nil {
		t.Fatal(err)
	}
	wc, err := c.WatchWaiter(ctx, key, "c")
	if err != nil {
		t.Fatal(err)
	}
	woken := func(ch <-chan struct{}, within time.Duration) bool {
		select {
		case <-ch:
			return true
		case <-time.After(within):
			return false
		}
	}
	drain := func(ch <-chan struct{}) {
		for woken(ch, 20*time.Millisecond) {
		}
	}
	ga, err := a.TryAcquire(ctx, key, request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !woken(plain, time.Second) {
		t.Error("the plain watch was not woken by an acquisition")
	}
	if woken(wb, 100*time.Millisecond) || woken(wc, 0) {
		t.Error("a waiter's watch was woken by another owner's acquisition")
	}
	// b, then c, queue up.
	for _, x := range []struct {
		s    *redisstore.Store
		name string
	}{{b, "b"}, {c, "c"}} {
		wait := request(x.name, time.Minute)
		wait.Waiting = true
		_, err := x.s.TryAcquire(ctx, key, wait)
		heldBy(t, err)
	}
	drain(plain)
	start := time.Now()
	if err := a.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	if !woken(wb, time.Second) {
		t.Error("b's watch was not woken by the release reserved for b")
	}
	if !woken(plain, time.Second) {
		t.Error("the plain watch was not woken by the release")
	}
	if woken(wc, window/2) {
		t.Error("c's watch was woken at once by the release reserved for b")
	}
	if !woken(wc, 2*window) {
		t.Fatal("c's watch was not woken when b's reservation ended")
	}
	if d := time.Since(start); d < window {
		t.Errorf("c's watch was woken %v after the release, before the %v reservation ended", d, window)
	}
	// The reservation ran out: c takes the lock.
	if _, err := c.TryAcquire(ctx, key, request("c", time.Minute)); err != nil {
		t.Fatalf("c after b's reservation ended: %v", err)
	}
}

// windowStore returns a Store on addr with prefix and a handover window,
// closed at the end of t.
func windowStore(t *testing.T, addr, prefix string, window time.Duration) *redisstore.Store {
	t.Helper()
	s := mustNew(t, newClient(t, addr), redisstore.WithPrefix(prefix), redisstore.WithHandoverWindow(window))
	t.Cleanup(func() { _ = s.Close() })
	return s
}
