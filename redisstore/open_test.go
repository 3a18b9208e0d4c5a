package redisstore_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// openURLs opens urls and closes what it opened at the end of t.
func openURLs(t *testing.T, urls []string, opts ...redisstore.Option) backend.Backend {
	t.Helper()
	b, closer, err := redisstore.OpenURLs(urls, opts...)
	if err != nil {
		t.Fatalf("OpenURLs(%q): %v", urls, err)
	}
	t.Cleanup(func() { _ = closer.Close() })
	return b
}

func TestOpenURLsErrors(t *testing.T) {
	for _, urls := range [][]string{nil, {"redis://a:1", "redis://b:1"}, {"a", "b", "c", "d"}} {
		if _, _, err := redisstore.OpenURLs(urls); !errors.Is(err, backend.ErrInvalidOptions) {
			t.Errorf("OpenURLs(%q): %v, want ErrInvalidOptions", urls, err)
		}
	}
	if _, _, err := redisstore.OpenURLs([]string{"http://x"}); err == nil {
		t.Error("OpenURLs with an http URL succeeded")
	}
	if _, err := redisstore.Open("redis://127.0.0.1:1", redisstore.WithPrefix("a{b}")); err == nil {
		t.Error("Open with a prefix containing braces succeeded")
	}
}

// TestOpenBadURL: a URL that does not parse is a misconfiguration that
// callers match with ErrInvalidOptions, as every other refusal of Open's
// arguments; it matched nothing.
func TestOpenBadURL(t *testing.T) {
	for _, u := range []string{"http://x:1", "redis://x:99999", "redis://x:port", "redis://[::1", "redis://x:1/notadb"} {
		if _, err := redisstore.Open(u); !errors.Is(err, backend.ErrInvalidOptions) {
			t.Errorf("Open(%q): %v, want ErrInvalidOptions", u, err)
		}
		if _, err := redisstore.ParseURL(u); !errors.Is(err, backend.ErrInvalidOptions) {
			t.Errorf("ParseURL(%q): %v, want ErrInvalidOptions", u, err)
		}
	}
}

func TestOpenURLsKinds(t *testing.T) {
	servers := startRedis(t, 3)
	ctx := testCtx(t, 20*time.Second)
	one := openURLs(t, []string{servers[0].URL()})
	if _, ok := one.(*redisstore.Store); !ok {
		t.Errorf("one URL opened a %T, want *redisstore.Store", one)
	}
	three := openURLs(t, []string{servers[0].URL(), servers[1].URL(), servers[2].URL()})
	if _, ok := three.(*redisstore.Redlock); !ok {
		t.Errorf("three URLs opened a %T, want *redisstore.Redlock", three)
	}
	for _, b := range []backend.Backend{one, three} {
		cycle(t, ctx, b, "kinds", 2)
	}
}

// TestPasswordAndDB: a password-protected server, the database from the
// URL path; a wrong password is reported as ErrForbidden.
func TestPasswordAndDB(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisArgs("--requirepass", "s3cret"))
	ctx := testCtx(t, 20*time.Second)
	b := openURLs(t, []string{fmt.Sprintf("redis://:s3cret@%s/3", srv.Addr())}, redisstore.WithPrefix("p:"))
	cycle(t, ctx, b, "db", 1)

	raw := newClient(t, srv.Addr(), func(o *redis.Options) { o.Password = "s3cret"; o.DB = 3 })
	if n, err := raw.Exists(ctx, "p:{db}:fence").Result(); err != nil || n != 1 {
		t.Errorf("the fence key is not in DB 3: %d, %v", n, err)
	}

	bad := openURLs(t, []string{fmt.Sprintf("redis://:wrong@%s", srv.Addr())})
	_, err := bad.TryAcquire(ctx, "db", request("x", time.Minute))
	if !errors.Is(err, backend.ErrForbidden) {
		t.Errorf("TryAcquire with a wrong password: %v, want ErrForbidden", err)
	}
}

