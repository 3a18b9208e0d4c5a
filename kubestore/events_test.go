package kubestore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
)

// eventKind is one kind of lock object, for the Event tests.
type eventKind struct {
	kind  string
	gvr   schema.GroupVersionResource
	plane func(t *testing.T) *rest.Config
	open  func(t *testing.T, cfg *rest.Config, ns string) kubestore.LockStore
}

var eventKinds = []eventKind{
	{
		kind: "Lease", gvr: schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"},
		plane: controlPlane,
		open:  func(t *testing.T, cfg *rest.Config, ns string) kubestore.LockStore { return newLease(t, cfg, ns) },
	},
	{
		kind: "ConfigMap", gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		plane: controlPlane,
		open: func(t *testing.T, cfg *rest.Config, ns string) kubestore.LockStore {
			s, err := kubestore.NewConfigMapForConfig(cfg, ns, kubestore.WithRateLimit(200, 400))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	},
	{
		kind: "DistributedLock", gvr: schema.GroupVersionResource{Group: "baton.dev", Version: "v1alpha1", Resource: "distributedlocks"},
		plane: crdPlane,
		open:  func(t *testing.T, cfg *rest.Config, ns string) kubestore.LockStore { return newDL(t, cfg, ns) },
	},
}

// The leadership Events of a term carry the lock object's uid, so that
// kubectl describe (which selects Events on involvedObject.uid) shows them,
// for each kind of lock object. Without the store, the observer reads the
// object once per term; after the object is deleted and created again,
// the next term's Events carry the new uid and the old object keeps the
// old term's.
func TestEventObserverInvolvedObjectUID(t *testing.T) {
	t.Parallel()
	for _, k := range eventKinds {
		t.Run(k.kind, func(t *testing.T) {
			t.Parallel()
			cfg := k.plane(t)
			ns := newNamespace(t)
			store := k.open(t, cfg, ns)
			cs, gets := countingClient(t, cfg, k.gvr.Resource)
			obs := newObserver(t, cs, ns, k.kind)
			objects := adminDynamic(t).Resource(k.gvr).Namespace(ns)

			tok1 := leadOnce(t, store, obs)
			uid1 := objectUID(t, objects, "scheduler")
			checkTerm(t, awaitTerm(t, ns, uid1), k.kind, uid1, tok1)
			if err := objects.Delete(t.Context(), "scheduler", metav1.DeleteOptions{}); err != nil {
				t.Fatalf("deleting the %s: %v", k.kind, err)
			}

			tok2 := leadOnce(t, store, obs)
			uid2 := objectUID(t, objects, "scheduler")
			if uid2 == uid1 {
				t.Fatalf("the %s created again kept uid %s", k.kind, uid1)
			}
			checkTerm(t, awaitTerm(t, ns, uid2), k.kind, uid2, tok2)
			closeObserver(t, obs)
			checkTerm(t, listEvents(t, ns, uid1), k.kind, uid1, tok1) // nothing of term 2 on the old object
			if n := gets.Load(); n != 2 {
				t.Errorf("the observer read the %s %d times for two terms, want once per term", k.kind, n)
			}
		})
	}
}

// Given the store (WithLockStore), the observer takes the uid from the
// store's view and never reads the lock object.
func TestEventObserverStoreView(t *testing.T) {
	t.Parallel()
	for _, k := range eventKinds {
		t.Run(k.kind, func(t *testing.T) {
			t.Parallel()
			cfg := k.plane(t)
			ns := newNamespace(t)
			store := k.open(t, cfg, ns)
			cs, gets := countingClient(t, cfg, k.gvr.Resource)
			obs := newObserver(t, cs, ns, k.kind, kubestore.WithLockStore(store))

			tok := leadOnce(t, store, obs)
			closeObserver(t, obs)
			uid := objectUID(t, adminDynamic(t).Resource(k.gvr).Namespace(ns), "scheduler")
			checkTerm(t, listEvents(t, ns, uid), k.kind, uid, tok)
			if n := gets.Load(); n != 0 {
				t.Errorf("the observer read the %s %d times although it had the store's view", k.kind, n)
			}
		})
	}
}

// WithLockStore refuses a store of another namespace or kind.
func TestEventObserverStoreMismatch(t *testing.T) {
	t.Parallel()
	cfg := controlPlane(t)
	cs := adminClient(t)
	lease := newLease(t, cfg, "ns-a")
	for _, c := range []struct{ ns, kind string }{{"ns-b", "Lease"}, {"ns-a", "ConfigMap"}} {
		obs, err := kubestore.NewEventObserver(cs, c.ns, c.kind, "baton", nil, kubestore.WithLockStore(lease))
		if err == nil {
			closeObserver(t, obs)
			t.Errorf("%s in %s with a Lease store of ns-a: no error", c.kind, c.ns)
		}
	}
}

// An observer that cannot read the lock object still records the Events,
// named by kind, namespace and name.
func TestEventObserverRecordsWithoutObject(t *testing.T) {
	t.Parallel()
	cfg := controlPlane(t)
	ns := newNamespace(t)
	cs := adminClient(t)
	obs := newObserver(t, cs, ns, "Lease")
	store := &deletingBackend{LeaseStore: newLease(t, cfg, ns), cs: cs}
	tok := leadOnce(t, store, obs)
	closeObserver(t, obs)
	evs, err := cs.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) == 0 {
		t.Fatalf("no Event on the deleted Lease (token %d)", tok)
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind != "Lease" || e.InvolvedObject.UID != "" {
			t.Errorf("event %s: involvedObject %+v, want a Lease without uid", e.Reason, e.InvolvedObject)
		}
	}
}

