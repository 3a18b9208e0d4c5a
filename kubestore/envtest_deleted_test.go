package kubestore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// deleteKind is one Kubernetes kind under test: how to open a store and
// how an operator deletes and reads the lock object (kubectl delete,
// kubectl get), through the admin's own client.
type deleteKind struct {
	name   string
	plane  func(t *testing.T) *rest.Config
	open   func(t *testing.T, cfg *rest.Config, ns string) backend.Backend
	remove func(t *testing.T, ns, name string) error
	// deleting reports whether the object exists and whether it is
	// being deleted (metadata.deletionTimestamp set).
	deleting func(t *testing.T, ns, name string) (exists, deleting bool, err error)
}

func deleteKinds() []deleteKind {
	return []deleteKind{{
		name:  "Lease",
		plane: controlPlane,
		open: func(t *testing.T, cfg *rest.Config, ns string) backend.Backend {
			return newLease(t, cfg, ns)
		},
		remove: func(t *testing.T, ns, name string) error {
			return adminClient(t).CoordinationV1().Leases(ns).Delete(t.Context(), name, metav1.DeleteOptions{})
		},
		deleting: func(t *testing.T, ns, name string) (bool, bool, error) {
			l, err := adminClient(t).CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
			return found(err, l)
		},
	}, {
		name:  "ConfigMap",
		plane: controlPlane,
		open: func(t *testing.T, cfg *rest.Config, ns string) backend.Backend {
			s, err := kubestore.NewConfigMapForConfig(cfg, ns, kubestore.WithRateLimit(200, 400))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		remove: func(t *testing.T, ns, name string) error {
			return adminClient(t).CoreV1().ConfigMaps(ns).Delete(t.Context(), name, metav1.DeleteOptions{})
		},
		deleting: func(t *testing.T, ns, name string) (bool, bool, error) {
			cm, err := adminClient(t).CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
			return found(err, cm)
		},
	}, {
		name:  "DistributedLock",
		plane: crdPlane,
		open: func(t *testing.T, cfg *rest.Config, ns string) backend.Backend {
			return newDL(t, cfg, ns)
		},
		remove: func(t *testing.T, ns, name string) error {
			return dlAdmin(t).Delete(t.Context(), &v1alpha1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		},
		deleting: func(t *testing.T, ns, name string) (bool, bool, error) {
			l := &v1alpha1.DistributedLock{}
			err := dlAdmin(t).Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, l)
			return found(err, l)
		},
	}}
}

func found(err error, o metav1.Object) (exists, deleting bool, _ error) {
	if apierrors.IsNotFound(err) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return true, o.GetDeletionTimestamp() != nil, nil
}

// acquireEventually retries TryAcquire while the lock is held, waiting
// RetryAfter (bounded) between attempts, until it succeeds or ctx ends.
func acquireEventually(ctx context.Context, t *testing.T, s backend.Backend, key string, r backend.Request) (backend.Grant, time.Time) {
	t.Helper()
	for {
		g, err := s.TryAcquire(ctx, key, r)
		if err == nil {
			return g, time.Now()
		}
		var held *backend.HeldError
		if !errors.As(err, &held) {
			t.Fatalf("acquire %s: %v", key, err)
		}
		wait := min(max(held.RetryAfter, 10*time.Millisecond), time.Second)
		select {
		case <-ctx.Done():
			t.Fatalf("acquire %s: not acquired before the test's deadline (last: %v)", key, err)
		case <-time.After(wait):
		}
	}
}

// TestDeletedWhileHeld: an operator deletes the lock object while a
// holder holds it and a standby (with a watch open) waits. The standby
// does not acquire before the claim it saw could have expired (one lease
// duration after it could first have seen the object missing), the
// holder's renew gets ErrLost and does not recreate the object, and the
// standby's token is larger than the holder's.
func TestDeletedWhileHeld(t *testing.T) {
	for _, k := range deleteKinds() {
		t.Run(k.name, func(t *testing.T) {
			cfg := k.plane(t)
			ns := newNamespace(t)
			a, b := k.open(t, cfg, ns), k.open(t, cfg, ns)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			const key, ttl = "deleted", 2 * time.Second
			ga, err := a.TryAcquire(ctx, key, req("a", ttl))
			if err != nil {
				t.Fatal(err)
			}
			if ga, err = a.Renew(ctx, ga); err != nil {
				t.Fatal(err)
			}
			wctx, wcancel := context.WithCancel(ctx)
			defer wcancel()
			if _, err := b.(backend.Watcher).Watch(wctx, key); err != nil {
				t.Fatal(err)
			}
			rb := req("b", ttl)
			if _, err := b.TryAcquire(ctx, key, rb); !errors.As(err, new(*backend.HeldError)) {
				t.Fatalf("b while a holds: %v; want a HeldError", err)
			}

			deleted := time.Now() // b can first see the object missing after this
			if err := k.remove(t, ns, key); err != nil {
				t.Fatal(err)
			}
			if _, err := b.TryAcquire(ctx, key, rb); !errors.As(err, new(*backend.HeldError)) {
				t.Fatalf("b right after the deletion: %v; want a HeldError (the claim it saw may still be valid)", err)
			}
			if _, err := a.Renew(ctx, ga); !errors.Is(err, backend.ErrLost) {
				t.Fatalf("the holder's renew of the deleted object: %v; want ErrLost", err)
			}
			// FinalizerClaim keeps the object, being deleted, until the
			// claim ends; the holder neither recreates nor frees it.
			if ok, del, err := k.deleting(t, ns, key); err != nil || !ok || !del {
				t.Fatalf("after the holder's renew: exists %v, deleting %v (%v); want the object kept, being deleted", ok, del, err)
			}
			gb, at := acquireEventually(ctx, t, b, key, rb)
			if at.Before(deleted.Add(ttl)) {
				t.Errorf("b acquired %v after the deletion; not before one lease duration (%v) may pass", at.Sub(deleted), ttl)
			}
			if gb.Token <= ga.Token {
				t.Errorf("token after the deletion %d, before %d; want larger", gb.Token, ga.Token)
			}
			if _, err := a.Renew(ctx, ga); !errors.Is(err, backend.ErrLost) {
				t.Errorf("the former holder's renew of the new object: %v; want ErrLost", err)
			}
			// The creator writes its token as a number; tokens go on.
			if gb, err = b.Renew(ctx, gb); err != nil {
				t.Fatal(err)
			}
			if err := b.Release(ctx, gb); err != nil {
				t.Fatal(err)
			}
			g3, err := a.TryAcquire(ctx, key, req("a", ttl))
			if err != nil || g3.Token != gb.Token+1 {
				t.Fatalf("acquire after release: token %d, %v; want %d", g3.Token, err, gb.Token+1)
			}
		})
	}
}

// TestDeletedWhileHeldNoStandby: with nobody waiting, the holder's renew
// of the object being deleted gets ErrLost and leaves it (FinalizerClaim
// keeps it until the claim ends). Then either its own next acquisition
// waits for its former claim to end, or its release (its work has
// stopped) lets the deletion finish at once; the next token is larger.
func TestDeletedWhileHeldNoStandby(t *testing.T) {
	for _, k := range deleteKinds() {
		for _, released := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/released=%v", k.name, released), func(t *testing.T) {
				cfg := k.plane(t)
				ns := newNamespace(t)
				a := k.open(t, cfg, ns)
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				const key, ttl = "deleted", 2 * time.Second
				ga, err := a.TryAcquire(ctx, key, req("a", ttl))
				if err != nil {
					t.Fatal(err)
				}
				deleted := time.Now()
				if err := k.remove(t, ns, key); err != nil {
					t.Fatal(err)
				}
				if _, err := a.Renew(ctx, ga); !errors.Is(err, backend.ErrLost) {
					t.Fatalf("renew of the deleted object: %v; want ErrLost", err)
				}
				if ok, del, err := k.deleting(t, ns, key); err != nil || !ok || !del {
					t.Fatalf("after the renew: exists %v, deleting %v (%v); want the object kept, being deleted", ok, del, err)
				}
				if !released {
					g2, at := acquireEventually(ctx, t, a, key, req("a", ttl))
					if at.Before(deleted.Add(ttl)) {
						t.Errorf("reacquired %v after the deletion; not before one lease duration (%v) may pass", at.Sub(deleted), ttl)
					}
					if g2.Token <= ga.Token {
						t.Errorf("token after the deletion %d, before %d; want larger", g2.Token, ga.Token)
					}
					return
				}
				if err := a.Release(ctx, ga); err != nil {
					t.Fatalf("release of the object being deleted: %v", err)
				}
				if ok, _, err := k.deleting(t, ns, key); err != nil || ok {
					t.Fatalf("after the release the object exists (%v, %v); want it gone", ok, err)
				}
				g2, err := a.TryAcquire(ctx, key, req("a", ttl))
				if err != nil || g2.Token <= ga.Token {
					t.Fatalf("acquire after the release: token %d, %v; want more than %d, at once", g2.Token, err, ga.Token)
				}
			})
		}
	}
}