// TestACLUser: an ACL user with a password and only the rights the package
// documentation lists can lock, watch and list; a user without the right to
// run scripts gets ErrForbidden.
func TestACLUser(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisArgs(
		"--user", "default", "off",
	), testenv.RedisArgs(
		append([]string{"--user", "locker", "on", ">pw"}, strings.Fields(redisstore.ACLRules)...)...,
	), testenv.RedisArgs(
		"--user", "reader", "on", ">pw", "~*", "+@read", "-@scripting",
	), testenv.RedisArgs(
		// The rules as documented before +rpop was added.
		append([]string{"--user", "older", "on", ">pw"}, slices.DeleteFunc(strings.Fields(redisstore.ACLRules), func(r string) bool { return r == "+rpop" })...)...,
	))
	ctx := testCtx(t, 20*time.Second)
	b := openURLs(t, []string{fmt.Sprintf("redis://locker:pw@%s", srv.Addr())})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := b.(backend.Watcher).Watch(wctx, "acl")
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	cycle(t, ctx, b, "acl", 2)
	expectWake(t, ch, 5*time.Second, "two acquire/release cycles")
	// The FIFO path: a refused waiter (with the watch open) is queued, the
	// release hands the lock to it, and it collects it.
	g, err := b.TryAcquire(ctx, "acl", request("first", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	second := request("second", time.Minute)
	second.Waiting = true
	turn, err := b.(backend.WaiterWatcher).WatchWaiter(wctx, "acl", "second")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, "acl", second); !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("TryAcquire while held: %v", err)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, "acl", request("third", time.Minute)); !errors.Is(err, backend.ErrHeld) {
		t.Errorf("TryAcquire by a newcomer after the lock was handed to a waiter: %v, want ErrHeld", err)
	}
	// The handoff wakes second's watch. A notice of the cycles above may
	// have woken it first (it reached the Store after the watch was
	// registered), and a waiting attempt is answered from the Store's
	// last answer until the Store hears the handoff: try at each wake.
	for {
		expectWake(t, turn, 5*time.Second, "the handoff to second")
		_, err := b.TryAcquire(ctx, "acl", second)
		if err == nil {
			break
		}
		if !errors.Is(err, backend.ErrHeld) {
			t.Fatalf("TryAcquire by the waiter the lock was handed to: %v", err)
		}
	}
	// A full FIFO: the scripts drop the place of the waiter beyond its cap
	// again (RPOP), which the rules must allow.
	for i := range redisstore.MaxWaiters + 1 {
		if _, err := b.TryAcquire(ctx, "acl", waitingRequest(fmt.Sprintf("w%d", i), time.Minute)); !errors.Is(err, backend.ErrHeld) {
			t.Fatalf("waiting attempt %d of %d (the FIFO holds %d) while the lock is held: %v, want ErrHeld",
				i+1, redisstore.MaxWaiters+1, redisstore.MaxWaiters, err)
		}
	}
	older := openURLs(t, []string{fmt.Sprintf("redis://older:pw@%s", srv.Addr())})
	if _, err := older.TryAcquire(ctx, "acl", waitingRequest("late", time.Minute)); !errors.Is(err, backend.ErrForbidden) || !strings.Contains(err.Error(), "redisstore.ACLRules") {
		t.Errorf("a waiting attempt beyond the FIFO's cap by a user without +rpop: %v, want ErrForbidden naming redisstore.ACLRules as the fix", err)
	}
	if err := b.(*redisstore.Store).ForceRelease(ctx, "acl"); err != nil {
		t.Errorf("ForceRelease: %v", err)
	}
	if recs, err := b.(backend.Lister).List(ctx); err != nil || len(recs) != 1 {
		t.Errorf("List = %v, %v; want the one lock", recs, err)
	}

	r := openURLs(t, []string{fmt.Sprintf("redis://reader:pw@%s", srv.Addr())})
	if _, err := r.TryAcquire(ctx, "acl", request("x", time.Minute)); !errors.Is(err, backend.ErrForbidden) || !strings.Contains(err.Error(), "redisstore.ACLRules") {
		t.Errorf("TryAcquire by a user without scripting: %v, want ErrForbidden naming redisstore.ACLRules as the fix", err)
	}
}

// TestTLS: rediss:// with a private CA given through WithClientOptions.
func TestTLS(t *testing.T) {
	files, pool := testenv.WriteTLSFiles(t)
	srv := testenv.StartRedis(t, testenv.WithRedisTLS(files))
	ctx := testCtx(t, 20*time.Second)
	url := srv.URL()
	if !strings.HasPrefix(url, "rediss://") {
		t.Fatalf("URL %q", url)
	}
	b := openURLs(t, []string{url}, redisstore.WithClientOptions(func(o *redis.Options) {
		o.TLSConfig.RootCAs = pool
		o.TLSConfig.MinVersion = tls.VersionTLS12
	}))
	cycle(t, ctx, b, "tls", 2)

	// Without the CA the server's certificate is not trusted.
	untrusted := openURLs(t, []string{url}, redisstore.WithClientOptions(func(o *redis.Options) {
		o.MaxRetries = -1
		o.DialerRetries = 1
	}))
	if _, err := untrusted.TryAcquire(ctx, "tls", request("x", time.Minute)); err == nil {
		t.Error("TryAcquire over TLS with an untrusted certificate succeeded")
	}

	// A plain redis:// URL to the TLS port: the server hangs up, and Get
	// (the CLI's first request) says to use rediss://.
	plain := openURLs(t, []string{strings.Replace(url, "rediss://", "redis://", 1)}, redisstore.WithClientOptions(func(o *redis.Options) {
		o.MaxRetries = -1
	}))
	if _, err := plain.Get(ctx, "tls"); !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "use a rediss:// URL") {
		t.Errorf("Get over plain TCP from a TLS port: %v, want ErrMisconfigured naming rediss://", err)
	}
}

// TestNotRedis: a URL whose host and port are an HTTP server's is a
// misconfiguration that says the server does not speak Redis, not an
// unknown failure.
func TestNotRedis(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	s := openURL(t, "redis://"+srv.Listener.Addr().String(), uniquePrefix())
	_, err := s.Get(testCtx(t, 20*time.Second), "job")
	if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "does not answer in the Redis protocol") {
		t.Errorf("Get from an HTTP server: %v; want ErrMisconfigured saying it is not Redis", err)
	}
}
