package bench

// Kubernetes: baton's Lease backend (kube.LeaseStore under baton.Elector)
// beside client-go's tools/leaderelection (LeaseLock, ReleaseOnCancel) on one
// envtest control plane (kube-apiserver + etcd from tools/testbin) in one run.
//
//	cd bench && go test -run TestKubeReport -v -count=1 .        # ~5 min, prints Markdown
//	BENCH_OUT=/tmp/kube.md go test -run TestKubeReport -count=1 .
//
// Measured:
//   - release-to-new-leader handover: the leader's Run context is cancelled
//     (both libraries then release the Lease) and the clock runs from that
//     cancel to the moment the standby's work starts (baton: the work
//     function; client-go: OnStartedLeading). Two candidates, each with its
//     own client, as two processes would have.
//   - API requests per minute made by the leader and by each idle standby,
//     counted at the HTTP transport (rest.Config.WrapTransport), three
//     candidates, in the steady state.
//   - the floor: one conditional Lease update (PUT) round trip.

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/kube"
	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

const kubeNamespace = "default"

// kubeTiming is one LeaseDuration/RenewDeadline/RetryPeriod setting, given
// to both libraries alike (baton: WithTTL, WithRenewDeadline,
// WithRetryPeriod).
type kubeTiming struct {
	lease, renew, retry time.Duration
	handovers           int // rounds per library
}

func (k kubeTiming) String() string {
	return fmt.Sprintf("%v/%v/%v", k.lease, k.renew, k.retry)
}

var kubeTimings = []kubeTiming{
	{15 * time.Second, 10 * time.Second, 2 * time.Second, 20},
	{4 * time.Second, 3 * time.Second, 1 * time.Second, 25},
}

const (
	kubeCountCandidates = 3
	kubeFloorUpdates    = 200
)

var kubeCountWindow = 60 * time.Second

// ---- request counting at the transport ----

type kubeCounter struct {
	mu  sync.Mutex
	n   map[string]int
	log []kubeReq // every request, for the handover breakdown
}

type kubeReq struct {
	verb       string
	start, end time.Time
}

// since returns the requests started at or after t0.
func (c *kubeCounter) since(t0 time.Time) []kubeReq {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := len(c.log)
	for i > 0 && !c.log[i-1].start.Before(t0) {
		i--
	}
	return slices.Clone(c.log[i:])
}

func newKubeCounter() *kubeCounter { return &kubeCounter{n: map[string]int{}} }

func (c *kubeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return kubeCountingRT{c: c, next: rt}
}

func (c *kubeCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

type kubeCountingRT struct {
	c    *kubeCounter
	next http.RoundTripper
}

func (r kubeCountingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	verb := req.Method
	if verb == http.MethodGet && req.URL.Query().Get("watch") != "" {
		verb = "WATCH"
	}
	start := time.Now()
	r.c.mu.Lock()
	r.c.n[verb]++
	i := len(r.c.log)
	r.c.log = append(r.c.log, kubeReq{verb: verb, start: start})
	r.c.mu.Unlock()
	resp, err := r.next.RoundTrip(req)
	end := time.Now()
	r.c.mu.Lock()
	r.c.log[i].end = end
	r.c.mu.Unlock()
	return resp, err
}

// ---- candidates ----

// kubeCand is one candidate (one "process"): its own client and transport
// counter, and the events of its current Run.
type kubeCand struct {
	id      string
	count   *kubeCounter
	run     func(ctx context.Context) // blocks until the library's Run returns
	started chan time.Time            // work started (leading)
	stopped chan time.Time            // leadership ended, after the release returned
	leaders chan string               // leaders observed (other than itself)

	cancel context.CancelFunc
	done   chan struct{}
}

func (c *kubeCand) start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan struct{})
	go func() { defer close(c.done); c.run(ctx) }()
}

func (c *kubeCand) stop() {
	c.cancel()
	<-c.done
}

func (c *kubeCand) drain() {
	for {
		select {
		case <-c.started:
		case <-c.stopped:
		case <-c.leaders:
		default:
			return
		}
	}
}

