package redisstore_test

import (
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
	for {
		n, err := raw.Exists(ctx, lock).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break // the release ran; its reply is on its way
		}
		time.Sleep(5 * time.Millisecond)
	}
	proxy.Reset()
	proxy.SetLatency(0)
	if err := <-done; err != nil {
		t.Fatalf("Release whose reply was lost after it ran: %v; want nil (it released the lock)", err)
	}
	if err := s.Release(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Errorf("a second Release: %v; want ErrLost", err)
	}
}
