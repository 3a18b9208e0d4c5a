//go:build linux

package safety

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
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
// done or held (never an error), each replica attempts its slots in
// increasing order, and the slots' lock records are removed
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
	ty := newScheduleTally(st, len(offs))
	// Every replica is up, and the stores' clients connected, by the
	// first slot.
	first := time.Now().Truncate(time.Second).Add(5 * time.Second)
	last := first.Add(time.Duration(slots-1) * time.Second)
	// The replica whose clock is behind is the last to reach a slot.
	lastSeen := ty.reached(len(offs)-1, last)
	var stops []func()
	for i, off := range offs {
		// The job outlasts the replicas' skew, so that the replica that
		// comes second to a slot finds its lock held; the one 3 s behind
		// comes after the run, and finds the slot done.
		stops = append(stops, ty.start(t, i, skewedClock{baton.SystemClock(), off}, ty.job(i, 2*time.Second, nil)))
	}
	awaitSlot(t, lastSeen, last, 3*time.Second, "the replica 3 s behind")
	for _, stop := range stops {
		stop()
	}
	ty.check(t, first, last)
	if o := ty.outcomeCounts(); o[schedule.Held] == 0 || o[schedule.AlreadyDone] == 0 {
		t.Errorf("outcomes %v: want some slots found held and some found done, which the job's length and the clocks' skew are chosen for", o)
	}
	checkSlotLocksLeft(t, st, len(offs))
}

// scheduleTally runs a schedule row's replicas on one store and records
// what they did: the job's runs per slot, each replica's attempts in the
// order it made them, and the slot locks' tokens of the attempts that ran
// a slot and of those that found it done. The latter took the lock after
// the run's holder released it (the ledger says done only once the run is
// recorded, which its holder does before releasing), most of them after
// its record was removed: their tokens must be larger. The ledger is the
// memory ledger (the replicas are one process); TestRunLogLedger in
// package schedule runs PostgreSQL's.
type scheduleTally struct {
	st     scheduleStore
	ledger *schedule.MemoryLedger

	mu       sync.Mutex
	runs     map[time.Time]int
	began    map[time.Time]time.Time // when each slot's run began
	ran      map[time.Time]uint64
	done     map[time.Time][]uint64
	outcomes map[schedule.Outcome]int
	attempts [][]slotAttempt // per replica, in order
	waits    []slotWait
}

// slotAttempt is one replica's attempt at a slot, as its observer saw it
// (at: when, on this process's clock).
type slotAttempt struct {
	slot    time.Time
	outcome schedule.Outcome
	at      time.Time
}

// slotWait is closed once replica has attempted a slot at or after slot.
type slotWait struct {
	replica int
	slot    time.Time
	ch      chan struct{}
}

func newScheduleTally(st scheduleStore, replicas int) *scheduleTally {
	return &scheduleTally{st: st, ledger: schedule.NewMemoryLedger(),
		runs: make(map[time.Time]int), began: make(map[time.Time]time.Time),
		ran: make(map[time.Time]uint64), done: make(map[time.Time][]uint64),
		outcomes: make(map[schedule.Outcome]int), attempts: make([][]slotAttempt, replicas)}
}

// job returns replica i's job: it counts a run of the slot and lasts
// length, or until its context ends. during, if not nil, is called once
// while it runs, with the moment the job ends.
func (ty *scheduleTally) job(i int, length time.Duration, during func(ctx context.Context, end time.Time)) schedule.Func {
	return func(ctx context.Context, run schedule.Run) error {
		now := time.Now()
		end := now.Add(length)
		ty.mu.Lock()
		ty.runs[run.Slot.UTC()]++
		ty.began[run.Slot.UTC()] = now
		ty.mu.Unlock()
		if during != nil {
			during(ctx, end)
		}
		_ = sleepCtx(ctx, time.Until(end))
		return nil
	}
}