func send[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

func newKubeCandShell(id string) *kubeCand {
	return &kubeCand{
		id:      id,
		count:   newKubeCounter(),
		started: make(chan time.Time, 8),
		stopped: make(chan time.Time, 8),
		leaders: make(chan string, 64),
	}
}

type kubeLibrary struct {
	name, config string
	newCand      func(t *testing.T, cfg *rest.Config, lock, id string, tm kubeTiming) *kubeCand
}

func countedConfig(cfg *rest.Config, c *kubeCounter) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(c.wrap)
	return cfg
}

var kubeBaton = kubeLibrary{
	name:   "baton kube.LeaseStore",
	config: "baton.Elector on kube.NewLeaseForConfig (its own client, QPS 20/burst 40), WithTTL/WithRenewDeadline/WithRetryPeriod as given, renew interval TTL/3 (default), release on cancel (default); standbys watch the Lease (field selector) and retry when it changes or when the claim can first expire",
	newCand: func(t *testing.T, cfg *rest.Config, lock, id string, tm kubeTiming) *kubeCand {
		c := newKubeCandShell(id)
		store, err := kube.NewLeaseForConfig(countedConfig(cfg, c.count), kubeNamespace, kube.WithApplication("bench"))
		if err != nil {
			t.Fatal(err)
		}
		el, err := baton.NewElector(store, lock,
			baton.WithIdentity(id),
			baton.WithTTL(tm.lease), baton.WithRenewDeadline(tm.renew), baton.WithRetryPeriod(tm.retry),
			baton.WithLogger(slog.New(slog.DiscardHandler)),
			baton.OnNewLeader(func(l string) {
				if l != id {
					send(c.leaders, l)
				}
			}),
			baton.OnStoppedLeading(func(*baton.Lease, error) { send(c.stopped, time.Now()) }),
		)
		if err != nil {
			t.Fatal(err)
		}
		c.run = func(ctx context.Context) {
			err := el.Run(ctx, func(ctx context.Context, _ *baton.Lease) error {
				send(c.started, time.Now())
				<-ctx.Done()
				return nil
			})
			if err != nil && ctx.Err() == nil {
				t.Errorf("baton %s: Run: %v", id, err)
			}
		}
		return c
	},
}

var kubeClientGo = kubeLibrary{
	name:   "client-go leaderelection",
	config: "leaderelection.NewLeaderElector with resourcelock.LeasesResourceLock, ReleaseOnCancel true, LeaseDuration/RenewDeadline/RetryPeriod as given; clientset with client-go's default QPS 5/burst 10; a new LeaderElector (same client) for each Run",
	newCand: func(t *testing.T, cfg *rest.Config, lock, id string, tm kubeTiming) *kubeCand {
		c := newKubeCandShell(id)
		cs, err := kubernetes.NewForConfig(countedConfig(cfg, c.count))
		if err != nil {
			t.Fatal(err)
		}
		c.run = func(ctx context.Context) {
			rl, err := resourcelock.New(resourcelock.LeasesResourceLock, kubeNamespace, lock,
				cs.CoreV1(), cs.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
			if err != nil {
				t.Errorf("client-go %s: %v", id, err)
				return
			}
			le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
				Lock:            rl,
				LeaseDuration:   tm.lease,
				RenewDeadline:   tm.renew,
				RetryPeriod:     tm.retry,
				ReleaseOnCancel: true,
				Name:            lock,
				Callbacks: leaderelection.LeaderCallbacks{
					OnStartedLeading: func(context.Context) { send(c.started, time.Now()) },
					OnStoppedLeading: func() { send(c.stopped, time.Now()) },
					OnNewLeader: func(l string) {
						if l != id {
							send(c.leaders, l)
						}
					},
				},
			})
			if err != nil {
				t.Errorf("client-go %s: %v", id, err)
				return
			}
			le.Run(ctx)
		}
		return c
	},
}

var kubeLibraries = []kubeLibrary{kubeBaton, kubeClientGo}

var kubeLockSeq atomic.Int64

func kubeLockName(what string) string {
	return fmt.Sprintf("bench-%s-%d-%d", what, os.Getpid(), kubeLockSeq.Add(1))
}

