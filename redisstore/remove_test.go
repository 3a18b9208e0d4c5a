package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// lockKeys returns every key of lock name: lock, fence, queue, queued,
// next.
func lockKeys(s *redisstore.Store, name string) []string {
	lock, fence, _ := s.Keys(name)
	return append([]string{lock, fence}, redisstore.QueueKeys(s, name)...)
}

// snapshot returns the DUMP of each of keys that exists on c.
func snapshot(t *testing.T, ctx context.Context, c redis.Cmdable, keys []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, k := range keys {
		v, err := c.Dump(ctx, k).Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			t.Fatal(err)
		default:
			m[k] = v
		}
	}
	return m
}

// removeRefused checks that err is a removal's refusal naming holder and
// token, with a RetryAfter in (0, most].
func removeRefused(t *testing.T, what string, err error, holder string, token uint64, most time.Duration) *backend.HeldError {
	t.Helper()
	var held *backend.HeldError
	if !errors.Is(err, backend.ErrHeld) || !errors.As(err, &held) {
		t.Fatalf("%s: Remove: %v, want an error matching ErrHeld", what, err)
	}
	if held.Holder != holder || held.Token != token || held.RetryAfter <= 0 || held.RetryAfter > most {
		t.Fatalf("%s: Remove refused with %+v, want holder %q, token %d, 0 < RetryAfter <= %v", what, held, holder, token, most)
	}
	return held
}

// placeSpan is how long a waiter's place lasts after an attempt refused
// by a claim no longer than the waiter's TTL: that TTL, and a third of it
// for its next attempt to arrive late.
func placeSpan(ttl time.Duration) time.Duration { return ttl + ttl/3 }

// removeWhenFree calls Remove until it succeeds, waiting what each
// refusal says; every refusal must name holder and token.
func removeWhenFree(t *testing.T, ctx context.Context, s backend.Remover, key, holder string, token uint64, most time.Duration) {
	t.Helper()
	for {
		err := s.Remove(ctx, key)
		if err == nil {
			return
		}
		held := removeRefused(t, "until free", err, holder, token, most)
		select {
		case <-ctx.Done():
			t.Fatalf("Remove still refused when the test timed out: %v", err)
		case <-time.After(held.RetryAfter): // the server's expiry is the subject
		}
	}
}

// checkGone checks that none of keys exists on c.
func checkGone(t *testing.T, ctx context.Context, c redis.Cmdable, keys []string) {
	t.Helper()
	if left := snapshot(t, ctx, c, keys); len(left) > 0 {
		t.Errorf("after Remove these keys are left: %v", slices.Sorted(maps.Keys(left)))
	}
}

// A waiter's place refuses a removal, even while the lock is free (after
// a forced release, which serves no waiter); so does a lock a release
// handed to a waiter, until it is collected and released. Then every key
// of the lock goes.
func TestRemoveWhileWaiting(t *testing.T) {
	srv := startRedis(t, 1)[0]
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	a, b, c, admin := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	raw := newClient(t, srv.Addr())
	const ttl = time.Minute

	t.Run("queued", func(t *testing.T) {
		const key = "queued"
		ga, err := a.TryAcquire(ctx, key, request("a", ttl))
		if err != nil {
			t.Fatal(err)
		}
		removeRefused(t, "held", admin.Remove(ctx, key), "a", ga.Token, ttl)
		rb := waitingRequest("b", ttl)
		_, err = b.TryAcquire(ctx, key, rb)
		heldBy(t, err)
		if err := admin.ForceRelease(ctx, key); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, ctx, raw, lockKeys(admin, key))
		removeRefused(t, "free, b queued", admin.Remove(ctx, key), "b", ga.Token, placeSpan(ttl))
		if after := snapshot(t, ctx, raw, lockKeys(admin, key)); !maps.Equal(before, after) {
			t.Errorf("a refused Remove changed the keys: %v before, %v after", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
		}
		gb, err := b.TryAcquire(ctx, key, rb)
		if err != nil {
			t.Fatalf("b after the forced release: %v", err)
		}
		if err := b.Release(ctx, gb); err != nil {
			t.Fatal(err)
		}
		if err := admin.Remove(ctx, key); err != nil {
			t.Fatalf("Remove after b released: %v", err)
		}
		checkGone(t, ctx, raw, lockKeys(admin, key))
	})

	t.Run("handed", func(t *testing.T) {
		const key = "handed"
		ga, err := a.TryAcquire(ctx, key, request("a", ttl))
		if err != nil {
			t.Fatal(err)
		}
		rb, rc := waitingRequest("b", ttl), waitingRequest("c", ttl)
		for _, x := range []struct {
			s   *redisstore.Store
			req backend.Request
		}{{b, rb}, {c, rc}} {
			_, err := x.s.TryAcquire(ctx, key, x.req)
			heldBy(t, err)
		}
		if err := a.Release(ctx, ga); err != nil {
			t.Fatal(err)
		}
		rec, err := admin.Get(ctx, key)
		if err != nil || rec.Holder != "b" {
			t.Fatalf("after a released: %+v, %v; want the lock handed to b", rec, err)
		}
		removeRefused(t, "handed to b", admin.Remove(ctx, key), "b", rec.Token, ttl)
		gb, err := b.TryAcquire(ctx, key, rb)
		if err != nil {
			t.Fatalf("b collecting the handed lock: %v", err)
		}
		if err := b.Release(ctx, gb); err != nil {
			t.Fatal(err)
		}
		rec, err = admin.Get(ctx, key)
		if err != nil || rec.Holder != "c" {
			t.Fatalf("after b released: %+v, %v; want the lock handed to c", rec, err)
		}
		removeRefused(t, "handed to c", admin.Remove(ctx, key), "c", rec.Token, ttl)
		gc, err := c.TryAcquire(ctx, key, rc)
		if err != nil {
			t.Fatalf("c collecting the handed lock: %v", err)
		}
		if err := c.Release(ctx, gc); err != nil {
			t.Fatal(err)
		}
		if err := admin.Remove(ctx, key); err != nil {
			t.Fatalf("Remove after the last waiter released: %v", err)
		}
		checkGone(t, ctx, raw, lockKeys(admin, key))
	})
}

