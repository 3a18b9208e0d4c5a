// Package etcdbench compares baton's etcd backend with etcd's own
// concurrency package (Mutex and Election) on the same etcd server in the
// same run. It lives in the bench module so that nothing here enters
// baton's dependency graph.
//
//	cd bench && go test ./etcd -run TestEtcdReport -v -count=1     # a few minutes, prints Markdown
//	BENCH_OUT=/tmp/etcd.md go test ./etcd -run TestEtcdReport -count=1
//
// The etcd server is the binary internal/testenv finds (tools/testbin
// builds it), one member on loopback, with fsync on (as in production).
package etcdbench

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/bench/internal/contend"
	"github.com/baton-go/baton/bench/internal/procstat"
	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Parameters of the report.
const (
	lockTTL = 10 * time.Second

	uncontendedCycles = 1000
	uncontendedRounds = 5

	contenders     = 8
	sharedTotal    = 400 // acquisitions in all, whoever makes them
	perContender   = 50  // acquisitions each contender makes
	contendedLimit = 90 * time.Second

	handovers     = 100
	longHandovers = 60 // waiters that waited 300-400 ms
	longRounds    = 4  // taken in rounds, the libraries' turns rotating
	watchSamples  = 200

	heldLocks    = 10000
	renewTTL     = 15 * time.Second // baton's default TTL
	renewWindow  = 30 * time.Second // two renewal cycles of the engine
	acquireConns = 32
)

var quiet = slog.New(slog.DiscardHandler)

// contender is one process's handle on a lock: its own etcd client and
// library objects.
type contender interface {
	lock(ctx context.Context) (unlock func(context.Context) error, err error)
	close()
}

type library struct {
	name, config string
	open         func(t testing.TB, endpoints []string, key, id string) contender
}

