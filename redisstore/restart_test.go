package redisstore_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
)

var quiet = baton.WithLogger(slog.New(slog.DiscardHandler))

// awaitDone waits for ch to close, failing the test after d.
func awaitDone(t *testing.T, ch <-chan struct{}, d time.Duration, what string) time.Time {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
		return time.Now()
	case <-timer.C:
		t.Fatalf("%s did not happen within %v", what, d)
		return time.Time{}
	}
}

// cycle acquires and releases key on b n times and returns the last token.
func cycle(t *testing.T, ctx context.Context, b backend.Backend, key string, n int) uint64 {
	t.Helper()
	var token uint64
	for range n {
		g, err := b.TryAcquire(ctx, key, request("cycler", time.Minute))
		if err != nil {
			t.Fatalf("TryAcquire: %v", err)
		}
		if g.Token <= token {
			t.Fatalf("token %d after %d", g.Token, token)
		}
		token = g.Token
		if err := b.Release(ctx, g); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	return token
}

// TestRestartWithoutPersistence asserts the documented behaviour of a
// server restarted without persistence while a lock is held: the claim and
// the counter vanish, so another client acquires at once with token 1
// while the old holder still runs; the old holder's next renew fails with
// ErrLost and its lease's context ends.
func TestRestartWithoutPersistence(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	a, b := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	const key = "restart"

	before := cycle(t, ctx, a, key, 3)
	mu, err := baton.NewMutex(a, key, baton.WithTTL(3*time.Second), baton.WithRenewDeadline(2*time.Second),
		baton.WithRenewInterval(500*time.Millisecond), baton.WithRetryPeriod(200*time.Millisecond), quiet)
	if err != nil {
		t.Fatal(err)
	}
	l, err := mu.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Unlock(context.Background()) })
	if l.Token() <= before {
		t.Fatalf("lease token %d, want above %d", l.Token(), before)
	}

	srv.Restart()

	if _, err := b.Get(ctx, key); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Get after the restart: %v; want ErrNotFound (the server lost the claim and the counter)", err)
	}
	g, err := b.TryAcquire(ctx, key, request("other", time.Minute))
	if err != nil {
		t.Fatalf("TryAcquire by another client after the restart: %v; the claim should be gone", err)
	}
	if g.Token <= l.Token() {
		t.Errorf("token after the restart = %d, want above the lost holder's %d: the counter is gone, the server's clock is not", g.Token, l.Token())
	}
	if l.Err() != nil {
		t.Logf("note: the old holder noticed before the other acquired: %v", l.Err())
	}
	// The old holder learns at its next renew (every 500ms) that the lock
	// is someone else's.
	awaitDone(t, l.Done(), 5*time.Second, "the old holder's step-down")
	if cause := context.Cause(l.Context()); !errors.Is(cause, backend.ErrLost) {
		t.Errorf("the old lease ended with %v, want ErrLost", cause)
	}
	if err := l.Unlock(ctx); !errors.Is(err, backend.ErrLost) {
		t.Errorf("Unlock of the lost lease: %v, want ErrLost", err)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Errorf("Release by the new holder: %v", err)
	}
}

