package kubestore_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// These tests check Remove (backend.Remover) of the three kinds on the
// package's real API server; the conformance suite's "Remove" subtest
// (TestLeaseConformance, TestConfigMapConformance,
// TestDistributedLockConformance) checks the contract shared by every
// store.

// removeKind is a kind under test, as deleteKind (envtest_deleted_test.go)
// is, plus how an administrator writes an object by hand (plant) and the
// resource and rule an RBAC error names.
type removeKind struct {
	deleteKind
	resource string
	group    string // API group, for a Role
	plural   string // resource name, for a Role
	// plant creates a free lock object of the store's application (""),
	// as an older baton left it: token as a plain number, counted from 1,
	// and the given finalizers.
	plant func(t *testing.T, ns, name string, token uint64, finalizers ...string)
}

func removeKinds() []removeKind {
	dk := deleteKinds()
	return []removeKind{{
		deleteKind: dk[0], resource: "leases.coordination.k8s.io", group: "coordination.k8s.io", plural: "leases",
		plant: func(t *testing.T, ns, name string, token uint64, finalizers ...string) {
			l := &coordinationv1.Lease{
				ObjectMeta: plantedMeta(name, token, finalizers),
				Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](10), LeaseTransitions: ptr.To[int32](4)},
			}
			if _, err := adminClient(t).CoordinationV1().Leases(ns).Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		deleteKind: dk[1], resource: "configmaps", group: "", plural: "configmaps",
		plant: func(t *testing.T, ns, name string, token uint64, finalizers ...string) {
			cm := &corev1.ConfigMap{ObjectMeta: plantedMeta(name, token, finalizers)}
			cm.Annotations[kubestore.AnnotationDuration] = "10"
			if _, err := adminClient(t).CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		deleteKind: dk[2], resource: "distributedlocks.baton.dev", group: "baton.dev", plural: "distributedlocks",
		plant: func(t *testing.T, ns, name string, token uint64, finalizers ...string) {
			meta := plantedMeta(name, token, finalizers)
			meta.Namespace, meta.Annotations = ns, nil // a DistributedLock keeps its token in its status
			l := &v1alpha1.DistributedLock{
				ObjectMeta: meta,
				Spec:       v1alpha1.DistributedLockSpec{LeaseDurationSeconds: 10, Capacity: 1},
				Status:     v1alpha1.DistributedLockStatus{Token: int64(token), Transitions: 4},
			}
			if err := dlAdmin(t).Create(t.Context(), l); err != nil {
				t.Fatal(err)
			}
		},
	}}
}

func plantedMeta(name string, token uint64, finalizers []string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:        name,
		Labels:      map[string]string{kubestore.LabelApplication: ""},
		Annotations: map[string]string{kubestore.AnnotationToken: strconv.FormatUint(token, 10)},
		Finalizers:  finalizers,
	}
}

// checkExists fails t unless the lock object name exists in ns and is not
// being deleted.
func (k removeKind) checkExists(t *testing.T, ns, name, what string) {
	t.Helper()
	exists, deleting, err := k.deleting(t, ns, name)
	if err != nil || !exists || deleting {
		t.Fatalf("%s: the object exists %v, is being deleted %v (%v); want it kept as it was", what, exists, deleting, err)
	}
}

// beforeDelete runs f once, before the first DELETE request it carries is
// sent: a test's way of acting between a Remove's read and its delete.
type beforeDelete struct {
	rt   http.RoundTripper
	once *sync.Once
	f    func()
}

func (b beforeDelete) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodDelete {
		b.once.Do(b.f)
	}
	return b.rt.RoundTrip(r)
}

// withBeforeDelete returns a copy of cfg whose first DELETE request runs f
// first.
func withBeforeDelete(cfg *rest.Config, f func()) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	once := new(sync.Once)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return beforeDelete{rt: rt, once: once, f: f} })
	return cfg
}