// start runs replica i, with its own store client and the wall clock clk,
// every second with CatchUp(2, 10 s), until the stop it returns.
func (ty *scheduleTally) start(t *testing.T, i int, clk baton.Clock, job schedule.Func) (stop func()) {
	t.Helper()
	quietLog := slog.New(slog.DiscardHandler)
	s, err := schedule.New(ty.st.replica(t), ty.ledger,
		schedule.WithClock(clk),
		schedule.WithLogger(quietLog.With("replica", i)),
		schedule.WithObserver(func(e schedule.Event) { ty.observe(t, i, e) }),
		schedule.WithLockOptions(baton.WithLogger(quietLog), baton.WithIdentity(fmt.Sprintf("replica-%d", i))))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add("tick", "* * * * * *", job, schedule.CatchUp(scheduleCatchUp, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	return runScheduler(t, s)
}

// scheduleCatchUp is the rows' CatchUp: a replica that becomes free, or
// notices a step of its wall clock, attempts the newest slot that has
// passed and at most this many older ones.
const scheduleCatchUp = 2

// observe records replica i's event e; an attempt that ends in anything
// but run, already done or held fails the test.
func (ty *scheduleTally) observe(t *testing.T, i int, e schedule.Event) {
	at := time.Now()
	ty.mu.Lock()
	defer ty.mu.Unlock()
	ty.outcomes[e.Outcome]++
	switch e.Outcome {
	case schedule.Ran:
		ty.ran[e.Slot.UTC()] = e.Token
	case schedule.AlreadyDone:
		ty.done[e.Slot.UTC()] = append(ty.done[e.Slot.UTC()], e.Token)
	case schedule.Held:
	default:
		t.Errorf("replica %d, slot %v: %v (%v)", i, e.Slot, e.Outcome, e.Err)
	}
	ty.attempts[i] = append(ty.attempts[i], slotAttempt{slot: e.Slot.UTC(), outcome: e.Outcome, at: at})
	waits := ty.waits[:0]
	for _, w := range ty.waits {
		if w.replica == i && !e.Slot.Before(w.slot) {
			close(w.ch)
		} else {
			waits = append(waits, w)
		}
	}
	ty.waits = waits
}

// reached returns a channel closed once replica has attempted a slot at or
// after slot.
func (ty *scheduleTally) reached(replica int, slot time.Time) <-chan struct{} {
	ch := make(chan struct{})
	ty.mu.Lock()
	defer ty.mu.Unlock()
	for _, a := range ty.attempts[replica] {
		if !a.slot.Before(slot) {
			close(ch)
			return ch
		}
	}
	ty.waits = append(ty.waits, slotWait{replica: replica, slot: slot, ch: ch})
	return ch
}

func (ty *scheduleTally) outcomeCounts() map[schedule.Outcome]int {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	return maps.Clone(ty.outcomes)
}

// replicaAttempts returns replica i's attempts and when the runs of slots
// began (any replica's).
func (ty *scheduleTally) replicaAttempts(i int) ([]slotAttempt, map[time.Time]time.Time) {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	return slices.Clone(ty.attempts[i]), maps.Clone(ty.began)
}

// check asserts, once the replicas stopped, that every slot in [first,
// last] ran exactly once and is recorded in the ledger, that no slot ran
// twice, that the tokens of the attempts that found a slot done are
// larger than its run's, and that each replica attempted its slots in
// increasing order (none twice, none it had passed).
func (ty *scheduleTally) check(t *testing.T, first, last time.Time) {
	t.Helper()
	ty.mu.Lock()
	defer ty.mu.Unlock()
	for s := first; !s.After(last); s = s.Add(time.Second) {
		if n := ty.runs[s.UTC()]; n != 1 {
			t.Errorf("slot %v ran %d times, want exactly once", s.UTC(), n)
		}
		if done, err := ty.ledger.Done(context.Background(), "tick", s); err != nil || !done {
			t.Errorf("slot %v: the ledger says done %v (%v), want done", s.UTC(), done, err)
		}
	}
	for s, n := range ty.runs {
		if n != 1 {
			t.Errorf("slot %v ran %d times", s, n)
		}
	}
	for s, tokens := range ty.done {
		for _, tok := range tokens {
			if r, ok := ty.ran[s]; ok && tok <= r {
				t.Errorf("slot %v: the lock was taken with token %d after the run's %d: a token did not increase across the lock's removal", s, tok, r)
			}
		}
	}
	for i, as := range ty.attempts {
		for k := 1; k < len(as); k++ {
			if !as[k].slot.After(as[k-1].slot) {
				t.Errorf("replica %d attempted slot %v (%v) after slot %v (%v): a replica attempts each slot once, in increasing order",
					i, as[k].slot, as[k].outcome, as[k-1].slot, as[k-1].outcome)
			}
		}
	}
}

// checkSlotLocksLeft asserts that the store keeps the locks of at most
// max slots: the replicas remove a slot's lock record once done, and a
// replica stopped in the middle of a slot may leave that one.
func checkSlotLocksLeft(t *testing.T, st scheduleStore, most int) {
	t.Helper()
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
	if len(left) > most {
		t.Errorf("the store keeps the locks of %d slots, want at most one per replica (%d): %v", len(left), most, names)
	}
}

// awaitSlot waits for reached, closed once a replica whose clock is
// behind by behind attempted slot, or fails the test if that has not
// happened 30 s after the slot was due on that clock.
func awaitSlot(t *testing.T, reached <-chan struct{}, slot time.Time, behind time.Duration, who string) {
	t.Helper()
	select {
	case <-reached:
	case <-time.After(time.Until(slot.Add(behind)) + 30*time.Second):
		t.Fatalf("%s did not reach slot %v 30 s after it was due", who, slot.UTC())
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
