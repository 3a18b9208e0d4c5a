//go:build linux

package safety

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
)

// naiveLock is a ConfigMap "lock" written the way older guides suggest, for
// the counter-example: it writes its name without a resourceVersion
// condition, sleeps, reads the object back and believes it holds the lock
// if its name is still there; it judges expiry by comparing the holder's
// written renew time with its own wall clock; it renews by writing again,
// unconditionally, after checking that its name is still there. It issues
// no fencing token (every tenure has token 0).
type naiveLock struct {
	cms      typedcorev1.ConfigMapInterface
	name, id string
	ttl      time.Duration
	skew     time.Duration // added to this process's wall clock
	settle   time.Duration // the sleep before the read-back
}

const (
	naiveHolder = "holder"
	naiveRenew  = "renewTime"
)

func newNaiveLock(cfg *rest.Config, ns, name, id string, ttl, skew, settle time.Duration) (*naiveLock, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &naiveLock{cms: cs.CoreV1().ConfigMaps(ns), name: name, id: id, ttl: ttl, skew: skew, settle: settle}, nil
}

func (n *naiveLock) now() time.Time { return time.Now().Add(n.skew) }

// write writes this process as the holder, with no precondition: an update
// without a resourceVersion, or a create if there is no object.
func (n *naiveLock) write(ctx context.Context) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n.name},
		Data: map[string]string{naiveHolder: n.id, naiveRenew: n.now().UTC().Format(time.RFC3339Nano)}}
	_, err := n.cms.Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = n.cms.Create(ctx, cm, metav1.CreateOptions{})
	}
	return err
}

// read returns the holder and renew time, "" if there is none.
func (n *naiveLock) read(ctx context.Context) (string, time.Time, error) {
	cm, err := n.cms.Get(ctx, n.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", time.Time{}, nil
	}
	if err != nil {
		return "", time.Time{}, err
	}
	renew, _ := time.Parse(time.RFC3339Nano, cm.Data[naiveRenew])
	return cm.Data[naiveHolder], renew, nil
}

