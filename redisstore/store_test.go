package redisstore_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

func TestKeyLayout(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	s := mustNew(t, c)
	defer s.Close()
	lock, fence, channel := s.Keys("nightly.report")
	if lock != "baton:{nightly.report}:lock" || fence != "baton:{nightly.report}:fence" || channel != "baton:{nightly.report}:notify" {
		t.Errorf("Keys = %q, %q, %q", lock, fence, channel)
	}
}

// TestNewRejectsInvalidOptions: a bad option is an error naming it, not a
// panic.
func TestNewRejectsInvalidOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, o := range []redisstore.Option{redisstore.WithPrefix("x{"), redisstore.WithPrefix("}"), redisstore.WithDriftFactor(0.5),
		redisstore.WithDriftFactor(math.NaN())} { // NaN passed both bounds; on amd64 no Redlock grant was then ever within budget
		s, err := redisstore.New(c, o)
		if s != nil || !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), "must not contain") && !strings.Contains(err.Error(), "drift factor") {
			t.Errorf("New = %v, %v; want nil and an error matching ErrInvalidOptions that names the option", s, err)
		}
	}
}

// TestCorruptRecords: keys of another type or with bad fields are reported
// as ErrCorruptRecord and left alone, and the errors name the key at fault
// and how to clear it (an acquisition's WRONGTYPE named the lock key, the
// script's SHA and no fix, whichever key it was).
func TestCorruptRecords(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	s := newStore(t, srv.Addr(), prefix)
	raw := newClient(t, srv.Addr())

	// acquire and get are what TryAcquire's and Get's errors must say;
	// bad is the key at fault.
	cases := []struct {
		name, bad    string
		acquire, get string
		setup        func(lock, fence string) error
	}{
		{"lock-hash", "lock", "it is a hash, not a", "it is a hash, not a lock value", func(lock, _ string) error { return raw.HSet(ctx, lock, "holder", "h").Err() }},
		{"lock-garbage", "lock", "is not a lock value", `lock value "x" has fewer than five space-separated parts`, func(lock, _ string) error {
			return raw.Set(ctx, lock, "x", time.Minute).Err()
		}},
		{"lock-no-holder", "lock", "does not name a holder", "does not hold a nonce of the stated length and a holder", func(lock, fence string) error {
			if err := raw.HSet(ctx, fence, "token", 1, "transitions", 0, "holder", "h").Err(); err != nil {
				return err
			}
			return raw.Set(ctx, lock, "1 60000 1764500000000 5 nonce", time.Minute).Err()
		}},
		{"lock-no-expiry", "lock", "has no expiry", "it has no expiry", func(lock, fence string) error {
			if err := raw.HSet(ctx, fence, "token", 1, "transitions", 0, "holder", "h").Err(); err != nil {
				return err
			}
			return raw.Set(ctx, lock, "1 60000 1764500000000 1 nh", 0).Err()
		}},
		{"fence-list", "fence", "it is a list, not a hash", "it is a list, not a hash", func(_, fence string) error { return raw.LPush(ctx, fence, "x").Err() }},
		{"fence-token-text", "fence", "not a number", `token "seven" or transitions "" is not a number`, func(_, fence string) error {
			return raw.HSet(ctx, fence, "token", "seven").Err()
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lock, fence, _ := s.Keys(c.name)
			bad := prefix + "{" + c.name + "}:" + c.bad
			if err := c.setup(lock, fence); err != nil {
				t.Fatal(err)
			}
			before, _ := raw.Dump(ctx, fence).Result()
			_, err := s.TryAcquire(ctx, c.name, request("a", time.Minute))
			if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), c.acquire) || !namesFix(err, bad) {
				t.Errorf("TryAcquire: %v, want ErrCorruptRecord saying %q, naming %s and its fix", err, c.acquire, bad)
			}
			if _, err := s.Get(ctx, c.name); !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), c.get) || !namesFix(err, bad) {
				t.Errorf("Get: %v, want ErrCorruptRecord saying %q, naming %s and its fix", err, c.get, bad)
			}
			if after, _ := raw.Dump(ctx, fence).Result(); after != before {
				t.Errorf("the fence key changed")
			}
		})
	}

	// A lock whose token differs from the fence's last token.
	lock, fence, _ := s.Keys("mismatch")
	raw.HSet(ctx, fence, "token", 5, "transitions", 0, "holder", "h")
	raw.Set(ctx, lock, "9 60000 1764500000000 1 nh", time.Minute)
	if _, err := s.Get(ctx, "mismatch"); !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), "differs") {
		t.Errorf("Get with mismatched tokens: %v, want ErrCorruptRecord", err)
	}
	// List reports corrupt records and returns the others.
	g, err := s.TryAcquire(ctx, "fine", request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := s.List(ctx)
	if !errors.Is(err, backend.ErrCorruptRecord) {
		t.Errorf("List: %v, want an error matching ErrCorruptRecord", err)
	}
	if len(recs) != 1 || recs[0].Key != "fine" || recs[0].Token != g.Token {
		t.Errorf("List returned %+v, want the one good record", recs)
	}
}

