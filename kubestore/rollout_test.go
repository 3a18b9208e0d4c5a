package kubestore_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/kubestore"
)

// TestRollingUpdateLeadership simulates a Deployment's rolling update of 3
// replicas with maxSurge 1 and maxUnavailable 0 on a real API server (Pod
// objects, no kubelet), three times: with the first leader on the oldest,
// the middle and the youngest of the old Pods. Each step creates a new
// Pod, starts its candidate and waits until the candidate has read the
// lock (ready), then scales the old Pods down by one as a ReplicaSet
// does: the Pod with the lowest controller.kubernetes.io/pod-deletion-cost
// goes first, then the newest. Terminating a Pod stops its candidate
// first (a leader releases), then deletes the Pod. It counts the leadership
// changes (terms after the first) for baton's Elector with LeaderLabel and
// for client-go's LeaderElector, and requires at most 2 for baton: the
// leader's Pod carries a deletion cost, so it goes last among the old Pods
// and leadership moves once, to a new Pod. client-go's count is reported,
// not asserted (it depends on which old candidate wins each race).
func TestRollingUpdateLeadership(t *testing.T) {
	cfg := controlPlane(t)
	var rows []string
	for _, system := range []string{"baton", "client-go"} {
		for first, where := range []string{"oldest", "middle", "youngest"} {
			t.Run(system+"/leader_"+where, func(t *testing.T) {
				changes, leaders := rollout(t, cfg, system, first)
				rows = append(rows, fmt.Sprintf("%s, first leader the %s old Pod: %d changes (%v)", system, where, changes, leaders))
				if system == "baton" && changes > 2 {
					t.Errorf("%d leadership changes in a rolling update (%v); want at most 2", changes, leaders)
				}
			})
		}
	}
	for _, r := range rows {
		t.Log(r)
	}
}

// rollout runs one simulated rolling update and returns the number of
// leadership changes and the leaders in order.
func rollout(t *testing.T, cfg *rest.Config, system string, first int) (int, []string) {
	ns := newNamespace(t)
	cs := adminClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	terms := &leaderTerms{}
	run := map[string]*candidate{}
	start := func(pod string) *candidate {
		c := startCandidate(ctx, t, cfg, ns, pod, system, terms)
		run[pod] = c
		return c
	}
	old := []string{"old-0", "old-1", "old-2"} // created oldest first
	makePods(t, cs, ns, old...)
	start(old[first]).awaitLeading(ctx, t)
	for i, p := range old {
		if i != first {
			start(p).awaitReady(ctx, t)
		}
	}
	for step := range 3 {
		pod := fmt.Sprintf("new-%d", step)
		makePods(t, cs, ns, pod)
		start(pod).awaitReady(ctx, t)
		victim := scaleDownVictim(ctx, t, cs, ns, old)
		old = slices.DeleteFunc(old, func(p string) bool { return p == victim })
		run[victim].stop()
		if err := cs.CoreV1().Pods(ns).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	terms.awaitLeaderAmong(ctx, t, "new-0", "new-1", "new-2")
	for _, c := range run {
		c.stop()
	}
	return terms.changes()
}

// scaleDownVictim picks the Pod among candidates that a ReplicaSet
// scaling down deletes first (all are running and ready): the lowest
// pod-deletion-cost, then the newest (candidates are oldest first).
func scaleDownVictim(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, candidates []string) string {
	t.Helper()
	best, bestCost := "", 0
	for _, name := range candidates {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cost := 0
		if v, ok := p.Annotations[kubestore.AnnotationPodDeletionCost]; ok {
			if cost, err = strconv.Atoi(v); err != nil {
				t.Fatalf("Pod %s: %s=%q", name, kubestore.AnnotationPodDeletionCost, v)
			}
		}
		if best == "" || cost <= bestCost { // later (newer) wins ties
			best, bestCost = name, cost
		}
	}
	return best
}

// leaderTerms records the terms, in order, as the candidates report them.
type leaderTerms struct {
	mu      sync.Mutex
	leaders []string
	leader  string
	changed chan struct{} // closed and replaced on every change
}

func (l *leaderTerms) start(pod string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leaders = append(l.leaders, pod)
	l.leader = pod
	l.notifyLocked()
}

func (l *leaderTerms) end(pod string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leader == pod {
		l.leader = ""
		l.notifyLocked()
	}
}

func (l *leaderTerms) notifyLocked() {
	if l.changed != nil {
		close(l.changed)
	}
	l.changed = make(chan struct{})
}

// await waits until cond holds on the current leader.
func (l *leaderTerms) await(ctx context.Context, t *testing.T, what string, cond func(leader string) bool) {
	t.Helper()
	for {
		l.mu.Lock()
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		ok, ch := cond(l.leader), l.changed
		l.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

func (l *leaderTerms) awaitLeaderAmong(ctx context.Context, t *testing.T, pods ...string) {
	l.await(ctx, t, fmt.Sprintf("a leader among %v", pods), func(leader string) bool { return slices.Contains(pods, leader) })
}

func (l *leaderTerms) changes() (int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.leaders) - 1, slices.Clone(l.leaders)
}

// candidate is one Pod's campaigning process.
type candidate struct {
	pod    string
	terms  *leaderTerms
	ready  func() bool // it has read the lock
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// stop ends the candidate as SIGTERM does and waits for it: a leader ends
// its term and releases, a standby stops campaigning.
func (c *candidate) stop() {
	c.once.Do(func() {
		c.cancel()
		<-c.done
	})
}

func (c *candidate) awaitLeading(ctx context.Context, t *testing.T) {
	t.Helper()
	c.terms.await(ctx, t, c.pod+" to lead", func(leader string) bool { return leader == c.pod })
}

// awaitReady waits until the candidate has read the lock (a readiness
// probe's "campaigning"); there is no event for it, so it polls.
func (c *candidate) awaitReady(ctx context.Context, t *testing.T) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !c.ready() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("%s not campaigning: %v", c.pod, ctx.Err())
		}
	}
}

