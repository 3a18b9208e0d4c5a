package kubestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/baton-go/baton/backend"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coreclient "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
)

// Annotations of the ConfigMap record format (besides AnnotationToken,
// AnnotationNonce and LabelApplication, which mean what they mean on a
// Lease). They mirror the Lease spec fields.
const (
	AnnotationHolder      = "baton.dev/holder"                 // holderIdentity; absent when released
	AnnotationDuration    = "baton.dev/lease-duration-seconds" // decimal seconds
	AnnotationAcquireTime = "baton.dev/acquire-time"           // RFC 3339 with nanoseconds, holder's wall clock
	AnnotationRenewTime   = "baton.dev/renew-time"             // RFC 3339 with nanoseconds, holder's wall clock
	AnnotationTransitions = "baton.dev/transitions"            // decimal, like leaseTransitions
)

// ConfigMapStore is a baton backend that keeps each lock in a ConfigMap of
// one namespace, named after the lock, for clusters or policies that allow
// ConfigMaps but not Leases. It gives the same guarantees as LeaseStore,
// with the same clock model (expiry by local observation of an unchanged
// resourceVersion) and conditional writes; see the package documentation.
//
// The record lives entirely in annotations (AnnotationToken,
// AnnotationNonce, AnnotationHolder, AnnotationDuration,
// AnnotationAcquireTime, AnnotationRenewTime, AnnotationTransitions) and
// the LabelApplication label; baton leaves the ConfigMap's data alone.
//
// It replaces the pattern "every 50 s: write my name into a ConfigMap,
// sleep 2 s, read it back; if it is still my name, I am the leader". That
// pattern fails because the write carries no precondition: two replicas
// both write, and whichever reads back after the other's write loses, but
// a replica that reads back *between* the two writes still sees its own
// name; both then act as leader. Sleeping longer only narrows the window.
// It also has no expiry that does not compare clocks, and no fencing
// token. ConfigMapStore makes every write conditional on the
// resourceVersion it read, so exactly one of two concurrent writers wins
// and the other gets a conflict and sees the winner.
type ConfigMapStore struct {
	*store
}

// NewConfigMap returns a store for ConfigMap objects in namespace. See
// NewLease about giving lock traffic its own client and rate limiter.
func NewConfigMap(client kubernetes.Interface, namespace string, opts ...Option) (*ConfigMapStore, error) {
	if client == nil {
		return nil, fmt.Errorf("kube: NewConfigMap: %w: the client is nil", backend.ErrInvalidOptions)
	}
	s, err := newStore(namespace, &configMapKind{c: client.CoreV1().ConfigMaps(namespace)}, opts)
	if err != nil {
		return nil, fmt.Errorf("kube: NewConfigMap: %w", err)
	}
	if s.o.adopt {
		return nil, fmt.Errorf("kube: NewConfigMap: %w: WithAdoption applies to Leases only", backend.ErrInvalidOptions)
	}
	return &ConfigMapStore{s}, nil
}

// NewConfigMapForConfig is NewConfigMap with a dedicated client built from
// a copy of cfg, as NewLeaseForConfig.
func NewConfigMapForConfig(cfg *rest.Config, namespace string, opts ...Option) (*ConfigMapStore, error) {
	client, note, err := clientForConfig(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("kube: NewConfigMapForConfig: %w", err)
	}
	s, err := NewConfigMap(client, namespace, opts...)
	if err != nil {
		return nil, err
	}
	s.clientNote = note
	return s, nil
}

type configMapKind struct {
	c coreclient.ConfigMapInterface
}

func (*configMapKind) resource() string { return "configmaps" }

func (*configMapKind) rbacRule(verbs string) string {
	return `- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ` + verbs
}

func (k *configMapKind) get(ctx context.Context, name string) (object, error) {
	cm, err := k.c.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return object{}, wrongServer(err, k.resource(), true)
	}
	return k.answer(name, cm)
}

func (k *configMapKind) create(ctx context.Context, o object) (object, error) {
	cm, err := k.c.Create(ctx, encodeConfigMap(o), metav1.CreateOptions{})
	if err != nil {
		return object{}, wrongServer(err, k.resource(), true)
	}
	return k.answer(o.name, cm)
}

func (k *configMapKind) update(ctx context.Context, o object) (object, error) {
	cm := encodeConfigMap(o)
	if cm.ResourceVersion == "" {
		return object{}, fmt.Errorf("kube: internal error: update of %q without a resourceVersion", o.name)
	}
	cm, err := k.c.Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		return object{}, wrongServer(err, k.resource(), true)
	}
	return k.answer(o.name, cm)
}