func openClient(t testing.TB, endpoints []string) *clientv3.Client {
	c, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type batonContender struct {
	c *clientv3.Client
	s *etcdstore.Store
	m *baton.Mutex
}

func (b *batonContender) lock(ctx context.Context) (func(context.Context) error, error) {
	l, err := b.m.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (b *batonContender) close() { _ = b.s.Close(); _ = b.c.Close() }

func openBaton(fair bool) func(t testing.TB, endpoints []string, key, id string) contender {
	return func(t testing.TB, endpoints []string, key, id string) contender {
		c := openClient(t, endpoints)
		s, err := etcdstore.New(c, etcdstore.WithFair(fair), etcdstore.WithPrefix("/bench/baton/"), etcdstore.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		m, err := baton.NewMutex(s, key, baton.WithIdentity(id), baton.WithTTL(lockTTL), baton.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		return &batonContender{c, s, m}
	}
}

type mutexContender struct {
	c *clientv3.Client
	s *concurrency.Session
	m *concurrency.Mutex
}

func (m *mutexContender) lock(ctx context.Context) (func(context.Context) error, error) {
	if err := m.m.Lock(ctx); err != nil {
		return nil, err
	}
	return m.m.Unlock, nil
}

func (m *mutexContender) close() { _ = m.s.Close(); _ = m.c.Close() }

type electionContender struct {
	c  *clientv3.Client
	s  *concurrency.Session
	e  *concurrency.Election
	id string
}

func (e *electionContender) lock(ctx context.Context) (func(context.Context) error, error) {
	if err := e.e.Campaign(ctx, e.id); err != nil {
		return nil, err
	}
	return e.e.Resign, nil
}

func (e *electionContender) close() { _ = e.s.Close(); _ = e.c.Close() }

func session(t testing.TB, c *clientv3.Client) *concurrency.Session {
	s, err := concurrency.NewSession(c, concurrency.WithTTL(int(lockTTL/time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var libraries = []library{
	{
		name:   "baton etcdstore",
		config: "baton.Mutex Lock/Unlock on etcdstore.Store in fair mode, the default (a Lease with renewals): waiters queue by create revision, each woken by its predecessor; a release hands the lock to the next waiter, which collects it from a watch event",
		open:   openBaton(true),
	},
	{
		name:   "baton etcdstore, plain",
		config: "the same with etcdstore.WithFair(false): no queue; waiters woken by an etcd watch on the claim race for it when it is released",
		open:   openBaton(false),
	},
	{
		name:   "etcd concurrency.Mutex",
		config: "concurrency.NewMutex(session, prefix) Lock/Unlock, one Session (TTL 10s) per contender",
		open: func(t testing.TB, endpoints []string, key, id string) contender {
			c := openClient(t, endpoints)
			s := session(t, c)
			return &mutexContender{c, s, concurrency.NewMutex(s, "/bench/mutex/"+key)}
		},
	},
	{
		name:   "etcd concurrency.Election",
		config: "concurrency.NewElection(session, prefix) Campaign/Resign, one Session (TTL 10s) per contender",
		open: func(t testing.TB, endpoints []string, key, id string) contender {
			c := openClient(t, endpoints)
			s := session(t, c)
			return &electionContender{c, s, concurrency.NewElection(s, "/bench/election/"+key), id}
		},
	},
}

// fifoFloor is the handover table's floor: a FIFO that hands the lock over
// in its release, as fair mode does, with no library (fifo_test.go).
var fifoFloor = library{
	name:   "raw FIFO handoff (no library)",
	config: "a place written when the lock is found held, the claim watched; the queue watched by a holder that took the free lock; the release takes the oldest place from that watch or else reads it (serializable), and puts the claim with its value on its lease in one transaction: fair mode's handover without baton's engine, Store, guard, /last record, release marker or any failure handling (handover table only)",
	open:   openFIFO,
}

// fifoKeysFloor is fifoFloor with the keys and conditions of baton's fair
// transactions: etcd's side of baton's handover, without its logic.
var fifoKeysFloor = library{
	name:   "raw FIFO handoff with baton's keys (no logic)",
	config: "the raw FIFO handoff, its transactions writing what baton's fair Store's do, nested and conditioned as they are: the claim's guard on the same lease, the /last record, the release marker, the waiter's place touched (handover table only)",
	open:   openFIFOKeys,
}

// Floors for the uncontended table: what the cycle costs without an engine.
var floors = []library{
	{
		name:   "baton Store.TryAcquire+Release (backend only)",
		config: "the two transactions of a cycle, without the engine (no Lease, no watch; fair mode, the default)",
		open: func(t testing.TB, endpoints []string, key, id string) contender {
			c := openClient(t, endpoints)
			s, err := etcdstore.New(c, etcdstore.WithPrefix("/bench/store/"), etcdstore.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			return &storeContender{c, s, key, id}
		},
	},
	{
		name:   "raw put-if-absent txn + delete",
		config: "Txn(If CreateRevision == 0, Then Put) and Delete: two consensus writes, the floor of any etcd lock",
		open: func(t testing.TB, endpoints []string, key, id string) contender {
			return &rawContender{c: openClient(t, endpoints), key: "/bench/raw/" + key}
		},
	},
	{
		name:   "raw put-if-absent txn on a lease + delete",
		config: "the same, the Put attached to a lease granted when the contender opens: the floor of an etcd lock whose claim ends with its holder",
		open: func(t testing.TB, endpoints []string, key, id string) contender {
			c := openClient(t, endpoints)
			l, err := c.Grant(t.Context(), int64(lockTTL/time.Second)*6)
			if err != nil {
				t.Fatal(err)
			}
			return &rawContender{c: c, key: "/bench/rawlease/" + key, lease: l.ID}
		},
	},
	{
		name:   "baton's etcd transactions, no logic",
		config: "the two transactions baton's fair Store sends in an uncontended cycle, with their conditions and keys (claim, guard, /last record, release marker; the claim and guard on a lease), built once and sent without the Store's or the engine's logic: what etcd's side of baton's cycle costs",
		open: func(t testing.TB, endpoints []string, key, id string) contender {
			c := openClient(t, endpoints)
			l, err := c.Grant(t.Context(), int64(lockTTL/time.Second)*6)
			if err != nil {
				t.Fatal(err)
			}
			return newTxnContender(c, "/bench/txns/"+key, l.ID)
		},
	},
}

// txnContender sends the transactions of baton's fair, uncontended cycle
// (etcdstore's fairTxn without a place, and deleteClaim without a
// successor or a queue key) with nothing around them: the commands floor
// of baton's cycle, as the Redis report has one.
type txnContender struct {
	c       *clientv3.Client
	lease   clientv3.LeaseID
	claim   string
	guard   string
	last    string
	queue   string
	release string
	val     string
}

func newTxnContender(c *clientv3.Client, key string, lease clientv3.LeaseID) *txnContender {
	return &txnContender{c: c, lease: lease, claim: key, guard: key + "/.guard", last: key + "/last",
		queue: key + "/queue/", release: key + "/released",
		// A claim value of etcdstore's format and size.
		val: "baton/v1 holder=c1 nonce=0123456789abcdef ttl=10s at=2026-12-02T23:59:59.123456789Z"}
}

func (x *txnContender) lock(ctx context.Context) (func(context.Context) error, error) {
	resp, err := x.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(x.claim), "=", 0), clientv3.Compare(clientv3.CreateRevision(x.guard), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(x.queue), "=", 0).WithPrefix()).
		Then(clientv3.OpPut(x.guard, x.val, clientv3.WithLease(x.lease)), clientv3.OpPut(x.claim, x.val, clientv3.WithLease(x.lease)),
			clientv3.OpPut(x.last, x.val), clientv3.OpGet(x.claim)).
		Else(clientv3.OpGet(x.claim), clientv3.OpGet(x.queue, clientv3.WithLastCreate()...), clientv3.OpGet(x.guard)).
		Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("txns: %s is held", x.claim)
	}
	token := resp.Header.Revision
	return func(ctx context.Context) error {
		marker := clientv3.OpPut(x.release, strconv.FormatInt(token, 10))
		_, err := x.c.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(x.claim), "=", token)).
			Then(clientv3.OpDelete(x.claim), clientv3.OpDelete(x.guard), marker).
			Else(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(x.guard), "=", token)}, []clientv3.Op{clientv3.OpDelete(x.guard)}, nil),
				clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(x.claim), "=", 0)}, []clientv3.Op{marker}, nil)).
			Commit()
		return err
	}, nil
}

