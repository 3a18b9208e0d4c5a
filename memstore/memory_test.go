package memstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/clocktest"
	"github.com/baton-go/baton/memstore"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConformance runs the backend conformance suite: every client of one
// subtest shares one Store, as the processes of one store would.
func TestConformance(t *testing.T) {
	batontest.Run(t, batontest.Harness{
		Open: func(*testing.T) func(*testing.T) backend.Backend {
			s := memstore.New()
			return func(*testing.T) backend.Backend { return s }
		},
	})
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

const ttl = 10 * time.Second

func newFake(t *testing.T) (*memstore.Store, *clocktest.FakeClock) {
	t.Helper()
	clk := clocktest.NewFakeClock(t0)
	return memstore.New(memstore.WithClock(clk)), clk
}

func req(holder string) backend.Request {
	return backend.Request{Holder: holder, Nonce: baton.NewNonce(), TTL: ttl}
}

func mustAcquire(t *testing.T, s *memstore.Store, key, holder string) backend.Grant {
	t.Helper()
	g, err := s.TryAcquire(context.Background(), key, req(holder))
	if err != nil {
		t.Fatalf("TryAcquire(%q) for %q: %v", key, holder, err)
	}
	return g
}

func mustGet(t *testing.T, s *memstore.Store, key string) backend.Record {
	t.Helper()
	r, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return r
}

// wantHeld checks that err is a HeldError for holder and token with the
// given RetryAfter.
func wantHeld(t *testing.T, err error, holder string, token uint64, retryAfter time.Duration) {
	t.Helper()
	var held *backend.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("err = %v, want a *backend.HeldError", err)
	}
	if held.Holder != holder || held.Token != token || held.RetryAfter != retryAfter {
		t.Fatalf("HeldError{Holder: %q, Token: %d, RetryAfter: %v}, want {%q, %d, %v}",
			held.Holder, held.Token, held.RetryAfter, holder, token, retryAfter)
	}
}

func wantLost(t *testing.T, err error, mention string) {
	t.Helper()
	if !errors.Is(err, backend.ErrLost) {
		t.Fatalf("err = %v, want an error matching ErrLost", err)
	}
	if !strings.Contains(err.Error(), mention) {
		t.Fatalf("error %q does not say %q", err, mention)
	}
}

func TestExpiryOnStoreClock(t *testing.T) {
	s, clk := newFake(t)
	ctx := context.Background()
	ga := mustAcquire(t, s, "job", "a")
	if ga.Token != 1 || ga.TTL != ttl {
		t.Fatalf("first grant: token %d, TTL %v; want 1, %v", ga.Token, ga.TTL, ttl)
	}

	clk.Step(ttl - time.Nanosecond)
	_, err := s.TryAcquire(ctx, "job", req("b"))
	wantHeld(t, err, "a", 1, time.Nanosecond)
	if r := mustGet(t, s, "job"); !r.Held() || r.Remaining != time.Nanosecond {
		t.Fatalf("1ns before expiry: held %v, remaining %v", r.Held(), r.Remaining)
	}

	clk.Step(time.Nanosecond)
	r := mustGet(t, s, "job")
	if r.Held() || r.Remaining != 0 || r.Holder != "a" {
		t.Fatalf("at expiry: holder %q, held %v, remaining %v; want the last holder %q, not held", r.Holder, r.Held(), r.Remaining, "a")
	}
	// Nobody has taken the lock, but the claim is over: no renew, no release.
	_, err = s.Renew(ctx, ga)
	wantLost(t, err, "expired")
	wantLost(t, s.Release(ctx, ga), "expired")
	if r := mustGet(t, s, "job"); r.Held() {
		t.Fatalf("the failed renew resurrected the claim: remaining %v", r.Remaining)
	}

	gb := mustAcquire(t, s, "job", "b")
	if gb.Token != 2 {
		t.Fatalf("takeover token %d, want 2", gb.Token)
	}
	_, err = s.Renew(ctx, ga)
	wantLost(t, err, `now held by "b" (token 2)`)
}