// A release for an earlier version's waiter reserves the lock for it:
// Remove is refused, naming that waiter, until the reservation ends.
func TestRemoveWhileReserved(t *testing.T) {
	srv := startRedis(t, 1)[0]
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key, window = "reserved", 100 * time.Millisecond
	a := windowStore(t, srv.Addr(), prefix, window)
	raw := newClient(t, srv.Addr())
	ga, err := a.TryAcquire(ctx, key, request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	plantOldPlace(t, ctx, srv.Addr(), a, key, "gone")
	if err := a.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	removeRefused(t, "reserved", a.Remove(ctx, key), "gone", ga.Token, window)
	removeWhenFree(t, ctx, a, key, "gone", ga.Token, window)
	checkGone(t, ctx, raw, lockKeys(a, key))
}

// A lock key deleted by hand while its claim is live does not let Remove
// delete the fence before the claim's recorded expiry (the fence keeps
// both the expiry and the counter); after it, the keys go, the old grant
// is lost, and the next token is larger. A forced release clears the
// expiry: Remove then succeeds at once.
func TestRemoveLockKeyDeleted(t *testing.T) {
	srv := startRedis(t, 1)[0]
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	holder, admin, other := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	raw := newClient(t, srv.Addr())
	const key, ttl = "deleted", time.Second

	g, err := holder.TryAcquire(ctx, key, request("a", ttl))
	if err != nil {
		t.Fatal(err)
	}
	lock, fence, _ := holder.Keys(key)
	until := fenceExpiry(t, ctx, raw, fence)
	if err := raw.Del(ctx, lock).Err(); err != nil {
		t.Fatal(err)
	}
	removeRefused(t, "lock key deleted", admin.Remove(ctx, key), "a", g.Token, ttl)
	if n, err := raw.Exists(ctx, fence).Result(); err != nil || n != 1 {
		t.Fatalf("the fence after a refused Remove: exists %d, %v", n, err)
	}
	removeWhenFree(t, ctx, admin, key, "a", g.Token, ttl)
	if now := serverMillis(t, ctx, raw); now < until {
		t.Errorf("removed at server time %d, before the deleted claim's expiry %d", now, until)
	}
	checkGone(t, ctx, raw, lockKeys(admin, key))
	if _, err := holder.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Errorf("Renew of the removed claim: %v, want ErrLost", err)
	}
	g2, err := other.TryAcquire(ctx, key, request("b", ttl))
	if err != nil || g2.Token <= g.Token {
		t.Fatalf("TryAcquire after Remove: token %d, %v; want more than %d", g2.Token, err, g.Token)
	}

	raw.Del(ctx, lock)
	if err := admin.ForceRelease(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := admin.Remove(ctx, key); err != nil {
		t.Fatalf("Remove after a forced release of a deleted claim: %v", err)
	}
	checkGone(t, ctx, raw, lockKeys(admin, key))
}

// A claim that expired without a release (its holder crashed) is not
// live: Redis expired it, so Remove deletes the keys once it has.
func TestRemoveExpiredClaim(t *testing.T) {
	srv := startRedis(t, 1)[0]
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	s := newStore(t, srv.Addr(), prefix)
	raw := newClient(t, srv.Addr())
	const key, ttl = "expired", 200 * time.Millisecond
	g, err := s.TryAcquire(ctx, key, request("a", ttl))
	if err != nil {
		t.Fatal(err)
	}
	removeWhenFree(t, ctx, s, key, "a", g.Token, ttl)
	checkGone(t, ctx, raw, lockKeys(s, key))
	if _, err := s.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Errorf("Renew of the expired, removed claim: %v, want ErrLost", err)
	}
}