// TestLeaseOldTokensContinue: a Lease written before tokens came from the
// resourceVersion (token annotation "5") keeps counting from its
// annotation, and once deleted its next object's tokens are larger.
func TestLeaseOldTokensContinue(t *testing.T) {
	cfg := controlPlane(t)
	ns := newNamespace(t)
	ctx := t.Context()
	old := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: "old", Labels: map[string]string{kubestore.LabelApplication: ""},
		Annotations: map[string]string{kubestore.AnnotationToken: "5"},
	}}
	leases := adminClient(t).CoordinationV1().Leases(ns)
	if _, err := leases.Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := newLease(t, cfg, ns)
	g, err := s.TryAcquire(ctx, "old", req("a", time.Second))
	if err != nil || g.Token != 6 {
		t.Fatalf("acquire of an old-format Lease: token %d, %v; want 6", g.Token, err)
	}
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := leases.Delete(ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	g2, err := newLease(t, cfg, ns).TryAcquire(ctx, "old", req("b", time.Second))
	if err != nil || g2.Token <= g.Token {
		t.Fatalf("acquire after deleting an old-format Lease: token %d, %v; want more than %d", g2.Token, err, g.Token)
	}
	l, err := leases.Get(ctx, "old", metav1.GetOptions{})
	if err != nil || l.Annotations[kubestore.AnnotationToken] != kubestore.TokenFromResourceVersion || l.ResourceVersion == "" {
		t.Fatalf("the created Lease: %v, %v; want its token marked %q", l, err, kubestore.TokenFromResourceVersion)
	}
}