func (n *naiveLock) lock(ctx context.Context) (held, error) {
	for {
		holder, renew, err := n.read(ctx)
		// "Free or expired": the remote renew time against the local clock.
		if err == nil && (holder == "" || holder == n.id || n.now().Sub(renew) > n.ttl) {
			if err = n.write(ctx); err == nil {
				if err = sleepCtx(ctx, n.settle); err != nil {
					return nil, err
				}
				var again string
				if again, _, err = n.read(ctx); err == nil && again == n.id {
					hctx, cancel := context.WithCancel(context.Background())
					h := &naiveHeld{n: n, ctx: hctx, cancel: cancel, done: make(chan struct{})}
					go h.renew()
					return h, nil
				}
			}
		}
		if err != nil && ctx.Err() == nil {
			fmt.Printf("naive %s: %v\n", n.id, err)
		}
		if err := sleepCtx(ctx, n.ttl/4); err != nil {
			return nil, err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

type naiveHeld struct {
	n      *naiveLock
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

func (h *naiveHeld) token() uint64            { return 0 }
func (h *naiveHeld) validUntil() time.Time    { return time.Time{} }
func (h *naiveHeld) context() context.Context { return h.ctx }

// renew checks every TTL/2 that its name is still there and writes it
// again; it ends the tenure when the name is gone.
func (h *naiveHeld) renew() {
	defer close(h.done)
	for sleepCtx(h.ctx, h.n.ttl/2) == nil {
		holder, _, err := h.n.read(h.ctx)
		if err != nil {
			continue
		}
		if holder != h.n.id {
			h.cancel()
			return
		}
		_ = h.n.write(h.ctx)
	}
}

func (h *naiveHeld) unlock(ctx context.Context) error {
	h.cancel()
	<-h.done
	holder, _, err := h.n.read(ctx)
	if err != nil || holder != h.n.id {
		return err
	}
	// Clear the holder, again without a precondition.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: h.n.name}, Data: map[string]string{naiveHolder: ""}}
	_, err = h.n.cms.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

// naiveSettle is the naive lock's sleep before the read-back: the guides
// say 2s; 300ms keeps the test short and changes only how often the
// window is hit (the sleep against the renew period of TTL/2), not whether
// it exists.
const naiveSettle = 300 * time.Millisecond

// naiveSkew is how far one contender's wall clock is ahead and another's
// behind: more than the TTL, as on nodes whose NTP broke.
const naiveSkew = 3 * time.Second

// TestNaiveConfigMapLock is the counter-example: the same harness, on a
// real API server, with the naive ConfigMap lock instead of baton, one
// contender whose wall clock is 3s ahead and one whose clock is 3s behind.
// The naive lock must fail: two contenders act as holder at once (their
// tenures interleave on the unfenced counter). Lost updates are counted
// for the report. Its tenures carry no token, so the fenced register
// cannot tell them apart either.
func TestNaiveConfigMapLock(t *testing.T) {
	cfg := controlPlane(t)
	be := &backendEnv{name: "naive", ttl: ttl, claimLife: ttl, ns: newNamespace(t, cfg),
		newLink: func(t *testing.T) link {
			return local(apiProxy.url())
		}}
	// After a tenure a contender idles for a while (as a job that ran
	// does), so that the others get the lock and can lose it to a skewed
	// one.
	sc := scenario{fault: "clocks 3s ahead / behind", lock: "naive", settle: naiveSettle,
		skews: []time.Duration{0, naiveSkew, -naiveSkew}, idle: time.Second}
	h := newHarness(t, be, sc)
	start := time.Now()
	for range K {
		h.spawn()
	}
	var overlap string
	t.Cleanup(func() {
		if t.Failed() {
			ops, evs := h.reg.history()
			t.Logf("%d ops; events: %+v", len(ops), evs)
		}
	})
	h.reg.await("two holders at once on the unfenced counter", 60*time.Second, func(s *snapshot) bool {
		overlap = interleaved(s.ops)
		return overlap != ""
	})
	t.Logf("the naive lock let two contenders hold at once: %s", overlap)
	// Let it run on until it loses an increment too (for the report; not
	// asserted: two holders at once is the failure, a lost update only
	// needs their read-modify-writes to interleave as well).
	lost := make(chan struct{})
	go func() {
		defer close(lost)
		h.reg.awaitQuiet(20*time.Second, func(s *snapshot) bool {
			return slices.ContainsFunc(s.ops, func(o op) bool { return o.PLost })
		})
	}()
	<-lost
	h.stopAll()
	ops, evs := h.reg.history()
	res := h.res
	res.backend = "naive ConfigMap lock (counter-example)"
	res.elapsed = time.Since(start)
	res.ops = len(ops)
	for _, e := range evs {
		if e.Kind == "acquired" {
			res.acquisitions++
		}
	}
	for _, o := range ops {
		if o.Write && o.PLost {
			res.plainLost++
		}
	}
	res.twoHolders = countInterleavings(ops)
	res.linearizable = "n/a (no tokens)"
	if res.twoHolders == 0 {
		t.Errorf("no two tenures interleaved on the counter")
	}
	// The main checker, the one every baton row passes, must reject this
	// history: two holders at once as the registers see them.
	var c catcher
	checkHistory(&c, be, sc, ops, evs, &result{backend: "naive", fault: sc.fault})
	rejected := false
	for i, e := range c.errs {
		if i < 5 {
			t.Logf("the checker rejects the naive lock: %s", e)
		}
		rejected = rejected || strings.Contains(e, "interleave on the registers")
	}
	if !rejected {
		t.Errorf("the checker did not report two holders at once in the naive lock's history; it reported %q", c.errs)
	}
	recordResult(res)
	t.Logf("naive lock: %d ops, %d acquisitions, %d interleaved tenure pairs, %d lost updates on the unfenced counter",
		res.ops, res.acquisitions, res.twoHolders, res.plainLost)
}

// interleaved describes the first pair of tenures whose operations
// interleave (A, then B, then A again), or returns "".
func interleaved(ops []op) string {
	last := map[string]int{} // term -> seq of its latest op
	for _, o := range ops {
		if i, ok := last[o.Term]; ok {
			for term, j := range last {
				if term != o.Term && j > i {
					return fmt.Sprintf("tenure %s worked (op %d) after tenure %s had started (op %d) and before its own op %d", o.Term, o.Seq, term, j, o.Seq)
				}
			}
		}
		last[o.Term] = o.Seq
	}
	return ""
}

// countInterleavings counts the pairs of tenures whose operations
// interleave.
func countInterleavings(ops []op) int {
	type span struct{ first, last int }
	spans := map[string]*span{}
	var terms []string
	for _, o := range ops {
		if s, ok := spans[o.Term]; ok {
			s.last = o.Seq
		} else {
			spans[o.Term] = &span{o.Seq, o.Seq}
			terms = append(terms, o.Term)
		}
	}
	n := 0
	for i, a := range terms {
		for _, b := range terms[i+1:] {
			sa, sb := spans[a], spans[b]
			if sa.first < sb.last && sb.first < sa.last {
				n++
			}
		}
	}
	return n
}