// startCandidate starts pod's candidate: a baton Elector with a
// LeaderLabel (as baton run --leader-label), or a client-go LeaderElector
// on a Lease, both with a 2s lease.
func startCandidate(ctx context.Context, t *testing.T, cfg *rest.Config, ns, pod, system string, terms *leaderTerms) *candidate {
	ctx, cancel := context.WithCancel(ctx)
	c := &candidate{pod: pod, terms: terms, cancel: cancel, done: make(chan struct{})}
	if system == "baton" {
		e, err := baton.NewElector(newLease(t, cfg, ns), "rollout", baton.WithTTL(2*time.Second), baton.WithIdentity(pod),
			baton.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		label, err := kubestore.NewLeaderLabel(cfg, ns, pod, "role=leader")
		if err != nil {
			t.Fatal(err)
		}
		c.ready = func() bool { return e.Leader() != "" }
		go func() {
			defer close(c.done)
			_ = e.Run(ctx, func(ctx context.Context, _ *baton.Lease) error {
				// A term can end while Lead labels the Pod (the test
				// stops the candidate, or the lease is lost under
				// load): Lead then returns the context's error, as it
				// should. Anything else is a failure.
				if err := label.Lead(ctx); err != nil && ctx.Err() == nil {
					t.Errorf("%s: Lead: %v", pod, err)
				}
				terms.start(pod) // once its Pod carries the deletion cost
				<-ctx.Done()
				if err := label.Unlead(context.WithoutCancel(ctx)); err != nil {
					t.Errorf("%s: Unlead: %v", pod, err)
				}
				terms.end(pod)
				return nil
			})
		}()
		return c
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: "rollout"},
			Client:     adminClient(t).CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: pod},
		},
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				terms.start(pod)
				<-ctx.Done()
				terms.end(pod)
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c.ready = func() bool { return le.GetLeader() != "" }
	go func() {
		defer close(c.done)
		le.Run(ctx)
	}()
	return c
}