// namesFix reports whether err names key as the one at fault and the
// command that clears it.
func namesFix(err error, key string) bool {
	return err != nil && strings.Contains(err.Error(), "(key "+key+")") && strings.Contains(err.Error(), "DEL "+key)
}

// TestCorruptRelease: a release that meets a key of another type (here
// the queue of waiters) names that key and its fix, not the lock key and
// the script's SHA.
func TestCorruptRelease(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	s := newStore(t, srv.Addr(), prefix)
	raw := newClient(t, srv.Addr())
	g, err := s.TryAcquire(ctx, "rel", request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	queue := prefix + "{rel}:queue"
	if err := raw.Set(ctx, queue, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, g); !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), "it is a string, not a list") || !namesFix(err, queue) {
		t.Errorf("Release: %v, want ErrCorruptRecord naming %s and its fix", err, queue)
	}
}

// TestCorruptUnderLiveClaim: a lock value overwritten while its claim is
// live, as the fence records it, is refused from the fence (naming the
// holder and token the fence records) until the claim could have
// expired, and reported as ErrCorruptRecord from then on.
func TestCorruptUnderLiveClaim(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	s := newStore(t, srv.Addr(), uniquePrefix())
	raw := newClient(t, srv.Addr())
	g, err := s.TryAcquire(ctx, "overwritten", request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lock, fence, _ := s.Keys("overwritten")
	if err := raw.Set(ctx, lock, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	var held *backend.HeldError
	if _, err := s.TryAcquire(ctx, "overwritten", request("b", time.Minute)); !errors.As(err, &held) || held.Holder != "a" || held.Token != g.Token {
		t.Errorf("TryAcquire while the fence shows a's claim live: %v, want a HeldError naming a and token %d", err, g.Token)
	}
	// The claim's expiry has passed, as far as the fence knows.
	if err := raw.HSet(ctx, fence, "expires", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx, "overwritten", request("b", time.Minute)); !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), "is not a lock value") {
		t.Errorf("TryAcquire after the claim's expiry: %v, want ErrCorruptRecord saying the key is not a lock value", err)
	}
}

// TestCorruptReservedField: a fence whose reservation end is not a number
// (only an acquisition reads it) is reported as ErrCorruptRecord naming the
// field, and left alone.
func TestCorruptReservedField(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	s := newStore(t, srv.Addr(), uniquePrefix())
	raw := newClient(t, srv.Addr())
	_, rfence, _ := s.Keys("reserved-text")
	raw.HSet(ctx, rfence, "token", 1, "transitions", 0, "holder", "h", "reserved", "soon")
	before, _ := raw.Dump(ctx, rfence).Result()
	if _, err := s.TryAcquire(ctx, "reserved-text", request("a", time.Minute)); !errors.Is(err, backend.ErrCorruptRecord) ||
		!strings.Contains(err.Error(), "token, transitions, expires or reserved field that is not a number") {
		t.Errorf("TryAcquire with a reserved field %q: %v, want ErrCorruptRecord naming the field", "soon", err)
	}
	if after, _ := raw.Dump(ctx, rfence).Result(); after != before {
		t.Errorf("the fence key with a bad reserved field changed")
	}

}

// TestForceRelease frees a held lock, keeps its counter, and wakes
// watchers; the old holder's renew then fails.
func TestForceRelease(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	a, admin := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	if err := admin.ForceRelease(ctx, "none"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("ForceRelease of an unknown lock: %v, want ErrNotFound", err)
	}
	g, err := a.TryAcquire(ctx, "forced", request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := a.Watch(wctx, "forced")
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.ForceRelease(ctx, "forced"); err != nil {
		t.Fatal(err)
	}
	expectWake(t, ch, 5*time.Second, "a forced release")
	if _, err := a.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Errorf("Renew after a forced release: %v, want ErrLost", err)
	}
	rec, err := admin.Get(ctx, "forced")
	if err != nil || rec.Held() || rec.Token != g.Token {
		t.Errorf("Get after a forced release = %+v, %v; want free with token %d", rec, err, g.Token)
	}
	if err := admin.ForceRelease(ctx, "forced"); err != nil {
		t.Errorf("ForceRelease of a free lock: %v", err)
	}
	g2, err := a.TryAcquire(ctx, "forced", request("b", time.Minute))
	if err != nil || g2.Token <= g.Token {
		t.Errorf("TryAcquire after a forced release = token %d, %v; want above %d", g2.Token, err, g.Token)
	}
}