// TestRemoveConcurrentAcquisition: a contender acquires the free lock
// between Remove's read and its delete. The delete's preconditions make
// the API server refuse it; Remove reads again and reports the new holder,
// whose object and claim stay intact.
func TestRemoveConcurrentAcquisition(t *testing.T) {
	t.Parallel()
	for _, k := range removeKinds() {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			cfg := k.plane(t)
			ns := newNamespace(t)
			ctx := t.Context()
			const key = "slot.20261130t030000z"
			a, c := k.open(t, cfg, ns), k.open(t, cfg, ns)
			g, err := a.TryAcquire(ctx, key, req("pod-a", time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Release(ctx, g); err != nil {
				t.Fatal(err)
			}
			var (
				gc     backend.Grant
				cErr   error
				raced  bool
				remove = withBeforeDelete(cfg, func() {
					raced = true
					gc, cErr = c.TryAcquire(ctx, key, req("pod-c", time.Minute))
				})
			)
			err = k.open(t, remove, ns).(backend.Remover).Remove(ctx, key)
			if !raced {
				t.Fatalf("Remove of a released lock sent no delete (it returned %v)", err)
			}
			if cErr != nil {
				t.Fatalf("the contender's acquisition before the delete: %v", cErr)
			}
			t.Logf("Remove: %v", err)
			var held *backend.HeldError
			if !errors.Is(err, backend.ErrHeld) || !errors.As(err, &held) || held.Holder != "pod-c" || held.Token != gc.Token {
				t.Fatalf("Remove that lost to an acquisition: %v; want ErrHeld naming pod-c with token %d", err, gc.Token)
			}
			if gc.Token <= g.Token {
				t.Errorf("the contender's token %d after %d", gc.Token, g.Token)
			}
			k.checkExists(t, ns, key, "after the refused delete")
			if gc, err = c.Renew(ctx, gc); err != nil {
				t.Fatalf("the new holder's renewal after the refused delete: %v", err)
			}
			if err := c.Release(ctx, gc); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRemoveForbidden: an identity whose Role has the verbs for taking
// locks but not "delete" gets from Remove an error matching ErrForbidden
// that names the verb, the resource, the namespace, the rule that grants
// it and what needs it (schedule's clean-up, baton remove, a program's own
// Remove); the object stays.
func TestRemoveForbidden(t *testing.T) {
	t.Parallel()
	crdPlane(t) // the DistributedLock CRD
	ns := newNamespace(t)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "lock-takers"}}
	for _, k := range removeKinds() {
		role.Rules = append(role.Rules, rbacv1.PolicyRule{
			APIGroups: []string{k.group}, Resources: []string{k.plural}, Verbs: []string{"get", "watch", "create", "update"},
		})
	}
	bind(t, ns, "no-delete", role)
	ucfg := addUser(t, "no-delete")
	for _, k := range removeKinds() {
		t.Run(k.name, func(t *testing.T) {
			ctx := t.Context()
			s := k.open(t, ucfg, ns)
			const key = "slot.20261130t030000z"
			g, err := s.TryAcquire(ctx, key, req("pod-a", time.Minute))
			if err != nil {
				t.Fatalf("TryAcquire with the verbs for taking locks: %v", err)
			}
			if err := s.Release(ctx, g); err != nil {
				t.Fatal(err)
			}
			err = s.(backend.Remover).Remove(ctx, key)
			t.Logf("the error:\n%v", err)
			if !errors.Is(err, backend.ErrForbidden) {
				t.Fatalf("Remove without delete: %v; want ErrForbidden", err)
			}
			for _, want := range []string{`verb "delete"`, k.resource, `namespace "` + ns + `"`, "schedule", "baton remove", "own Remove",
				`resources: ["` + k.plural + `"]`, `verbs: ["get", "watch", "create", "update", "delete"]`} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not contain %s", want)
				}
			}
			k.checkExists(t, ns, key, "after the forbidden delete")
		})
	}
}

// TestRemoveThenAcquire: the store that removed a released lock's object
// creates it again at once, with a larger token, whether or not it
// watches the lock (its watch may not have reported the deletion yet);
// another store that saw the claim before the release finds the object
// missing and waits, as for any deletion (see Deleted lock objects); the
// removed object's grant is lost.
func TestRemoveThenAcquire(t *testing.T) {
	t.Parallel()
	for _, k := range removeKinds() {
		for _, watched := range []bool{false, true} {
			name := k.name
			if watched {
				name += "/watched"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				testRemoveThenAcquire(t, k, watched)
			})
		}
	}
}

func testRemoveThenAcquire(t *testing.T, k removeKind, watched bool) {
	cfg := k.plane(t)
	ns := newNamespace(t)
	ctx := t.Context()
	const key = "slot.20261130t030000z"
	s, other := k.open(t, cfg, ns), k.open(t, cfg, ns)
	if watched {
		openWatch(t, s, key)
	}
	g, err := s.TryAcquire(ctx, key, req("pod-s", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	heldErr(t, errOf(other.TryAcquire(ctx, key, req("pod-o", time.Minute))), "the other store while s holds")
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := s.(backend.Remover).Remove(ctx, key); err != nil {
		t.Fatalf("Remove of a released lock: %v", err)
	}
	if !watched { // with a watch, acquire at once: before the watch reports the deletion, as it may
		if _, err := s.Get(ctx, key); !errors.Is(err, backend.ErrNotFound) {
			t.Fatalf("Get after Remove: %v; want ErrNotFound", err)
		}
		held := heldErr(t, errOf(other.TryAcquire(ctx, key, req("pod-o", time.Minute))), "the other store, which saw the claim")
		if held.Holder != "pod-s" || held.RetryAfter <= 0 {
			t.Errorf("the other store's HeldError: holder %q RetryAfter %v; want pod-s, the claim it saw, and a wait", held.Holder, held.RetryAfter)
		}
	}
	g2, err := s.TryAcquire(ctx, key, req("pod-s", time.Minute))
	if err != nil {
		t.Fatalf("the removing store's acquisition right after Remove: %v; want it at once", err)
	}
	if g2.Token <= g.Token {
		t.Errorf("token %d after Remove, %d before; want larger", g2.Token, g.Token)
	}
	if _, err := s.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Errorf("Renew of the removed object's grant: %v; want ErrLost", err)
	}
	if g2, err = s.Renew(ctx, g2); err != nil {
		t.Fatalf("Renew of the new object's grant: %v", err)
	}
	if err := s.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}
}

