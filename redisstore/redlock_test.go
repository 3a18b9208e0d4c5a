package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

func TestNewRedlockRejectsInstanceCounts(t *testing.T) {
	for _, n := range []int{0, 1, 2, 4} {
		clients := make([]redis.UniversalClient, n)
		for i := range clients {
			clients[i] = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		}
		_, err := redisstore.NewRedlock(clients)
		if !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), "odd number of at least 3") {
			t.Errorf("NewRedlock with %d clients: %v; want ErrInvalidOptions naming the rule", n, err)
		}
		for _, c := range clients {
			_ = c.Close()
		}
	}
}

// A nil client, or a nil pointer of a client type (a constructor's error
// ignored), is refused with ErrInvalidOptions naming it: New accepted one
// and the first acquire panicked, as did NewRedlock given a nil
// *redis.Client.
func TestNewRejectsNilClients(t *testing.T) {
	var c *redis.Client
	var cc *redis.ClusterClient
	for _, client := range []redis.UniversalClient{nil, c, cc} {
		if _, err := redisstore.New(client); !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), "the client is ") {
			t.Errorf("New(%T(nil)): %v; want ErrInvalidOptions naming the nil client", client, err)
		}
	}
	live := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer live.Close()
	_, err := redisstore.NewRedlock([]redis.UniversalClient{live, c, live})
	if !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), "client 1 is a nil *redis.Client") {
		t.Errorf("NewRedlock with a nil *redis.Client: %v; want ErrInvalidOptions naming it", err)
	}
}

// fastClient makes a stopped server fail fast instead of after go-redis's
// default retries and dial timeouts.
func fastClient(o *redis.Options) {
	o.DialTimeout = 200 * time.Millisecond
	o.ReadTimeout = 500 * time.Millisecond
	o.WriteTimeout = 500 * time.Millisecond
	o.MaxRetries = -1
	o.DialerRetries = 1
}

