package kubestore

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
)

// Event reasons recorded by EventObserver.
const (
	ReasonStartedLeading = "StartedLeading" // this holder's term started
	ReasonStoppedLeading = "StoppedLeading" // this holder's term ended and its work returned
	ReasonLockLost       = "LockLost"       // the lock was lost (Warning)
	ReasonReleased       = "Released"       // the holder released the lock
)

// EventObserver is a baton.Observer that records Kubernetes Events on the
// lock object (kind Lease, ConfigMap or DistributedLock) when a holder acquires, loses or
// releases a lock and when an elector's term starts or stops, so that
// `kubectl describe lease NAME` and `kubectl get events` show leadership
// changes. It needs the "create" verb on events in the namespace.
//
// Each Event's involvedObject names the lock object by kind, apiVersion,
// namespace, name and uid (and its resourceVersion when known): kubectl
// describe lists only the Events whose involvedObject.uid is the
// object's. The uid comes from the store's view of the object if the
// observer was given the store (WithLockStore), else from one GET of the
// object per term (which needs the "get" verb the lock protocol already
// uses). An Event whose object cannot be read is still recorded, without
// a uid: kubectl get events shows it, kubectl describe does not.
//
// Observe never blocks the lock engine: events go through a bounded queue
// to one goroutine; when the queue is full, events are dropped and counted
// in a log line. Close stops the goroutine after sending what is queued.
type EventObserver struct {
	client    kubernetes.Interface
	namespace string
	kind      string // "Lease", "ConfigMap" or "DistributedLock"
	apiVer    string
	component string
	log       *slog.Logger

	// view is fixed by NewEventObserver; refs and refWarned belong to
	// the run goroutine. See involvedObject.
	view      LockStore
	refs      map[string]cachedRef
	refWarned bool

	queue chan baton.Event
	done  chan struct{}

	// mu guards the fields below; Observe sends on queue under it, so
	// that Close cannot close queue between its check and its send.
	mu      sync.Mutex
	closed  bool
	dropped int
	denied  bool
}

// NewEventObserver returns an observer that records events in namespace on
// lock objects of kind "Lease", "ConfigMap" or "DistributedLock", with component as the
// event's source (for example "baton"). Call Close when done.
func NewEventObserver(client kubernetes.Interface, namespace, kind, component string, log *slog.Logger, opts ...EventOption) (*EventObserver, error) {
	o := &EventObserver{client: client, namespace: namespace, kind: kind, component: component, log: log,
		refs: map[string]cachedRef{}, queue: make(chan baton.Event, 64), done: make(chan struct{})}
	switch kind {
	case "Lease":
		o.apiVer = "coordination.k8s.io/v1"
	case "ConfigMap":
		o.apiVer = "v1"
	case "DistributedLock":
		o.apiVer = "baton.dev/v1alpha1"
	default:
		return nil, fmt.Errorf("kube: events: %w: unknown lock object kind %q (want Lease, ConfigMap or DistributedLock)", backend.ErrInvalidOptions, kind)
	}
	if client == nil {
		return nil, fmt.Errorf("kube: events: %w: the client is nil", backend.ErrInvalidOptions)
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
	if err := o.checkView(); err != nil {
		return nil, err
	}
	go o.run()
	return o, nil
}

// Observe implements baton.Observer.
func (o *EventObserver) Observe(e baton.Event) {
	switch e.Kind {
	case baton.EventStartedLeading, baton.EventStoppedLeading, baton.EventLost, baton.EventReleased:
	default:
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	select {
	case o.queue <- e:
	default:
		o.dropped++
	}
}

// Close sends the queued events (each bounded by a short timeout) and
// stops. Events observed from then on are dropped. A second Close returns
// nil.
func (o *EventObserver) Close() error {
	o.mu.Lock()
	if !o.closed {
		o.closed = true
		close(o.queue)
	}
	o.mu.Unlock()
	<-o.done
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dropped > 0 {
		o.log.Warn("kube: events dropped: the queue was full", "dropped", o.dropped)
	}
	return nil
}

func (o *EventObserver) run() {
	defer close(o.done)
	for e := range o.queue {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := o.record(ctx, e)
		cancel()
		if err != nil {
			o.mu.Lock()
			first := !o.denied
			o.denied = true
			o.mu.Unlock()
			if first {
				o.log.Warn("kube: recording a Kubernetes Event failed; leadership changes are still logged here", "err", err)
			}
		}
	}
}

func (o *EventObserver) record(ctx context.Context, e baton.Event) error {
	reason, typ, msg := "", corev1.EventTypeNormal, ""
	switch e.Kind {
	case baton.EventStartedLeading:
		reason, msg = ReasonStartedLeading, fmt.Sprintf("%s started leading with fencing token %d", e.Holder, e.Token)
	case baton.EventStoppedLeading:
		reason, msg = ReasonStoppedLeading, fmt.Sprintf("%s stopped leading (token %d): %v", e.Holder, e.Token, e.Err)
	case baton.EventLost:
		reason, typ, msg = ReasonLockLost, corev1.EventTypeWarning, fmt.Sprintf("%s lost the lock (token %d): %v", e.Holder, e.Token, e.Err)
	case baton.EventReleased:
		reason, msg = ReasonReleased, fmt.Sprintf("%s released the lock (token %d)", e.Holder, e.Token)
		if e.Err != nil {
			typ, msg = corev1.EventTypeWarning, fmt.Sprintf("%s ended its tenure (token %d), but its release failed, so the lock is free only once its claim expires: %v", e.Holder, e.Token, e.Err)
		}
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: e.Name + "-", Namespace: o.namespace},
		InvolvedObject: o.involvedObject(ctx, e),
		Source:         corev1.EventSource{Component: o.component},
		Reason:         reason, Message: msg, Type: typ,
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "baton.dev/" + o.component, ReportingInstance: e.Holder,
	}
	_, err := o.client.CoreV1().Events(o.namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}