func TestRenewExtendsFromRenewTime(t *testing.T) {
	s, clk := newFake(t)
	ctx := context.Background()
	g := mustAcquire(t, s, "job", "a")
	clk.Step(6 * time.Second)
	g2, err := s.Renew(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Token != g.Token || g2.Holder != g.Holder || g2.Nonce != g.Nonce || g2.Version == g.Version {
		t.Fatalf("renewed grant %+v, want %+v with a new version", g2, g)
	}
	r := mustGet(t, s, "job")
	if r.Remaining != ttl || !r.RenewTime.Equal(t0.Add(6*time.Second)) || !r.AcquireTime.Equal(t0) {
		t.Fatalf("after renew: remaining %v, acquired %v, renewed %v", r.Remaining, r.AcquireTime, r.RenewTime)
	}

	clk.Step(9 * time.Second) // 15s after the acquire, 9s after the renew
	_, err = s.TryAcquire(ctx, "job", req("b"))
	wantHeld(t, err, "a", 1, time.Second)
	clk.Step(time.Second)
	if g := mustAcquire(t, s, "job", "b"); g.Token != 2 {
		t.Fatalf("token %d, want 2", g.Token)
	}
}

func TestTokensAndTransitions(t *testing.T) {
	s, clk := newFake(t)
	ctx := context.Background()
	step := func(holder string, wantToken, wantTransitions uint64) backend.Grant {
		t.Helper()
		g := mustAcquire(t, s, "job", holder)
		r := mustGet(t, s, "job")
		if g.Token != wantToken || r.Token != wantToken || r.Transitions != wantTransitions {
			t.Fatalf("%q acquired: grant token %d, record token %d, transitions %d; want %d, %d",
				holder, g.Token, r.Token, r.Transitions, wantToken, wantTransitions)
		}
		return g
	}
	g := step("a", 1, 0)
	if _, err := s.Renew(ctx, g); err != nil {
		t.Fatal(err)
	}
	if r := mustGet(t, s, "job"); r.Transitions != 0 || r.Token != 1 {
		t.Fatalf("a renew changed transitions to %d or token to %d", r.Transitions, r.Token)
	}
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	r := mustGet(t, s, "job")
	if r.Holder != "" || r.Nonce != "" || r.Token != 1 || r.Held() {
		t.Fatalf("after release: %+v, want no holder and token 1", r)
	}
	g = step("a", 2, 1) // after a release the key has no holder: it changes hands
	clk.Step(ttl)
	g = step("a", 3, 1) // the same holder after its own claim expired
	clk.Step(ttl)
	step("b", 4, 2) // another holder after expiry
}

func TestGetListAndNotFound(t *testing.T) {
	s, clk := newFake(t)
	ctx := context.Background()
	if _, err := s.Get(ctx, "job"); !errors.Is(err, backend.ErrNotFound) || !strings.Contains(err.Error(), `"job"`) {
		t.Fatalf("Get of an unknown key: %v, want ErrNotFound naming the key", err)
	}
	if recs, err := s.List(ctx); err != nil || len(recs) != 0 {
		t.Fatalf("List of an empty store = %v, %v", recs, err)
	}
	gb := mustAcquire(t, s, "b.job", "x")
	clk.Step(time.Second)
	ga := mustAcquire(t, s, "a.job", "y")
	if err := s.Release(ctx, gb); err != nil {
		t.Fatal(err)
	}
	recs, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Key != "a.job" || recs[1].Key != "b.job" {
		t.Fatalf("List = %+v, want a.job then b.job", recs)
	}
	a := recs[0]
	if a.Holder != "y" || a.Nonce != ga.Nonce || a.Token != 1 || a.TTL != ttl || a.Remaining != ttl ||
		!a.AcquireTime.Equal(t0.Add(time.Second)) || a.Version != ga.Version {
		t.Fatalf("List a.job = %+v", a)
	}
	if b := recs[1]; b.Held() || b.Token != 1 || b.Remaining != 0 {
		t.Fatalf("List b.job = %+v, want released with token 1", b)
	}
}

func TestForceRelease(t *testing.T) {
	s, _ := newFake(t)
	ctx := context.Background()
	if err := s.ForceRelease(ctx, "job"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("ForceRelease of an unknown key: %v, want ErrNotFound", err)
	}
	g := mustAcquire(t, s, "job", "a")
	if err := s.ForceRelease(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Renew(ctx, g)
	wantLost(t, err, "released")
	if err := s.ForceRelease(ctx, "job"); err != nil {
		t.Fatalf("ForceRelease of a free key: %v", err)
	}
	if g := mustAcquire(t, s, "job", "b"); g.Token != 2 {
		t.Fatalf("after a forced release: token %d, want 2", g.Token)
	}
}

func TestErrors(t *testing.T) {
	s, _ := newFake(t)
	ctx := context.Background()
	g := mustAcquire(t, s, "job", "a")

	for _, tc := range []struct {
		name, key string
		err       error
		want      error
	}{
		{"held", "job", func() error { _, err := s.TryAcquire(ctx, "job", req("b")); return err }(), backend.ErrHeld},
		{"empty holder", "job", func() error { _, err := s.TryAcquire(ctx, "job", backend.Request{Nonce: "n", TTL: ttl}); return err }(), backend.ErrInvalidOptions},
		{"empty nonce", "job", func() error { _, err := s.TryAcquire(ctx, "job", backend.Request{Holder: "h", TTL: ttl}); return err }(), backend.ErrInvalidOptions},
		{"zero TTL", "job", func() error { _, err := s.TryAcquire(ctx, "job", backend.Request{Holder: "h", Nonce: "n"}); return err }(), backend.ErrInvalidOptions},
		{"renew zero TTL", "job", func() error { bad := g; bad.TTL = 0; _, err := s.Renew(ctx, bad); return err }(), backend.ErrInvalidOptions},
		{"wrong nonce", "job", func() error { bad := g; bad.Nonce = "other"; return s.Release(ctx, bad) }(), backend.ErrLost},
		{"wrong token", "job", func() error { bad := g; bad.Token++; _, err := s.Renew(ctx, bad); return err }(), backend.ErrLost},
		{"never acquired", "never", s.Release(ctx, backend.Grant{Key: "never", Holder: "a", Nonce: "n", Token: 1}), backend.ErrLost},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want an error matching %v", tc.name, tc.err, tc.want)
		} else if !strings.Contains(tc.err.Error(), `"`+tc.key+`"`) {
			t.Errorf("%s: error %q does not name the key", tc.name, tc.err)
		}
	}
	if _, err := s.Get(ctx, "Job"); !errors.Is(err, backend.ErrInvalidName) || !strings.Contains(err.Error(), `"Job"`) {
		t.Errorf("Get(%q): %v, want ErrInvalidName naming the key", "Job", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Renew(canceled, g); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `"job"`) {
		t.Errorf("Renew with a canceled context: %v, want context.Canceled naming the key", err)
	}
	if _, err := s.List(canceled); !errors.Is(err, context.Canceled) {
		t.Errorf("List with a canceled context: %v", err)
	}
	// The failed calls changed nothing.
	if r := mustGet(t, s, "job"); r.Holder != "a" || r.Token != 1 || !r.Held() {
		t.Errorf("after the failed calls: %+v", r)
	}
}

func TestWatch(t *testing.T) {
	s, _ := newFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := s.Watch(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Watch(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	// Notifications are sent under the store's lock before the call returns,
	// so a value is pending (or not) as soon as the call has returned.
	pending := func(ch <-chan struct{}) bool {
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatal("watch channel closed while its context is live")
			}
			return true
		default:
			return false
		}
	}
	g := mustAcquire(t, s, "job", "a")
	if !pending(ch) {
		t.Fatal("no signal after acquire")
	}
	g, err = s.Renew(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if !pending(ch) {
		t.Fatal("no signal after renew")
	}
	_, _ = s.TryAcquire(ctx, "job", req("b")) // held: no change, no signal
	if pending(ch) {
		t.Fatal("signal after a failed TryAcquire that changed nothing")
	}
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	g = mustAcquire(t, s, "job", "b")
	if !pending(ch) || pending(ch) {
		t.Fatal("a release and an acquire did not fold into exactly one pending signal")
	}
	if pending(other) {
		t.Fatal("a watch on another key was signalled")
	}

	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("value after cancel")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch channel not closed after its context ended")
	}
	// A change after the watch ended must not panic (send on closed channel).
	if err := s.Release(context.Background(), g); err != nil {
		t.Fatal(err)
	}
}

// Engine tests: baton.Mutex on a memory Store, both on one fake clock.

var discard = baton.WithLogger(slog.New(slog.DiscardHandler))

// events records the engine's events of the given kinds.
func events(kinds ...baton.EventKind) (baton.Option, <-chan baton.Event) {
	ch := make(chan baton.Event, 16)
	return baton.WithObserver(baton.ObserverFunc(func(e baton.Event) {
		for _, k := range kinds {
			if e.Kind == k {
				ch <- e
			}
		}
	})), ch
}

func next(t *testing.T, ch <-chan baton.Event, want baton.EventKind) baton.Event {
	t.Helper()
	select {
	case e := <-ch:
		if e.Kind != want {
			t.Fatalf("event %v (err %v), want %v", e.Kind, e.Err, want)
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatalf("no %v event within 10s", want)
		return baton.Event{}
	}
}

// awaitTimer waits until a goroutine waits on clk, so that a Step reaches
// it. Stepping earlier would move time under a goroutine about to compute
// its next timer.
func awaitTimer(t *testing.T, clk *clocktest.FakeClock) {
	t.Helper()
	clocktest.AwaitTimer(t, clk)
}

// Timing for the engine tests: TTL 10s, renew every 3s, step down 7s
// after the last successful renew was sent, margin 200ms (2% of 10s).
func engineOptions(clk *clocktest.FakeClock, id string, extra ...baton.Option) []baton.Option {
	return append([]baton.Option{
		baton.WithClock(clk), baton.WithIdentity(id), discard,
		baton.WithTTL(ttl), baton.WithRenewInterval(3 * time.Second),
		baton.WithRenewDeadline(7 * time.Second), baton.WithRetryPeriod(4 * time.Second),
	}, extra...)
}

func TestMutexRenewsPastTTL(t *testing.T) {
	s, clk := newFake(t)
	ctx := context.Background()
	obs, ev := events(baton.EventRenewed, baton.EventRenewFailed, baton.EventLost)
	m, err := baton.NewMutex(s, "job", engineOptions(clk, "a", obs)...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)

	// Four renewals, 3s apart: 12s, past the 10s TTL.
	for range 4 {
		awaitTimer(t, clk)
		clk.Step(3 * time.Second)
		next(t, ev, baton.EventRenewed)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease ended: %v", err)
	}
	if got, want := l.ValidUntil(), t0.Add(12*time.Second+ttl-200*time.Millisecond); !got.Equal(want) {
		t.Fatalf("ValidUntil = %v, want the last renew's send time + TTL - margin = %v", got, want)
	}
	r := mustGet(t, s, "job")
	if !r.Held() || r.Holder != "a" || r.Remaining != ttl || r.Token != l.Token() {
		t.Fatalf("store record after renewals: %+v", r)
	}
	_, err = s.TryAcquire(ctx, "job", req("b"))
	wantHeld(t, err, "a", l.Token(), ttl)

	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, baton.ErrReleased) {
		t.Fatalf("cause after Unlock: %v", cause)
	}
	if r := mustGet(t, s, "job"); r.Held() {
		t.Fatalf("held after Unlock: %+v", r)
	}
}

// failingRenew is a Backend whose Renew always fails with a transient
// error, as a store that cannot be reached would.
type failingRenew struct {
	backend.Backend
	calls atomic.Int64
}

var errUnreachable = errors.New("store unreachable (injected)")

func (f *failingRenew) Renew(context.Context, backend.Grant) (backend.Grant, error) {
	f.calls.Add(1)
	return backend.Grant{}, errUnreachable
}

func TestMutexStepsDownAtRenewDeadline(t *testing.T) {
	s, clk := newFake(t)
	ctx := context.Background()
	b := &failingRenew{Backend: s}
	obs, ev := events(baton.EventRenewed, baton.EventRenewFailed, baton.EventLost)
	m, err := baton.NewMutex(b, "job", engineOptions(clk, "a", obs)...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(ctx) // sent at t0
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)

	awaitTimer(t, clk)
	clk.Step(3 * time.Second) // the renew is due, and fails
	if e := next(t, ev, baton.EventRenewFailed); !errors.Is(e.Err, errUnreachable) {
		t.Fatalf("renew failed with %v", e.Err)
	}
	awaitTimer(t, clk)
	clk.Step(4*time.Second - time.Nanosecond) // 1ns before the renew deadline
	if err := l.Err(); err != nil {
		t.Fatalf("lease ended before the renew deadline: %v", err)
	}
	clk.Step(time.Nanosecond) // t0 + 7s: the renew deadline
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease did not end at the renew deadline")
	}
	next(t, ev, baton.EventLost)
	cause := context.Cause(l.Context())
	if !errors.Is(cause, backend.ErrLost) || !errors.Is(cause, errUnreachable) {
		t.Fatalf("cause %v, want ErrLost with the last renew error", cause)
	}
	if now := clk.Now(); !now.Equal(t0.Add(7*time.Second)) || !now.Before(l.ValidUntil()) {
		t.Fatalf("stepped down at %v, ValidUntil %v; want at t0+7s, before ValidUntil", now.Sub(t0), l.ValidUntil().Sub(t0))
	}
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("%d renew calls, want 1 (retry period 4s reaches the deadline)", n)
	}
	// The holder stopped while the store still counts its claim: nobody
	// else could have started yet.
	_, err = s.TryAcquire(ctx, "job", req("b"))
	wantHeld(t, err, "a", l.Token(), 3*time.Second)
	if err := l.Unlock(ctx); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("Unlock after step-down: %v, want ErrLost", err)
	}
}

func BenchmarkTryAcquireRelease(b *testing.B) {
	s := memstore.New()
	ctx := context.Background()
	r := backend.Request{Holder: "bench", Nonce: "n", TTL: ttl}
	for b.Loop() {
		g, err := s.TryAcquire(ctx, "job", r)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, g); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTryAcquireContended(b *testing.B) {
	s := memstore.New()
	ctx := context.Background()
	holder := backend.Request{Holder: "holder", Nonce: "n", TTL: time.Hour}
	if _, err := s.TryAcquire(ctx, "job", holder); err != nil {
		b.Fatal(err)
	}
	b.RunParallel(func(pb *testing.PB) {
		r := backend.Request{Holder: "other", Nonce: "m", TTL: ttl}
		for pb.Next() {
			if _, err := s.TryAcquire(ctx, "job", r); !errors.Is(err, backend.ErrHeld) {
				b.Fatal(err)
			}
		}
	})
}
