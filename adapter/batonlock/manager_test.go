package batonlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/adapter/batonlock"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/internal/faultproxy"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/kubestore"
	"github.com/baton-go/baton/redisstore"
	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Leader election timings of the managers under test: short, with the
// proportions client-go requires (LeaseDuration > RenewDeadline >
// RetryPeriod*1.2) and RetryPeriod + RenewDeadline < LeaseDuration, so that
// a leader that cannot renew stops before its claim can expire in the
// backend.
const (
	leaseDuration = 2 * time.Second
	renewDeadline = 1500 * time.Millisecond
	retryPeriod   = 200 * time.Millisecond
)

// TestManagerFailover runs two controller-runtime managers with leader
// election through a Lock on each of baton's networked backends: exactly
// one runs its leader-election runnables, and when its manager stops (with
// LeaderElectionReleaseOnCancel), the other takes over without waiting for
// the lease to expire.
func TestManagerFailover(t *testing.T) {
	cfg := startControlPlane(t)
	quiet := slog.New(slog.DiscardHandler)

	t.Run("lease", func(t *testing.T) {
		ns := newNamespace(t, cfg)
		failover(t, cfg, func(t *testing.T, id string) *batonlock.Lock {
			store, err := kubestore.NewLeaseForConfig(cfg, ns, kubestore.WithApplication("batonlock-test"))
			if err != nil {
				t.Fatal(err)
			}
			return newLock(t, store, "controller-lease", id, quiet)
		})
	})
	t.Run("redis", func(t *testing.T) {
		srv := testenv.StartRedis(t)
		failover(t, cfg, func(t *testing.T, id string) *batonlock.Lock {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
			store, err := redisstore.New(c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = store.Close(); _ = c.Close() })
			return newLock(t, store, "controller-redis", id, quiet)
		})
	})
	t.Run("etcd", func(t *testing.T) {
		srv := testenv.StartEtcd(t, testenv.EtcdNoFsync())
		failover(t, cfg, func(t *testing.T, id string) *batonlock.Lock {
			c, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: srv.Endpoints()})
			if err != nil {
				t.Fatal(err)
			}
			store, err := etcdstore.New(c, etcdstore.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = store.Close(); _ = c.Close() })
			return newLock(t, store, "controller-etcd", id, quiet)
		})
	})
}

func newLock(t *testing.T, b backend.Backend, name, id string, log *slog.Logger) *batonlock.Lock {
	t.Helper()
	l, err := batonlock.New(b, name, id, batonlock.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// tracker records the leader-election runnables of the managers of one
// test.
type tracker struct {
	running atomic.Int32 // leader-election runnables running now
	overlap atomic.Bool  // two ran at once
	started chan string  // identity of each runnable that starts
	stopped chan string  // identity of each runnable that returns
}

func newTracker() *tracker {
	return &tracker{started: make(chan string, 4), stopped: make(chan string, 4)}
}

// replica is one manager under test.
type replica struct {
	id     string
	lock   *batonlock.Lock
	cancel context.CancelFunc
	done   chan struct{} // closed when Start has returned
	err    error         // Start's result, once done is closed
}

// startReplica starts a manager that elects through lock and runs one
// leader-election runnable reporting to tr. It is stopped at the end of t.
func startReplica(t *testing.T, cfg *rest.Config, tr *tracker, id string, lock *batonlock.Lock) *replica {
	t.Helper()
	r := startManager(t, cfg, tr, id, manager.Options{LeaderElectionResourceLockInterface: lock})
	r.lock = lock
	return r
}

// startLeaseLockReplica starts a manager as startReplica does, electing
// through client-go's own LeaseLock on the Lease ns/name, as a manager
// does before it moves to baton.
func startLeaseLockReplica(t *testing.T, cfg *rest.Config, tr *tracker, id, ns, name string) *replica {
	t.Helper()
	return startManager(t, cfg, tr, id, manager.Options{
		LeaderElectionID: name, LeaderElectionNamespace: ns, LeaderElectionResourceLock: "leases",
	})
}

// startManager starts a manager with the leader election of opts and
// runs one leader-election runnable reporting to tr.
func startManager(t *testing.T, cfg *rest.Config, tr *tracker, id string, opts manager.Options) *replica {
	t.Helper()
	r := &replica{id: id, done: make(chan struct{})}
	ld, rd, rp := leaseDuration, renewDeadline, retryPeriod
	opts.Logger, opts.Metrics, opts.HealthProbeBindAddress = logr.Discard(), metricsserver.Options{BindAddress: "0"}, "0"
	opts.LeaderElection, opts.LeaderElectionReleaseOnCancel = true, true
	opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = &ld, &rd, &rp
	mgr, err := manager.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	// A plain Runnable needs leader election: it starts only on the
	// leader.
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if tr.running.Add(1) > 1 {
			tr.overlap.Store(true)
		}
		tr.started <- id
		<-ctx.Done()
		tr.running.Add(-1)
		tr.stopped <- id
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		r.err = mgr.Start(ctx)
	}()
	t.Cleanup(func() { _ = r.stop(t) })
	return r
}

// stop cancels the manager and returns Start's result.
func (r *replica) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		return r.err
	case <-time.After(30 * time.Second):
		t.Fatalf("manager %s did not stop within 30s", r.id)
		return nil
	}
}

