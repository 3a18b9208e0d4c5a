package kubestore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// TestMigrationFromClientGo: a client-go LeaderElector and a baton Mutex
// (WithAdoption) campaign for one Lease, the Lease created by client-go in
// one run and by baton in the other. Each side, after a term, campaigns
// again only once the other side has led, so that leadership crosses over
// at least handovers times in each direction while the other side is
// campaigning. Terms never overlap (a term starts in the side's start
// callback and ends before it lets go: client-go's context is cancelled
// before it releases), and baton's tokens strictly increase across its
// terms.
func TestMigrationFromClientGo(t *testing.T) {
	const handovers = 100
	for _, creator := range []string{"client-go", "baton"} {
		t.Run("created_by_"+creator, func(t *testing.T) {
			cfg := controlPlane(t)
			ns := newNamespace(t)
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			r := &terms{n: map[string]int{}}
			r.cond = sync.NewCond(&r.mu)
			context.AfterFunc(ctx, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); campaignClientGo(ctx, t, ns, r, handovers, creator == "client-go") }()
			go func() { defer wg.Done(); campaignBaton(ctx, t, cfg, ns, r, handovers, creator == "baton") }()
			wg.Wait()
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.overlaps > 0 {
				t.Errorf("%d terms started while the other side led", r.overlaps)
			}
			if r.n["client-go"] < handovers || r.n["baton"] < handovers {
				t.Errorf("terms: client-go %d, baton %d; want at least %d each", r.n["client-go"], r.n["baton"], handovers)
			}
			for i := 1; i < len(r.tokens); i++ {
				if r.tokens[i] <= r.tokens[i-1] {
					t.Fatalf("baton's token %d after %d", r.tokens[i], r.tokens[i-1])
				}
			}
			t.Logf("created by %s: %d client-go terms, %d baton terms, baton tokens %d..%d",
				creator, r.n["client-go"], r.n["baton"], r.tokens[0], r.tokens[len(r.tokens)-1])
		})
	}
}

const migrateLease = "migrate"

// terms records who leads, as the two sides report it.
type terms struct {
	mu       sync.Mutex
	cond     *sync.Cond
	leader   string
	n        map[string]int // terms per side
	overlaps int
	tokens   []uint64 // baton's, in order
}

// start records that who leads, and returns how many terms other has had
// so far: after this term, who waits for the other's next one.
func (r *terms) start(who, other string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leader != "" {
		r.overlaps++
	}
	r.leader = who
	r.n[who]++
	r.cond.Broadcast()
	return r.n[other]
}

func (r *terms) end(who string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leader == who {
		r.leader = ""
	}
}

// awaitOther waits until other has led more than seen times, or ctx ends;
// it reports whether the side should go on. A side calls it after each of
// its terms with the other's count then: the other campaigns meanwhile.
func (r *terms) awaitOther(ctx context.Context, other string, seen int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.n[other] <= seen && ctx.Err() == nil {
		r.cond.Wait()
	}
	return ctx.Err() == nil
}

// campaignClientGo runs one client-go LeaderElector per term until it has
// led n times; unless it creates the Lease, it first waits for baton's
// first term.
func campaignClientGo(ctx context.Context, t *testing.T, ns string, r *terms, n int, creates bool) {
	if !creates && !r.awaitOther(ctx, "baton", 0) {
		return
	}
	for i := 0; i < n; i++ {
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: migrateLease},
			Client:     adminClient(t).CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: "client-go"},
		}
		tctx, cancel := context.WithCancel(ctx)
		var seen int
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 50 * time.Millisecond,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					seen = r.start("client-go", "baton")
					r.end("client-go") // before cancel, so before the release
					cancel()
				},
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			t.Error(err)
			cancel()
			return
		}
		le.Run(tctx) // returns after the release, and after the callback's cancel
		cancel()
		if i < n-1 && !r.awaitOther(ctx, "baton", seen) {
			return
		}
	}
}

// campaignBaton takes the lock with a baton Mutex until it has led n
// times; unless it creates the Lease, it first waits for client-go's first
// term.
func campaignBaton(ctx context.Context, t *testing.T, cfg *rest.Config, ns string, r *terms, n int, creates bool) {
	if !creates && !r.awaitOther(ctx, "client-go", 0) {
		return
	}
	m, err := baton.NewMutex(newLease(t, cfg, ns, kubestore.WithAdoption()), migrateLease,
		baton.WithTTL(2*time.Second), baton.WithIdentity("baton"))
	if err != nil {
		t.Error(err)
		return
	}
	for i := 0; i < n; i++ {
		l, err := m.Lock(ctx)
		if err != nil {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("baton Lock: %v", err)
			}
			return
		}
		seen := r.start("baton", "client-go")
		r.mu.Lock()
		r.tokens = append(r.tokens, l.Token())
		r.mu.Unlock()
		r.end("baton")
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("baton Unlock: %v", err)
			return
		}
		if i < n-1 && !r.awaitOther(ctx, "client-go", seen) {
			return
		}
	}
}

// WithAdoption is for Leases only: a ConfigMap or DistributedLock written
// by another tool holds no record baton could judge.
func TestAdoptionLeasesOnly(t *testing.T) {
	cfg := &rest.Config{Host: "http://127.0.0.1:1"}
	_, err := kubestore.NewConfigMapForConfig(cfg, "ns", kubestore.WithAdoption())
	if !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), "WithAdoption applies to Leases only") {
		t.Errorf("NewConfigMapForConfig with WithAdoption: %v; want ErrInvalidOptions saying it is for Leases", err)
	}
	if _, err := kubestore.NewLeaseForConfig(cfg, "ns", kubestore.WithAdoption()); err != nil {
		t.Errorf("NewLeaseForConfig with WithAdoption: %v", err)
	}
}