func (k *configMapKind) deleteVersion(ctx context.Context, o object) error {
	pre, err := deletePreconditions(o)
	if err != nil {
		return err
	}
	return wrongServer(k.c.Delete(ctx, o.name, metav1.DeleteOptions{Preconditions: pre}), k.resource(), true)
}

func (k *configMapKind) list(ctx context.Context) ([]object, error) {
	cms, err := k.c.List(ctx, metav1.ListOptions{LabelSelector: LabelApplication})
	if err != nil {
		return nil, wrongServer(err, k.resource(), true)
	}
	out := make([]object, 0, len(cms.Items))
	var bad []error
	for i := range cms.Items {
		o, err := decodeConfigMap(&cms.Items[i])
		if err != nil {
			bad = append(bad, fmt.Errorf("%s %s/%s: %w", k.resource(), cms.Items[i].Namespace, cms.Items[i].Name, err))
			continue
		}
		out = append(out, o)
	}
	return out, errors.Join(bad...)
}

func (k *configMapKind) watch(ctx context.Context, name, rv string) (watch.Interface, error) {
	w, err := k.c.Watch(ctx, metav1.ListOptions{
		FieldSelector:       fields.OneTermEqualSelector("metadata.name", name).String(),
		ResourceVersion:     rv,
		AllowWatchBookmarks: true,
	})
	return w, wrongServer(err, k.resource(), true)
}

// answer decodes the object the server returned for name.
func (k *configMapKind) answer(name string, cm *corev1.ConfigMap) (object, error) {
	if err := checkAnswer(k.resource(), name, cm.Name); err != nil {
		return object{}, err
	}
	return decodeConfigMap(cm)
}

func (*configMapKind) decode(obj runtime.Object) (object, bool, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return object{}, false, nil
	}
	o, err := decodeConfigMap(cm)
	return o, true, err
}

func decodeConfigMap(cm *corev1.ConfigMap) (object, error) {
	o := object{name: cm.Name, rv: cm.ResourceVersion, uid: string(cm.UID), deleting: cm.DeletionTimestamp != nil, raw: cm}
	o.claimed = slices.Contains(cm.Finalizers, FinalizerClaim)
	o.app, o.hasApp = cm.Labels[LabelApplication]
	a := cm.Annotations
	s, ok := tokenOf(cm)
	if !ok {
		return o, nil // not baton's
	}
	o.baton = true
	var err error
	if o.token, o.pending, err = parseToken(s, o.rv); err != nil {
		return o, errCorrupt(err)
	}
	o.holder, o.nonce = a[AnnotationHolder], a[AnnotationNonce]
	if s, ok := a[AnnotationDuration]; ok {
		d, err := strconv.ParseInt(s, 10, 32)
		if err != nil || d < 0 {
			return o, errCorrupt(fmt.Errorf("annotation %s=%q is not a number of seconds", AnnotationDuration, s))
		}
		o.durationSec = int32(d)
	}
	if s, ok := a[AnnotationTransitions]; ok {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 0 {
			return o, errCorrupt(fmt.Errorf("annotation %s=%q is not a count", AnnotationTransitions, s))
		}
		o.transitions = int32(n)
	}
	// Times are for people only; an unreadable one is shown as unset.
	o.acquire, _ = time.Parse(time.RFC3339Nano, a[AnnotationAcquireTime])
	o.renew, _ = time.Parse(time.RFC3339Nano, a[AnnotationRenewTime])
	// A claim without a duration (removed by hand) is judged by remaining.
	return o, nil
}

func encodeConfigMap(o object) *corev1.ConfigMap {
	var cm *corev1.ConfigMap
	if prev, ok := o.raw.(*corev1.ConfigMap); ok && prev != nil {
		cm = prev.DeepCopy()
	} else {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: o.name}}
	}
	cm.ResourceVersion = o.rv
	cm.Finalizers = withClaimFinalizer(cm.Finalizers, o.holder != "", cm.DeletionTimestamp != nil)
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	if o.hasApp {
		cm.Labels[LabelApplication] = o.app
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	a := cm.Annotations
	set := func(k, v string) {
		if v == "" {
			delete(a, k)
		} else {
			a[k] = v
		}
	}
	set(AnnotationToken, tokenAnnotation(o))
	set(AnnotationNonce, o.nonce)
	set(AnnotationHolder, o.holder)
	set(AnnotationDuration, strconv.FormatInt(int64(o.durationSec), 10))
	set(AnnotationTransitions, strconv.FormatInt(int64(o.transitions), 10))
	set(AnnotationAcquireTime, formatTime(o.acquire))
	set(AnnotationRenewTime, formatTime(o.renew))
	return cm
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