// openWatch opens a Watch of key on s until t ends, and waits until it is
// established (the stores notify every channel then).
func openWatch(t *testing.T, s backend.Backend, key string) {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	changes, err := s.(backend.Watcher).Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		for range changes { // closed once the watch has ended
		}
	})
	select {
	case <-changes:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch was not established within 10s")
	}
}

// heldErr and errOf are the internal tests' helpers (deleted_test.go),
// which this package cannot see.
func heldErr(t *testing.T, err error, what string) *backend.HeldError {
	t.Helper()
	var held *backend.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("%s: %v; want a *backend.HeldError", what, err)
	}
	return held
}

func errOf(_ backend.Grant, err error) error { return err }

// TestRemoveOldSchemeTokens: objects an older baton wrote count tokens
// from 1 in their annotation (a DistributedLock: status.token). Removed,
// the next object of the name starts at its resourceVersion, above them.
// A counter above the object's resourceVersion (set by hand) would not be
// exceeded so: Remove keeps that object, and its counter goes on.
func TestRemoveOldSchemeTokens(t *testing.T) {
	t.Parallel()
	for _, k := range removeKinds() {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			cfg := k.plane(t)
			ns := newNamespace(t)
			ctx := t.Context()
			s := k.open(t, cfg, ns)

			k.plant(t, ns, "old", 5)
			if err := s.(backend.Remover).Remove(ctx, "old"); err != nil {
				t.Fatalf("Remove of a free object of the old scheme: %v", err)
			}
			g, err := s.TryAcquire(ctx, "old", req("pod-a", time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if g.Token <= 5 {
				t.Errorf("token %d after removing an object whose last token was 5", g.Token)
			}
			if err := s.Release(ctx, g); err != nil {
				t.Fatal(err)
			}

			const high = 1_000_000_000_000_000
			k.plant(t, ns, "high", high)
			err = s.(backend.Remover).Remove(ctx, "high")
			t.Logf("Remove of a counter above the resourceVersion: %v", err)
			if err == nil || errors.Is(err, backend.ErrHeld) || !strings.Contains(err.Error(), "kept") {
				t.Fatalf("Remove of an object whose token %d is above its resourceVersion: %v; want it kept, with an error saying so", uint64(high), err)
			}
			k.checkExists(t, ns, "high", "after the refusal")
			g, err = s.TryAcquire(ctx, "high", req("pod-a", time.Minute))
			if err != nil || g.Token != high+1 {
				t.Fatalf("TryAcquire of the kept object: token %d, %v; want %d", g.Token, err, uint64(high+1))
			}
			if err := s.Release(ctx, g); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRemoveDeleting: an object that someone deleted while it was free,
// kept by another controller's finalizer, is left to that deletion:
// Remove returns nil and sends no delete of its own.
func TestRemoveDeleting(t *testing.T) {
	t.Parallel()
	for _, k := range removeKinds() {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			cfg := k.plane(t)
			ns := newNamespace(t)
			ctx := t.Context()
			k.plant(t, ns, "going", 5, "example.com/keep")
			if err := k.remove(t, ns, "going"); err != nil {
				t.Fatal(err)
			}
			deletes := 0
			s := k.open(t, withBeforeDelete(cfg, func() { deletes++ }), ns)
			if err := s.(backend.Remover).Remove(ctx, "going"); err != nil || deletes != 0 {
				t.Fatalf("Remove of a free object being deleted: %v, %d deletes sent; want nil and none", err, deletes)
			}
			if exists, deleting, err := k.deleting(t, ns, "going"); err != nil || !exists || !deleting {
				t.Fatalf("after Remove: exists %v, being deleted %v (%v); want it waiting for the other finalizer", exists, deleting, err)
			}
		})
	}
}

// TestRemoveOtherApplication: an object of another application is not
// Remove's to delete.
func TestRemoveOtherApplication(t *testing.T) {
	t.Parallel()
	cfg := controlPlane(t)
	ns := newNamespace(t)
	ctx := t.Context()
	billing, reports := newLease(t, cfg, ns, kubestore.WithApplication("billing")), newLease(t, cfg, ns, kubestore.WithApplication("reports"))
	g, err := billing.TryAcquire(ctx, "nightly", req("pod-a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := billing.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := reports.Remove(ctx, "nightly"); !errors.Is(err, kubestore.ErrOtherApplication) {
		t.Fatalf("Remove of another application's object: %v; want ErrOtherApplication", err)
	}
	if _, err := billing.Get(ctx, "nightly"); err != nil {
		t.Fatalf("after the refusal: %v; want the object kept", err)
	}
}