func (x *txnContender) close() {
	_, _ = x.c.Revoke(context.Background(), x.lease)
	_ = x.c.Close()
}

type storeContender struct {
	c       *clientv3.Client
	s       *etcdstore.Store
	key, id string
}

func (s *storeContender) lock(ctx context.Context) (func(context.Context) error, error) {
	g, err := s.s.TryAcquire(ctx, s.key, backend.Request{Holder: s.id, Nonce: baton.NewNonce(), TTL: lockTTL})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return s.s.Release(ctx, g) }, nil
}

func (s *storeContender) close() { _ = s.s.Close(); _ = s.c.Close() }

type rawContender struct {
	c     *clientv3.Client
	key   string
	lease clientv3.LeaseID // 0: none
}

func (r *rawContender) lock(ctx context.Context) (func(context.Context) error, error) {
	var opts []clientv3.OpOption
	if r.lease != 0 {
		opts = append(opts, clientv3.WithLease(r.lease))
	}
	resp, err := r.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(r.key), "=", 0)).
		Then(clientv3.OpPut(r.key, "x", opts...)).Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("raw: %s is held", r.key)
	}
	return func(ctx context.Context) error { _, err := r.c.Delete(ctx, r.key); return err }, nil
}

func (r *rawContender) close() {
	if r.lease != 0 {
		_, _ = r.c.Revoke(context.Background(), r.lease)
	}
	_ = r.c.Close()
}

var runID atomic.Int64

func uniqueKey(what string) string {
	return fmt.Sprintf("%s-%d-%d", what, os.Getpid(), runID.Add(1))
}

