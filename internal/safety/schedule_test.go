//go:build linux

package safety

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
	"github.com/baton-go/baton/redisstore"
	"github.com/baton-go/baton/schedule"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// TestScheduleNetworkStores runs package schedule end to end on the
// network stores (Redis, Redlock, etcd and the three Kubernetes
// backends), as TestExactlyOnceSkewedReplicasFileBackend runs it on
// the file backend: three replicas (each with a store client of its own,
// as three processes would have) whose wall clocks are off by 0, +1.5 s
// and -3 s run an every-second job with a shared ledger. Every slot runs
// exactly once, every replica's attempt at a slot ends as run, already
// done or held (never an error), and the slots' lock records are removed
// once done: at the end the store keeps at most one slot's lock per
// replica (one stopped in the middle of a slot). The ledger is the memory
// ledger (the replicas are one process); TestRunLogLedger in package
// schedule runs PostgreSQL's. No fault is injected: this is the
// scheduler's path on each store (acquire, release, remove, a late
// replica's attempt at a removed slot), not a row of the fault table.
func TestScheduleNetworkStores(t *testing.T) {
	for _, st := range []struct {
		name string
		open func(t *testing.T) scheduleStore
	}{
		{"redis", redisScheduleStore(1)},
		{"redlock", redisScheduleStore(3)},
		{"etcd", etcdScheduleStore},
		{"lease", kubeScheduleStore("lease")},
		{"configmap", kubeScheduleStore("configmap")},
		{"crd", kubeScheduleStore("crd")},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel() // each store is the test's own, and a replica's job sleeps
			runSchedule(t, st.open(t))
		})
	}
}

// scheduleStore opens a replica's backend on one store and lists the lock
// names the store keeps records for.
type scheduleStore struct {
	replica func(t *testing.T) backend.Backend
	names   func(ctx context.Context) ([]string, error)
}

