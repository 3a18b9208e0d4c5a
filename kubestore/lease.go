package kubestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/baton-go/baton/backend"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
)

// LeaseStore is a baton backend that keeps each lock in a Lease object
// (coordination.k8s.io/v1) of one namespace, named after the lock. It
// implements backend.Backend, backend.Watcher, backend.Lister,
// backend.ForceReleaser and backend.Remover, and is safe for concurrent use.
//
// Use one LeaseStore per process and namespace: it remembers which version
// of each Lease it has seen and since when, which is how it judges expiry
// (see the package documentation). A LeaseStore starts no goroutines except
// those of a Watch, which end with its context.
type LeaseStore struct {
	*store
}

var (
	_ backend.Backend        = (*LeaseStore)(nil)
	_ backend.Watcher        = (*LeaseStore)(nil)
	_ backend.Lister         = (*LeaseStore)(nil)
	_ backend.ForceReleaser  = (*LeaseStore)(nil)
	_ backend.Remover        = (*LeaseStore)(nil)
	_ backend.StallExplainer = (*LeaseStore)(nil)
	_ backend.Backend        = (*ConfigMapStore)(nil)
	_ backend.Watcher        = (*ConfigMapStore)(nil)
	_ backend.Lister         = (*ConfigMapStore)(nil)
	_ backend.ForceReleaser  = (*ConfigMapStore)(nil)
	_ backend.Remover        = (*ConfigMapStore)(nil)
	_ backend.StallExplainer = (*ConfigMapStore)(nil)
)

// NewLease returns a store for Lease objects in namespace.
//
// Lock traffic should not share a client-side rate limiter with the rest of
// the application: if the application spends its QPS budget, renewals wait
// behind it and the holder steps down. Give NewLease a clientset built from
// its own copy of the *rest.Config (rest.CopyConfig) with its own QPS and
// Burst, or use NewLeaseForConfig, which does that.
func NewLease(client kubernetes.Interface, namespace string, opts ...Option) (*LeaseStore, error) {
	if client == nil {
		return nil, fmt.Errorf("kube: NewLease: %w: the client is nil", backend.ErrInvalidOptions)
	}
	s, err := newStore(namespace, &leaseKind{c: client.CoordinationV1().Leases(namespace)}, opts)
	if err != nil {
		return nil, fmt.Errorf("kube: NewLease: %w", err)
	}
	s.adoptable = true
	return &LeaseStore{s}, nil
}

// NewLeaseForConfig returns a store for Lease objects in namespace that
// talks to the API server described by cfg through its own client, with its
// own client-side rate limiter (WithRateLimit; default DefaultQPS and
// DefaultBurst). cfg is copied, not changed.
func NewLeaseForConfig(cfg *rest.Config, namespace string, opts ...Option) (*LeaseStore, error) {
	client, note, err := clientForConfig(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("kube: NewLeaseForConfig: %w", err)
	}
	s, err := NewLease(client, namespace, opts...)
	if err != nil {
		return nil, err
	}
	s.clientNote = note
	return s, nil
}

// leaseKind maps lock records to Lease objects.
type leaseKind struct {
	c coordclient.LeaseInterface
}

// leaseResource is the Lease in RBAC terms.
const leaseResource = "leases.coordination.k8s.io"

func (*leaseKind) resource() string { return leaseResource }

func (*leaseKind) rbacRule(verbs string) string {
	return `- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ` + verbs
}

func (k *leaseKind) get(ctx context.Context, name string) (object, error) {
	l, err := k.c.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return object{}, wrongServer(err, k.resource(), true)
	}
	return k.answer(name, l)
}

func (k *leaseKind) create(ctx context.Context, o object) (object, error) {
	l, err := k.c.Create(ctx, encodeLease(o), metav1.CreateOptions{})
	if err != nil {
		return object{}, wrongServer(err, k.resource(), true)
	}
	return k.answer(o.name, l)
}

func (k *leaseKind) update(ctx context.Context, o object) (object, error) {
	l := encodeLease(o)
	if l.ResourceVersion == "" {
		// Never write without a precondition.
		return object{}, fmt.Errorf("kube: internal error: update of %q without a resourceVersion", o.name)
	}
	l, err := k.c.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		return object{}, wrongServer(err, k.resource(), true)
	}
	return k.answer(o.name, l)
}

func (k *leaseKind) deleteVersion(ctx context.Context, o object) error {
	pre, err := deletePreconditions(o)
	if err != nil {
		return err
	}
	return wrongServer(k.c.Delete(ctx, o.name, metav1.DeleteOptions{Preconditions: pre}), k.resource(), true)
}

