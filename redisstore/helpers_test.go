package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// newClient connects a go-redis client to addr, closed at the end of t.
func newClient(t testing.TB, addr string, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newStore returns a Store on addr with prefix, closed at the end of t.
func newStore(t testing.TB, addr, prefix string, opts ...func(*redis.Options)) *redisstore.Store {
	t.Helper()
	s := mustNew(t, newClient(t, addr, opts...), redisstore.WithPrefix(prefix))
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newRedlock returns a Redlock over servers with prefix, closed at the end
// of t.
func newRedlock(t testing.TB, servers []*testenv.RedisServer, prefix string, opts ...func(*redis.Options)) *redisstore.Redlock {
	t.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	for i, srv := range servers {
		clients[i] = newClient(t, srv.Addr(), opts...)
	}
	r, err := redisstore.NewRedlock(clients, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// mustNew is redisstore.New for options a test knows to be valid.
func mustNew(t testing.TB, c redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var prefixes atomic.Int64

// uniquePrefix returns a key prefix no other test in this process uses.
func uniquePrefix() string { return fmt.Sprintf("baton-test-%d:", prefixes.Add(1)) }

// startRedis starts n servers.
func startRedis(t testing.TB, n int, opts ...testenv.RedisOption) []*testenv.RedisServer {
	t.Helper()
	s := make([]*testenv.RedisServer, n)
	for i := range s {
		s[i] = testenv.StartRedis(t, opts...)
	}
	return s
}

// testCtx returns a context that ends with the test or after d.
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func request(holder string, ttl time.Duration) backend.Request {
	return backend.Request{Holder: holder, Nonce: baton.NewNonce(), TTL: ttl}
}