// TestGetAfterExpiry: after a claim expired (not released), Get names the
// last holder with no time remaining.
func TestGetAfterExpiry(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	s := newStore(t, srv.Addr(), uniquePrefix())
	raw := newClient(t, srv.Addr())
	g, err := s.TryAcquire(ctx, "expiring", request("gone", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lock, fence, _ := s.Keys("expiring")
	// What the server's expiry leaves: no lock key, an expiry in the past.
	raw.Del(ctx, lock)
	raw.HSet(ctx, fence, "expires", "1")
	rec, err := s.Get(ctx, "expiring")
	if err != nil || rec.Holder != "gone" || rec.Held() || rec.Token != g.Token {
		t.Errorf("Get after expiry = %+v, %v; want last holder %q, not held, token %d", rec, err, "gone", g.Token)
	}
}

// TestTTLRoundsUp: a sub-millisecond TTL is rounded up, never down.
func TestTTLRoundsUp(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	s := newStore(t, srv.Addr(), uniquePrefix())
	if _, err := s.TryAcquire(ctx, "round", request("a", 10*time.Second+time.Microsecond)); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(ctx, "round")
	if err != nil || rec.TTL != 10*time.Second+time.Millisecond {
		t.Errorf("TTL stored = %v, %v; want 10.001s", rec.TTL, err)
	}
	if _, err := s.TryAcquire(ctx, "round", backend.Request{Holder: "a", Nonce: "n", TTL: 0}); !errors.Is(err, backend.ErrInvalidOptions) {
		t.Errorf("TryAcquire with TTL 0: %v, want ErrInvalidOptions", err)
	}
}

// TestWatchLingerStops: with no linger, the subscriber stops once no lock
// is watched; a later Watch starts it again. (goleak in TestMain checks
// that no goroutine is left behind.)
func TestWatchLingerStops(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	c := newClient(t, srv.Addr())
	s := mustNew(t, c, redisstore.WithPrefix(prefix), redisstore.WithWatchLinger(0))
	defer s.Close()
	other := newStore(t, srv.Addr(), prefix)
	for range 3 {
		wctx, cancel := context.WithCancel(ctx)
		ch, err := s.Watch(wctx, "linger")
		if err != nil {
			t.Fatal(err)
		}
		g, err := other.TryAcquire(ctx, "linger", request("o", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		expectWake(t, ch, 5*time.Second, "an acquire")
		if err := other.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
}

// TestClientClosedUnderStore: closing the client without closing the Store
// breaks its watches (their channels close) and stops its subscriber.
func TestClientClosedUnderStore(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	s := mustNew(t, c, redisstore.WithPrefix(uniquePrefix()))
	defer s.Close()
	ctx := testCtx(t, 20*time.Second)
	ch, err := s.Watch(ctx, "closed")
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatal("the watch channel is still open 10s after the client was closed")
		}
	}
}

// TestClientClosedByOwner: a Store made by New does not own its client;
// once the owner closes it, the Store's operations fail with an error
// matching backend.ErrClosed, which the engine does not retry, instead of
// go-redis's bare "client is closed", which it retried until the caller's
// context ended.
func TestClientClosedByOwner(t *testing.T) {
	srv := startRedis(t, 1)[0]
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	s := mustNew(t, c, redisstore.WithPrefix(uniquePrefix()))
	defer s.Close()
	ctx := testCtx(t, time.Minute)
	if _, err := s.TryAcquire(ctx, "owner.closed", request("a", time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := s.TryAcquire(ctx, "owner.closed.2", request("a", time.Minute))
	if !errors.Is(err, backend.ErrClosed) || !strings.Contains(err.Error(), "client was closed") {
		t.Fatalf("TryAcquire after the client was closed = %v; want ErrClosed naming the client", err)
	}
	m, err := baton.NewMutex(s, "owner.closed.3", baton.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lock(ctx); !errors.Is(err, backend.ErrClosed) || ctx.Err() != nil {
		t.Fatalf("Lock after the client was closed = %v (context: %v); want ErrClosed at once", err, ctx.Err())
	}
}