// TestRestartWithAppendOnly: with appendonly yes and appendfsync always, a
// crash (SIGKILL) and restart keep the claim and the counter: the holder
// can still release, and tokens keep increasing.
func TestRestartWithAppendOnly(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.AppendOnly())
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	a := newStore(t, srv.Addr(), prefix)
	const key = "durable"

	before := cycle(t, ctx, a, key, 5)
	g, err := a.TryAcquire(ctx, key, request("holder", time.Minute))
	if err != nil {
		t.Fatal(err)
	}

	srv.Kill()
	srv.Start()

	b := newStore(t, srv.Addr(), prefix)
	rec, err := b.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get after the restart: %v", err)
	}
	if !rec.Held() || rec.Holder != "holder" || rec.Token != g.Token || rec.Token <= before {
		t.Errorf("after the restart Get = holder %q, token %d, held %v; want %q, %d, true", rec.Holder, rec.Token, rec.Held(), "holder", g.Token)
	}
	if _, err := b.TryAcquire(ctx, key, request("other", time.Minute)); !errors.Is(err, backend.ErrHeld) {
		t.Errorf("TryAcquire by another client after the restart: %v, want ErrHeld", err)
	}
	// The holder's client reconnects (go-redis retries on a new connection).
	if _, err := a.Renew(ctx, g); err != nil {
		t.Errorf("Renew by the holder after the restart: %v", err)
	}
	if err := a.Release(ctx, g); err != nil {
		t.Errorf("Release by the holder after the restart: %v", err)
	}
	after := cycle(t, ctx, b, key, 1)
	if after <= g.Token {
		t.Errorf("first token after the restart = %d, want above %d", after, g.Token)
	}

	// A clean restart (SIGTERM) too.
	srv.Restart()
	if got := cycle(t, ctx, b, key, 1); got <= after {
		t.Errorf("token after a second restart = %d, want above %d", got, after)
	}
}

// TestWatchSurvivesRestart: a watch keeps working across a server restart
// (go-redis reconnects and resubscribes; the resubscription wakes the
// watcher, since a notice may have been missed).
func TestWatchSurvivesRestart(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	a, b := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	const key = "watch-restart"

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := a.Watch(wctx, key)
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	expectWake(t, ch, 10*time.Second, "the restart")
	drain(ch)

	// Notices flow again; the first may need the subscriber to reconnect.
	g, err := b.TryAcquire(ctx, key, request("b", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	expectWake(t, ch, 10*time.Second, "an acquire after the restart")
	drain(ch)
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	expectWake(t, ch, 10*time.Second, "a release after the restart")
}

// TestWatchQuietWhileServerDown: while the server is down, a watch wakes
// once, when its connection breaks, and not at each of the hub's failed
// reconnections (every waiter sent an attempt to the absent server, and
// logged its failure, at each one: about 17 in 6 s); the server's return
// wakes it again.
func TestWatchQuietWhileServerDown(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 60*time.Second)
	a := newStore(t, srv.Addr(), uniquePrefix())
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := a.Watch(wctx, "watch-outage")
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	// The hub retries at 50 ms, 100 ms, ... 1 s: 3 s see at least four
	// failed reconnections, however slow the machine.
	wakes := 0
	for timeout := time.After(3 * time.Second); ; {
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatal("watch channel closed while the server was down")
			}
			wakes++
			continue
		case <-timeout:
		}
		break
	}
	if wakes > 2 {
		t.Errorf("the watch woke %d times in 3 s of outage, want once (at the break; twice if the break came in two errors)", wakes)
	}
	srv.Start()
	expectWake(t, ch, 20*time.Second, "the server's return")
}

func expectWake(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("watch channel closed, waiting for %s", what)
		}
	case <-timer.C:
		t.Fatalf("no wake-up within %v after %s", d, what)
	}
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// TestTokensAfterLostWrites: with appendfsync everysec, a crash (SIGKILL)
// right after acquisitions can lose the last second of writes, counter
// included. The next tokens still only grow: they follow the server's
// clock when the counter went back (see "Fencing tokens").
func TestTokensAfterLostWrites(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisArgs("--appendonly", "yes", "--appendfsync", "everysec"))
	ctx := testCtx(t, 60*time.Second)
	prefix := uniquePrefix()
	var last uint64
	for round := range 4 {
		a := newStore(t, srv.Addr(), prefix)
		// A claim whose release was lost comes back with the restart:
		// the administrator's way out keeps the counter.
		if err := a.ForceRelease(ctx, "amnesia"); err != nil && !errors.Is(err, backend.ErrNotFound) {
			t.Fatal(err)
		}
		got := cycle(t, ctx, a, "amnesia", 5)
		if got <= last {
			t.Fatalf("round %d: token %d after %d, the last one issued before the crash", round, got, last)
		}
		last = got
		srv.Kill() // at once: the last writes may not be on disk
		srv.Start()
	}
}