// TestRedlockOneServerDown: with one of three servers stopped, a Redlock
// still locks, renews (past the TTL) and releases, with increasing tokens.
func TestRedlockOneServerDown(t *testing.T) {
	servers := startRedis(t, 3)
	ctx := testCtx(t, 30*time.Second)
	r := newRedlock(t, servers, uniquePrefix(), fastClient)
	const key = "one-down"

	before := cycle(t, ctx, r, key, 2)
	servers[1].Stop()

	// A renew deadline of seconds, not of a few hundred milliseconds: a
	// busy machine must not make the holder step down (it did, once, at
	// 700ms, with both cores loaded).
	mu, err := baton.NewMutex(r, key, baton.WithTTL(3*time.Second), baton.WithRenewDeadline(2*time.Second),
		baton.WithRenewInterval(300*time.Millisecond), baton.WithRetryPeriod(200*time.Millisecond), quiet)
	if err != nil {
		t.Fatal(err)
	}
	l, err := mu.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock with one of three servers down: %v", err)
	}
	t.Cleanup(func() { _ = l.Unlock(context.Background()) })
	if l.Token() <= before {
		t.Errorf("token %d after %d", l.Token(), before)
	}
	// Hold past the TTL: renewals on the remaining quorum keep it.
	hold := time.NewTimer(4 * time.Second)
	defer hold.Stop()
	select {
	case <-l.Done():
		t.Fatalf("the lease ended with two of three servers up: %v", context.Cause(l.Context()))
	case <-hold.C:
	}
	if _, err := r.TryAcquire(ctx, key, request("other", time.Minute)); !errors.Is(err, backend.ErrHeld) {
		t.Errorf("TryAcquire by another owner while held: %v, want ErrHeld", err)
	}
	rec, err := r.Get(ctx, key)
	if err != nil || rec.Holder != mu.Identity() || rec.Token != l.Token() || !rec.Held() {
		t.Errorf("Get = %+v, %v; want held by %q with token %d", rec, err, mu.Identity(), l.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	if got := cycle(t, ctx, r, key, 1); got <= l.Token() {
		t.Errorf("token %d after %d", got, l.Token())
	}
}

// TestRedlockOneServerSilent: with one of three servers paused (SIGSTOP:
// it keeps its connections and answers nothing, as a frozen VM or a
// firewall that drops packets), a Redlock still locks, renews past the TTL
// and releases with the clients' default timeouts: a quorum's answers
// decide, without waiting for the silent server.
func TestRedlockOneServerSilent(t *testing.T) {
	servers := startRedis(t, 3)
	ctx := testCtx(t, 30*time.Second)
	r := newRedlock(t, servers, uniquePrefix())
	const key = "one-silent"
	before := cycle(t, ctx, r, key, 1) // every client connected
	servers[2].Pause()
	t.Cleanup(servers[2].Resume)

	mu, err := baton.NewMutex(r, key, baton.WithTTL(2*time.Second), quiet)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := mu.Lock(lctx)
	if err != nil {
		t.Fatalf("Lock with one of three servers silent: %v", err)
	}
	if l.Token() <= before {
		t.Errorf("token %d after %d", l.Token(), before)
	}
	hold := time.NewTimer(5 * time.Second) // past two TTLs: renewals on the quorum keep it
	defer hold.Stop()
	select {
	case <-l.Done():
		t.Fatalf("the lease ended with two of three servers answering: %v", context.Cause(l.Context()))
	case <-hold.C:
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock with one of three servers silent: %v", err)
	}
}

// TestRedlockSilentMajorityKeepsDeadline: with two of three servers
// paused, a Lock given a short deadline returns by it (about), although
// the failed attempt's releases wait on the paused servers for up to 5 s.
func TestRedlockSilentMajorityKeepsDeadline(t *testing.T) {
	servers := startRedis(t, 3)
	ctx := testCtx(t, 30*time.Second)
	r := newRedlock(t, servers, uniquePrefix())
	cycle(t, ctx, r, "silent", 1) // every client connected
	for _, s := range servers[1:] {
		s.Pause()
		t.Cleanup(s.Resume)
	}
	mu, err := baton.NewMutex(r, "silent", baton.WithTTL(10*time.Second), quiet)
	if err != nil {
		t.Fatal(err)
	}
	const deadline = 500 * time.Millisecond
	lctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	_, err = mu.Lock(lctx)
	if took := time.Since(start); err == nil || took > 4*deadline {
		t.Errorf("Lock with two of three servers paused and a %v deadline: %v after %v; want its deadline's error by about then", deadline, err, took)
	}
}

// TestRedlockTwoServersDown: with two of three servers stopped, nobody
// acquires, and a holder's renewals fail until its lease ends.
func TestRedlockTwoServersDown(t *testing.T) {
	servers := startRedis(t, 3)
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	r := newRedlock(t, servers, prefix, fastClient)
	r2 := newRedlock(t, servers, prefix, fastClient)

	mu, err := baton.NewMutex(r, "held", baton.WithTTL(2*time.Second), baton.WithRenewDeadline(time.Second),
		baton.WithRenewInterval(300*time.Millisecond), baton.WithRetryPeriod(100*time.Millisecond), quiet)
	if err != nil {
		t.Fatal(err)
	}
	l, err := mu.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Unlock(context.Background()) })

	servers[0].Stop()
	servers[2].Stop()

	for _, b := range []*redisstore.Redlock{r, r2} {
		_, err := b.TryAcquire(ctx, "free", request("x", time.Minute))
		if err == nil {
			t.Fatal("TryAcquire succeeded with two of three servers down")
		}
		if errors.Is(err, backend.ErrHeld) || !strings.Contains(err.Error(), "acquired on 1 of 3 servers, need 2") {
			t.Errorf("TryAcquire with two of three servers down: %v; want a transient error naming the quorum", err)
		}
	}
	// The one reachable server must not keep the failed attempt's claim.
	if rec, err := newStore(t, servers[1].Addr(), prefix).Get(ctx, "free"); err == nil && rec.Held() {
		t.Errorf("the failed attempt left a claim on the reachable server: %+v", rec)
	}

	// The holder cannot renew on a quorum: its lease ends by the renew
	// deadline.
	awaitDone(t, l.Done(), 5*time.Second, "the holder's step-down")
	if cause := context.Cause(l.Context()); !errors.Is(cause, backend.ErrLost) {
		t.Errorf("lease ended with %v, want ErrLost", cause)
	}
}

