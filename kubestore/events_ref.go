package kubestore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// LockStore is a store of this package: *LeaseStore, *ConfigMapStore or
// *DistributedLockStore. It is what WithLockStore accepts; other types
// cannot implement it.
type LockStore interface {
	backend.Backend
	// Namespace returns the namespace the store keeps its objects in.
	Namespace() string
	// lockKind is the Kubernetes kind of the store's lock objects.
	lockKind() string
	// objectRef returns the uid and resourceVersion of the lock object
	// name as this store last wrote it (or, for Lease and ConfigMap, as
	// its watch last delivered it); ok is false if it knows neither.
	objectRef(name string) (ref objectRef, ok bool)
}

var (
	_ LockStore = (*LeaseStore)(nil)
	_ LockStore = (*ConfigMapStore)(nil)
	_ LockStore = (*DistributedLockStore)(nil)
)

// EventOption configures NewEventObserver.
type EventOption func(*EventObserver)

// WithLockStore lets the observer take the uid of the lock object from
// store's view of it (the object as store last wrote or watched it)
// instead of reading the object from the API server once per term. store
// must be the one the observed locks use: same namespace, same kind, or
// NewEventObserver returns an error.
func WithLockStore(store LockStore) EventOption {
	return func(o *EventObserver) { o.view = store }
}

// objectRef identifies one version of a lock object.
type objectRef struct {
	uid types.UID
	rv  string
}

// cachedRef is the lock object as read for the term with fencing token
// token. A term's events all concern one object: a holder whose object is
// deleted and created again loses the lock, and every new term has a new
// token, so an event with another token reads the object again.
type cachedRef struct {
	token uint64
	ref   objectRef
}

// maxCachedRefs bounds the per-name cache; past it the cache starts
// afresh (one more GET per name in use).
const maxCachedRefs = 256

// checkView refuses a store of another namespace or kind.
func (o *EventObserver) checkView() error {
	if o.view == nil {
		return nil
	}
	if ns, kind := o.view.Namespace(), o.view.lockKind(); ns != o.namespace || kind != o.kind {
		return fmt.Errorf("kube: events: WithLockStore: the store keeps %s objects in namespace %q, the observer records events on %s objects in %q",
			kind, ns, o.kind, o.namespace)
	}
	return nil
}

// involvedObject is the reference to e's lock object. Its uid and
// resourceVersion come from the store's view if at hand, else from the
// cache if it holds the object for e's term, else from one GET; without
// them (the object is gone, or cannot be read) the reference names the
// object by kind, namespace and name only.
func (o *EventObserver) involvedObject(ctx context.Context, e baton.Event) corev1.ObjectReference {
	ref := corev1.ObjectReference{Kind: o.kind, APIVersion: o.apiVer, Namespace: o.namespace, Name: e.Name}
	r, ok := o.lookup(ctx, e)
	if ok {
		ref.UID, ref.ResourceVersion = r.uid, r.rv
	}
	return ref
}

func (o *EventObserver) lookup(ctx context.Context, e baton.Event) (objectRef, bool) {
	if o.view != nil {
		if r, ok := o.view.objectRef(e.Name); ok {
			o.remember(e, r)
			return r, true
		}
	}
	if c, ok := o.refs[e.Name]; ok && c.token == e.Token {
		return c.ref, true
	}
	r, err := o.get(ctx, e.Name)
	if err != nil {
		if !apierrors.IsNotFound(err) {
			o.warnRef(e.Name, err)
		}
		return objectRef{}, false
	}
	o.remember(e, r)
	return r, true
}

func (o *EventObserver) remember(e baton.Event, r objectRef) {
	if _, ok := o.refs[e.Name]; !ok && len(o.refs) >= maxCachedRefs {
		clear(o.refs)
	}
	o.refs[e.Name] = cachedRef{token: e.Token, ref: r}
}

// warnRef logs the first failure to read a lock object.
func (o *EventObserver) warnRef(name string, err error) {
	if o.refWarned {
		return
	}
	o.refWarned = true
	o.log.Warn("kube: reading the lock object for its Events failed; they are recorded without its uid, "+
		"so kubectl get events shows them and kubectl describe does not",
		"kind", o.kind, "namespace", o.namespace, "name", name, "err", err)
}

// get reads the uid and resourceVersion of the lock object name.
func (o *EventObserver) get(ctx context.Context, name string) (objectRef, error) {
	var meta metav1.Object
	switch o.kind {
	case "Lease":
		l, err := o.client.CoordinationV1().Leases(o.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return objectRef{}, fmt.Errorf("get lease %s/%s: %w", o.namespace, name, err)
		}
		meta = l
	case "ConfigMap":
		cm, err := o.client.CoreV1().ConfigMaps(o.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return objectRef{}, fmt.Errorf("get configmap %s/%s: %w", o.namespace, name, err)
		}
		meta = cm
	default:
		m, err := o.getDistributedLock(ctx, name)
		if err != nil {
			return objectRef{}, err
		}
		meta = m
	}
	return objectRef{uid: meta.GetUID(), rv: meta.GetResourceVersion()}, nil
}

// getDistributedLock reads the metadata of a DistributedLock through the
// clientset's REST client: a kubernetes.Interface has no typed client for
// custom resources.
func (o *EventObserver) getDistributedLock(ctx context.Context, name string) (*metav1.PartialObjectMetadata, error) {
	rc, ok := o.client.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil {
		return nil, fmt.Errorf("get distributedlock %s/%s: the clientset has no REST client", o.namespace, name)
	}
	raw, err := rc.Get().
		AbsPath("/apis", "baton.dev", "v1alpha1", "namespaces", o.namespace, "distributedlocks", name).
		SetHeader("Accept", "application/json").
		Do(ctx).Raw()
	if err != nil {
		return nil, fmt.Errorf("get distributedlock %s/%s: %w", o.namespace, name, err)
	}
	var m metav1.PartialObjectMetadata
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("get distributedlock %s/%s: decoding: %w", o.namespace, name, err)
	}
	return &m, nil
}

// lockKind implements LockStore.
func (s *store) lockKind() string {
	switch s.k.(type) {
	case *leaseKind:
		return "Lease"
	case *configMapKind:
		return "ConfigMap"
	}
	return ""
}

// objectRef implements LockStore: the object as this process last wrote
// it, else as the live watch last delivered it.
func (s *store) objectRef(name string) (objectRef, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if obs, ok := s.seen[name]; ok && obs.obj != nil && obs.obj.uid != "" {
		return objectRef{uid: types.UID(obs.obj.uid), rv: obs.obj.rv}, true
	}
	if sw := s.watches[name]; sw != nil && sw.valid && sw.exists && sw.obj.uid != "" {
		return objectRef{uid: types.UID(sw.obj.uid), rv: sw.obj.rv}, true
	}
	return objectRef{}, false
}

// lockKind implements LockStore.
func (*DistributedLockStore) lockKind() string { return "DistributedLock" }

// objectRef implements LockStore: the object as this process last wrote
// it.
func (s *DistributedLockStore) objectRef(name string) (objectRef, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.last[name]; l != nil && l.UID != "" {
		return objectRef{uid: l.UID, rv: l.ResourceVersion}, true
	}
	return objectRef{}, false
}
