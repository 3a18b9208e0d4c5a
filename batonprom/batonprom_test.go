package batonprom_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/batonprom"
	"github.com/baton-go/baton/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = baton.WithLogger(slog.New(slog.DiscardHandler))

func newCollector(t *testing.T) (*batonprom.Collector, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	c, err := batonprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return c, reg
}

// value returns the value of the gauge or counter name{labels} in reg.
func value(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func TestNewRefusesNilAndDoubleRegistration(t *testing.T) {
	if _, err := batonprom.New(nil); err == nil || !strings.Contains(err.Error(), "the registerer is nil") {
		t.Errorf("New(nil) = %v, want an error saying the registerer is nil", err)
	}
	reg := prometheus.NewRegistry()
	if _, err := batonprom.New(reg); err != nil {
		t.Fatal(err)
	}
	_, err := batonprom.New(reg)
	var already prometheus.AlreadyRegisteredError
	if !errors.As(err, &already) {
		t.Errorf("second New on one registry: %v, want an AlreadyRegisteredError", err)
	}
	// Registerers wrapped with one constant label, of different values,
	// tell two collectors in one registry apart.
	shared := prometheus.NewPedanticRegistry()
	for _, store := range []string{"a", "b"} {
		if _, err := batonprom.New(prometheus.WrapRegistererWith(prometheus.Labels{"store": store}, shared)); err != nil {
			t.Errorf("New on a registerer wrapped with store=%s: %v", store, err)
		}
	}
}

func TestInitExportsZeroSeries(t *testing.T) {
	c, reg := newCollector(t)
	c.Init("scheduler")
	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP baton_leader 1 while this process holds the lock (leads), else 0.
# TYPE baton_leader gauge
baton_leader{lock="scheduler"} 0
# HELP baton_losses_total Leases of the lock lost by this process: step_down (no renew succeeded within the renew deadline) or revoked (the store said the claim is someone else's).
# TYPE baton_losses_total counter
baton_losses_total{lock="scheduler",reason="revoked"} 0
baton_losses_total{lock="scheduler",reason="step_down"} 0
`), "baton_leader", "baton_losses_total")
	if err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c); n != 12 {
		t.Errorf("Init created %d series, want 12 (one per metric, two for losses)", n)
	}
}

// Events as an Elector reports them: a conflict, a takeover, renewals, a
// failed renewal, a step-down and a second term that ends by release.
func TestObserveElectorTerms(t *testing.T) {
	c, reg := newCollector(t)
	const name = "scheduler"
	obs := func(e baton.Event) {
		e.Name = name
		c.Observe(e)
	}
	leader := func() float64 { return value(t, reg, "baton_leader", "lock", name) }

	obs(baton.Event{Kind: baton.EventHeld, Holder: "other", Token: 6})
	obs(baton.Event{Kind: baton.EventNewLeader, Holder: "other"})
	if got := leader(); got != 0 {
		t.Errorf("standby: baton_leader = %v, want 0", got)
	}
	obs(baton.Event{Kind: baton.EventAcquired, Holder: "me", Token: 7, Duration: 3 * time.Second})
	obs(baton.Event{Kind: baton.EventNewLeader, Holder: "me"})
	obs(baton.Event{Kind: baton.EventStartedLeading, Holder: "me", Token: 7})
	if got := leader(); got != 1 {
		t.Errorf("leading: baton_leader = %v, want 1", got)
	}
	obs(baton.Event{Kind: baton.EventRenewed, Holder: "me", Token: 7, Duration: 20 * time.Millisecond})
	obs(baton.Event{Kind: baton.EventRenewFailed, Holder: "me", Token: 7, Err: errors.New("timeout")})
	stepDown := fmt.Errorf("%w: %w 10s: no renew succeeded", backend.ErrLost, baton.ErrStepDown)
	obs(baton.Event{Kind: baton.EventLost, Holder: "me", Token: 7, Err: stepDown})
	if got := leader(); got != 0 {
		t.Errorf("after the loss: baton_leader = %v, want 0", got)
	}
	obs(baton.Event{Kind: baton.EventStoppedLeading, Holder: "me", Token: 7, Err: stepDown})

	obs(baton.Event{Kind: baton.EventAcquired, Holder: "me", Token: 9, Duration: 0})
	obs(baton.Event{Kind: baton.EventStartedLeading, Holder: "me", Token: 9})
	obs(baton.Event{Kind: baton.EventReleased, Holder: "me", Token: 9})
	obs(baton.Event{Kind: baton.EventStoppedLeading, Holder: "me", Token: 9, Err: baton.ErrReleased})

	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP baton_acquire_wait_seconds Time from the start of Lock (or of a campaign) to the acquisition.
# TYPE baton_acquire_wait_seconds histogram
baton_acquire_wait_seconds_bucket{lock="scheduler",le="0.001"} 1
baton_acquire_wait_seconds_bucket{lock="scheduler",le="0.005"} 1
baton_acquire_wait_seconds_bucket{lock="scheduler",le="0.01"} 1
baton_acquire_wait_seconds_bucket{lock="scheduler",le="0.05"} 1
baton_acquire_wait_seconds_bucket{lock="scheduler",le="0.1"} 1
baton_acquire_wait_seconds_bucket{lock="scheduler",le="0.5"} 1
baton_acquire_wait_seconds_bucket{lock="scheduler",le="1"} 1
baton_acquire_wait_seconds_bucket{lock="scheduler",le="5"} 2
baton_acquire_wait_seconds_bucket{lock="scheduler",le="15"} 2
baton_acquire_wait_seconds_bucket{lock="scheduler",le="30"} 2
baton_acquire_wait_seconds_bucket{lock="scheduler",le="60"} 2
baton_acquire_wait_seconds_bucket{lock="scheduler",le="300"} 2
baton_acquire_wait_seconds_bucket{lock="scheduler",le="900"} 2
baton_acquire_wait_seconds_bucket{lock="scheduler",le="3600"} 2
baton_acquire_wait_seconds_bucket{lock="scheduler",le="+Inf"} 2
baton_acquire_wait_seconds_sum{lock="scheduler"} 3
baton_acquire_wait_seconds_count{lock="scheduler"} 2
# HELP baton_acquisitions_total Leases of the lock acquired by this process.
# TYPE baton_acquisitions_total counter
baton_acquisitions_total{lock="scheduler"} 2
# HELP baton_conflicts_total Acquire attempts that found the lock held by another owner.
# TYPE baton_conflicts_total counter
baton_conflicts_total{lock="scheduler"} 1
# HELP baton_fencing_token Fencing token of the last lease of the lock this process acquired (0: none yet).
# TYPE baton_fencing_token gauge
baton_fencing_token{lock="scheduler"} 9
# HELP baton_leader 1 while this process holds the lock (leads), else 0.
# TYPE baton_leader gauge
baton_leader{lock="scheduler"} 0
# HELP baton_leader_changes_total Changes of the leader of the lock observed by an Elector in this process, including to itself.
# TYPE baton_leader_changes_total counter
baton_leader_changes_total{lock="scheduler"} 2
# HELP baton_losses_total Leases of the lock lost by this process: step_down (no renew succeeded within the renew deadline) or revoked (the store said the claim is someone else's).
# TYPE baton_losses_total counter
baton_losses_total{lock="scheduler",reason="revoked"} 0
baton_losses_total{lock="scheduler",reason="step_down"} 1
# HELP baton_releases_total Leases of the lock released by this process.
# TYPE baton_releases_total counter
baton_releases_total{lock="scheduler"} 1
# HELP baton_renew_failures_total Renewals of the lock that failed, or had no answer for a retry period; the holder retries until the renew deadline.
# TYPE baton_renew_failures_total counter
baton_renew_failures_total{lock="scheduler"} 1
`), "baton_acquire_wait_seconds", "baton_acquisitions_total", "baton_conflicts_total",
		"baton_fencing_token", "baton_leader", "baton_leader_changes_total",
		"baton_losses_total", "baton_releases_total", "baton_renew_failures_total")
	if err != nil {
		t.Error(err)
	}
	if got := value(t, reg, "baton_renew_duration_seconds", "lock", name); got != 1 {
		t.Errorf("baton_renew_duration_seconds_count = %v, want 1", got)
	}
}