// deletingBackend deletes the Lease right after acquiring it, so that the
// observer finds no object to read: it removes the Lease's finalizer and
// deletes it, as an operator forcing a deletion would.
type deletingBackend struct {
	*kubestore.LeaseStore
	cs kubernetes.Interface
}

func (b *deletingBackend) TryAcquire(ctx context.Context, key string, req backend.Request) (backend.Grant, error) {
	g, err := b.LeaseStore.TryAcquire(ctx, key, req)
	leases := b.cs.CoordinationV1().Leases(b.Namespace())
	if err == nil {
		_, err = leases.Patch(ctx, key, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	}
	if err == nil {
		err = leases.Delete(ctx, key, metav1.DeleteOptions{})
	}
	return g, err
}

// newObserver returns an EventObserver with baton as its component.
func newObserver(t *testing.T, cs kubernetes.Interface, ns, kind string, opts ...kubestore.EventOption) *kubestore.EventObserver {
	t.Helper()
	obs, err := kubestore.NewEventObserver(cs, ns, kind, "baton", slog.New(slog.DiscardHandler), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

func closeObserver(t *testing.T, obs *kubestore.EventObserver) {
	t.Helper()
	if err := obs.Close(); err != nil {
		t.Fatal(err)
	}
}

// countingClient is a clientset of the admin that counts its GET requests
// for single objects of resource (roundTripFunc: idle_test.go).
func countingClient(t *testing.T, cfg *rest.Config, resource string) (kubernetes.Interface, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/"+resource+"/") {
				n.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, &n
}

func adminDynamic(t *testing.T) *dynamic.DynamicClient {
	t.Helper()
	c, err := dynamic.NewForConfig(controlPlane(t))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func objectUID(t *testing.T, objects dynamic.ResourceInterface, name string) types.UID {
	t.Helper()
	o, err := objects.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the lock object: %v", err)
	}
	return o.GetUID()
}

// leadOnce runs one short term of an Elector of the lock "scheduler" as
// pod-a, ended by a graceful shutdown (release), and returns its token.
func leadOnce(t *testing.T, b backend.Backend, obs baton.Observer) uint64 {
	t.Helper()
	el, err := baton.NewElector(b, "scheduler", quiet, baton.WithIdentity("pod-a"), baton.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var token uint64
	err = el.Run(ctx, func(ctx context.Context, l *baton.Lease) error {
		token = l.Token()
		cancel()
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	return token
}

// termReasons are the Events of one term that ends with a release.
var termReasons = []string{kubestore.ReasonStartedLeading, kubestore.ReasonReleased, kubestore.ReasonStoppedLeading}

// termMessages are the messages of termReasons, given the term's token.
var termMessages = map[string]string{
	kubestore.ReasonStartedLeading: "pod-a started leading with fencing token %d",
	kubestore.ReasonReleased:       "pod-a released the lock (token %d)",
	kubestore.ReasonStoppedLeading: "pod-a stopped leading (token %d)",
}

// selectUID selects the Events on the object with uid, as kubectl describe
// does.
func selectUID(uid types.UID) metav1.ListOptions {
	return metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(uid)}
}

// awaitTerm watches the Events of ns on the object uid until one of each
// of termReasons has arrived (at most 20s), and returns all seen.
func awaitTerm(t *testing.T, ns string, uid types.UID) []corev1.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	// A watch without a resourceVersion starts with every existing match.
	w, err := adminClient(t).CoreV1().Events(ns).Watch(ctx, selectUID(uid))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []corev1.Event
	for !hasReasons(got, termReasons) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch of Events on uid %s ended; got %v", uid, reasons(got))
			}
			if e, isEvent := ev.Object.(*corev1.Event); isEvent && ev.Type == watch.Added {
				got = append(got, *e)
			}
		case <-ctx.Done():
			t.Fatalf("Events on uid %s after 20s: %v, want %v", uid, reasons(got), termReasons)
		}
	}
	return got
}

func listEvents(t *testing.T, ns string, uid types.UID) []corev1.Event {
	t.Helper()
	evs, err := adminClient(t).CoreV1().Events(ns).List(t.Context(), selectUID(uid))
	if err != nil {
		t.Fatal(err)
	}
	return evs.Items
}

// checkTerm checks that evs are the Events of the term with token on the
// object kind/uid: one of each of termReasons, sourced from baton.
func checkTerm(t *testing.T, evs []corev1.Event, kind string, uid types.UID, token uint64) {
	t.Helper()
	if len(evs) != len(termReasons) || !hasReasons(evs, termReasons) {
		t.Errorf("Events on %s %s: %v, want %v", kind, uid, reasons(evs), termReasons)
	}
	for _, e := range evs {
		ref := e.InvolvedObject
		if ref.Kind != kind || ref.Name != "scheduler" || ref.UID != uid || ref.ResourceVersion == "" || e.Source.Component != "baton" {
			t.Errorf("event %s: involvedObject %+v, source %q", e.Reason, ref, e.Source.Component)
		}
		if want := termMessages[e.Reason]; !strings.Contains(e.Message, fmt.Sprintf(want, token)) {
			t.Errorf("event %s on %s: message %q, want %q", e.Reason, uid, e.Message, fmt.Sprintf(want, token))
		}
	}
}

func reasons(evs []corev1.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Reason
	}
	return out
}

