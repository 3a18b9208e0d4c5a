package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/faultproxy"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// A connection that breaks after Redis ran a release but before its reply
// came (CLIENT KILL TYPE normal, a proxy or load balancer resetting it)
// makes go-redis send the release again on a new connection. That second
// run found the claim gone and answered that the lock was lost, so Unlock
// failed with ErrLost and baton lock warned that the lock had been taken
// while the command ran, though the release itself freed it (four loops
// locking and unlocking under CLIENT KILL TYPE normal every 3 ms: 11 of
// about 520 releases in 20 s). The release now recognises its own earlier
// run, unless another release of the lock came in between; a second
// Release call still gets ErrLost (the conformance suite's "a second
// Release").
func TestReleaseReplyLost(t *testing.T) {
	srv := testenv.StartRedis(t)
	proxy, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	s := newStore(t, proxy.Addr(), prefix, func(o *redis.Options) { o.MaxRetries = 3 })
	raw := newClient(t, srv.Addr())
	g, err := s.TryAcquire(ctx, "job", request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lock, _, _ := s.Keys("job")
	// Replies take 300 ms back through the proxy: long enough to break the
	// connection between the release's run and its reply.
	const delay = 300 * time.Millisecond
	proxy.SetLatency(delay)
	done := make(chan error, 1)
	go func() { done <- s.Release(ctx, g) }()
	loseReplyOnceRun(ctx, t, proxy, raw, lock, 0) // the release ran
	if err := <-done; err != nil {
		t.Fatalf("Release whose reply was lost after it ran: %v; want nil (it released the lock)", err)
	}
	if err := s.Release(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Errorf("a second Release: %v; want ErrLost", err)
	}
}

// An acquisition whose reply is lost the same way was sent again, found
// its own claim, and was refused as held by its own identity: TryLock
// failed (baton lock --wait 0 exited 75 naming itself), a waiting Lock
// waited for its own claim to expire, and the lock was nobody's for a TTL
// (four loops locking and unlocking under CLIENT KILL TYPE normal every
// 3 ms: 10 such claims in 20 s, about 2% of the acquisitions). The same
// call's retry now takes the claim, its TTL counting from the retry, and
// another call is still refused.
func TestAcquireReplyLost(t *testing.T) {
	srv := testenv.StartRedis(t)
	proxy, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	s := newStore(t, proxy.Addr(), prefix, func(o *redis.Options) { o.MaxRetries = 3 })
	raw := newClient(t, srv.Addr())
	lock, _, _ := s.Keys("job")
	const delay = 300 * time.Millisecond
	proxy.SetLatency(delay)
	req := request("a", time.Minute)
	type result struct {
		g   backend.Grant
		err error
	}
	done := make(chan result, 1)
	go func() {
		g, err := s.TryAcquire(ctx, "job", req)
		done <- result{g, err}
	}()
	loseReplyOnceRun(ctx, t, proxy, raw, lock, 1) // the acquisition ran
	r := <-done
	if r.err != nil {
		t.Fatalf("TryAcquire whose reply was lost after it ran: %v; want the claim it wrote", r.err)
	}
	pttl, err := raw.PTTL(ctx, lock).Result()
	if err != nil || pttl < req.TTL-5*time.Second {
		t.Errorf("the claim's PTTL after the retry: %v (%v); want about the TTL %v, counted from the retry", pttl, err, req.TTL)
	}
	if _, err := s.TryAcquire(ctx, "job", req); !errors.Is(err, backend.ErrHeld) {
		t.Errorf("a second TryAcquire with the same request: %v; want ErrHeld", err)
	}
	if err := s.Release(ctx, r.g); err != nil {
		t.Errorf("Release of the grant: %v", err)
	}
}

// loseReplyOnceRun waits until the script on its way through proxy (whose
// replies are delayed) has run, which it tells by the lock key's existence
// reaching exists, and then breaks every connection through proxy, so
// that the script's reply is lost and go-redis sends it again.
func loseReplyOnceRun(ctx context.Context, t *testing.T, proxy *faultproxy.Proxy, raw *redis.Client, lock string, exists int64) {
	t.Helper()
	for {
		n, err := raw.Exists(ctx, lock).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == exists {
			break
		}
		time.Sleep(5 * time.Millisecond) // polling the server: the script's run sends no event
	}
	proxy.Reset()
	proxy.SetLatency(0)
}
