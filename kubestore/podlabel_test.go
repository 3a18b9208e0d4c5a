package kubestore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// makePods creates Pod objects (the API server needs no kubelet for them).
func makePods(t *testing.T, cs kubernetes.Interface, ns string, names ...string) {
	t.Helper()
	for _, n := range names {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: ns, Labels: map[string]string{"app": "demo"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "localhost/baton:dev"}}},
		}
		if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// labelled returns the Pods that carry role=leader.
func labelled(t *testing.T, cs kubernetes.Interface, ns string) []string {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "role=leader"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	return names
}

// deletionCosts returns the Pods' pod-deletion-cost annotations.
func deletionCosts(t *testing.T, cs kubernetes.Interface, ns string) map[string]string {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	costs := map[string]string{}
	for _, p := range pods.Items {
		if v, ok := p.Annotations[kubestore.AnnotationPodDeletionCost]; ok {
			costs[p.Name] = v
		}
	}
	return costs
}

// Lead moves the label to this Pod, taking it from any other (a cut-off
// former leader's); Unlead removes it; other labels stay.
func TestLeaderLabel(t *testing.T) {
	cfg := controlPlane(t)
	ns := newNamespace(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	makePods(t, cs, ns, "pod-a", "pod-b")
	a, err := kubestore.NewLeaderLabel(cfg, ns, "pod-a", "role=leader")
	if err != nil {
		t.Fatal(err)
	}
	b, err := kubestore.NewLeaderLabel(cfg, ns, "pod-b", "role=leader")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := a.Lead(ctx); err != nil {
		t.Fatal(err)
	}
	if got := labelled(t, cs, ns); len(got) != 1 || got[0] != "pod-a" {
		t.Fatalf("after a leads: labelled %v", got)
	}
	// a is cut off and cannot Unlead: b's Lead takes the label from it.
	if err := b.Lead(ctx); err != nil {
		t.Fatal(err)
	}
	if got := labelled(t, cs, ns); len(got) != 1 || got[0] != "pod-b" {
		t.Fatalf("after b leads: labelled %v", got)
	}
	// The leader's Pod alone carries the deletion cost.
	if got := deletionCosts(t, cs, ns); got["pod-b"] != kubestore.LeaderDeletionCost || got["pod-a"] != "" {
		t.Fatalf("after b leads: deletion costs %v", got)
	}
	if err := b.Unlead(ctx); err != nil {
		t.Fatal(err)
	}
	if got := deletionCosts(t, cs, ns); len(got) != 0 {
		t.Fatalf("after b's term: deletion costs %v", got)
	}
	if got := labelled(t, cs, ns); len(got) != 0 {
		t.Fatalf("after b's term: labelled %v", got)
	}
	p, err := cs.CoreV1().Pods(ns).Get(ctx, "pod-a", metav1.GetOptions{})
	if err != nil || p.Labels["app"] != "demo" {
		t.Errorf("pod-a's other labels: %v, %v", p.Labels, err)
	}
	// A Pod that is gone has no label to remove.
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "pod-a", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if err := a.Unlead(ctx); err != nil {
		t.Errorf("Unlead of a deleted Pod: %v", err)
	}
}

func TestParseLabel(t *testing.T) {
	for _, bad := range []string{"", "role", "=leader", "role=", "ro le=x", "role=a b"} {
		if _, _, err := kubestore.ParseLabel(bad); !errors.Is(err, backend.ErrInvalidOptions) {
			t.Errorf("ParseLabel(%q) = %v, want ErrInvalidOptions", bad, err)
		}
	}
	if k, v, err := kubestore.ParseLabel("baton.dev/role=leader"); err != nil || k != "baton.dev/role" || v != "leader" {
		t.Errorf("ParseLabel: %q %q %v", k, v, err)
	}
}

// Two workloads in one namespace, each electing its own leader on its own
// lock, use the same leader label (both copied deploy/example's
// baton.dev/role=leader): one's Lead must not take the label, and the
// deletion cost, from the other's leader. Before, it removed them from
// every Pod of the namespace that carried the label, so the other
// workload's Service lost its leader and a rolling update of it deleted
// its leader first.
func TestLeaderLabelOtherLock(t *testing.T) {
	cfg := controlPlane(t)
	ns := newNamespace(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	makePods(t, cs, ns, "report-0", "report-1", "billing-0")
	newL := func(pod, lock string) *kubestore.LeaderLabel {
		l, err := kubestore.NewLeaderLabel(cfg, ns, pod, "role=leader", kubestore.LeaderOf(lock))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	report0, report1, billing := newL("report-0", "report"), newL("report-1", "report"), newL("billing-0", "billing")
	ctx := context.Background()
	for _, l := range []*kubestore.LeaderLabel{report0, billing} {
		if err := l.Lead(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := labelled(t, cs, ns); len(got) != 2 {
		t.Fatalf("after report-0 and billing-0 lead their locks: labelled %v; want both", got)
	}
	if got := deletionCosts(t, cs, ns); got["report-0"] != kubestore.LeaderDeletionCost || got["billing-0"] != kubestore.LeaderDeletionCost {
		t.Fatalf("deletion costs %v; want both leaders'", got)
	}
	// report-0 is cut off: report-1's Lead takes the label from it, and
	// from no other lock's leader.
	if err := report1.Lead(ctx); err != nil {
		t.Fatal(err)
	}
	got := labelled(t, cs, ns)
	if len(got) != 2 || got[0] != "billing-0" || got[1] != "report-1" {
		t.Fatalf("after report-1 leads: labelled %v; want billing-0 and report-1", got)
	}
	// A Pod labelled without naming its lock (by hand, or by an older
	// baton) is taken as a former leader of any lock, as before.
	if _, err := cs.CoreV1().Pods(ns).Patch(ctx, "report-0", "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"role":"leader"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := billing.Lead(ctx); err != nil {
		t.Fatal(err)
	}
	if got := labelled(t, cs, ns); len(got) != 2 || got[0] != "billing-0" || got[1] != "report-1" {
		t.Fatalf("after billing-0 leads again: labelled %v; want billing-0 and report-1", got)
	}
}