func hasReasons(evs []corev1.Event, want []string) bool {
	have := map[string]bool{}
	for _, e := range evs {
		have[e.Reason] = true
	}
	for _, r := range want {
		if !have[r] {
			return false
		}
	}
	return true
}

// TestEventObserverObserveDuringClose: Observe called while Close sends
// the queued events (a lease lost or released in another goroutine at
// shutdown) drops the event; it sent on the closed queue and panicked in
// baton's goroutine.
func TestEventObserverObserveDuringClose(t *testing.T) {
	t.Parallel()
	controlPlane(t)
	obs := newObserver(t, adminClient(t), newNamespace(t), "Lease")
	ev := baton.Event{Kind: baton.EventReleased, Name: "busy", Holder: "a", Token: 1}
	for range 64 { // a full queue: Close takes a while to send it
		obs.Observe(ev)
	}
	closed := make(chan struct{})
	var observing sync.WaitGroup
	for range 4 {
		observing.Go(func() {
			for {
				select {
				case <-closed:
					return
				default:
					obs.Observe(ev)
				}
			}
		})
	}
	closeObserver(t, obs)
	close(closed)
	observing.Wait()
	obs.Observe(ev) // after Close: dropped
}

// A release whose store call failed is a Warning that says so; it was
// recorded as "released the lock", though the lock stays taken until the
// claim expires.
func TestEventObserverFailedRelease(t *testing.T) {
	t.Parallel()
	controlPlane(t)
	ns := newNamespace(t)
	cs := adminClient(t)
	obs := newObserver(t, cs, ns, "Lease")
	obs.Observe(baton.Event{Kind: baton.EventReleased, Name: "job", Holder: "pod-a", Token: 7, Err: errors.New("store unreachable")})
	closeObserver(t, obs)
	evs, err := cs.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=job"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 1 {
		t.Fatalf("%d Events, want 1", len(evs.Items))
	}
	if e := evs.Items[0]; e.Type != corev1.EventTypeWarning || !strings.Contains(e.Message, "release failed") || !strings.Contains(e.Message, "store unreachable") {
		t.Errorf("Event %s %q: want a Warning saying the release failed, with the error", e.Type, e.Message)
	}
}