// ---- handover ----

type kubeHandoverResult struct {
	handover []time.Duration // cancel of the leader -> standby's work started
	release  []time.Duration // cancel of the leader -> its Run reported the term over (release returned)
	failures int             // rounds where the standby did not take over in time

	// Breakdown, each from the cancel: the leader's release write (the
	// last PUT it sent before its Run returned) sent and returned; the
	// standby's first request sent; the standby's last request before it
	// led returned; and how many requests the standby sent in between.
	relSent, relDone, standbyFirst, standbyLast []time.Duration
	standbyReqs                                 []int
	standbyVerbs                                map[string]int
}

func waitFor[T any](ch chan T, d time.Duration) (T, bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, true
	case <-t.C:
		var zero T
		return zero, false
	}
}

// waitLeader waits until c has observed leader as the holder.
func waitLeader(c *kubeCand, leader string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		l, ok := waitFor(c.leaders, time.Until(deadline))
		if !ok {
			return false
		}
		if l == leader {
			return true
		}
	}
}

func kubeHandover(t *testing.T, lib kubeLibrary, cfg *rest.Config, tm kubeTiming) kubeHandoverResult {
	lock := kubeLockName("handover")
	a := lib.newCand(t, cfg, lock, "cand-a", tm)
	b := lib.newCand(t, cfg, lock, "cand-b", tm)
	timeout := 2*tm.lease + 10*time.Second
	var res kubeHandoverResult

	a.start()
	if _, ok := waitFor(a.started, timeout); !ok {
		t.Fatalf("%s: first candidate never led", lib.name)
	}
	b.start()
	if !waitLeader(b, a.id, timeout) {
		t.Fatalf("%s: standby never saw the leader", lib.name)
	}
	leader, standby := a, b
	defer func() { leader.stop(); standby.stop() }()

	for range tm.handovers {
		// Release at a random phase of the standby's poll cycle (client-go
		// polls every RetryPeriod plus up to 120% jitter).
		time.Sleep(100*time.Millisecond + mrand.N(time.Duration(2.2*float64(tm.retry))))
		standby.drain()
		leader.drain()
		t0 := time.Now()
		leader.cancel()
		t1, ok := waitFor(standby.started, timeout)
		<-leader.done
		if s, ok := waitFor(leader.stopped, time.Second); ok {
			res.release = append(res.release, s.Sub(t0))
		}
		if !ok {
			res.failures++
			t.Errorf("%s %v: standby did not lead within %v of the release", lib.name, tm, timeout)
			// Restart and find out who leads before going on.
			leader.start()
			select {
			case <-leader.started:
				leader.drain()
				continue
			case <-standby.started:
			case <-time.After(timeout):
				t.Fatalf("%s: no leader after a failed handover", lib.name)
			}
		} else {
			res.handover = append(res.handover, t1.Sub(t0))
			kubeBreakdown(&res, leader, standby, t0, t1)
			if lib.name == kubeBaton.name && t1.Sub(t0) > 15*time.Millisecond {
				t.Logf("%s %v: slow handover %v: %s", lib.name, tm, kround(t1.Sub(t0)), kubeTimeline(leader, standby, t0))
			}
			leader.drain()
			leader.start()
		}
		if !waitLeader(leader, standby.id, timeout) {
			t.Fatalf("%s: the old leader never saw the new one", lib.name)
		}
		leader, standby = standby, leader
	}
	return res
}

func kubeBreakdown(res *kubeHandoverResult, leader, standby *kubeCand, t0, t1 time.Time) {
	var rel *kubeReq
	for _, r := range leader.count.since(t0) {
		if r.verb == http.MethodPut && !r.end.IsZero() {
			rel = &r
		}
	}
	if rel != nil {
		res.relSent = append(res.relSent, rel.start.Sub(t0))
		res.relDone = append(res.relDone, rel.end.Sub(t0))
	}
	var before []kubeReq
	for _, r := range standby.count.since(t0) {
		if r.start.Before(t1) && !r.end.IsZero() && !r.end.After(t1) {
			before = append(before, r)
		}
	}
	if len(before) == 0 {
		return
	}
	if res.standbyVerbs == nil {
		res.standbyVerbs = map[string]int{}
	}
	for _, r := range before {
		res.standbyVerbs[r.verb]++
	}
	res.standbyFirst = append(res.standbyFirst, before[0].start.Sub(t0))
	res.standbyLast = append(res.standbyLast, before[len(before)-1].end.Sub(t0))
	res.standbyReqs = append(res.standbyReqs, len(before))
}