func (k *leaseKind) list(ctx context.Context) ([]object, error) {
	ls, err := k.c.List(ctx, metav1.ListOptions{LabelSelector: LabelApplication})
	if err != nil {
		return nil, wrongServer(err, k.resource(), true)
	}
	out := make([]object, 0, len(ls.Items))
	var bad []error
	for i := range ls.Items {
		o, err := decodeLease(&ls.Items[i])
		if err != nil {
			bad = append(bad, fmt.Errorf("%s %s/%s: %w", k.resource(), ls.Items[i].Namespace, ls.Items[i].Name, err))
			continue
		}
		out = append(out, o)
	}
	return out, errors.Join(bad...)
}

func (k *leaseKind) watch(ctx context.Context, name, rv string) (watch.Interface, error) {
	w, err := k.c.Watch(ctx, metav1.ListOptions{
		FieldSelector:       fields.OneTermEqualSelector("metadata.name", name).String(),
		ResourceVersion:     rv,
		AllowWatchBookmarks: true,
	})
	return w, wrongServer(err, k.resource(), true)
}

// answer decodes the object the server returned for name.
func (k *leaseKind) answer(name string, l *coordinationv1.Lease) (object, error) {
	if err := checkAnswer(k.resource(), name, l.Name); err != nil {
		return object{}, err
	}
	return decodeLease(l)
}

func (*leaseKind) decode(obj runtime.Object) (object, bool, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return object{}, false, nil
	}
	o, err := decodeLease(l)
	return o, true, err
}

// decodeLease reads the lock record from l. A Lease that baton did not
// create (no token annotation nor other mark of baton's, see tokenOf)
// decodes with baton false; an unreadable token is an error that the
// store reports as a corrupt record.
func decodeLease(l *coordinationv1.Lease) (object, error) {
	o := object{name: l.Name, rv: l.ResourceVersion, uid: string(l.UID), deleting: l.DeletionTimestamp != nil, raw: l}
	o.claimed = slices.Contains(l.Finalizers, FinalizerClaim)
	o.app, o.hasApp = l.Labels[LabelApplication]
	if s, ok := tokenOf(l); ok {
		o.baton = true
		var err error
		if o.token, o.pending, err = parseToken(s, o.rv); err != nil {
			return o, errCorrupt(err)
		}
	}
	o.nonce = l.Annotations[AnnotationNonce]
	sp := &l.Spec
	if sp.HolderIdentity != nil {
		o.holder = *sp.HolderIdentity
	}
	if sp.LeaseDurationSeconds != nil {
		o.durationSec = *sp.LeaseDurationSeconds
	}
	if sp.AcquireTime != nil {
		o.acquire = sp.AcquireTime.Time
	}
	if sp.RenewTime != nil {
		o.renew = sp.RenewTime.Time
	}
	if sp.LeaseTransitions != nil {
		o.transitions = *sp.LeaseTransitions
	}
	if o.durationSec < 0 || o.transitions < 0 {
		// The API server's validation refuses both; a record that has them
		// did not come through it as written.
		return o, errCorrupt(fmt.Errorf("negative spec.leaseDurationSeconds (%d) or spec.leaseTransitions (%d)", o.durationSec, o.transitions))
	}
	// A claim without a duration (removed by hand) is judged by remaining.
	return o, nil
}

// encodeLease writes o onto a deep copy of the Lease it was decoded from
// (or a new Lease), keeping its resourceVersion as the update's
// precondition.
func encodeLease(o object) *coordinationv1.Lease {
	var l *coordinationv1.Lease
	if prev, ok := o.raw.(*coordinationv1.Lease); ok && prev != nil {
		l = prev.DeepCopy()
	} else {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: o.name}}
	}
	l.ResourceVersion = o.rv
	l.Finalizers = withClaimFinalizer(l.Finalizers, o.holder != "", l.DeletionTimestamp != nil)
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if o.hasApp {
		l.Labels[LabelApplication] = o.app
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AnnotationToken] = tokenAnnotation(o)
	if o.nonce != "" {
		l.Annotations[AnnotationNonce] = o.nonce
	} else {
		delete(l.Annotations, AnnotationNonce)
	}
	sp := &l.Spec
	sp.HolderIdentity = nil
	if o.holder != "" {
		sp.HolderIdentity = &o.holder
	}
	sp.LeaseDurationSeconds = nil
	if o.durationSec > 0 {
		sp.LeaseDurationSeconds = &o.durationSec
	}
	sp.AcquireTime = microTime(o.acquire)
	sp.RenewTime = microTime(o.renew)
	sp.LeaseTransitions = &o.transitions
	return l
}

func microTime(t time.Time) *metav1.MicroTime {
	if t.IsZero() {
		return nil
	}
	m := metav1.NewMicroTime(t)
	return &m
}