// A corrupt record is reported as ErrCorruptRecord and nothing is
// deleted: not the fence (its counter), nor any other key of the lock.
func TestRemoveCorrupt(t *testing.T) {
	srv := startRedis(t, 1)[0]
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	s := newStore(t, srv.Addr(), prefix)
	raw := newClient(t, srv.Addr())
	released := func(key string) {
		t.Helper()
		cycle1(t, ctx, s, key)
	}
	for _, tc := range []struct {
		name, want string
		setup      func(key string, k []string) error
	}{
		{"fence-without-token", "has no token field", func(_ string, k []string) error {
			return raw.HSet(ctx, k[1], "holder", "", "expires", "0").Err()
		}},
		{"fence-token-not-a-number", "not a number", func(key string, k []string) error {
			released(key)
			return raw.HSet(ctx, k[1], "token", "x").Err()
		}},
		{"fence-a-string", "is a string, not a hash", func(_ string, k []string) error {
			return raw.Set(ctx, k[1], "7", 0).Err()
		}},
		{"queue-a-string", "is a string, not a list", func(key string, k []string) error {
			released(key)
			return raw.Set(ctx, k[2], "w", time.Minute).Err()
		}},
		{"lock-garbage", "is not a lock value", func(key string, k []string) error {
			released(key)
			return raw.Set(ctx, k[0], "x", time.Minute).Err()
		}},
		{"lock-without-expiry", "has no expiry", func(key string, k []string) error {
			released(key)
			tok, err := raw.HGet(ctx, k[1], "token").Result()
			if err != nil {
				return err
			}
			return raw.Set(ctx, k[0], tok+" 60000 0 2 nnh", 0).Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "corrupt-" + tc.name
			k := lockKeys(s, key)
			if err := tc.setup(key, k); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, ctx, raw, k)
			err := s.Remove(ctx, key)
			if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Remove: %v; want ErrCorruptRecord saying %q", err, tc.want)
			}
			if after := snapshot(t, ctx, raw, k); !maps.Equal(before, after) {
				t.Errorf("Remove of a corrupt record changed its keys: %v before, %v after", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
			}
		})
	}
}

// A fence whose counter is not below the server's clock (a clock that
// went back) is kept: the next token, which would come from the clock,
// could repeat an earlier one. The error is no refusal by a holder.
func TestRemoveCounterAheadOfClock(t *testing.T) {
	srv := startRedis(t, 1)[0]
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	s := newStore(t, srv.Addr(), prefix)
	raw := newClient(t, srv.Addr())
	const key = "ahead"
	cycle1(t, ctx, s, key)
	now, err := raw.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ahead := uint64(now.Add(time.Hour).UnixMicro())
	_, fence, _ := s.Keys(key)
	if err := raw.HSet(ctx, fence, "token", ahead).Err(); err != nil {
		t.Fatal(err)
	}
	err = s.Remove(ctx, key)
	if err == nil || errors.Is(err, backend.ErrHeld) || errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), "not below the server's clock") {
		t.Fatalf("Remove with the counter an hour ahead of the clock: %v; want an error saying the counter is not below the clock", err)
	}
	g, err := s.TryAcquire(ctx, key, request("a", time.Minute))
	if err != nil || g.Token <= ahead {
		t.Fatalf("TryAcquire after the refused Remove: token %d, %v; want more than %d", g.Token, err, ahead)
	}
}