// kubeTimeline lists the two candidates' requests since t0.
func kubeTimeline(leader, standby *kubeCand, t0 time.Time) string {
	var parts []string
	for _, c := range []*kubeCand{leader, standby} {
		role := "leader"
		if c == standby {
			role = "standby"
		}
		for _, r := range c.count.since(t0.Add(-50 * time.Millisecond)) {
			end := "open"
			if !r.end.IsZero() {
				end = kround(r.end.Sub(t0)).String()
			}
			parts = append(parts, fmt.Sprintf("%s %s %v..%s", role, r.verb, kround(r.start.Sub(t0)), end))
		}
	}
	return strings.Join(parts, "; ")
}

// ---- requests per minute ----

type kubeCountResult struct {
	leader   map[string]int
	standbys []map[string]int
	window   time.Duration
	changed  bool // leadership changed during the window
}

func kubeCount(t *testing.T, lib kubeLibrary, cfg *rest.Config, tm kubeTiming) kubeCountResult {
	lock := kubeLockName("count")
	cands := make([]*kubeCand, kubeCountCandidates)
	for i := range cands {
		cands[i] = lib.newCand(t, cfg, lock, fmt.Sprintf("cand-%d", i), tm)
	}
	timeout := 2*tm.lease + 10*time.Second
	cands[0].start()
	if _, ok := waitFor(cands[0].started, timeout); !ok {
		t.Fatalf("%s: first candidate never led", lib.name)
	}
	for _, c := range cands[1:] {
		c.start()
		if !waitLeader(c, cands[0].id, timeout) {
			t.Fatalf("%s: a standby never saw the leader", lib.name)
		}
	}
	defer func() {
		for _, c := range cands {
			c.stop()
		}
	}()
	// Steady state: past the standbys' first attempts and watch setup.
	time.Sleep(2 * tm.retry)
	for _, c := range cands {
		c.drain()
	}
	before := make([]map[string]int, len(cands))
	for i, c := range cands {
		before[i] = c.count.snapshot()
	}
	start := time.Now()
	time.Sleep(kubeCountWindow)
	window := time.Since(start)
	var res kubeCountResult
	res.window = window
	for i, c := range cands {
		after := c.count.snapshot()
		d := map[string]int{}
		for k, v := range after {
			if v -= before[i][k]; v != 0 {
				d[k] = v
			}
		}
		if i == 0 {
			res.leader = d
		} else {
			res.standbys = append(res.standbys, d)
		}
		select {
		case <-c.started:
			res.changed = true
		default:
		}
	}
	return res
}

// ---- floor ----

// kubeFloor times conditional Lease updates (PUT with the resourceVersion
// just returned) in a tight loop: the one write a handover needs.
func kubeFloor(t *testing.T, cfg *rest.Config) []time.Duration {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1e6, 1e6
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	leases := cs.CoordinationV1().Leases(kubeNamespace)
	l, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: kubeLockName("floor")},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("floor"), LeaseDurationSeconds: ptr.To[int32](15)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Duration
	for i := range kubeFloorUpdates + 10 {
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		start := time.Now()
		l, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if i >= 10 { // warm-up
			out = append(out, time.Since(start))
		}
	}
	return out
}

// ---- the report ----

func startKubePlane(t *testing.T) *rest.Config {
	assets := testenv.KubeAssets(t)
	ctrllog.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting kube-apiserver and etcd from %s: %v", assets, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	t.Logf("control plane from %s started in %v", assets, time.Since(start).Round(time.Millisecond))
	return cfg
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1 // nearest rank
	i = max(0, min(i, len(s)-1))
	return s[i]
}