// TestRedlockTokensRaised: when the servers' counters differ, the token is
// the largest, and the lagging servers of the quorum are raised to it, so
// that a later quorum without the leading server still issues a larger
// token.
func TestRedlockTokensRaised(t *testing.T) {
	servers := startRedis(t, 3)
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	r := newRedlock(t, servers, prefix, fastClient)
	const key = "raise"

	// Server 0 has issued many more tokens than the others (it served
	// another quorum while they were unreachable, say).
	s0 := newClient(t, servers[0].Addr())
	_, fence, _ := mustNew(t, s0, redisstore.WithPrefix(prefix)).Keys(key)
	// Its counter is ahead of the servers' clocks (in microseconds), so
	// the counter, not a clock, decides the token.
	ahead := uint64(time.Now().UnixMicro()) + 1e12
	if err := s0.HSet(ctx, fence, "token", ahead, "transitions", 0, "holder", "").Err(); err != nil {
		t.Fatal(err)
	}
	g, err := r.TryAcquire(ctx, key, request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if g.Token != ahead+1 {
		t.Fatalf("token %d, want %d (the largest counter plus one)", g.Token, ahead+1)
	}
	for i := 1; i < 3; i++ {
		rec, err := newStore(t, servers[i].Addr(), prefix).Get(ctx, key)
		if err != nil || rec.Token != ahead+1 {
			t.Errorf("server %d after the acquire: %+v, %v; want its counter raised to %d", i, rec, err, ahead+1)
		}
	}
	if err := r.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	servers[0].Stop()
	g2, err := r.TryAcquire(ctx, key, request("b", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if g2.Token <= g.Token {
		t.Errorf("token %d after %d without the server that led", g2.Token, g.Token)
	}
	if err := r.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}
}

// TestRedlockSplitVote: when no owner holds a quorum, nobody is granted
// the lock and the attempt releases what it took.
func TestRedlockSplitVote(t *testing.T) {
	servers := startRedis(t, 3)
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	r := newRedlock(t, servers, prefix, fastClient)
	const key = "split"
	stores := make([]*redisstore.Store, 3)
	for i := range stores {
		stores[i] = newStore(t, servers[i].Addr(), prefix)
	}
	// x holds server 0, y holds server 1; server 2 is free.
	if _, err := stores[0].TryAcquire(ctx, key, request("x", time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := stores[1].TryAcquire(ctx, key, request("y", time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, err := r.TryAcquire(ctx, key, request("z", time.Minute))
	var held *backend.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("TryAcquire with a split vote: %v, want ErrHeld", err)
	}
	if rec, err := stores[2].Get(ctx, key); err != nil || rec.Held() {
		t.Errorf("server 2 after the failed attempt: %+v, %v; want the claim released", rec, err)
	}
	if rec, err := r.Get(ctx, key); err != nil || rec.Held() {
		t.Errorf("Redlock Get with a split vote: %+v, %v; want not held", rec, err)
	}
}

// TestRedlockForceRelease frees a held lock on every server and keeps the
// counters; the holder's renew then fails.
func TestRedlockForceRelease(t *testing.T) {
	servers := startRedis(t, 3)
	ctx := testCtx(t, 20*time.Second)
	r := newRedlock(t, servers, uniquePrefix(), fastClient)
	if err := r.ForceRelease(ctx, "forced"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("ForceRelease of an unknown lock: %v, want ErrNotFound", err)
	}
	g, err := r.TryAcquire(ctx, "forced", request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ForceRelease(ctx, "forced"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Errorf("Renew after a forced release: %v, want ErrLost", err)
	}
	g2, err := r.TryAcquire(ctx, "forced", request("b", time.Minute))
	if err != nil || g2.Token <= g.Token {
		t.Errorf("TryAcquire after a forced release: token %d, %v; want more than %d", g2.Token, err, g.Token)
	}
}

// TestRedlockForceReleaseOneServerSilent: with one of three servers
// paused, ForceRelease of a held lock succeeds on the other two (no owner
// can hold a quorum any more), the holder's renew reports the loss, and
// another owner takes the lock with a larger token. It failed, after the
// silent server's timeouts, although the lock was free.
func TestRedlockForceReleaseOneServerSilent(t *testing.T) {
	servers := startRedis(t, 3)
	ctx := testCtx(t, 60*time.Second)
	r := newRedlock(t, servers, uniquePrefix())
	g, err := r.TryAcquire(ctx, "forced", request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	servers[2].Pause()
	t.Cleanup(servers[2].Resume)
	if err := r.ForceRelease(ctx, "forced"); err != nil {
		t.Fatalf("ForceRelease with one of three servers silent: %v", err)
	}
	if _, err := r.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Errorf("Renew after a forced release: %v, want ErrLost", err)
	}
	g2, err := r.TryAcquire(ctx, "forced", request("b", time.Minute))
	if err != nil || g2.Token <= g.Token {
		t.Errorf("TryAcquire after a forced release: token %d, %v; want more than %d", g2.Token, err, g.Token)
	}
}

// One address named twice is not an independent instance: OpenRedlock
// refuses it (two names of one server it cannot tell apart; doctor
// compares run_ids, see TestDoctorRedlockIndependence).
func TestRedlockSameServerTwice(t *testing.T) {
	a, b := testenv.StartRedis(t), testenv.StartRedis(t)
	if _, err := redisstore.OpenRedlock([]string{a.URL(), a.URL() + "/1", b.URL()}); !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), "name the same server") {
		t.Errorf("OpenRedlock with one address twice: %v; want ErrInvalidOptions naming it", err)
	}
}
