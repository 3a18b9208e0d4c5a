package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
)

func heldBy(t *testing.T, err error) *backend.HeldError {
	t.Helper()
	var held *backend.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("got %v, want ErrHeld", err)
	}
	return held
}

// TestFIFOHandover: a release hands the lock to the longest-waiting
// waiter; a newcomer and the releaser are refused, and the waiter collects
// it with the attempt of the same Lock call (same nonce).
func TestFIFOHandover(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key = "fifo"
	a, b, c, d := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	// Each waiter's watch wakes when the lock is handed to it (a waiting
	// attempt may be answered from its Store's last answer until the
	// Store hears the notice).
	turn := map[string]<-chan struct{}{}
	for name, s := range map[string]*redisstore.Store{"a": a, "b": b, "c": c} {
		ch, err := s.WatchWaiter(ctx, key, name)
		if err != nil {
			t.Fatal(err)
		}
		turn[name] = ch
	}
	handedTo := func(name string) {
		t.Helper()
		select {
		case <-turn[name]:
		case <-ctx.Done():
			t.Fatalf("%s's watch was not woken by the handoff to it", name)
		}
	}
	ga, err := a.TryAcquire(ctx, key, request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// b, then c, queue up.
	rb, rc, ra := waitingRequest("b", time.Minute), waitingRequest("c", time.Minute), waitingRequest("a", time.Minute)
	_, err = b.TryAcquire(ctx, key, rb)
	heldBy(t, err)
	_, err = c.TryAcquire(ctx, key, rc)
	heldBy(t, err)
	if err := a.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	rec, err := d.Get(ctx, key)
	if err != nil || rec.Holder != "b" || rec.Nonce != rb.Nonce || rec.Token <= ga.Token || rec.Remaining <= 0 {
		t.Fatalf("after the release: %+v, %v; want the lock handed to b's attempt with a larger token", rec, err)
	}
	for _, x := range []struct {
		s    *redisstore.Store
		name string
		req  backend.Request
	}{{d, "d", request("d", time.Minute)}, {a, "a", ra}, {b, "b with another nonce", request("b", time.Minute)}} {
		_, err := x.s.TryAcquire(ctx, key, x.req)
		if h := heldBy(t, err); h.Holder != "b" || h.Token != rec.Token {
			t.Errorf("%s after the lock was handed to b: %+v; want held by b, token %d", x.name, h, rec.Token)
		}
	}
	// c's Store, which waits as c only, does not hear handoffs to b: its
	// waiting attempt may be answered from its last answer (a's claim).
	_, err = c.TryAcquire(ctx, key, rc)
	if h := heldBy(t, err); !(h.Holder == "b" && h.Token == rec.Token) && !(h.Holder == "a" && h.Token == ga.Token) {
		t.Errorf("c after the lock was handed to b: %+v; want held by b (token %d) or, from c's last answer, a (token %d)", h, rec.Token, ga.Token)
	}
	handedTo("b")
	gb, err := b.TryAcquire(ctx, key, rb)
	if err != nil {
		t.Fatalf("b, to which the lock was handed: %v", err)
	}
	if gb.Token != rec.Token {
		t.Errorf("b collected token %d, want the handed %d", gb.Token, rec.Token)
	}
	if err := b.Release(ctx, gb); err != nil {
		t.Fatal(err)
	}
	// c waited before a re-queued.
	if rec, err := d.Get(ctx, key); err != nil || rec.Holder != "c" || rec.Token <= gb.Token {
		t.Errorf("after b released: %+v, %v; want the lock handed to c", rec, err)
	}
	handedTo("c")
	gc, err := c.TryAcquire(ctx, key, rc)
	if err != nil {
		t.Fatalf("c: %v", err)
	}
	if err := c.Release(ctx, gc); err != nil {
		t.Fatal(err)
	}
	handedTo("a")
	if _, err := a.TryAcquire(ctx, key, ra); err != nil {
		t.Errorf("a, the last waiter: %v", err)
	}
}

// TestFIFOReservationExpires: a place without owner (a waiter of an
// earlier version, which does not collect handed locks) gets the
// reservation of old: the lock is freed and reserved for it for the
// window; if it never comes back, anyone can acquire after the window.
func TestFIFOReservationExpires(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key = "fifo-expiry"
	const window = 100 * time.Millisecond
	a := windowStore(t, srv.Addr(), prefix, window)
	ga, err := a.TryAcquire(ctx, key, request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	plantOldPlace(t, ctx, srv.Addr(), a, key, "gone")
	if err := a.Release(ctx, ga); err != nil {
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

// plantOldPlace queues holder in key's FIFO as an earlier version did: a
// place with a registration deadline only (a minute from now).
func plantOldPlace(t *testing.T, ctx context.Context, addr string, s *redisstore.Store, key, holder string) {
	t.Helper()
	c := newClient(t, addr)
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	q := redisstore.QueueKeys(s, key)
	if err := c.RPush(ctx, q[0], holder).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, q[1], holder, now.Add(time.Minute).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestFIFONoStarvation: contenders that unlock and lock again in tight
// loops take turns. The loops start while a starter holds the lock, and
// the starter unlocks once all of them are queued: a contender whose
// goroutine was slow to start would otherwise be counted as starved while
// it had not asked yet (on a busy machine one loop could finish 20 rounds
// alone before another sent its first attempt).
//
// What the FIFO guarantees is checked per wait: from the moment a
// contender's Lock is first refused (Redis has queued it) until it gets
// the lock, every other contender gets the lock at most once (a place
// ahead of it, or a handoff made before it queued and counted only after:
// a contender holds one place or one claim at a time, and queues again
// behind it). Totals at the end are not the property: a contender whose
// goroutine is slow to call Lock again after its Unlock (on a loaded
// machine, a whole round of handoffs) queues late and falls behind without
// losing any place (a loaded run once saw one contender at 2 when the
// first had 6; the cause was not caught).
func TestFIFONoStarvation(t *testing.T) { testNoStarvation(t, 4, 30) }

// TestFIFONoStarvationHundredContenders: as TestFIFONoStarvation, with
// more contenders than the FIFO once held (64): those beyond it never got
// a place, since every place a handover freed went to the holder that had
// just released, locking again at once, and they waited until the others
// stopped.
func TestFIFONoStarvationHundredContenders(t *testing.T) { testNoStarvation(t, 100, 6) }

func testNoStarvation(t *testing.T, n, rounds int) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 60*time.Second)
	prefix := uniquePrefix()
	const key = "fifo-loop"
	starterStore := newStore(t, srv.Addr(), prefix)
	starter, err := baton.NewMutex(starterStore, key, baton.WithIdentity("starter"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	first, err := starter.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	turns := &turnLog{counts: make([]int, n)}
	var wg sync.WaitGroup
	for i := range n {
		// queuedAt is the other contenders' counts when this contender's
		// current Lock was first refused; the Observer runs in the Lock's
		// goroutine.
		var queuedAt []int
		onHeld := baton.ObserverFunc(func(e baton.Event) {
			if e.Kind == baton.EventHeld && queuedAt == nil {
				queuedAt = turns.snapshot()
			}
		})
		m, err := baton.NewMutex(newStore(t, srv.Addr(), prefix), key, baton.WithIdentity(fmt.Sprintf("loop-%d", i)), quiet, baton.WithObserver(onHeld))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for range rounds {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				turns.acquired(t, i, queuedAt)
				queuedAt = nil
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("Unlock: %v", err)
					return
				}
			}
		})
	}
	// On a failure here the loops still end (with ctx) before the test does.
	awaitQueued(t, ctx, srv.Addr(), starterStore, key, int64(n))
	if err := first.Unlock(ctx); err != nil {
		t.Errorf("the starter's Unlock: %v", err)
	}
	wg.Wait()
	t.Logf("acquisitions: %v", turns.counts)
}

// turnLog counts the acquisitions of each contender of testNoStarvation.
type turnLog struct {
	mu     sync.Mutex
	counts []int
}

func (l *turnLog) snapshot() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.counts)
}

