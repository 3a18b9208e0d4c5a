package kubestore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// tokenKind is a kind whose token is an annotation an operator can remove
// (kubectl annotate lease NAME baton.dev/token-).
type tokenKind struct {
	name  string
	open  func(t *testing.T, cfg *rest.Config, ns string) backend.Backend
	patch func(ctx context.Context, cs kubernetes.Interface, ns, name string, body []byte) (map[string]string, error)
}

func tokenKinds() []tokenKind {
	return []tokenKind{{
		name: "Lease",
		open: func(t *testing.T, cfg *rest.Config, ns string) backend.Backend { return newLease(t, cfg, ns) },
		patch: func(ctx context.Context, cs kubernetes.Interface, ns, name string, body []byte) (map[string]string, error) {
			l, err := cs.CoordinationV1().Leases(ns).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
			if err != nil {
				return nil, err
			}
			return l.Annotations, nil
		},
	}, {
		name: "ConfigMap",
		open: func(t *testing.T, cfg *rest.Config, ns string) backend.Backend {
			s, err := kubestore.NewConfigMapForConfig(cfg, ns, kubestore.WithRateLimit(200, 400))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		patch: func(ctx context.Context, cs kubernetes.Interface, ns, name string, body []byte) (map[string]string, error) {
			cm, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
			if err != nil {
				return nil, err
			}
			return cm.Annotations, nil
		},
	}}
}

// An operator removes the token annotation from a held lock object of
// baton's (kubectl annotate lease NAME baton.dev/token-). The object still
// carries baton's label, nonce and claim finalizer: it is baton's lock, not
// another tool's. Before, every store took it for another tool's object
// (ErrForbidden, "use another lock name"): its holder lost the lock, naming
// itself as the holder with token 0, and nobody could ever take or
// force-release it again. Now the missing token reads as the object's
// resourceVersion (at least every token issued on it), the holder's next
// renewal writes its own token back, and tokens go on growing.
func TestTokenAnnotationRemoved(t *testing.T) {
	for _, k := range tokenKinds() {
		t.Run(k.name, func(t *testing.T) {
			cfg := controlPlane(t)
			ns := newNamespace(t)
			ctx := t.Context()
			a, b := k.open(t, cfg, ns), k.open(t, cfg, ns)
			g, err := a.TryAcquire(ctx, "job", req("a", 15*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if g, err = a.Renew(ctx, g); err != nil { // writes the token as a number
				t.Fatal(err)
			}
			if _, err := k.patch(ctx, adminClient(t), ns, "job", []byte(`{"metadata":{"annotations":{"`+kubestore.AnnotationToken+`":null}}}`)); err != nil {
				t.Fatal(err)
			}
			var held *backend.HeldError
			if _, err := b.TryAcquire(ctx, "job", req("b", 15*time.Second)); !errors.As(err, &held) || held.Holder != "a" {
				t.Fatalf("b after the token annotation was removed: %v; want ErrHeld naming a", err)
			}
			if held.Token < g.Token {
				t.Errorf("b was told token %d, below a's %d", held.Token, g.Token)
			}
			if g, err = a.Renew(ctx, g); err != nil {
				t.Fatalf("a's renewal after the token annotation was removed: %v; want the lock kept", err)
			}
			ann, err := k.patch(ctx, adminClient(t), ns, "job", []byte(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			if got := ann[kubestore.AnnotationToken]; got != strconv.FormatUint(g.Token, 10) {
				t.Errorf("token annotation after a's renewal: %q; want a's token %d written back", got, g.Token)
			}
			if err := a.Release(ctx, g); err != nil {
				t.Fatal(err)
			}
			gb, err := b.TryAcquire(ctx, "job", req("b", 15*time.Second))
			if err != nil {
				t.Fatalf("b after a's release: %v", err)
			}
			if gb.Token <= g.Token {
				t.Errorf("b's token %d is not above a's %d", gb.Token, g.Token)
			}
			if err := b.Release(ctx, gb); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An operator removes the lease duration from a held lock object
// (kubectl edit: spec.leaseDurationSeconds of a Lease, the duration
// annotation of a ConfigMap). Before, every store reported the object as a
// corrupt record: the holder lost the lock at its renew deadline, waiters
// failed, and baton release --force refused it too, so the lock stayed
// stuck with no fix named. Now a process that never saw the claim's
// duration counts it as held (it cannot judge it expired), the holder's
// next renewal writes its duration back, and a forced release frees it.
func TestLeaseDurationRemoved(t *testing.T) {
	for _, k := range tokenKinds() {
		t.Run(k.name, func(t *testing.T) {
			cfg := controlPlane(t)
			ns := newNamespace(t)
			ctx := t.Context()
			a, b := k.open(t, cfg, ns), k.open(t, cfg, ns)
			removeDuration := func() {
				t.Helper()
				body := `{"spec":{"leaseDurationSeconds":null}}`
				if k.name == "ConfigMap" {
					body = `{"metadata":{"annotations":{"` + kubestore.AnnotationDuration + `":null}}}`
				}
				if _, err := k.patch(ctx, adminClient(t), ns, "job", []byte(body)); err != nil {
					t.Fatal(err)
				}
			}
			g, err := a.TryAcquire(ctx, "job", req("a", 15*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			removeDuration()
			var held *backend.HeldError
			if _, err := b.TryAcquire(ctx, "job", req("b", 15*time.Second)); !errors.As(err, &held) || held.Holder != "a" {
				t.Fatalf("b after the duration was removed: %v; want ErrHeld naming a", err)
			}
			if g, err = a.Renew(ctx, g); err != nil {
				t.Fatalf("a's renewal after the duration was removed: %v; want the lock kept", err)
			}
			if rec, err := b.Get(ctx, "job"); err != nil || rec.TTL != 15*time.Second {
				t.Errorf("Get after a's renewal: %+v, %v; want the duration written back", rec, err)
			}
			removeDuration()
			if err := k.open(t, cfg, ns).(backend.ForceReleaser).ForceRelease(ctx, "job"); err != nil {
				t.Fatalf("ForceRelease of a claim without a duration: %v", err)
			}
			gb, err := b.TryAcquire(ctx, "job", req("b", 15*time.Second))
			if err != nil {
				t.Fatalf("b after the forced release: %v", err)
			}
			if gb.Token <= g.Token {
				t.Errorf("b's token %d is not above a's %d", gb.Token, g.Token)
			}
		})
	}
}

// An operator edits the nonce annotation of a held lock object. The holder
// loses the lock (only its nonce proves the claim is its own), and its
// error says why: before, it said the lock was held by the holder's own
// identity, which read as nonsense.
func TestNonceEdited(t *testing.T) {
	for _, k := range tokenKinds() {
		t.Run(k.name, func(t *testing.T) {
			cfg := controlPlane(t)
			ns := newNamespace(t)
			ctx := t.Context()
			a := k.open(t, cfg, ns)
			g, err := a.TryAcquire(ctx, "job", req("a", 15*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := k.patch(ctx, adminClient(t), ns, "job", []byte(`{"metadata":{"annotations":{"`+kubestore.AnnotationNonce+`":"edited"}}}`)); err != nil {
				t.Fatal(err)
			}
			_, err = a.Renew(ctx, g)
			if !errors.Is(err, backend.ErrLost) || !strings.Contains(err.Error(), kubestore.AnnotationNonce) || !strings.Contains(err.Error(), "same identity") {
				t.Errorf("a's renewal after its nonce was edited: %v; want ErrLost naming the nonce annotation and a second process of the same identity", err)
			}
		})
	}
}

// TestListCorruptRecord: List leaves a lock object whose record does not
// decode out, names it in the error, and returns the others; before, one
// such object (a token annotation edited to "abc") made List return none,
// with an error that did not name it, so baton status showed no lock.
func TestListCorruptRecord(t *testing.T) {
	for _, k := range tokenKinds() {
		t.Run(k.name, func(t *testing.T) {
			cfg := controlPlane(t)
			ns := newNamespace(t)
			ctx := t.Context()
			a := k.open(t, cfg, ns)
			g, err := a.TryAcquire(ctx, "good", req("a", 15*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.TryAcquire(ctx, "bad", req("a", 15*time.Second)); err != nil {
				t.Fatal(err)
			}
			if _, err := k.patch(ctx, adminClient(t), ns, "bad", []byte(`{"metadata":{"annotations":{"`+kubestore.AnnotationToken+`":"abc"}}}`)); err != nil {
				t.Fatal(err)
			}
			recs, err := a.(backend.Lister).List(ctx)
			if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), ns+"/bad") {
				t.Errorf("List: %v; want ErrCorruptRecord naming %s/bad", err, ns)
			}
			if len(recs) != 1 || recs[0].Key != "good" || recs[0].Holder != "a" || recs[0].Token != g.Token {
				t.Errorf("List returned %+v; want the good record, held by a with token %d", recs, g.Token)
			}
		})
	}
}