func kround(d time.Duration) time.Duration {
	switch {
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

func perMinute(m map[string]int, window time.Duration) (total float64, detail string) {
	keys := make([]string, 0, len(m))
	n := 0
	for k, v := range m {
		keys = append(keys, k)
		n += v
	}
	slices.Sort(keys)
	scale := float64(time.Minute) / float64(window)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, float64(m[k])*scale))
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	return float64(n) * scale, strings.Join(parts, ", ")
}

func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	// Test binaries may carry no dependency list: read the module's go.mod
	// (go test runs in the package directory, bench/).
	data, err := os.ReadFile("go.mod")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == path {
			return f[1]
		}
		if len(f) >= 3 && f[0] == "require" && f[1] == path {
			return f[2]
		}
	}
	return "?"
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func TestKubeReport(t *testing.T) {
	if testing.Short() {
		t.Skip("the Kubernetes report takes minutes")
	}
	if os.Getenv("BENCH_QUICK") != "" { // a smoke run of the harness, not figures
		kubeCountWindow = 10 * time.Second
		for i := range kubeTimings {
			kubeTimings[i].handovers = 3
		}
	}
	cfg := startKubePlane(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}

	var out strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&out, format, args...) }
	p("kube-apiserver %s (envtest, one etcd %s member, loopback), client-go %s, controller-runtime %s (envtest); %s/%s, %d CPUs (%s), %s\n\n",
		sv.GitVersion, etcdAssetVersion(), moduleVersion("k8s.io/client-go"), moduleVersion("sigs.k8s.io/controller-runtime"),
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(), runtime.Version())

	// The floor: one conditional update of a Lease.
	floor := kubeFloor(t, cfg)
	p("Floor: one conditional Lease update (PUT with resourceVersion), %d in a tight loop after 10 warm-up: p50 %v, p99 %v, max %v\n\n",
		len(floor), kround(quantile(floor, 0.5)), kround(quantile(floor, 0.99)), kround(quantile(floor, 1)))

	// Requests per minute: every library and timing at once (different
	// Leases), since the counts do not depend on load.
	type countKey struct {
		lib int
		tm  int
	}
	counts := map[countKey]kubeCountResult{}
	{
		var mu sync.Mutex
		var wg sync.WaitGroup
		for li, lib := range kubeLibraries {
			for ti, tm := range kubeTimings {
				wg.Go(func() {
					r := kubeCount(t, lib, cfg, tm)
					mu.Lock()
					counts[countKey{li, ti}] = r
					mu.Unlock()
				})
			}
		}
		wg.Wait()
	}

	// Handovers: one library and timing at a time.
	hand := map[countKey]kubeHandoverResult{}
	for ti, tm := range kubeTimings {
		for li, lib := range kubeLibraries {
			start := time.Now()
			r := kubeHandover(t, lib, cfg, tm)
			hand[countKey{li, ti}] = r
			t.Logf("%s %v: %d handovers in %v, p50 %v", lib.name, tm, len(r.handover), time.Since(start).Round(time.Second), kround(quantile(r.handover, 0.5)))
		}
	}

	p("Release-to-new-leader handover, 2 candidates (each its own client): the leader's Run context is cancelled, both libraries release the Lease, and the time runs from that cancel to the standby's work starting (baton: work function; client-go: OnStartedLeading). Rounds release at a random moment 0.1 s to 0.1 s + 2.2 × RetryPeriod after the standby has seen the leader. \"release returned\" is cancel to the old leader's OnStoppedLeading (called after its release request returned). With n ≤ 100, p99 is the largest sample (nearest rank).\n\n")
	p("| LeaseDuration/RenewDeadline/RetryPeriod | library | n | handover p50 | p90 | p99 = max | release returned p50 | client-go p50 ÷ baton p50 |\n")
	p("|---|---|---:|---:|---:|---:|---:|---:|\n")
	for ti, tm := range kubeTimings {
		b := hand[countKey{0, ti}]
		g := hand[countKey{1, ti}]
		for li, lib := range kubeLibraries {
			r := hand[countKey{li, ti}]
			ratio := ""
			if li == 0 && quantile(b.handover, 0.5) > 0 {
				ratio = fmt.Sprintf("%.0fx", float64(quantile(g.handover, 0.5))/float64(quantile(b.handover, 0.5)))
			}
			n := fmt.Sprint(len(r.handover))
			if r.failures > 0 {
				n += fmt.Sprintf(" (+%d failed)", r.failures)
			}
			p("| %v | %s | %s | %v | %v | %v | %v | %s |\n", tm, lib.name, n,
				kround(quantile(r.handover, 0.5)), kround(quantile(r.handover, 0.9)), kround(quantile(r.handover, 1)),
				kround(quantile(r.release, 0.5)), ratio)
		}
	}
	p("\n")

	p("Where the handover time goes (medians over the rounds above, each measured from the cancel, from the timestamps of the requests at the two candidates' transports): the old leader's release write sent and returned; the standby's first request after the cancel sent (baton: woken by its watch; client-go: its next poll); the standby's last request before leading returned (its acquiring write); work started.\n\n")
	p("| LeaseDuration/RenewDeadline/RetryPeriod | library | release PUT sent | release PUT returned | standby's first request sent | standby's acquiring request returned | work started | standby requests per handover (all rounds) |\n")
	p("|---|---|---:|---:|---:|---:|---:|---|\n")
	for ti, tm := range kubeTimings {
		for li, lib := range kubeLibraries {
			r := hand[countKey{li, ti}]
			per := ""
			if len(r.standbyReqs) > 0 {
				keys := slices.Sorted(maps.Keys(r.standbyVerbs))
				var parts []string
				for _, k := range keys {
					parts = append(parts, fmt.Sprintf("%s %.1f", k, float64(r.standbyVerbs[k])/float64(len(r.standbyReqs))))
				}
				per = strings.Join(parts, ", ")
			}
			p("| %v | %s | %v | %v | %v | %v | %v | %s |\n", tm, lib.name,
				kround(quantile(r.relSent, 0.5)), kround(quantile(r.relDone, 0.5)),
				kround(quantile(r.standbyFirst, 0.5)), kround(quantile(r.standbyLast, 0.5)),
				kround(quantile(r.handover, 0.5)), per)
		}
	}
	p("\n")

	p("API requests per minute at the HTTP transport (rest.Config.WrapTransport), %d candidates each with its own client, steady state: counted over %v starting 2 × RetryPeriod after the last standby saw the leader (each standby's joining requests are not counted). WATCH is a GET with watch=true (one per watch opened, however long it lasts). Both libraries and both timings ran at once on separate Leases.\n\n", kubeCountCandidates, kubeCountWindow)
	p("| LeaseDuration/RenewDeadline/RetryPeriod | library | role | requests/min | by verb (/min) |\n")
	p("|---|---|---|---:|---|\n")
	for ti, tm := range kubeTimings {
		for li, lib := range kubeLibraries {
			r := counts[countKey{li, ti}]
			note := ""
			if r.changed {
				note = " (leadership changed during the window!)"
			}
			tot, det := perMinute(r.leader, r.window)
			p("| %v | %s | leader%s | %.1f | %s |\n", tm, lib.name, note, tot, det)
			for i, s := range r.standbys {
				tot, det := perMinute(s, r.window)
				p("| %v | %s | idle standby %d | %.1f | %s |\n", tm, lib.name, i+1, tot, det)
			}
		}
	}
	p("\nConfigurations:\n\n")
	for _, lib := range kubeLibraries {
		p("- %s: %s\n", lib.name, lib.config)
	}

	report := out.String()
	fmt.Print("\n" + report)
	if path := os.Getenv("BENCH_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// etcdAssetVersion is the version of the etcd binary envtest ran (from the
// testbin cache directory name, k8s-<kube>-etcd-<etcd>).
func etcdAssetVersion() string {
	dir, err := testenv.FindKubeAssets()
	if err != nil {
		return "?"
	}
	if _, v, ok := strings.Cut(dir, "-etcd-"); ok {
		return v
	}
	return "?"
}