// acquired counts an acquisition by contender i, which was first refused
// when the counts were queuedAt (nil if it never was), and reports every
// other contender that acquired more than once since: it overtook i's
// place in the FIFO.
func (l *turnLog) acquired(t *testing.T, i int, queuedAt []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for j, c := range queuedAt {
		if j != i && l.counts[j]-c > 1 {
			t.Errorf("contender %d acquired %d times while contender %d waited in the FIFO; want at most once", j, l.counts[j]-c, i)
		}
	}
	l.counts[i]++
}

// awaitQueued waits until key's FIFO holds n waiters, or reports (with
// t.Errorf, so that the caller can still wait for its goroutines) that it
// did not before ctx ended.
func awaitQueued(t *testing.T, ctx context.Context, addr string, s *redisstore.Store, key string, n int64) {
	t.Helper()
	c := newClient(t, addr)
	queue := redisstore.QueueKeys(s, key)[0]
	for {
		got, err := c.LLen(ctx, queue).Result()
		if err == nil && got >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("%d waiters queued in %s, want %d (last error: %v)", got, queue, n, err)
			return
		case <-time.After(10 * time.Millisecond): // polls the server: the waiters queue in other goroutines
		}
	}
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
			t.Errorf("%s after the release: held by %q, want handed to b, the waiting contender", x.name, h.Holder)
		}
	}
	if _, err := b.TryAcquire(ctx, key, wait); err != nil {
		t.Fatalf("b, to which the lock was handed: %v", err)
	}
}