// A user whose ACL rules lack DEL gets ErrForbidden naming the command,
// and the keys stay.
func TestRemoveForbidden(t *testing.T) {
	rules := slices.DeleteFunc(strings.Fields(redisstore.ACLRules), func(r string) bool { return r == "+del" })
	srv := testenv.StartRedis(t, testenv.RedisArgs(append([]string{"--user", "nodel", "on", ">pw"}, rules...)...))
	ctx := testCtx(t, 20*time.Second)
	s := newStore(t, srv.Addr(), redisstore.DefaultPrefix)
	raw := newClient(t, srv.Addr())
	cycle1(t, ctx, s, "job")
	nodel, err := redisstore.Open(fmt.Sprintf("redis://nodel:pw@%s", srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer nodel.Close()
	before := snapshot(t, ctx, raw, lockKeys(s, "job"))
	err = nodel.Remove(ctx, "job")
	t.Logf("error: %v", err)
	if !errors.Is(err, backend.ErrForbidden) || !strings.Contains(err.Error(), "may not run DEL baton:{job}:lock") || !strings.Contains(err.Error(), "redisstore.ACLRules") {
		t.Errorf("Remove without +del: %v; want ErrForbidden naming DEL and the rules to give", err)
	}
	if after := snapshot(t, ctx, raw, lockKeys(s, "job")); !maps.Equal(before, after) {
		t.Errorf("a forbidden Remove changed the keys: %v before, %v after", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}
}

// A server that cannot be reached is unavailable, as for every call.
func TestRemoveUnavailable(t *testing.T) {
	s := newStore(t, "127.0.0.1:1", uniquePrefix(), fastClient)
	if err := s.Remove(testCtx(t, 10*time.Second), "job"); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Remove on an address nobody listens on: %v; want ErrUnavailable", err)
	}
}

// On a Redis Cluster every key of a lock shares a hash slot, so one script
// checks and deletes them all, whichever node serves the lock.
func TestRemoveCluster(t *testing.T) {
	c := testenv.StartRedisCluster(t, 3)
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	s, waiter := openURL(t, c.URL(), prefix), openURL(t, c.URL(), prefix)
	raw := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = raw.Close() })
	nodes := map[int]bool{}
	for i := range 6 { // names on more than one node
		key := fmt.Sprintf("job%d", i)
		lock, _, _ := s.Keys(key)
		nodes[c.SlotServer(t, lock)] = true
		g, err := s.TryAcquire(ctx, key, request("a", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		rb := waitingRequest("b", time.Minute)
		_, err = waiter.TryAcquire(ctx, key, rb)
		heldBy(t, err)
		if err := s.ForceRelease(ctx, key); err != nil {
			t.Fatal(err)
		}
		removeRefused(t, key+", b queued", s.Remove(ctx, key), "b", g.Token, placeSpan(time.Minute))
		gb, err := waiter.TryAcquire(ctx, key, rb)
		if err != nil {
			t.Fatal(err)
		}
		if err := waiter.Release(ctx, gb); err != nil {
			t.Fatal(err)
		}
		if err := s.Remove(ctx, key); err != nil {
			t.Fatalf("%s: Remove: %v", key, err)
		}
		checkGone(t, ctx, raw, lockKeys(s, key))
		if g2, err := s.TryAcquire(ctx, key, request("c", time.Minute)); err != nil || g2.Token <= gb.Token {
			t.Errorf("%s: TryAcquire after Remove: token %d, %v; want more than %d", key, g2.Token, err, gb.Token)
		}
	}
	if len(nodes) < 2 {
		t.Errorf("the names hashed to %d node(s), want several", len(nodes))
	}
}

// Redlock removes on every server; a claim left on one server (a failed
// acquisition's, say) refuses the removal there and names its holder,
// while the free servers remove their keys. Once it is released, Remove
// succeeds and the next token is larger.
func TestRedlockRemove(t *testing.T) {
	servers := startRedis(t, 3)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	rl := newRedlock(t, servers, prefix)
	one := newStore(t, servers[0].Addr(), prefix)
	raws := make([]*redis.Client, len(servers))
	for i, srv := range servers {
		raws[i] = newClient(t, srv.Addr())
	}
	const key = "job"
	cycle1(t, ctx, rl, key)
	g, err := one.TryAcquire(ctx, key, request("stray", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	removeRefused(t, "a claim on one server", rl.Remove(ctx, key), "stray", g.Token, time.Minute)
	for i, c := range raws {
		left := snapshot(t, ctx, c, lockKeys(one, key))
		if (len(left) > 0) != (i == 0) {
			t.Errorf("server %d after the refused Remove: keys %v; want keys only on server 0, which refused", i, slices.Sorted(maps.Keys(left)))
		}
	}
	if err := one.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := rl.Remove(ctx, key); err != nil {
		t.Fatalf("Remove once free everywhere: %v", err)
	}
	for _, c := range raws {
		checkGone(t, ctx, c, lockKeys(one, key))
	}
	g2, err := rl.TryAcquire(ctx, key, request("b", time.Minute))
	if err != nil || g2.Token <= g.Token {
		t.Fatalf("TryAcquire after Remove: token %d, %v; want more than %d", g2.Token, err, g.Token)
	}
	if err := rl.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}
}
