package cli_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// labelWatch records, in the API server's order, each change of the
// role=leader label on the namespace's Pods.
type labelWatch struct {
	w       watch.Interface
	holders map[string]bool
	changes chan labelChange
}

type labelChange struct {
	pod      string
	labelled bool
}

func watchLabels(t *testing.T, cs kubernetes.Interface, ns string) *labelWatch {
	t.Helper()
	w, err := cs.CoreV1().Pods(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	lw := &labelWatch{w: w, holders: map[string]bool{}, changes: make(chan labelChange, 64)}
	go func() {
		defer close(lw.changes)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			has := p.Labels["role"] == "leader" && ev.Type != watch.Deleted
			if has != lw.holders[p.Name] {
				lw.holders[p.Name] = has
				lw.changes <- labelChange{p.Name, has}
			}
		}
	}()
	return lw
}

// next returns the next label change, failing t after d.
func (lw *labelWatch) next(t *testing.T, d time.Duration, what string) labelChange {
	t.Helper()
	select {
	case c, ok := <-lw.changes:
		if !ok {
			t.Fatalf("the Pod watch ended while waiting for %s", what)
		}
		return c
	case <-time.After(d):
		t.Fatalf("no label change within %v: waiting for %s", d, what)
	}
	panic("unreachable")
}

// expect fails t unless the next changes are want, in this order.
func (lw *labelWatch) expect(t *testing.T, what string, want ...labelChange) {
	t.Helper()
	for _, w := range want {
		if got := lw.next(t, 30*time.Second, what); got != w {
			t.Fatalf("%s: label change %+v, want %+v", what, got, w)
		}
	}
}

// baton run --leader-label: the leader's Pod carries the label; on a
// handover it moves (taken off the old Pod before the lock is released);
// a leader cut off (stopped) loses it to the next leader before that one
// labels its own Pod, so no two Pods are ever labelled at once.
func TestRunLeaderLabel(t *testing.T) {
	t.Parallel()
	kc, ns := kubeconfig(t)
	cs, err := kubernetes.NewForConfig(controlPlane(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"pod-a", "pod-b"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "localhost/baton:dev"}}}}
		if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lw := watchLabels(t, cs, ns)
	run := func(pod string) *proc {
		// Timings longer than the other tests': the label's moves are
		// counted, and on a busy machine a 1.4s renew deadline can pass
		// (a correct step-down, but one more move).
		args := []string{"run", "--backend", "lease", "--kubeconfig", kc, "--name", "web", "--leader-label", "role=leader",
			"--ttl", "6s", "--renew-deadline", "4s", "--retry-period", "1s"}
		return startCLI(t, pod, []string{"POD_NAME=" + pod}, append(args, "--", "sleep", "600")...)
	}
	a := run("pod-a")
	lw.expect(t, "pod-a leads", labelChange{"pod-a", true})
	b := run("pod-b")
	b.stderr.waitFor(t, "waiting for the lock", 30*time.Second)

	// A graceful handover: a's CMD exits, a unlabels, then releases.
	a.signal(syscall.SIGTERM)
	lw.expect(t, "the handover to pod-b", labelChange{"pod-a", false}, labelChange{"pod-b", true})
	a.wait(30 * time.Second)

	// b is cut off (its baton stopped): a new replica on pod-a takes over
	// after b's validity and takes the label from pod-b before labelling
	// pod-a.
	b.signalGroup(syscall.SIGSTOP)
	defer b.signalGroup(syscall.SIGCONT)
	run("pod-a")
	lw.expect(t, "the takeover from the cut-off pod-b", labelChange{"pod-b", false}, labelChange{"pod-a", true})
}