// baton_leader must return to 0 however the events of a lease arrive.
func TestLeaderGaugeFollowsLeases(t *testing.T) {
	revoked := fmt.Errorf("renew: %w", backend.ErrLost)
	ev := func(kind baton.EventKind, token uint64) baton.Event {
		return baton.Event{Kind: kind, Name: "job", Holder: "me", Token: token, Err: revoked}
	}
	for _, tc := range []struct {
		name   string
		events []baton.Event
		want   float64
	}{
		{"acquired", []baton.Event{ev(baton.EventAcquired, 1)}, 1},
		{"renewed", []baton.Event{ev(baton.EventAcquired, 1), ev(baton.EventRenewed, 1)}, 1},
		{"released", []baton.Event{ev(baton.EventAcquired, 1), ev(baton.EventReleased, 1)}, 0},
		{"lost", []baton.Event{ev(baton.EventAcquired, 1), ev(baton.EventLost, 1)}, 0},
		// The renewer gives up before Lock reports the acquisition when the
		// acquire took longer than the renew deadline.
		{"lost before acquired", []baton.Event{ev(baton.EventLost, 1), ev(baton.EventAcquired, 1)}, 0},
		{"lost before acquired, then a new lease", []baton.Event{ev(baton.EventLost, 1), ev(baton.EventAcquired, 1), ev(baton.EventAcquired, 2)}, 1},
		// An Elector whose release failed or was not wanted reports no
		// release, only the end of the term.
		{"term stopped without release", []baton.Event{ev(baton.EventAcquired, 1), ev(baton.EventStartedLeading, 1), ev(baton.EventStoppedLeading, 1)}, 0},
		{"released and stopped", []baton.Event{ev(baton.EventAcquired, 1), ev(baton.EventReleased, 1), ev(baton.EventStoppedLeading, 1), ev(baton.EventAcquired, 2)}, 1},
		{"two leases, one released", []baton.Event{ev(baton.EventAcquired, 1), ev(baton.EventAcquired, 2), ev(baton.EventReleased, 1)}, 1},
		{"two leases, both ended", []baton.Event{ev(baton.EventAcquired, 1), ev(baton.EventAcquired, 2), ev(baton.EventReleased, 2), ev(baton.EventLost, 1)}, 0},
		// A lease acquired before the Collector was attached: its end must
		// not count as one.
		{"release of an unseen lease", []baton.Event{ev(baton.EventReleased, 4), ev(baton.EventLost, 5), ev(baton.EventAcquired, 6)}, 1},
		{"conflicts only", []baton.Event{ev(baton.EventHeld, 3), ev(baton.EventNewLeader, 0)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, reg := newCollector(t)
			for _, e := range tc.events {
				c.Observe(e)
			}
			if got := value(t, reg, "baton_leader", "lock", "job"); got != tc.want {
				t.Errorf("baton_leader = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLockNamesAreSeparateSeries(t *testing.T) {
	c, reg := newCollector(t)
	c.Observe(baton.Event{Kind: baton.EventAcquired, Name: "a", Holder: "me", Token: 1})
	c.Observe(baton.Event{Kind: baton.EventHeld, Name: "b", Holder: "other", Token: 1})
	if a, b := value(t, reg, "baton_leader", "lock", "a"), value(t, reg, "baton_leader", "lock", "b"); a != 1 || b != 0 {
		t.Errorf("baton_leader a=%v b=%v, want 1 and 0", a, b)
	}
	c.Forget("a")
	if n, err := testutil.GatherAndCount(reg, "baton_leader"); err != nil || n != 1 {
		t.Errorf("after Forget(a): %d baton_leader series (%v), want 1", n, err)
	}
	c.Observe(baton.Event{Kind: baton.EventReleased, Name: "a", Holder: "me", Token: 1})
	if got := value(t, reg, "baton_leader", "lock", "a"); got != 0 {
		t.Errorf("a forgotten lock: baton_leader = %v, want 0", got)
	}
}

// A real Mutex on the memory store: the gauge follows Lock and Unlock, and
// a second contender's TryLock counts a conflict.
func TestMutexOnMemoryStore(t *testing.T) {
	c, reg := newCollector(t)
	store := memstore.New()
	ctx := context.Background()
	m, err := baton.NewMutex(store, "reports", baton.WithIdentity("worker-1"), baton.WithObserver(c), quiet)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "baton_leader", "lock", "reports"); got != 1 {
		t.Errorf("after Lock: baton_leader = %v, want 1", got)
	}
	if got := value(t, reg, "baton_fencing_token", "lock", "reports"); got != float64(l.Token()) {
		t.Errorf("baton_fencing_token = %v, want %d", got, l.Token())
	}
	other, err := baton.NewMutex(store, "reports", baton.WithIdentity("worker-2"), baton.WithObserver(c), quiet)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryLock(ctx); !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("TryLock while held: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "baton_leader", "lock", "reports"); got != 0 {
		t.Errorf("after Unlock: baton_leader = %v, want 0", got)
	}
	l2, err := other.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "baton_leader", "lock", "reports"); got != 1 {
		t.Errorf("after TryLock: baton_leader = %v, want 1", got)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"baton_acquisitions_total": 2, "baton_conflicts_total": 1, "baton_releases_total": 2,
	} {
		if got := value(t, reg, name, "lock", "reports"); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// failingRenew is a memory store whose renewals fail on demand.
type failingRenew struct {
	*memstore.Store
	fail atomic.Bool
}

func (s *failingRenew) Renew(ctx context.Context, g backend.Grant) (backend.Grant, error) {
	if s.fail.Load() {
		return backend.Grant{}, errors.New("store unreachable")
	}
	return s.Store.Renew(ctx, g)
}

// Real losses on the memory store carry their reason: a force-release is
// revoked; renewals failing until the renew deadline are a step-down.
func TestLossReasonsOnMemoryStore(t *testing.T) {
	c, reg := newCollector(t)
	store := &failingRenew{Store: memstore.New()}
	ctx := context.Background()
	m, err := baton.NewMutex(store, "sync", baton.WithTTL(time.Second), baton.WithRetryPeriod(50*time.Millisecond), baton.WithObserver(c), quiet)
	if err != nil {
		t.Fatal(err)
	}

	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.ForceRelease(ctx, "sync"); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	_ = l.Unlock(ctx)
	if got := value(t, reg, "baton_losses_total", "lock", "sync", "reason", batonprom.ReasonRevoked); got != 1 {
		t.Errorf("after a force-release: losses{reason=revoked} = %v, want 1", got)
	}

	l, err = m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store.fail.Store(true)
	<-l.Done()
	_ = l.Unlock(ctx)
	if got := value(t, reg, "baton_losses_total", "lock", "sync", "reason", batonprom.ReasonStepDown); got != 1 {
		t.Errorf("after failed renewals: losses{reason=step_down} = %v, want 1", got)
	}
	if got := value(t, reg, "baton_renew_failures_total", "lock", "sync"); got < 1 {
		t.Errorf("baton_renew_failures_total = %v, want at least 1", got)
	}
	if got := value(t, reg, "baton_leader", "lock", "sync"); got != 0 {
		t.Errorf("after the losses: baton_leader = %v, want 0", got)
	}
}

// failingAcquire is a memory store whose first acquire attempts fail as an
// unreachable store's do.
type failingAcquire struct {
	*memstore.Store
	failures atomic.Int32 // attempts left to fail
}

func (s *failingAcquire) TryAcquire(ctx context.Context, key string, req backend.Request) (backend.Grant, error) {
	if s.failures.Add(-1) >= 0 {
		return backend.Grant{}, fmt.Errorf("%w: i/o timeout", baton.ErrUnavailable)
	}
	return s.Store.TryAcquire(ctx, key, req)
}

// Attempts that fail (the store unreachable) are counted, so that a
// standby that cannot reach its store, and so could not take over, shows
// in metrics and not only in its log.
func TestAcquireFailuresCounted(t *testing.T) {
	c, reg := newCollector(t)
	c.Init("sync")
	store := &failingAcquire{Store: memstore.New()}
	store.failures.Store(2)
	m, err := baton.NewMutex(store, "sync", baton.WithTTL(time.Second), baton.WithRetryPeriod(50*time.Millisecond), baton.WithObserver(c), quiet)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "baton_acquire_failures_total", "lock", "sync"); got != 2 {
		t.Errorf("baton_acquire_failures_total = %v, want 2 (the attempts that failed)", got)
	}
	if got := value(t, reg, "baton_conflicts_total", "lock", "sync"); got != 0 {
		t.Errorf("baton_conflicts_total = %v, want 0: a failed attempt is not a conflict", got)
	}
}

// Two Electors, each with its own registry as two processes would have:
// the leader exports 1, the standby 0, and the standby takes over when the
// leader stops.
func TestElectorsOnMemoryStore(t *testing.T) {
	store := memstore.New()
	type replica struct {
		reg     *prometheus.Registry
		el      *baton.Elector
		leading chan struct{}
		done    chan struct{} // closed when Run returned
	}
	start := func(ctx context.Context, wg *sync.WaitGroup, id string) *replica {
		c, reg := newCollector(t)
		c.Init("leader-lock")
		r := &replica{reg: reg, leading: make(chan struct{}, 1), done: make(chan struct{})}
		var err error
		r.el, err = baton.NewElector(store, "leader-lock", baton.WithIdentity(id), baton.WithObserver(c), quiet)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(r.done)
			_ = r.el.Run(ctx, func(ctx context.Context, _ *baton.Lease) error {
				r.leading <- struct{}{}
				<-ctx.Done()
				return nil
			})
		}()
		return r
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctxA, stopA := context.WithCancel(context.Background())
	defer stopA()
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()

	a := start(ctxA, &wg, "replica-a")
	<-a.leading
	b := start(ctxB, &wg, "replica-b")
	deadline := time.Now().Add(10 * time.Second)
	for b.el.Leader() != "replica-a" {
		if time.Now().After(deadline) {
			t.Fatal("the standby never saw the leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if la, lb := value(t, a.reg, "baton_leader", "lock", "leader-lock"), value(t, b.reg, "baton_leader", "lock", "leader-lock"); la != 1 || lb != 0 {
		t.Errorf("baton_leader: leader %v, standby %v; want 1 and 0", la, lb)
	}

	stopA() // releases; b takes over through the watch
	<-b.leading
	// The old leader reports its release once the store has freed the
	// lock, so the new one can lead a moment before: wait for Run.
	<-a.done
	if la, lb := value(t, a.reg, "baton_leader", "lock", "leader-lock"), value(t, b.reg, "baton_leader", "lock", "leader-lock"); la != 0 || lb != 1 {
		t.Errorf("after the handover, baton_leader: old leader %v, new leader %v; want 0 and 1", la, lb)
	}
	if got := value(t, b.reg, "baton_leader_changes_total", "lock", "leader-lock"); got != 2 {
		t.Errorf("standby saw %v leader changes, want 2 (to replica-a, to itself)", got)
	}
}

// Observe is called from many goroutines while the registry is scraped.
func TestObserveConcurrently(t *testing.T) {
	c, reg := newCollector(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				tok := uint64(g*1000 + i)
				c.Observe(baton.Event{Kind: baton.EventAcquired, Name: "busy", Holder: "me", Token: tok})
				c.Observe(baton.Event{Kind: baton.EventRenewed, Name: "busy", Holder: "me", Token: tok, Duration: time.Millisecond})
				c.Observe(baton.Event{Kind: baton.EventReleased, Name: "busy", Holder: "me", Token: tok})
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	if got := value(t, reg, "baton_acquisitions_total", "lock", "busy"); got != 800 {
		t.Errorf("baton_acquisitions_total = %v, want 800", got)
	}
	if got := value(t, reg, "baton_leader", "lock", "busy"); got != 0 {
		t.Errorf("baton_leader = %v, want 0", got)
	}
}