// cpuPer formats etcd's CPU time between c0 and c1 per operation.
func metStr(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// walFsyncs reads etcd's count of WAL fsyncs from its metrics (one per
// batch of consensus writes) and the time they took in all.
func walFsyncs(t *testing.T, eps []string) (n float64, total time.Duration) {
	t.Helper()
	resp, err := http.Get(eps[0] + "/metrics")
	if err != nil {
		t.Fatalf("reading etcd's metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	const count, sum = "etcd_disk_wal_fsync_duration_seconds_count ", "etcd_disk_wal_fsync_duration_seconds_sum "
	found := 0
	for sc.Scan() {
		for _, name := range []string{count, sum} {
			v, ok := strings.CutPrefix(sc.Text(), name)
			if !ok {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("etcd metric %s%s: %v", name, v, err)
			}
			if name == count {
				n = f
			} else {
				total = time.Duration(f * float64(time.Second))
			}
			found++
		}
	}
	if found != 2 {
		t.Fatalf("etcd's metrics lack %sor %s(%v)", count, sum, sc.Err())
	}
	return n, total
}

func cpuPer(c0, c1 time.Duration, ops int) string {
	if c0 < 0 || c1 < 0 || ops == 0 {
		return "?"
	}
	return round((c1 - c0) / time.Duration(ops)).String()
}

// uncontended returns acquire+release cycles per second of one contender.
func uncontended(t *testing.T, lib library, endpoints []string) float64 {
	c := lib.open(t, endpoints, uniqueKey("u"), "solo")
	defer c.close()
	ctx := t.Context()
	run := func(n int) time.Duration {
		start := time.Now()
		for range n {
			unlock, err := c.lock(ctx)
			if err != nil {
				t.Fatalf("%s: lock: %v", lib.name, err)
			}
			if err := unlock(ctx); err != nil {
				t.Fatalf("%s: unlock: %v", lib.name, err)
			}
		}
		return time.Since(start)
	}
	run(50) // warm up the connection (and the lease)
	return float64(uncontendedCycles) / run(uncontendedCycles).Seconds()
}

// putRate returns plain Puts per second of one client: one consensus write.
func putRate(t *testing.T, endpoints []string) float64 {
	c := openClient(t, endpoints)
	defer c.Close()
	key := "/bench/put/" + uniqueKey("p")
	for range 50 {
		if _, err := c.Put(t.Context(), key, "x"); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for range uncontendedCycles {
		if _, err := c.Put(t.Context(), key, "x"); err != nil {
			t.Fatal(err)
		}
	}
	return float64(uncontendedCycles) / time.Since(start).Seconds()
}

// watchFloor returns, sorted, the time from a Put's call to a watcher on
// another client receiving its event: one consensus write and a watch
// event, the least any handover to a waiting watcher needs (a fair
// release hands the lock over in its own write; the waiter collects it
// from the event).
func watchFloor(t *testing.T, endpoints []string) []time.Duration {
	w, p := openClient(t, endpoints), openClient(t, endpoints)
	defer w.Close()
	defer p.Close()
	key := "/bench/watch/" + uniqueKey("w")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	events := w.Watch(ctx, key, clientv3.WithCreatedNotify())
	if _, ok := <-events; !ok {
		t.Fatal("watch closed before it was created")
	}
	received := make(chan time.Time, watchSamples+10) // when each event arrived, not when it was read
	go func() {
		for wr := range events {
			if wr.Err() == nil {
				received <- time.Now()
			}
		}
		close(received)
	}()
	var out []time.Duration
	for i := range watchSamples + 10 {
		start := time.Now()
		if _, err := p.Put(ctx, key, "x"); err != nil {
			t.Fatal(err)
		}
		at, ok := <-received
		if !ok {
			t.Fatal("watch closed")
		}
		if i >= 10 { // warm-up
			out = append(out, at.Sub(start))
		}
	}
	slices.Sort(out)
	return out
}

// loadAverage is the machine's load average, from /proc/loadavg.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) >= 3 {
		return f[0] + "/" + f[1] + "/" + f[2]
	}
	return "unknown"
}

type contendedResult = contend.Result

// contended runs contenders in tight lock/unlock loops (see contend.Run).
func contended(t *testing.T, lib library, endpoints []string, total, each int) contendedResult {
	key := uniqueKey("c")
	locks := make([]contend.LockFunc, contenders)
	for i := range locks {
		c := lib.open(t, endpoints, key, fmt.Sprintf("contender-%d", i))
		defer c.close()
		locks[i] = c.lock
	}
	return contend.Run(t, lib.name, contendedLimit, locks, total, each)
}

// rotation reports whether, after the first round, every window of
// contenders consecutive acquisitions has each contender exactly once: the
// lock passed round-robin, in arrival order.
func rotation(order []int) string {
	bad := 0
	for i := contenders; i+contenders <= len(order); i++ {
		seen := map[int]bool{}
		for _, c := range order[i : i+contenders] {
			seen[c] = true
		}
		if len(seen) != contenders {
			bad++
		}
	}
	windows := max(len(order)-2*contenders+1, 1)
	if bad == 0 {
		return "round-robin"
	}
	return fmt.Sprintf("%d%% of windows not round-robin", 100*bad/windows)
}

// handover measures, for a waiter blocked in lock, the time from the start
// of the holder's unlock to the waiter holding the lock. The holder
// unlocks 10-60ms after the waiter started.
func handover(t *testing.T, lib library, endpoints []string, rounds int, wait, spread time.Duration) []time.Duration {
	key := uniqueKey("h")
	a := lib.open(t, endpoints, key, "holder")
	defer a.close()
	b := lib.open(t, endpoints, key, "waiter")
	defer b.close()
	var out []time.Duration
	for range rounds {
		var t0 time.Time
		at := contend.Handover(t, a.lock, b.lock, wait+mrand.N(spread), func(unlock func() error) error {
			t0 = time.Now()
			return unlock()
		})
		out = append(out, at.Sub(t0))
	}
	slices.Sort(out)
	return out
}

// longWaits runs the handovers to a waiter that has waited long for each
// of libs, in longRounds rounds (see contend.Rotated).
func longWaits(t *testing.T, libs []library, endpoints []string) map[string][]time.Duration {
	return contend.Rotated(longRounds, libs, func(l library) string { return l.name },
		func(l library) []time.Duration {
			return handover(t, l, endpoints, longHandovers/longRounds, 300*time.Millisecond, 100*time.Millisecond)
		})
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func TestEtcdReport(t *testing.T) {
	if testing.Short() {
		t.Skip("the report takes a few minutes")
	}
	srv := testenv.StartEtcd(t)
	eps := srv.Endpoints()
	cpu := func() time.Duration { return procstat.CPU(srv.Dir) }
	var b strings.Builder
	fmt.Fprintf(&b, "etcd %s, one member on 127.0.0.1 with fsync, %s/%s, %d CPUs, %s; lock TTL %v; load average %s at the start\n\n",
		etcdVersion(t, eps), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), lockTTL, loadAverage())

	// Uncontended: rounds interleave the libraries, each taking each place
	// in turn (a fixed order showed the last library faster in every run);
	// the median counts.
	all := append(slices.Clone(libraries), floors...)
	rates := map[string][]float64{}
	cpus := map[string]time.Duration{}
	var puts []float64
	var putSyncs float64
	var putSyncTime time.Duration
	for r := range uncontendedRounds {
		n, d := walFsyncs(t, eps)
		puts = append(puts, putRate(t, eps))
		n1, d1 := walFsyncs(t, eps)
		putSyncs, putSyncTime = putSyncs+n1-n, putSyncTime+d1-d
		for i := range all {
			lib := all[(i+r*len(all)/uncontendedRounds)%len(all)]
			c0 := cpu()
			rates[lib.name] = append(rates[lib.name], uncontended(t, lib, eps))
			if c1 := cpu(); c0 >= 0 && c1 >= 0 {
				cpus[lib.name] += c1 - c0
			}
		}
	}
	mutex := median(rates["etcd concurrency.Mutex"])
	meanSync := time.Duration(0)
	if putSyncs > 0 {
		meanSync = time.Duration(float64(putSyncTime) / putSyncs)
	}
	floor := watchFloor(t, eps)
	floorP50 := floor[len(floor)/2]
	fmt.Fprintf(&b, "The machine's state in this run (the floors every ratio below is judged against): plain Puts %.0f/s (one client, median of %d rounds), mean WAL fsync %v during them; a Put to a watcher's event (one write and a watch event) p50 %v, p99 %v (%d samples).\n\n",
		median(puts), uncontendedRounds, round(meanSync), round(floorP50), round(floor[len(floor)*99/100]), len(floor))
	fmt.Fprintf(&b, "Uncontended acquire+release cycles/s (one contender, median of %d rounds of %d cycles); plain Puts: %.0f/s:\n\n",
		uncontendedRounds, uncontendedCycles, median(puts))
	fmt.Fprintf(&b, "| library | cycles/s | × concurrency.Mutex | cycles per plain Put | etcd CPU per cycle |\n|---|---:|---:|---:|---:|\n")
	for _, lib := range all {
		m := median(rates[lib.name])
		fmt.Fprintf(&b, "| %s | %.0f | %.2f | %.2f | %s |\n", lib.name, m, m/mutex, m/median(puts),
			cpuPer(0, cpus[lib.name], uncontendedRounds*(uncontendedCycles+50)))
	}

	fmt.Fprintf(&b, "\n%d contenders (each its own client) in tight lock/unlock loops until %d acquisitions in all, "+
		"after a warm-up in which the contenders wait for the lock; "+
		"lock calls still waiting at the end count with their wait so far:\n\n", contenders, sharedTotal)
	fmt.Fprintf(&b, "| library | acquisitions/s | wait p50 | wait p99 | wait max | etcd CPU per acquisition | WAL fsyncs per acquisition | mean WAL fsync | acquisitions per contender | order |\n|---|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	shared := map[string]contendedResult{}
	for _, lib := range libraries {
		c0 := cpu()
		n0, d0 := walFsyncs(t, eps)
		r := contended(t, lib, eps, sharedTotal, 0)
		shared[lib.name] = r
		n1, d1 := walFsyncs(t, eps)
		var mean time.Duration
		if n1 > n0 {
			mean = time.Duration(float64(d1-d0) / (n1 - n0))
		}
		fmt.Fprintf(&b, "| %s | %.0f | %v | %v | %v | %s | %.2f | %v | %v | %s |\n", lib.name, r.PerSecond, round(r.P50), round(r.P99), round(r.Max),
			cpuPer(c0, cpu(), len(r.Order)+contenders), (n1-n0)/float64(len(r.Order)), round(mean), r.Counts, rotation(r.Order))
	}
	fmt.Fprintf(&b, "\nThe same, but every contender makes %d acquisitions; counts are taken when the first is done:\n\n", perContender)
	fmt.Fprintf(&b, "| library | acquisitions/s | wait p50 | wait p99 | wait max | etcd CPU per acquisition | acquisitions per contender when the first was done |\n|---|---:|---:|---:|---:|---:|---|\n")
	for _, lib := range libraries {
		c0 := cpu()
		r := contended(t, lib, eps, 0, perContender)
		fmt.Fprintf(&b, "| %s | %.0f | %v | %v | %v | %s | %v |\n", lib.name, r.PerSecond, round(r.P50), round(r.P99), round(r.Max),
			cpuPer(c0, cpu(), len(r.Order)+contenders), r.Counts)
	}

	fmt.Fprintf(&b, "\nHandover: the holder's unlock call (Resign for Election) to the waiter holding the lock (%d handovers, unlock 10-60ms after the waiter started; then %d with unlock 300-400ms after it started, a waiter that has waited long, taken in %d rounds with the libraries' turns rotating):\n\n", handovers, longHandovers, longRounds)
	fmt.Fprintf(&b, "| library | p50 | p99 | max | waited long: p50 | p99 | max | × the Put-to-watcher floor (p50, waited long) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	hlibs := append(slices.Clone(libraries), fifoFloor, fifoKeysFloor)
	longs := longWaits(t, hlibs, eps)
	long := map[string]time.Duration{}
	for _, lib := range hlibs {
		h := handover(t, lib, eps, handovers, 10*time.Millisecond, 50*time.Millisecond)
		hl := longs[lib.name]
		long[lib.name] = hl[len(hl)/2]
		fmt.Fprintf(&b, "| %s | %v | %v | %v | %v | %v | %v | %.1f |\n", lib.name, round(h[len(h)/2]), round(h[len(h)*99/100]), round(h[len(h)-1]),
			round(hl[len(hl)/2]), round(hl[len(hl)*99/100]), round(hl[len(hl)-1]), float64(hl[len(hl)/2])/float64(floorP50))
	}

	fmt.Fprintf(&b, "\nHolding %d locks in one process for %v (TTL %v; baton's engine renews each lock every TTL/3): requests to etcd per second\n\n",
		heldLocks, renewWindow, renewTTL)
	fmt.Fprintf(&b, "| library | engine renewals/s | requests/s to etcd | of which | bytes/s from etcd | etcd CPU per second |\n|---|---:|---:|---|---:|---:|\n")
	for _, row := range holdMany(t, eps, cpu) {
		fmt.Fprintf(&b, "| %s | %s | %.1f | %s | %.0f | %s |\n", row.name, row.renewals, row.perSecond, row.detail, row.bytesPerSecond, row.cpu)
	}

	fmt.Fprintf(&b, "\nConfigurations:\n\n")
	for _, lib := range append(all, fifoFloor, fifoKeysFloor) {
		fmt.Fprintf(&b, "- %s: %s\n", lib.name, lib.config)
	}

	// Issue 19's targets, judged on this run against its own floors.
	fair, plain, mu := shared["baton etcdstore"], shared["baton etcdstore, plain"], shared["etcd concurrency.Mutex"]
	rawU, leasedU := median(rates["raw put-if-absent txn + delete"]), median(rates["raw put-if-absent txn on a lease + delete"])
	fairU, plainU := median(rates["baton etcdstore"]), median(rates["baton etcdstore, plain"])
	fmt.Fprintf(&b, "\nTargets (issue 19), in this run (baton's default is fair mode):\n\n")
	txnsU := median(rates["baton's etcd transactions, no logic"])
	fmt.Fprintf(&b, "- uncontended at least 0.95x the raw floor of two consensus writes: **%s** (baton %.2fx, plain mode %.2fx; the same floor with its Put on a lease, as a claim that ends with its holder needs: %.2fx the raw floor, and baton %.2fx of it; the transactions baton sends, without its logic: %.2fx the raw floor, and baton %.2fx of them)\n",
		metStr(min(fairU, plainU) >= 0.95*rawU), fairU/rawU, plainU/rawU, leasedU/rawU, fairU/leasedU, txnsU/rawU, fairU/txnsU)
	fmt.Fprintf(&b, "- contended p99 wait (default mode, %d in all) no worse than concurrency.Mutex's: **%s** (%v against %v; plain mode %v)\n",
		sharedTotal, metStr(fair.P99 <= mu.P99), round(fair.P99), round(mu.P99), round(plain.P99))
	fmt.Fprintf(&b, "- fair contended p99 wait within 8x the Put-to-watcher floor: **%s** (%v, %.1fx the floor's p50 %v)\n",
		metStr(fair.P99 <= 8*floorP50), round(fair.P99), float64(fair.P99)/float64(floorP50), round(floorP50))
	fl, pl, ml, ffl, fkl := long["baton etcdstore"], long["baton etcdstore, plain"], long["etcd concurrency.Mutex"], long[fifoFloor.name], long[fifoKeysFloor.name]
	fmt.Fprintf(&b, "- a waiter that has waited long handed the lock no slower than by concurrency.Mutex (p50): default (fair) mode **%s** (%v against %v; the raw FIFO handoff floor %v, %.2fx Mutex's, and baton %.2fx the floor; that floor with baton's keys %v, %.2fx Mutex's, and baton %.2fx of it); plain mode %v (no queue, so its waiter writes after the release)\n",
		metStr(fl <= ml), round(fl), round(ml), round(ffl), float64(ffl)/float64(ml), float64(fl)/float64(ffl),
		round(fkl), float64(fkl)/float64(ml), float64(fl)/float64(fkl), round(pl))
	fmt.Fprintf(&b, "- contended (default mode, %d in all) at least 10x concurrency.Mutex's throughput: **%s** (%.1fx)\n",
		sharedTotal, metStr(fair.PerSecond >= 10*mu.PerSecond), fair.PerSecond/mu.PerSecond)
	fmt.Fprintf(&b, "- fair order: %s\n", rotation(fair.Order))
	fmt.Print(b.String())
	if out := os.Getenv("BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func etcdVersion(t *testing.T, eps []string) string {
	c := openClient(t, eps)
	defer c.Close()
	st, err := c.Status(t.Context(), eps[0])
	if err != nil {
		t.Fatal(err)
	}
	return st.Version
}

// TestEtcdContended runs only the two contended tables of the report, for
// quick comparisons while working on the contended path (about a minute):
//
//	cd bench && go test ./etcd -run TestEtcdContended -v -count=1
func TestEtcdContended(t *testing.T) {
	if testing.Short() {
		t.Skip("a contended run takes a minute")
	}
	srv := testenv.StartEtcd(t)
	eps := srv.Endpoints()
	cpu := func() time.Duration { return procstat.CPU(srv.Dir) }
	var b strings.Builder
	fmt.Fprintf(&b, "| library | run | acquisitions/s | wait p50 | wait p99 | wait max | etcd CPU per acquisition | acquisitions per contender | order |\n|---|---|---:|---:|---:|---:|---:|---|---|\n")
	for _, lib := range libraries {
		for _, run := range []struct {
			name        string
			total, each int
		}{{"400 in all", sharedTotal, 0}, {"50 each", 0, perContender}} {
			c0 := cpu()
			r := contended(t, lib, eps, run.total, run.each)
			fmt.Fprintf(&b, "| %s | %s | %.0f | %v | %v | %v | %s | %v | %s |\n", lib.name, run.name, r.PerSecond, round(r.P50), round(r.P99), round(r.Max),
				cpuPer(c0, cpu(), len(r.Order)+contenders), r.Counts, rotation(r.Order))
		}
	}
	fmt.Print(b.String())
}
