package redisstore_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// Issue 13: a lock key deleted while its claim is live (DEL by hand, a
// clean-up job). The holder learns of it only at its next renew; until the
// claim could have expired, no contender may take the lock.

// fenceExpiry returns the claim expiry the fence of key records on c (server
// ms), 0 if none.
func fenceExpiry(t *testing.T, ctx context.Context, c *redis.Client, fence string) int64 {
	t.Helper()
	v, err := c.HGet(ctx, fence, "expires").Result()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// serverMillis returns c's server clock in ms.
func serverMillis(t *testing.T, ctx context.Context, c *redis.Client) int64 {
	t.Helper()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

// acquireAfterDeletion retries TryAcquire on b, waiting what each refusal
// says, until it succeeds. Every refusal must name the deleted claim.
func acquireAfterDeletion(t *testing.T, ctx context.Context, b backend.Backend, key string, req backend.Request, was backend.Grant) backend.Grant {
	t.Helper()
	for {
		g, err := b.TryAcquire(ctx, key, req)
		if err == nil {
			return g
		}
		var held *backend.HeldError
		if !errors.As(err, &held) || held.Holder != was.Holder || held.Token != was.Token || held.RetryAfter <= 0 || held.RetryAfter > was.TTL {
			t.Fatalf("TryAcquire after the deletion: %v (%+v), want a HeldError naming %q with token %d and 0 < RetryAfter <= %v",
				err, held, was.Holder, was.Token, was.TTL)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("TryAcquire after the deletion: still refused when the test timed out: %v", err)
		case <-time.After(held.RetryAfter):
		}
	}
}

// A contender is refused until the deleted claim (as last renewed) could
// have expired by the server's clock; the holder's renew and release get
// ErrLost and bring nothing back; the next token is larger.
func TestDeletedWhileHeldWithContender(t *testing.T) {
	srv := startRedis(t, 1)[0]
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	holder, standby := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	raw := newClient(t, srv.Addr())
	const key, ttl = "deleted", 2 * time.Second
	lock, fence, _ := holder.Keys(key)

	for range 3 { // a few tenures, so that the token is not the first
		cycle1(t, ctx, holder, key)
	}
	g, err := holder.TryAcquire(ctx, key, request("a", ttl))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := standby.TryAcquire(ctx, key, request("b", ttl)); !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("TryAcquire while held: %v", err)
	}
	if _, err := holder.Renew(ctx, g); err != nil {
		t.Fatal(err)
	}
	until := fenceExpiry(t, ctx, raw, fence)
	if n, err := raw.Del(ctx, lock).Result(); err != nil || n != 1 {
		t.Fatalf("DEL %s = %d, %v", lock, n, err)
	}

	if rec, err := standby.Get(ctx, key); err != nil || !rec.Held() || rec.Holder != "a" || rec.Token != g.Token || rec.Remaining > ttl {
		t.Errorf("Get after the deletion = %+v, %v; want held by a with token %d for at most %v", rec, err, g.Token, ttl)
	}
	_, err = standby.TryAcquire(ctx, key, request("b", ttl))
	var held *backend.HeldError
	if !errors.As(err, &held) || held.Holder != "a" || held.Token != g.Token {
		t.Fatalf("TryAcquire right after the deletion: %v, want held by a with token %d", err, g.Token)
	}
	_, err = holder.Renew(ctx, g)
	if !errors.Is(err, backend.ErrLost) {
		t.Fatalf("Renew after the deletion: %v, want ErrLost", err)
	}
	if err := holder.Release(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("Release after the deletion: %v, want ErrLost", err)
	}
	if n, err := raw.Exists(ctx, lock).Result(); err != nil || n != 0 {
		t.Fatalf("lock key after a failed renew and release: exists %d, %v", n, err)
	}

	g2 := acquireAfterDeletion(t, ctx, standby, key, request("b", ttl), g)
	if now := serverMillis(t, ctx, raw); now < until {
		t.Fatalf("acquired at server time %d, before the deleted claim's expiry %d", now, until)
	}
	if g2.Token <= g.Token {
		t.Fatalf("token after the deletion %d, want more than %d", g2.Token, g.Token)
	}
}

// cycle1 acquires and releases key once on s.
func cycle1(t *testing.T, ctx context.Context, s backend.Backend, key string) {
	t.Helper()
	g, err := s.TryAcquire(ctx, key, request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
}

// With no standby: the holder's renew gets ErrLost, and the holder itself
// cannot take the lock again before the claim could have expired; then it
// gets a larger token. A forced release frees a deleted claim at once.
func TestDeletedWhileHeldNoStandby(t *testing.T) {
	srv := startRedis(t, 1)[0]
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	s, admin := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	raw := newClient(t, srv.Addr())
	const ttl = 2 * time.Second

	g, err := s.TryAcquire(ctx, "alone", request("a", ttl))
	if err != nil {
		t.Fatal(err)
	}
	lock, fence, _ := s.Keys("alone")
	until := fenceExpiry(t, ctx, raw, fence)
	raw.Del(ctx, lock)
	if _, err := s.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("Renew after the deletion: %v, want ErrLost", err)
	}
	g2 := acquireAfterDeletion(t, ctx, s, "alone", request("a", ttl), g)
	if now := serverMillis(t, ctx, raw); now < until {
		t.Fatalf("acquired at server time %d, before the deleted claim's expiry %d", now, until)
	}
	if g2.Token <= g.Token {
		t.Fatalf("token after the deletion %d, want more than %d", g2.Token, g.Token)
	}

	// The sanctioned way: a forced release clears the deleted claim.
	raw.Del(ctx, lock)
	if err := admin.ForceRelease(ctx, "alone"); err != nil {
		t.Fatal(err)
	}
	g3, err := s.TryAcquire(ctx, "alone", request("c", ttl))
	if err != nil || g3.Token <= g2.Token {
		t.Fatalf("TryAcquire after a forced release of a deleted claim: token %d, %v; want more than %d", g3.Token, err, g2.Token)
	}
	// A release clears the expiry too: nothing is refused after it.
	if err := s.Release(ctx, g3); err != nil {
		t.Fatal(err)
	}
	if e := fenceExpiry(t, ctx, raw, fence); e != 0 {
		t.Fatalf("fence expiry after a release: %d, want 0", e)
	}
}

// Redlock runs the same scripts on every server. A lock key deleted on one
// server leaves the quorum holding; deleted on all, the holder's renew gets
// ErrLost and no contender acquires before the claim could have expired.
func TestRedlockDeletedWhileHeld(t *testing.T) {
	servers := startRedis(t, 3)
	ctx := testCtx(t, 60*time.Second)
	prefix := uniquePrefix()
	holder, standby := newRedlock(t, servers, prefix, fastClient), newRedlock(t, servers, prefix, fastClient)
	raws := make([]*redis.Client, len(servers))
	for i, srv := range servers {
		raws[i] = newClient(t, srv.Addr())
	}
	const key, ttl = "deleted", 3 * time.Second
	lock, fence, _ := mustNew(t, raws[0], redisstore.WithPrefix(prefix)).Keys(key)

	cycle1(t, ctx, holder, key)
	g, err := holder.TryAcquire(ctx, key, request("a", ttl))
	if err != nil {
		t.Fatal(err)
	}
	raws[0].Del(ctx, lock)
	if _, err := holder.Renew(ctx, g); err != nil {
		t.Fatalf("Renew with the key deleted on one server: %v, want success (a quorum holds)", err)
	}
	if _, err := standby.TryAcquire(ctx, key, request("b", ttl)); !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("TryAcquire with the key deleted on one server: %v, want ErrHeld", err)
	}

	// A new quorum includes a server of the holder's last quorum, whose
	// claim lasts at least as long as the holder counts itself valid: no
	// acquisition before the (N-quorum+1)-th largest expiry.
	var exp []int64
	for _, c := range raws {
		exp = append(exp, fenceExpiry(t, ctx, c, fence))
		c.Del(ctx, lock)
	}
	slices.Sort(exp)
	until := exp[len(exp)-holder.Quorum()]
	if _, err := holder.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("Renew with the key deleted everywhere: %v, want ErrLost", err)
	}
	g2 := acquireAfterDeletion(t, ctx, standby, key, request("b", ttl), g)
	if now := serverMillis(t, ctx, raws[1]); now < until {
		t.Fatalf("acquired at server time %d, before the deleted claim's expiry %d", now, until)
	}
	if g2.Token <= g.Token {
		t.Fatalf("token after the deletion %d, want more than %d", g2.Token, g.Token)
	}
}