// TestWatchWaiterWakesOnlyItsTurn: a waiter's watch is not woken by an
// acquisition, nor by a handoff to another waiter; it is woken at once by
// a handoff to its holder. A plain watch is woken by all of them.
func TestWatchWaiterWakesOnlyItsTurn(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key = "watch-waiter"
	a, b, c := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
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
	reqs := map[string]backend.Request{}
	for _, x := range []struct {
		s    *redisstore.Store
		name string
	}{{b, "b"}, {c, "c"}} {
		wait := request(x.name, time.Minute)
		wait.Waiting = true
		reqs[x.name] = wait
		_, err := x.s.TryAcquire(ctx, key, wait)
		heldBy(t, err)
	}
	drain(plain)
	if err := a.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	if !woken(wb, time.Second) {
		t.Error("b's watch was not woken by the handoff to b")
	}
	if !woken(plain, time.Second) {
		t.Error("the plain watch was not woken by the handoff")
	}
	// plain and wc share c's Store: the notice that woke plain did not
	// wake wc.
	select {
	case <-wc:
		t.Error("c's watch was woken by the handoff to b")
	default:
	}
	gb, err := b.TryAcquire(ctx, key, reqs["b"])
	if err != nil {
		t.Fatalf("b after the handoff: %v", err)
	}
	if err := b.Release(ctx, gb); err != nil {
		t.Fatal(err)
	}
	if !woken(wc, time.Second) {
		t.Fatal("c's watch was not woken by the handoff to c")
	}
	if _, err := c.TryAcquire(ctx, key, reqs["c"]); err != nil {
		t.Fatalf("c after the handoff to c: %v", err)
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

// TestFIFOCap: the FIFO of waiters holds at most MaxWaiters places; a
// waiter beyond them competes without one (and leaves no half place
// behind).
func TestFIFOCap(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key = "fifo-cap"
	s := newStore(t, srv.Addr(), prefix)
	if _, err := s.TryAcquire(ctx, key, request("holder", time.Minute)); err != nil {
		t.Fatal(err)
	}
	capacity := redisstore.MaxWaiters
	for i := range capacity + 2 {
		_, err := s.TryAcquire(ctx, key, waitingRequest(fmt.Sprintf("w%d", i), time.Minute))
		heldBy(t, err)
	}
	raw := newClient(t, srv.Addr())
	qk := redisstore.QueueKeys(s, key)
	queue, err := raw.LRange(ctx, qk[0], 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	places, err := raw.HKeys(ctx, qk[1]).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(places)
	want := make([]string, capacity)
	for i := range want {
		want[i] = fmt.Sprintf("w%d", i)
	}
	if !slices.Equal(queue, want) {
		t.Errorf("queue %q, want w0..w%d", queue, capacity-1)
	}
	if slices.Sort(want); !slices.Equal(places, want) {
		t.Errorf("places %q, want w0..w%d", places, capacity-1)
	}
}
