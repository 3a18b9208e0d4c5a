package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// scriptGate is a go-redis hook that fails the first acquire script it
// sees (as a connection reset before the request went out would) and
// holds the first release script until open is closed (as go-redis's
// resend of a release whose reply was lost comes late, after a backoff).
type scriptGate struct {
	open         chan struct{}
	done         chan struct{} // closed once the held release has run
	mu           sync.Mutex
	failed, held bool
}

func (g *scriptGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *scriptGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (g *scriptGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.mu.Lock()
		var fail, hold bool
		switch redisstore.ScriptOf(cmd.Args()) {
		case "acquire":
			fail, g.failed = !g.failed, true
		case "release":
			hold, g.held = !g.held, true
		}
		g.mu.Unlock()
		if fail {
			err := errors.New("injected: connection reset by peer")
			cmd.SetErr(err)
			return err
		}
		if !hold {
			return next(ctx, cmd)
		}
		defer close(g.done)
		select {
		case <-g.open:
		case <-ctx.Done():
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}

// A Redlock attempt that fails undoes what it may have acquired by
// releasing the claim of its holder and nonce on every server, in the
// background on a server that is slow to answer. A waiting Lock sends every
// attempt with one nonce, so a release of a failed attempt that reached a
// server late (sent again by go-redis after its reply was lost) deleted the
// claim the next attempt had taken there in the meantime: the holder kept
// its quorum by its own count while the server was free for another, and
// two holders held the lock at once (the safety suite's lost-replies row,
// in one CI run of 2026-12-07). The cleanup must spare a claim that a later
// attempt took.
func TestRedlockCleanupSparesNextAttempt(t *testing.T) {
	srvs := startRedis(t, 3)
	ctx := testCtx(t, 60*time.Second)
	prefix := uniquePrefix()
	const ttl = 30 * time.Second
	// Server 0 is held throughout by another process's claim, and server 1
	// until the second attempt: the waiter's quorum must be servers 1 and 2.
	other := newStore(t, srvs[0].Addr(), prefix)
	g0, err := other.TryAcquire(ctx, "job", request("other", ttl))
	if err != nil {
		t.Fatal(err)
	}
	first := newStore(t, srvs[1].Addr(), prefix)
	g1, err := first.TryAcquire(ctx, "job", request("first", ttl))
	if err != nil {
		t.Fatal(err)
	}
	gate := &scriptGate{open: make(chan struct{}), done: make(chan struct{})}
	clients := make([]redis.UniversalClient, 3)
	for i, srv := range srvs {
		c := newClient(t, srv.Addr())
		if i == 2 {
			c.AddHook(gate)
		}
		clients[i] = c
	}
	w, err := redisstore.NewRedlock(clients, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	req := request("waiter", ttl) // one nonce for both attempts, as Lock's

	// Attempt 1: held on servers 0 and 1, an error on server 2: it fails
	// and sends its clean-up releases; server 2's is held back.
	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = w.TryAcquire(actx, "job", req)
	cancel()
	if err == nil {
		t.Fatal("the first attempt acquired; want it refused (servers 0 and 1 are held)")
	}
	// Server 1 is released; attempt 2 takes servers 1 and 2.
	if err := first.Release(ctx, g1); err != nil {
		t.Fatal(err)
	}
	g, err := w.TryAcquire(ctx, "job", req)
	if err != nil {
		t.Fatalf("the second attempt: %v", err)
	}
	// The first attempt's clean-up release reaches server 2 now.
	close(gate.open)
	select {
	case <-gate.done:
	case <-ctx.Done():
		t.Fatal("the first attempt's clean-up release on server 2 did not run")
	}
	// Another process may not take the lock, with server 0 freed, while
	// the waiter's lease lasts.
	if err := other.Release(ctx, g0); err != nil {
		t.Fatal(err)
	}
	third := newRedlock(t, srvs, prefix)
	if g3, err := third.TryAcquire(ctx, "job", request("third", ttl)); err == nil {
		t.Fatalf("another Redlock acquired token %d while the waiter held token %d (valid for %v): the first attempt's clean-up released the second attempt's claim on server 2",
			g3.Token, g.Token, ttl)
	}
}