func runSchedule(t *testing.T, st scheduleStore) {
	slots := 8
	if *longFlag {
		slots = 40
	}
	offs := []time.Duration{0, 1500 * time.Millisecond, -3 * time.Second}
	ledger := schedule.NewMemoryLedger()
	quietLog := slog.New(slog.DiscardHandler)
	var mu sync.Mutex
	runs := make(map[time.Time]int)
	// ran and done are the slot locks' tokens of the attempts that ran a
	// slot and of those that found it done. The latter took the lock
	// after the run's holder released it (the ledger says done only once
	// the run is recorded, which its holder does before releasing), most
	// of them after its record was removed: their tokens must be larger.
	ran := make(map[time.Time]uint64)
	done := make(map[time.Time][]uint64)
	outcomes := make(map[schedule.Outcome]int)
	// The job outlasts the replicas' skew, so that the replica that comes
	// second to a slot finds its lock held; the one 3 s behind comes
	// after the run, and finds the slot done.
	job := func(ctx context.Context, run schedule.Run) error {
		mu.Lock()
		runs[run.Slot.UTC()]++
		mu.Unlock()
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
		}
		return nil
	}
	// Every replica is up, and the stores' clients connected, by the
	// first slot.
	first := time.Now().Truncate(time.Second).Add(5 * time.Second)
	last := first.Add(time.Duration(slots-1) * time.Second)
	lastSeen := make(chan struct{})
	var once sync.Once
	var stops []func()
	for i, off := range offs {
		obs := func(e schedule.Event) {
			mu.Lock()
			outcomes[e.Outcome]++
			switch e.Outcome {
			case schedule.Ran:
				ran[e.Slot.UTC()] = e.Token
			case schedule.AlreadyDone:
				done[e.Slot.UTC()] = append(done[e.Slot.UTC()], e.Token)
			case schedule.Held:
			default:
				t.Errorf("replica %d, slot %v: %v (%v)", i, e.Slot, e.Outcome, e.Err)
			}
			mu.Unlock()
			// The replica whose clock is behind is the last to reach a
			// slot.
			if i == 2 && !e.Slot.Before(last) {
				once.Do(func() { close(lastSeen) })
			}
		}
		s, err := schedule.New(st.replica(t), ledger,
			schedule.WithClock(skewedClock{baton.SystemClock(), off}),
			schedule.WithLogger(quietLog.With("replica", i)),
			schedule.WithObserver(obs),
			schedule.WithLockOptions(baton.WithLogger(quietLog), baton.WithIdentity(fmt.Sprintf("replica-%d", i))))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Add("tick", "* * * * * *", job, schedule.CatchUp(2, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		stops = append(stops, runScheduler(t, s))
	}
	select {
	case <-lastSeen:
	case <-time.After(time.Until(last) + 30*time.Second):
		t.Fatal("the replica 3s behind did not reach the last slot 27s after it was due")
	}
	for _, stop := range stops {
		stop()
	}
	mu.Lock()
	defer mu.Unlock()
	for s := first; !s.After(last); s = s.Add(time.Second) {
		if n := runs[s.UTC()]; n != 1 {
			t.Errorf("slot %v ran %d times, want exactly once", s.UTC(), n)
		}
	}
	for s, n := range runs {
		if n != 1 {
			t.Errorf("slot %v ran %d times", s, n)
		}
	}
	for s, tokens := range done {
		for _, tok := range tokens {
			if r, ok := ran[s]; ok && tok <= r {
				t.Errorf("slot %v: the lock was taken with token %d after the run's %d: a token did not increase across the lock's removal", s, tok, r)
			}
		}
	}
	if outcomes[schedule.Held] == 0 || outcomes[schedule.AlreadyDone] == 0 {
		t.Errorf("outcomes %v: want some slots found held and some found done, which the job's length and the clocks' skew are chosen for", outcomes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names, err := st.names(ctx)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, n := range names {
		if m := slotLock.FindString(n); m != "" {
			left[m] = true
		}
	}
	if len(left) > len(offs) {
		t.Errorf("the store keeps the locks of %d slots, want at most one per replica (%d): %v", len(left), len(offs), names)
	}
}

// slotLock matches the job's slot lock names in a store's keys or object
// names (schedule.LockName: the job, a dot, the slot in UTC).
var slotLock = regexp.MustCompile(`tick\.\d{8}t\d{6}z`)

// skewedClock is a replica's wall clock: base's time plus off.
type skewedClock struct {
	baton.Clock
	off time.Duration
}

func (c skewedClock) Now() time.Time                  { return c.Clock.Now().Add(c.off) }
func (c skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// runScheduler runs s until stop, which fails the test if Run returns
// anything but context.Canceled or does not return within 20 s.
func runScheduler(t *testing.T, s *schedule.Scheduler) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != context.Canceled {
					t.Errorf("Run = %v, want context.Canceled", err)
				}
			case <-time.After(20 * time.Second):
				t.Error("Run did not return 20s after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// redisScheduleStore is one redis-server (servers 1) or Redlock over
// that many; names lists the first server's keys (Redlock writes every
// lock on each server).
func redisScheduleStore(servers int) func(t *testing.T) scheduleStore {
	return func(t *testing.T) scheduleStore {
		var addrs []string
		for range servers {
			addrs = append(addrs, testenv.StartRedis(t).Addr())
		}
		client := func(t *testing.T, addr string) *redis.Client {
			c := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
		admin := client(t, addrs[0])
		return scheduleStore{
			replica: func(t *testing.T) backend.Backend {
				var clients []redis.UniversalClient
				for _, a := range addrs {
					clients = append(clients, client(t, a))
				}
				var s interface {
					backend.Backend
					Close() error
				}
				var err error
				if servers == 1 {
					s, err = redisstore.New(clients[0])
				} else {
					s, err = redisstore.NewRedlock(clients)
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			},
			names: func(ctx context.Context) ([]string, error) {
				return admin.Keys(ctx, "*").Result()
			},
		}
	}
}

func etcdScheduleStore(t *testing.T) scheduleStore {
	srv := testenv.StartEtcd(t, testenv.EtcdNoFsync())
	client := func(t *testing.T) *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + srv.Addr()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	admin := client(t)
	return scheduleStore{
		replica: func(t *testing.T) backend.Backend {
			s, err := etcdstore.New(client(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		names: func(ctx context.Context) ([]string, error) {
			resp, err := admin.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithKeysOnly())
			if err != nil {
				return nil, err
			}
			var names []string
			for _, kv := range resp.Kvs {
				names = append(names, string(kv.Key))
			}
			return names, nil
		},
	}
}

// kubeScheduleStore is a Kubernetes backend (kind: lease, configmap or
// crd); names lists the objects of that kind in the test's namespace.
func kubeScheduleStore(kind string) func(t *testing.T) scheduleStore {
	return func(t *testing.T) scheduleStore {
		var env *backendEnv
		if kind == "crd" {
			env = crdEnv(t) // installs the CRD
		} else {
			env = leaseEnv(t, kind)
		}
		cfg, ns := controlPlane(t), env.ns
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		resource := map[string]schema.GroupVersionResource{
			"lease":     coordinationv1.SchemeGroupVersion.WithResource("leases"),
			"configmap": corev1.SchemeGroupVersion.WithResource("configmaps"),
			"crd":       v1alpha1.Resource,
		}[kind]
		return scheduleStore{
			replica: func(t *testing.T) backend.Backend {
				b, err := openKube(cfg, kind, ns)
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
			names: func(ctx context.Context) ([]string, error) {
				l, err := dyn.Resource(resource).Namespace(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return nil, err
				}
				var names []string
				for _, o := range l.Items {
					names = append(names, o.GetName())
				}
				return names, nil
			},
		}
	}
}