// failover runs the scenario with two managers whose locks newLock builds.
func failover(t *testing.T, cfg *rest.Config, newLock func(t *testing.T, id string) *batonlock.Lock) {
	tr := newTracker()
	replicas := make([]*replica, 2)
	for i := range replicas {
		id := fmt.Sprintf("replica-%c", 'a'+i)
		replicas[i] = startReplica(t, cfg, tr, id, newLock(t, id))
	}

	first := waitFor(t, tr.started, 20*time.Second, "a leader")
	leader, standby := replicas[0], replicas[1]
	if first == standby.id {
		leader, standby = standby, leader
	}
	if _, held := leader.lock.Token(); !held {
		t.Errorf("%s runs its leader-election runnables but its Lock holds no claim", leader.id)
	}
	// Exactly one leader: the standby must not start while the leader
	// renews. Two lease durations cover several renewals and one full
	// expiry window as the standby judges it.
	select {
	case id := <-tr.started:
		// On a loaded machine the leader may miss its renew deadline and
		// step down: a takeover then is correct, an overlap is not.
		if tr.overlap.Load() {
			t.Fatalf("%s started leading while %s still ran its runnables", id, first)
		}
		t.Logf("%s took over after %s lost its lease (a loaded machine?); no overlap", id, first)
		return
	case <-time.After(2 * leaseDuration):
	}

	if err := leader.stop(t); err != nil {
		t.Errorf("leader's manager: Start returned %v", err)
	}
	if _, held := leader.lock.Token(); held {
		t.Errorf("%s still holds a claim after its manager stopped with LeaderElectionReleaseOnCancel", leader.id)
	}
	stopped := time.Now()
	if id := waitFor(t, tr.started, 20*time.Second, "the standby to take over"); id != standby.id {
		t.Fatalf("%s started leading, want %s", id, standby.id)
	}
	// The release itself is asserted above (the leader's Lock holds no
	// claim); how soon the standby follows is the machine's speed, logged
	// (about a retry period, %v, on an idle machine).
	t.Logf("the standby took over %v after the leader stopped (retry period %v)", time.Since(stopped), retryPeriod)
	if tr.overlap.Load() {
		t.Error("two managers ran their leader-election runnables at the same time")
	}
	if err := standby.stop(t); err != nil {
		t.Errorf("new leader's manager: Start returned %v", err)
	}
}

// waitFor returns the next value on ch, failing t after d.
func waitFor[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("waited %v for %s", d, what)
		panic("unreachable")
	}
}

// startControlPlane starts a kube-apiserver and etcd for t (envtest), with
// the binaries testenv.KubeAssets finds, and returns the admin config.
func startControlPlane(t *testing.T) *rest.Config {
	t.Helper()
	env := &envtest.Environment{BinaryAssetsDirectory: testenv.KubeAssets(t)}
	env.ControlPlane.GetAPIServer().Configure().Set("advertise-address", testenv.KubeAdvertiseAddress)
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	return cfg
}

// newNamespace creates a fresh namespace (never deleted: envtest runs no
// namespace controller).
func newNamespace(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "batonlock-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}

// TestManagerPartition cuts the leader off from Redis: its manager must
// stop its runnables (client-go gives up at RenewDeadline) before Redis
// expires the claim and the standby can start, so the two never run at
// once.
func TestManagerPartition(t *testing.T) {
	cfg := startControlPlane(t)
	srv := testenv.StartRedis(t)
	proxy, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	lockVia := func(addr, id string) *batonlock.Lock {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		store, err := redisstore.New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close(); _ = c.Close() })
		return newLock(t, store, "controller-partition", id, slog.New(slog.DiscardHandler))
	}
	tr := newTracker()
	leader := startReplica(t, cfg, tr, "replica-a", lockVia(proxy.Addr(), "replica-a"))
	if id := waitFor(t, tr.started, 20*time.Second, "replica-a to lead"); id != leader.id {
		t.Fatalf("%s leads, want %s", id, leader.id)
	}
	startReplica(t, cfg, tr, "replica-b", lockVia(srv.Addr(), "replica-b"))

	proxy.Cut()
	cut := time.Now()
	if id := waitFor(t, tr.stopped, 20*time.Second, "the cut-off leader to stop"); id != leader.id {
		t.Fatalf("%s stopped, want %s", id, leader.id)
	}
	stoppedAfter := time.Since(cut)
	if id := waitFor(t, tr.started, 20*time.Second, "the standby to take over"); id != "replica-b" {
		t.Fatalf("%s started leading, want replica-b", id)
	}
	t.Logf("after the cut the leader stopped in %v, the standby started in %v", stoppedAfter, time.Since(cut))
	if tr.overlap.Load() {
		t.Error("the cut-off leader still ran when the standby started")
	}
	select {
	case <-leader.done:
		if leader.err == nil {
			t.Error("the cut-off leader's manager returned nil, want an error (leader election lost)")
		}
	case <-time.After(20 * time.Second):
		t.Error("the cut-off leader's manager did not return")
	}
}
