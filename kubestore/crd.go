package kubestore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DistributedLockStore is a baton backend that keeps each lock in a
// DistributedLock custom resource (baton.dev/v1alpha1, see package
// kube/api/v1alpha1 and deploy/crd) of one namespace, named after the lock.
// It implements backend.Backend, backend.Watcher, backend.Lister,
// backend.ForceReleaser and backend.Remover, and is safe for concurrent use.
//
// A DistributedLock is a mutex with exactly the guarantees of LeaseStore,
// in a resource of baton's own (with an application name, a schema and
// kubectl columns). Its spec.capacity must be 1 (the default). An object
// with a larger capacity (a counting semaphore, which baton's first
// versions kept in one object) is refused with backend.ErrMisconfigured:
// its holders shared one token counter, so a protected resource could not
// fence them, and the Mutex's first guarantee is one holder. For several
// holders use baton.NewSemaphore, which keeps one object per slot, each a
// mutex with its own tokens. The store still reads, renews and releases
// the entries of such an object, so holders from older versions end
// cleanly.

// # Guarantees
//
// As for LeaseStore (see the package documentation): every state change is
// one write conditional on the object's resourceVersion (a Create that
// fails if the object exists, or an Update of the whole object, spec and
// status; the CRD has no status subresource so that no change ever needs
// two writes); conflicts re-read and decide again (WithMaxConflicts); only
// the owner (identity and nonce, compared on the object in the same
// conditional write) renews or releases its entry; release removes the
// entry and never the object, so status.token survives releases, expiries
// and client restarts. An object whose status.protocolVersion is newer
// than this package knows (a future format with waiters or read/write
// modes) is never written: every operation on it fails with
// backend.ErrCorruptRecord.
//
// # Clock model: expiry per holder entry, by local observation
//
// With several holders, the object changes whenever any of them renews,
// so "the object is unchanged for the TTL" would let one live holder keep
// a dead one's slot forever. The store therefore observes each holder
// entry on its own: an entry is identified by (identity, nonce, renewTime
// as written, leaseDurationSeconds), and the store remembers, per lock and
// per entry, when it first saw that entry on this process's monotonic
// clock. An entry counts as expired once this process has seen it
// unchanged for its leaseDurationSeconds; renewing rewrites renewTime
// (strictly increasing per entry, even if the holder's wall clock steps
// back), which makes it a new entry to every observer and restarts their
// count. renewTime is never compared with any clock. The holder's own
// store counts its entry from the send time of its last successful write,
// as LeaseStore does, so it judges its claim expired no later than any
// other process. A process that sees an entry for the first time counts
// its full duration from that moment.
//
// Expired entries stay on the object until a writer that judged them
// expired removes them in its own conditional write (an acquire removes
// every entry it judges expired). Readers (Get, List, kubectl) may see
// them; Record.Remaining is 0 for them.
//
// # Records
//
// Get and List return one backend.Record per lock: Token is status.token
// (the last token issued), and Holder, Nonce, TTL, AcquireTime, RenewTime
// and Remaining describe the first holder entry that is still live as
// judged here (or the first entry, expired, if none is). Holders returns
// one record per holder entry.
//
// # RBAC
//
//	rules:
//	- apiGroups: ["baton.dev"]
//	  resources: ["distributedlocks"]
//	  verbs: ["get", "watch", "create", "update"]
//
// (deploy/rbac-crd/role.yaml). List (baton status) also needs
// "list", and Remove "delete", which only package schedule's clean-up of
// the lock objects of finished slots uses (see Removing lock objects in
// the package documentation). The CRD itself (deploy/crd) is installed
// once per cluster by an administrator.
type DistributedLockStore struct {
	base *store // namespace, options, error reporting, Watch
	c    client.WithWatch

	mu sync.Mutex
	// seen is, per lock name, when this process first saw each holder
	// entry (or sent the write that produced it), and how long it lasts.
	seen map[string]map[entryKey]entrySeen
	// last is, per lock name, the object as this process last wrote it,
	// so that a Renew or Release of that version needs no read first.
	last map[string]*v1alpha1.DistributedLock
	// claims is, per lock name, the claim this process last saw on the
	// object (or saw end with the object's deletion); see missing.
	claims map[string]claimSeen
	// sweepAt: seen and claims are swept when either grows past this (see
	// sweepLocked).
	sweepAt int
}

// claimSeen is the last claim this process saw on one lock object: the
// first holder and the lock's token (for a HeldError), the longest lease
// duration among its entries, when this process last saw it (seenAt),
// and, once the object was seen missing, when that was first seen, both
// on this process's monotonic clock.
type claimSeen struct {
	uid    string // the object's uid; "" if unknown
	holder string
	token  uint64
	ttl    time.Duration
	seenAt time.Time
	gone   bool
	at     time.Time
}

var (
	_ backend.Backend       = (*DistributedLockStore)(nil)
	_ backend.Watcher       = (*DistributedLockStore)(nil)
	_ backend.Lister        = (*DistributedLockStore)(nil)
	_ backend.ForceReleaser = (*DistributedLockStore)(nil)
	_ backend.Remover       = (*DistributedLockStore)(nil)
)

// DistributedLockOption configures NewDistributedLock. Every Option
// (WithApplication, WithRateLimit, WithMaxConflicts, WithClock) is one.
type DistributedLockOption interface {
	applyDistributedLock(*dlConfig)
}

type dlConfig struct{ opts []Option }

func (o Option) applyDistributedLock(c *dlConfig) { c.opts = append(c.opts, o) }

// Scheme returns a runtime.Scheme that knows the baton.dev/v1alpha1 types,
// for building a client for NewDistributedLock.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err) // static registration; cannot fail
	}
	return s
}

// NewDistributedLock returns a store for DistributedLock objects in
// namespace, using c, whose scheme must know baton.dev/v1alpha1 (see
// Scheme). c should read from the API server directly, not from a cache:
// a cached read could be older than the store's own last write. See
// NewLease about giving lock traffic its own client and rate limiter;
// NewDistributedLockForConfig does that.
func NewDistributedLock(c client.WithWatch, namespace string, opts ...DistributedLockOption) (*DistributedLockStore, error) {
	if c == nil {
		return nil, fmt.Errorf("kube: NewDistributedLock: %w: the client is nil", backend.ErrInvalidOptions)
	}
	gvk := v1alpha1.GroupVersion.WithKind("DistributedLock")
	if !c.Scheme().Recognizes(gvk) {
		return nil, fmt.Errorf("kube: NewDistributedLock: the client's scheme does not know %s; build the client with kubestore.Scheme()", gvk)
	}
	var cfg dlConfig
	for _, o := range opts {
		if o != nil {
			o.applyDistributedLock(&cfg)
		}
	}
	k := &dlKind{c: c, ns: namespace}
	s, err := newStore(namespace, k, cfg.opts)
	if err != nil {
		return nil, fmt.Errorf("kube: NewDistributedLock: %w", err)
	}
	if s.o.adopt {
		return nil, fmt.Errorf("kube: NewDistributedLock: %w: WithAdoption applies to Leases only", backend.ErrInvalidOptions)
	}
	d := &DistributedLockStore{
		base: s, c: c,
		seen:   map[string]map[entryKey]entrySeen{},
		last:   map[string]*v1alpha1.DistributedLock{},
		claims: map[string]claimSeen{},
	}
	k.owner = d
	return d, nil
}

// NewDistributedLockForConfig returns a store for DistributedLock objects
// in namespace that talks to the API server described by cfg through its
// own direct (uncached) client with its own client-side rate limiter
// (WithRateLimit; default DefaultQPS and DefaultBurst). cfg is copied, not
// changed.
func NewDistributedLockForConfig(cfg *rest.Config, namespace string, opts ...DistributedLockOption) (*DistributedLockStore, error) {
	if cfg == nil {
		return nil, fmt.Errorf("kube: NewDistributedLockForConfig: %w: the *rest.Config is nil", backend.ErrInvalidOptions)
	}
	var dc dlConfig
	for _, o := range opts {
		if o != nil {
			o.applyDistributedLock(&dc)
		}
	}
	o, err := buildOptions(dc.opts)
	if err != nil {
		return nil, fmt.Errorf("kube: NewDistributedLockForConfig: %w", err)
	}
	rc := rest.CopyConfig(cfg)
	rc.QPS, rc.Burst = o.qps, o.burst
	lim := newWaitingLimiter(o.qps, o.burst)
	rc.RateLimiter = lim
	rc.UserAgent = rest.DefaultKubernetesUserAgent() + " baton"
	if err := checkTLS(rc); err != nil {
		return nil, fmt.Errorf("kube: NewDistributedLockForConfig: %w", err)
	}
	note := &clientNote{limiter: lim}
	rc.Wrap(note.wrap)
	// A static mapper for the one type: no discovery requests per client.
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{v1alpha1.GroupVersion})
	mapper.Add(v1alpha1.GroupVersion.WithKind("DistributedLock"), meta.RESTScopeNamespace)
	c, err := client.NewWithWatch(rc, client.Options{Scheme: Scheme(), Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("kube: NewDistributedLockForConfig: %w", err)
	}
	s, err := NewDistributedLock(c, namespace, opts...)
	if err != nil {
		return nil, err
	}
	s.base.clientNote = note
	return s, nil
}

// Namespace returns the namespace the store keeps its objects in.
func (s *DistributedLockStore) Namespace() string { return s.base.ns }

// Application returns the application set with WithApplication.
func (s *DistributedLockStore) Application() string { return s.base.o.app }

// entryKey identifies one version of one holder entry.
type entryKey struct {
	identity, nonce, renew string
	dur                    int32
}

func keyOf(h *v1alpha1.Holder) entryKey {
	k := entryKey{identity: h.Identity, nonce: h.Nonce, dur: h.LeaseDurationSeconds}
	if h.RenewTime != nil {
		k.renew = h.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	return k
}

// entrySeen is when this process first saw one version of a holder
// entry, and the duration it counts for it: the entry's own, or longer if
// an earlier version of the same claim (identity and nonce) had a longer
// one (see observe).
type entrySeen struct {
	at  time.Time
	ttl time.Duration
}

func entryTTL(h *v1alpha1.Holder) time.Duration {
	return time.Duration(h.LeaseDurationSeconds) * time.Second
}

// observe returns how long each holder entry of l still lasts as judged
// from this process, recording the entries it sees for the first time.
// Entries no longer on the object are forgotten once their duration has
// passed since they were first seen (an older read that arrives late must
// not restart the count of an entry this process has just written).
//
// A claim's duration does not shrink here between two of its holder's
// renewals: a new version of an entry counts for the longest duration
// this process has seen on the same claim (identity and nonce) with the
// same renewTime. A write that leaves renewTime as it was and shortens
// the duration is someone else's edit (kubectl edit), which the holder,
// still counting its validity with its own TTL, learns of at its next
// renewal at the earliest; from that renewal on the duration the holder
// writes counts again.
func (s *DistributedLockStore) observe(l *v1alpha1.DistributedLock) []time.Duration {
	now := s.base.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noteClaimLocked(l, now)
	seen := s.seen[l.Name]
	if seen == nil {
		seen = map[entryKey]entrySeen{}
		s.seen[l.Name] = seen
	}
	rem := make([]time.Duration, len(l.Status.Holders))
	present := make(map[entryKey]bool, len(rem))
	for i := range l.Status.Holders {
		h := &l.Status.Holders[i]
		k := keyOf(h)
		present[k] = true
		e, ok := seen[k]
		if !ok {
			e = entrySeen{at: now, ttl: entryTTL(h)}
			if k.nonce != "" {
				for k2, e2 := range seen {
					if k2.identity == k.identity && k2.nonce == k.nonce && k2.renew == k.renew {
						e.ttl = max(e.ttl, e2.ttl)
					}
				}
			}
			seen[k] = e
		}
		rem[i] = max(0, e.at.Add(max(e.ttl, entryTTL(h))).Sub(now))
	}
	for k, e := range seen {
		if !present[k] && now.Sub(e.at) > e.ttl {
			delete(seen, k)
		}
	}
	if len(seen) == 0 {
		delete(s.seen, l.Name)
	}
	s.sweepLocked(now)
	return rem
}

// sweepLocked forgets the holder entries first seen at least twice their
// duration ago, on every lock name, and the names left with none, so
// that a process that touches many lock names (a lock per job) does not
// keep entries per name forever. It is the Lease store's rule
// (store.sweepLocked): should such an entry be seen again, it counts
// from then, which only delays a takeover. By the same rule it forgets
// the claims last seen at least twice their duration ago, and those seen
// deleted whose wait is over: a lock this process found held once and
// never looked at again (a loser of schedule's lock per slot) is then
// judged, should its object vanish, as by a process that never saw it
// (see "Deleted lock objects" in the package documentation), as the
// Lease store judges it once its observation is swept. It runs when seen
// or claims has doubled since the last sweep. s.mu must be held.
func (s *DistributedLockStore) sweepLocked(now time.Time) {
	if max(len(s.seen), len(s.claims)) <= max(s.sweepAt, minSweep) {
		return
	}
	for name, c := range s.claims {
		if c.gone && !now.Before(c.at.Add(c.ttl)) || !c.gone && now.Sub(c.seenAt) > 2*c.ttl {
			delete(s.claims, name)
		}
	}
	for name, seen := range s.seen {
		for k, e := range seen {
			if now.Sub(e.at) > 2*e.ttl {
				delete(seen, k)
			}
		}
		if len(seen) == 0 {
			delete(s.seen, name)
		}
	}
	s.sweepAt = 2 * max(len(s.seen), len(s.claims))
}

// noteClaimLocked records the claim on l (none if it has no holder
// entries) as the last one this process saw, at now. s.mu must be held.
func (s *DistributedLockStore) noteClaimLocked(l *v1alpha1.DistributedLock, now time.Time) {
	hs := l.Status.Holders
	if len(hs) == 0 {
		delete(s.claims, l.Name)
		return
	}
	c := claimSeen{uid: string(l.UID), holder: hs[0].Identity, token: uint64(max(0, l.Status.Token)), seenAt: now}
	for i := range hs {
		c.ttl = max(c.ttl, entryTTL(&hs[i]))
	}
	s.claims[l.Name] = c
}

// missing records that the lock object name does not exist, as this
// process sees now, and returns the claim last seen on it and how long it
// may still last, exactly as the Lease store does (see store.missing): a
// deletion counts as a new version of the record first seen when this
// process first saw the object missing, so the wait is the longest lease
// duration among the entries last seen, from then. last, if set, is the
// object's final state (a watch's Deleted event).
func (s *DistributedLockStore) missing(name string, last *v1alpha1.DistributedLock) (claimSeen, time.Duration) {
	now := s.base.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, had := s.claims[name]
	if last != nil && len(last.Status.Holders) == 0 && had && !sameObject(prev.uid, string(last.UID)) {
		// Free when deleted, and the claim seen is on another object of
		// this name (a lagging watch reports the deletion after this
		// process created the object again, say after Remove): keep it.
		return claimSeen{}, 0
	}
	if last != nil {
		s.noteClaimLocked(last, now)
		if c, ok := s.claims[name]; ok && had {
			c.ttl = max(c.ttl, prev.ttl)
			if prev.gone {
				c.gone, c.at = true, prev.at // keep the moment first seen missing
			}
			s.claims[name] = c
		}
	}
	c, ok := s.claims[name]
	if !ok {
		return claimSeen{}, 0
	}
	if !c.gone {
		c.gone, c.at = true, now
		s.claims[name] = c
	}
	rem := max(0, c.at.Add(c.ttl).Sub(now))
	if rem == 0 {
		delete(s.claims, name) // over; nothing left to protect
	}
	return c, rem
}

// wrote records that this process produced l with a write sent at sent.
// mine, if set, is the entry that write created or renewed: its count
// starts at sent, which is no later than any other process can see it.
func (s *DistributedLockStore) wrote(l *v1alpha1.DistributedLock, sent time.Time, mine *entryKey) {
	s.mu.Lock()
	if mine != nil {
		seen := s.seen[l.Name]
		if seen == nil {
			seen = map[entryKey]entrySeen{}
			s.seen[l.Name] = seen
		}
		seen[*mine] = entrySeen{at: sent, ttl: time.Duration(mine.dur) * time.Second}
	}
	s.noteClaimLocked(l, sent)
	if len(l.Status.Holders) == 0 {
		// Free: no grant has this version, so no Renew or Release will
		// ask for it (see written).
		delete(s.last, l.Name)
	} else {
		s.last[l.Name] = l.DeepCopy()
	}
	s.mu.Unlock()
}

// written returns the object at version rv if this process wrote it.
func (s *DistributedLockStore) written(name, rv string) (*v1alpha1.DistributedLock, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.last[name]
	if !ok || rv == "" || l.ResourceVersion != rv {
		return nil, false
	}
	return l.DeepCopy(), true
}

// check refuses objects this version must not write or cannot decide on.
func check(l *v1alpha1.DistributedLock) error {
	st := &l.Status
	pending := st.ProtocolVersion == v1alpha1.ProtocolVersionPendingToken && pendingToken(l) // known: see resolveToken
	if st.ProtocolVersion > v1alpha1.ProtocolVersion && !pending {
		return errCorrupt(fmt.Errorf("status.protocolVersion %d is newer than this baton knows (%d): "+
			"the lock uses features (such as waiters or read/write modes) of a newer baton; upgrade this client",
			st.ProtocolVersion, v1alpha1.ProtocolVersion))
	}
	if st.Token < 0 {
		return errCorrupt(fmt.Errorf("status.token %d is negative", st.Token))
	}
	for i := range st.Holders {
		h := &st.Holders[i]
		switch {
		case h.Identity == "" || h.Nonce == "":
			return errCorrupt(fmt.Errorf("status.holders[%d] has no identity or nonce", i))
		case h.LeaseDurationSeconds <= 0:
			return errCorrupt(fmt.Errorf("status.holders[%d] (%q) has no leaseDurationSeconds", i, h.Identity))
		case h.Token <= 0 || h.Token > st.Token:
			return errCorrupt(fmt.Errorf("status.holders[%d] (%q) has token %d, outside 1..status.token (%d)", i, h.Identity, h.Token, st.Token))
		}
	}
	return nil
}

func capacityOf(l *v1alpha1.DistributedLock) int {
	return max(1, int(l.Spec.Capacity))
}

// checkApplication refuses objects of another application.
func (s *DistributedLockStore) checkApplication(l *v1alpha1.DistributedLock) error {
	if l.Spec.Application == s.base.o.app {
		return nil
	}
	holder := ""
	if len(l.Status.Holders) > 0 {
		holder = l.Status.Holders[0].Identity
	}
	return &ApplicationError{
		Namespace: s.base.ns, Name: l.Name, Resource: dlResource,
		Want: s.base.o.app, Have: l.Spec.Application, Holder: holder,
	}
}

// fail reports an error of the API server; see store.fail. A missing CRD
// gets its own message.
func (s *DistributedLockStore) fail(ctx context.Context, op, verb, name string, err error) error {
	if meta.IsNoMatchError(err) || isCRDMissing(err) {
		return fmt.Errorf("kube: %s %s %s/%s: %w: the DistributedLock CRD is not installed in the cluster; "+
			"install it once (kubectl apply -k deploy/crd) or use another backend "+
			"(or the server URL is not a Kubernetes API server's: check the kubeconfig's current context): %w",
			op, dlResource, s.base.ns, name, backend.ErrMisconfigured, err)
	}
	return s.base.fail(ctx, op, verb, name, wrongServer(err, dlResource, false))
}

func (s *DistributedLockStore) get(ctx context.Context, name string) (*v1alpha1.DistributedLock, error) {
	l := &v1alpha1.DistributedLock{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.base.ns, Name: name}, l); err != nil {
		if isCRDMissing(err) {
			return nil, &meta.NoKindMatchError{GroupKind: v1alpha1.GroupVersion.WithKind("DistributedLock").GroupKind(),
				SearchedVersions: []string{v1alpha1.Version}}
		}
		return nil, err
	}
	if err := checkAnswer(dlResource, name, l.Name); err != nil {
		return nil, err
	}
	if err := resolveToken(l); err != nil {
		return nil, err
	}
	return l, nil
}

// pendingToken reports an object whose creator has not written its token
// yet (AnnotationToken is TokenFromResourceVersion).
func pendingToken(l *v1alpha1.DistributedLock) bool {
	return l.Annotations[AnnotationToken] == TokenFromResourceVersion
}

// resolveToken fills in the token of an object whose creator has not
// written it yet: the object's resourceVersion, which is the creator's
// token if the object has not changed since its creation, and larger
// otherwise. The object is created with placeholder tokens of 1 (the
// schema's minimum) and status.protocolVersion
// v1alpha1.ProtocolVersionPendingToken, which older clients refuse to
// write.
func resolveToken(l *v1alpha1.DistributedLock) error {
	if !pendingToken(l) || l.ResourceVersion == "" {
		return nil
	}
	rv, err := parseResourceVersion(l.ResourceVersion)
	if err != nil {
		return errCorrupt(err)
	}
	if rv > math.MaxInt64 {
		return errCorrupt(fmt.Errorf("resourceVersion %d exceeds the largest token a DistributedLock stores", rv))
	}
	l.Status.Token = int64(rv)
	for i := range l.Status.Holders {
		l.Status.Holders[i].Token = int64(rv)
	}
	return nil
}

// settleToken makes next, about to be written, carry its tokens as plain
// numbers (resolveToken filled them in when it was read): it drops the
// pending-token annotation and the protocol version that marks it.
func settleToken(next *v1alpha1.DistributedLock) {
	if pendingToken(next) {
		delete(next.Annotations, AnnotationToken)
	}
	next.Status.ProtocolVersion = v1alpha1.ProtocolVersion
}

// isCRDMissing tells the 404 of a resource the API server does not serve
// (the CRD is not installed) from the 404 of a missing object. The API
// server answers a path it does not serve with a plain-text "404 page not
// found", which client-go turns into a NotFound status with the cause
// UnexpectedServerResponse (and the resource and name it asked for); a
// missing object comes as a Status of the server's own.
func isCRDMissing(err error) bool {
	var st apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &st) {
		return false
	}
	d := st.Status().Details
	if d == nil || d.Kind == "" {
		return true
	}
	for _, c := range d.Causes {
		if c.Type == metav1.CauseTypeUnexpectedServerResponse {
			return true
		}
	}
	return false
}

func (s *DistributedLockStore) update(ctx context.Context, l *v1alpha1.DistributedLock) error {
	if l.ResourceVersion == "" {
		// Never write without a precondition.
		return fmt.Errorf("kube: internal error: update of %q without a resourceVersion", l.Name)
	}
	l.Finalizers = withClaimFinalizer(l.Finalizers, len(l.Status.Holders) > 0, l.DeletionTimestamp != nil)
	return s.c.Update(ctx, l)
}

// leaseSeconds converts a requested TTL to leaseDurationSeconds, within
// the CRD's limits.
func leaseSeconds(ttl time.Duration) (int32, error) {
	d, err := durationSeconds(ttl)
	if err != nil {
		return 0, err
	}
	if d > v1alpha1.MaxLeaseDurationSeconds {
		return 0, fmt.Errorf("TTL %v is longer than the DistributedLock maximum of %ds", ttl, v1alpha1.MaxLeaseDurationSeconds)
	}
	return d, nil
}

// microNow returns the wall-clock reading now as written into the object,
// strictly after prev (if set) so that every write of an entry changes it
// (also after the wall clock was stepped back).
func microNow(now time.Time, prev *metav1.MicroTime) *metav1.MicroTime {
	t := now.Truncate(time.Microsecond)
	if prev != nil && !t.After(prev.Time) {
		t = prev.Add(time.Microsecond)
	}
	m := metav1.NewMicroTime(t)
	return &m
}

func dlGrant(l *v1alpha1.DistributedLock, h *v1alpha1.Holder, ttl time.Duration) backend.Grant {
	return backend.Grant{Key: l.Name, Holder: h.Identity, Nonce: h.Nonce, Token: uint64(h.Token), TTL: ttl,
		Version: versionOf(l.ResourceVersion, string(l.UID))}
}

// TryAcquire takes the lock key for req if no entry is live as judged by
// this process, with one conditional write that also removes the entries
// judged expired: a create that fails if the object exists, or an update
// on the resourceVersion read. An object whose spec.capacity is above 1
// is refused with backend.ErrMisconfigured (see DistributedLockStore). The new entry gets
// token status.token+1 (a created object: its resourceVersion; see
// create). A missing object that this process last saw held is not created
// before that claim could have expired (see Deleted lock objects in the
// package documentation): until then TryAcquire returns a
// *backend.HeldError. If the lock is full it returns a
// *backend.HeldError naming the live holder whose entry ends soonest, with
// RetryAfter its remaining time as judged here; if req's owner already
// holds a slot, a *backend.HeldError naming it.
func (s *DistributedLockStore) TryAcquire(ctx context.Context, key string, req backend.Request) (backend.Grant, error) {
	const op = "acquire"
	ns := s.base.ns
	if err := backend.ValidateName(key); err != nil {
		return backend.Grant{}, fmt.Errorf("kube: %s in namespace %s: %w", op, ns, err)
	}
	if err := s.base.ctxErr(ctx, op, key); err != nil {
		return backend.Grant{}, err
	}
	if req.Holder == "" || req.Nonce == "" {
		return backend.Grant{}, fmt.Errorf("kube: %s %s/%s: %w: empty holder or nonce", op, ns, key, backend.ErrInvalidOptions)
	}
	dur, err := leaseSeconds(req.TTL)
	if err != nil {
		return backend.Grant{}, fmt.Errorf("kube: %s %s/%s: %w: %v", op, ns, key, backend.ErrInvalidOptions, err)
	}
	var lastErr error
	for range s.base.o.maxConflicts {
		g, err := s.attempt(ctx, key, req, dur)
		if errRetry(err) {
			lastErr = err
			continue
		}
		return g, err
	}
	// Every attempt lost its conditional write: others won the lock.
	return backend.Grant{}, fmt.Errorf("kube: %s %s/%s: contended: lost %d conditional writes in a row to other writers (last: %v): %w",
		op, ns, key, s.base.o.maxConflicts, lastErr, &backend.HeldError{Key: key})
}

// attempt is one round of TryAcquire: read the object, decide, and write
// conditionally. A lost race, a deletion it let finish, or one since its
// read, returns an error errRetry accepts, for TryAcquire to read again.
func (s *DistributedLockStore) attempt(ctx context.Context, key string, req backend.Request, dur int32) (backend.Grant, error) {
	const op = "acquire"
	ns := s.base.ns
	cur, err := s.get(ctx, key)
	switch {
	case apierrors.IsNotFound(err) && !isCRDMissing(err):
		if gone, rem := s.missing(key, nil); rem > 0 {
			return backend.Grant{}, fmt.Errorf("kube: %s %s/%s: the lock object was deleted while %q held it (token %d); "+
				"its claim may last until one lease duration after this process first saw it missing: %w", op, ns, key,
				gone.holder, gone.token, &backend.HeldError{Key: key, Holder: gone.holder, Token: gone.token, RetryAfter: rem})
		}
		g, err := s.create(ctx, key, req, dur)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			s.releaseUnanswered(ctx, key, req)
			return backend.Grant{}, s.fail(ctx, op, "create", key, err)
		}
		return g, err
	case err != nil:
		return backend.Grant{}, s.fail(ctx, op, "get", key, err)
	}
	if err := check(cur); err != nil {
		return backend.Grant{}, s.fail(ctx, op, "get", key, err)
	}
	if err := s.checkApplication(cur); err != nil {
		return backend.Grant{}, err
	}
	if err := checkCapacity(cur); err != nil {
		return backend.Grant{}, err
	}
	rem := s.observe(cur)
	if cur.DeletionTimestamp != nil {
		return backend.Grant{}, s.finish(ctx, cur, rem)
	}
	return s.takeSlot(ctx, cur, rem, req, dur)
}

// checkCapacity refuses to acquire an object with spec.capacity above 1: a
// counting semaphore, which a lock is not (see DistributedLockStore).
func checkCapacity(cur *v1alpha1.DistributedLock) error {
	n := capacityOf(cur)
	if n <= 1 {
		return nil
	}
	return fmt.Errorf("kube: acquire %s/%s: %w: the DistributedLock has spec.capacity %d, but a lock has one holder; "+
		"for up to %d holders use baton.NewSemaphore(store, %q, %d), which keeps one object per slot; "+
		"to use this object as a lock, set its capacity to 1: kubectl -n %s patch distributedlock %s --type merge -p '{\"spec\":{\"capacity\":1}}'",
		cur.Namespace, cur.Name, backend.ErrMisconfigured, n, n, cur.Name, n, cur.Namespace, cur.Name)
}

// takeSlot adds req's entry to cur, dropping the entries judged expired
// (rem), with an update on cur's resourceVersion, if no entry is live; a lost race returns the API server's Conflict error as
// it is.
func (s *DistributedLockStore) takeSlot(ctx context.Context, cur *v1alpha1.DistributedLock, rem []time.Duration,
	req backend.Request, dur int32) (backend.Grant, error) {
	const op = "acquire"
	ns, key := s.base.ns, cur.Name
	var live []v1alpha1.Holder
	soonest := -1
	for i := range cur.Status.Holders {
		h := &cur.Status.Holders[i]
		if rem[i] <= 0 {
			continue
		}
		if h.Identity == req.Holder && h.Nonce == req.Nonce {
			return backend.Grant{}, fmt.Errorf("kube: %s %s/%s: already held by this owner: %w", op, ns, key,
				&backend.HeldError{Key: key, Holder: h.Identity, Token: uint64(h.Token), RetryAfter: rem[i]})
		}
		live = append(live, *h)
		if soonest < 0 || rem[i] < rem[soonest] {
			soonest = i
		}
	}
	if len(live) > 0 {
		h := &cur.Status.Holders[soonest]
		return backend.Grant{}, fmt.Errorf("kube: %s %s/%s: %w", op, ns, key,
			&backend.HeldError{Key: key, Holder: h.Identity, Token: uint64(h.Token), RetryAfter: rem[soonest]})
	}
	token, err := nextToken(cur)
	if err != nil {
		return backend.Grant{}, s.fail(ctx, op, "update", key, err)
	}
	next := cur.DeepCopy()
	now := microNow(s.base.now(), nil)
	h := v1alpha1.Holder{
		Identity: req.Holder, Nonce: req.Nonce, Token: token, LeaseDurationSeconds: dur,
		AcquireTime: now, RenewTime: now,
	}
	next.Spec.LeaseDurationSeconds = dur
	next.Status.Holders = append(live, h)
	next.Status.Token = h.Token
	if cur.Status.Token > 0 {
		next.Status.Transitions = cur.Status.Transitions + 1
	}
	settleToken(next)
	mine := keyOf(&h)
	sent := s.base.now()
	err = s.update(ctx, next)
	switch {
	case apierrors.IsConflict(err):
		return backend.Grant{}, err
	case apierrors.IsNotFound(err) && !isCRDMissing(err):
		return backend.Grant{}, errFinished // deleted since read: read again
	case err != nil:
		s.releaseUnanswered(ctx, key, req)
		return backend.Grant{}, s.fail(ctx, op, "update", key, err)
	}
	s.wrote(next, sent, &mine)
	return dlGrant(next, &h, req.TTL), nil
}

// releaseUnanswered releases the entry that req's create or update may
// have written although ctx ended before its answer came, as the Lease
// and ConfigMap stores do (see store.releaseUnanswered).
func (s *DistributedLockStore) releaseUnanswered(ctx context.Context, key string, req backend.Request) {
	if ctx.Err() == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unansweredRelease)
	defer cancel()
	cur, err := s.get(rctx, key)
	if err != nil {
		return
	}
	i := slices.IndexFunc(cur.Status.Holders, func(h v1alpha1.Holder) bool { return h.Identity == req.Holder && h.Nonce == req.Nonce })
	if i >= 0 {
		_ = s.Release(rctx, dlGrant(cur, &cur.Status.Holders[i], req.TTL))
	}
}

// finish handles cur, an object being deleted, which is never acquired:
// while any of its entries lasts (rem, as judged here) it returns a
// *backend.HeldError naming the one that ends last; once none does, it
// removes them with an update on cur's resourceVersion, which removes
// FinalizerClaim so that the API server completes the deletion, and
// returns errFinished for TryAcquire to read again (or the Conflict of a
// lost race). While finalizers of others keep the object, it returns a
// *backend.HeldError.
func (s *DistributedLockStore) finish(ctx context.Context, cur *v1alpha1.DistributedLock, rem []time.Duration) error {
	const op = "acquire"
	ns, key := s.base.ns, cur.Name
	last := -1
	for i := range rem {
		if rem[i] > 0 && (last < 0 || rem[i] > rem[last]) {
			last = i
		}
	}
	if last >= 0 {
		h := &cur.Status.Holders[last]
		return fmt.Errorf("kube: %s %s/%s: the object is being deleted, which finishes when its claims end: %w", op, ns, key,
			&backend.HeldError{Key: key, Holder: h.Identity, Token: uint64(h.Token), RetryAfter: rem[last]})
	}
	if len(cur.Status.Holders) == 0 && !slices.Contains(cur.Finalizers, FinalizerClaim) {
		return fmt.Errorf("kube: %s %s/%s: the lock object is being deleted and waits for finalizers that are not baton's; "+
			"it can be acquired once it is gone: %w", op, ns, key, &backend.HeldError{Key: key, RetryAfter: time.Second})
	}
	next := cur.DeepCopy()
	next.Status.Holders = nil
	sent := s.base.now()
	err := s.update(ctx, next)
	switch {
	case apierrors.IsConflict(err):
		return err
	case apierrors.IsNotFound(err) && !isCRDMissing(err):
		return errFinished // someone else finished it
	case err != nil:
		return s.fail(ctx, op, "update", key, err)
	}
	s.wrote(next, sent, nil) // no entries: its final state is free
	return errFinished
}

// create creates the lock object key with req's entry. Its token is the
// resourceVersion the API server gives the new object, which is larger
// than that of every write before it, and so than every token issued on an
// earlier object of the same name (see "Fencing tokens" in the package
// documentation). The object carries the annotation
// AnnotationToken=TokenFromResourceVersion and placeholder tokens until
// the creator's first renewal or release, or another acquisition, writes
// them as numbers.
func (s *DistributedLockStore) create(ctx context.Context, key string, req backend.Request, dur int32) (backend.Grant, error) {
	now := microNow(s.base.now(), nil)
	h := v1alpha1.Holder{
		Identity: req.Holder, Nonce: req.Nonce, Token: 1, LeaseDurationSeconds: dur,
		AcquireTime: now, RenewTime: now,
	}
	l := &v1alpha1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{
			Name: key, Namespace: s.base.ns,
			Labels:      map[string]string{LabelApplication: s.base.o.app},
			Annotations: map[string]string{AnnotationToken: TokenFromResourceVersion},
			Finalizers:  []string{FinalizerClaim},
		},
		Spec: v1alpha1.DistributedLockSpec{LeaseDurationSeconds: dur, Capacity: 1, Application: s.base.o.app},
		Status: v1alpha1.DistributedLockStatus{
			Token: 1, Holders: []v1alpha1.Holder{h}, ProtocolVersion: v1alpha1.ProtocolVersionPendingToken,
		},
	}
	mine := keyOf(&h)
	sent := s.base.now()
	if err := s.c.Create(ctx, l); err != nil {
		return backend.Grant{}, err
	}
	if err := resolveToken(l); err != nil {
		return backend.Grant{}, err
	}
	s.wrote(l, sent, &mine)
	return dlGrant(l, &l.Status.Holders[0], req.TTL), nil
}

// nextToken is the token of the next acquisition of cur: status.token+1,
// or, on an object on which no token was issued yet (status.token 0: an
// administrator created it), its resourceVersion, which is larger than
// every token issued on an earlier object of the same name.
func nextToken(cur *v1alpha1.DistributedLock) (int64, error) {
	switch t := cur.Status.Token; {
	case t == math.MaxInt64:
		return 0, errCorrupt(fmt.Errorf("the fencing token is at its maximum"))
	case t > 0:
		return t + 1, nil
	}
	rv, err := parseResourceVersion(cur.ResourceVersion)
	if err != nil {
		return 0, errCorrupt(err)
	}
	if rv > math.MaxInt64 {
		return 0, errCorrupt(fmt.Errorf("resourceVersion %d exceeds the largest token a DistributedLock stores", rv))
	}
	return int64(rv), nil
}

// Renew rewrites g's entry (renewTime, leaseDurationSeconds from g.TTL)
// with an update conditional on the resourceVersion read, if the object
// still has an entry of g's identity and nonce that has not expired as
// judged by this process (counted from the send time of its own last
// write of it). It returns an error matching backend.ErrLost otherwise.
func (s *DistributedLockStore) Renew(ctx context.Context, g backend.Grant) (backend.Grant, error) {
	var out backend.Grant
	err := s.change(ctx, "renew", g, func(l *v1alpha1.DistributedLock, i int) (*entryKey, error) {
		if l.DeletionTimestamp != nil {
			return nil, fmt.Errorf("%w: the lock object is being deleted (kubectl delete?); it is freed when its claims end "+
				"(only baton release --force frees a lock safely)", backend.ErrLost)
		}
		dur, err := leaseSeconds(g.TTL)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", backend.ErrInvalidOptions, err)
		}
		h := &l.Status.Holders[i]
		h.LeaseDurationSeconds = dur
		h.RenewTime = microNow(s.base.now(), h.RenewTime)
		l.Spec.LeaseDurationSeconds = dur
		out = dlGrant(l, h, g.TTL)
		k := keyOf(h)
		return &k, nil
	}, func(l *v1alpha1.DistributedLock) { out.Version = l.ResourceVersion })
	if err != nil {
		return backend.Grant{}, err
	}
	return out, nil
}

// Release removes g's entry with an update conditional on the
// resourceVersion read, if it is still there and has not expired as judged
// by this process. The object and status.token stay. It returns an error
// matching backend.ErrLost otherwise.
func (s *DistributedLockStore) Release(ctx context.Context, g backend.Grant) error {
	return s.change(ctx, "release", g, func(l *v1alpha1.DistributedLock, i int) (*entryKey, error) {
		l.Status.Holders = append(l.Status.Holders[:i:i], l.Status.Holders[i+1:]...)
		return nil, nil
	}, nil)
}

// change applies f to g's entry (at index i of the object) if it is still
// g's and live, with a conditional update, retrying conflicts. If this
// process wrote the version named by g.Version, the first attempt updates
// it without reading it first. done, if set, sees the written object.
func (s *DistributedLockStore) change(ctx context.Context, op string, g backend.Grant,
	f func(l *v1alpha1.DistributedLock, i int) (*entryKey, error), done func(*v1alpha1.DistributedLock)) error {
	ns := s.base.ns
	if err := backend.ValidateName(g.Key); err != nil {
		return fmt.Errorf("kube: %s in namespace %s: %w", op, ns, err)
	}
	if err := s.base.ctxErr(ctx, op, g.Key); err != nil {
		return err
	}
	lost := func(why string, args ...any) error {
		return fmt.Errorf("kube: %s %s/%s (holder %q, token %d): %w: %s",
			op, ns, g.Key, g.Holder, g.Token, backend.ErrLost, fmt.Sprintf(why, args...))
	}
	rv, uid := splitVersion(g.Version)
	var lastErr error
	for attempt := range s.base.o.maxConflicts {
		cur, cached := s.written(g.Key, rv)
		if !cached || attempt > 0 {
			var err error
			cur, err = s.get(ctx, g.Key)
			if apierrors.IsNotFound(err) && !isCRDMissing(err) {
				s.missing(g.Key, nil)
				return lost("the lock object was deleted (only baton release --force frees a lock safely)")
			}
			if err != nil {
				return s.fail(ctx, op, "get", g.Key, err)
			}
		}
		if err := check(cur); err != nil {
			return s.fail(ctx, op, "get", g.Key, err)
		}
		rem := s.observe(cur)
		i := slices.IndexFunc(cur.Status.Holders, func(h v1alpha1.Holder) bool { return h.Identity == g.Holder && h.Nonce == g.Nonce })
		switch {
		case uid != "" && string(cur.UID) != uid:
			return lost("the lock object was deleted and created again (uid %s, granted on uid %s)", cur.UID, uid)
		case i < 0:
			return lost("its entry is gone (released, force-released, or expired and removed by another holder)")
		case rem[i] <= 0:
			return lost("the claim expired (not renewed for %v as seen from this process)", entryTTL(&cur.Status.Holders[i]))
		}
		next := cur.DeepCopy()
		if pendingToken(next) {
			// Write the creator's token as the number it is: no other
			// token was issued on this object, and readers took its
			// current resourceVersion meanwhile, which is no smaller.
			h := &next.Status.Holders[i]
			h.Token = min(int64(min(g.Token, math.MaxInt64)), h.Token)
			next.Status.Token = h.Token
			settleToken(next)
		}
		mine, err := f(next, i)
		if err != nil {
			return fmt.Errorf("kube: %s %s/%s: %w", op, ns, g.Key, err)
		}
		sent := s.base.now()
		err = s.update(ctx, next)
		if apierrors.IsConflict(err) {
			lastErr = err
			continue
		}
		if apierrors.IsNotFound(err) && !isNamespaceNotFound(err) {
			s.missing(g.Key, nil)
			return lost("the lock object was deleted (only baton release --force frees a lock safely)")
		}
		if err != nil {
			return s.fail(ctx, op, "update", g.Key, err)
		}
		s.wrote(next, sent, mine)
		if done != nil {
			done(next)
		}
		return nil
	}
	return fmt.Errorf("kube: %s %s/%s: the object kept changing under us; gave up after %d conflicts: %w",
		op, ns, g.Key, s.base.o.maxConflicts, lastErr)
}

// Get returns the lock's record (see Records in the type's documentation).
func (s *DistributedLockStore) Get(ctx context.Context, key string) (backend.Record, error) {
	l, err := s.read(ctx, "get", key)
	if err != nil {
		return backend.Record{}, err
	}
	return s.record(l), nil
}

// Holders returns one record per holder entry of the lock, oldest first,
// with that entry's token and its remaining time as judged here (0 for
// entries this process judges expired). A free lock has none.
func (s *DistributedLockStore) Holders(ctx context.Context, key string) ([]backend.Record, error) {
	l, err := s.read(ctx, "get", key)
	if err != nil {
		return nil, err
	}
	rem := s.observe(l)
	out := make([]backend.Record, len(l.Status.Holders))
	for i := range l.Status.Holders {
		out[i] = s.entryRecord(l, i, rem[i])
		out[i].Token = uint64(l.Status.Holders[i].Token)
	}
	return out, nil
}

func (s *DistributedLockStore) read(ctx context.Context, op, key string) (*v1alpha1.DistributedLock, error) {
	if err := backend.ValidateName(key); err != nil {
		return nil, fmt.Errorf("kube: %s in namespace %s: %w", op, s.base.ns, err)
	}
	if err := s.base.ctxErr(ctx, op, key); err != nil {
		return nil, err
	}
	l, err := s.get(ctx, key)
	if apierrors.IsNotFound(err) && !isCRDMissing(err) {
		return nil, fmt.Errorf("kube: %s %s %s/%s: %w", op, dlResource, s.base.ns, key, backend.ErrNotFound)
	}
	if err != nil {
		return nil, s.fail(ctx, op, "get", key, err)
	}
	if err := check(l); err != nil {
		return nil, s.fail(ctx, op, "get", key, err)
	}
	return l, nil
}

func (s *DistributedLockStore) entryRecord(l *v1alpha1.DistributedLock, i int, rem time.Duration) backend.Record {
	h := &l.Status.Holders[i]
	r := backend.Record{
		Key: l.Name, Holder: h.Identity, Nonce: h.Nonce, Token: uint64(l.Status.Token), TTL: entryTTL(h),
		Transitions: uint64(max(0, l.Status.Transitions)), Remaining: rem, Version: l.ResourceVersion,
	}
	if h.AcquireTime != nil {
		r.AcquireTime = h.AcquireTime.Time
	}
	if h.RenewTime != nil {
		r.RenewTime = h.RenewTime.Time
	}
	return r
}

func (s *DistributedLockStore) record(l *v1alpha1.DistributedLock) backend.Record {
	rem := s.observe(l)
	for i := range rem {
		if rem[i] > 0 {
			return s.entryRecord(l, i, rem[i])
		}
	}
	if len(rem) > 0 {
		return s.entryRecord(l, 0, 0)
	}
	return backend.Record{
		Key: l.Name, Token: uint64(l.Status.Token), TTL: time.Duration(l.Spec.LeaseDurationSeconds) * time.Second,
		Transitions: uint64(max(0, l.Status.Transitions)), Version: l.ResourceVersion,
	}
}

// List returns the records of every DistributedLock in the namespace. It
// needs the "list" verb, which the Role for running replicas does not.
// Objects this version cannot read (a corrupt record, or a newer record
// format) are left out and reported in the error (backend.ErrCorruptRecord,
// naming each and why); the others are still returned.
func (s *DistributedLockStore) List(ctx context.Context) ([]backend.Record, error) {
	if err := s.base.ctxErr(ctx, "list", "*"); err != nil {
		return nil, err
	}
	var ls v1alpha1.DistributedLockList
	if err := s.c.List(ctx, &ls, client.InNamespace(s.base.ns)); err != nil {
		return nil, s.fail(ctx, "list", "list", "", err)
	}
	out := make([]backend.Record, 0, len(ls.Items))
	var bad []error
	for i := range ls.Items {
		l := &ls.Items[i]
		err := check(l)
		if err == nil {
			err = resolveToken(l)
		}
		if err != nil {
			bad = append(bad, fmt.Errorf("%s %s/%s: %w", dlResource, l.Namespace, l.Name, err))
			continue
		}
		out = append(out, s.record(l))
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("kube: list %s in namespace %s: %w", dlResource, s.base.ns, errors.Join(bad...))
	}
	return out, nil
}

// ForceRelease implements backend.ForceReleaser: it removes every holder
// entry of key, whoever holds it, with an update conditional on the
// resourceVersion read (conflicts re-read and retry). The object and
// status.token stay, so the next holders get larger tokens. An object of
// another application is refused. It returns an error matching
// backend.ErrNotFound if the object does not exist, and nil if it has no
// holders.
func (s *DistributedLockStore) ForceRelease(ctx context.Context, key string) error {
	const op = "force-release"
	var lastErr error
	for range s.base.o.maxConflicts {
		cur, err := s.read(ctx, op, key)
		if err != nil {
			return err
		}
		if err := s.checkApplication(cur); err != nil {
			return err
		}
		if len(cur.Status.Holders) == 0 && !slices.Contains(cur.Finalizers, FinalizerClaim) {
			return nil
		}
		next := cur.DeepCopy()
		next.Status.Holders = nil
		settleToken(next) // keeps the resolved status.token, at least the creator's
		sent := s.base.now()
		err = s.update(ctx, next)
		if apierrors.IsConflict(err) {
			lastErr = err
			continue
		}
		if err != nil {
			return s.fail(ctx, op, "update", key, err)
		}
		s.wrote(next, sent, nil)
		return nil
	}
	return fmt.Errorf("kube: %s %s/%s: the object kept changing under us; gave up after %d conflicts: %w",
		op, s.base.ns, key, s.base.o.maxConflicts, lastErr)
}

// Watch watches the single DistributedLock key and sends on the returned
// channel soon after it changes, exactly as LeaseStore.Watch does (same
// coalescing, re-establishment and fallback to polling).
func (s *DistributedLockStore) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	return s.base.Watch(ctx, key)
}

const dlResource = "distributedlocks.baton.dev"

// dlKind gives the shared store what its error reporting, Watch and
// Remove's conditional delete need.
// The record logic of DistributedLocks (several holders) lives in
// DistributedLockStore; the single-holder methods are not used.
type dlKind struct {
	c     client.WithWatch
	ns    string
	owner *DistributedLockStore
}

// absent implements absenceObserver: the watch saw the object missing.
func (k *dlKind) absent(name string, last runtime.Object) {
	l, _ := last.(*v1alpha1.DistributedLock)
	if l != nil {
		l = l.DeepCopy()
		if resolveToken(l) != nil || check(l) != nil {
			l = nil // judge from what was seen before
		}
	}
	k.owner.missing(name, l)
}

var errNotSingleHolder = errors.New("kube: internal error: DistributedLocks are not single-holder objects")

func (*dlKind) resource() string { return dlResource }

func (*dlKind) rbacRule(verbs string) string {
	return `- apiGroups: ["baton.dev"]
  resources: ["distributedlocks"]
  verbs: ` + verbs
}

// get returns only the name and resourceVersion, for Watch.
func (k *dlKind) get(ctx context.Context, name string) (object, error) {
	l := &v1alpha1.DistributedLock{}
	if err := k.c.Get(ctx, client.ObjectKey{Namespace: k.ns, Name: name}, l); err != nil {
		return object{}, err
	}
	return object{name: l.Name, rv: l.ResourceVersion}, nil
}

func (k *dlKind) deleteVersion(ctx context.Context, o object) error {
	pre, err := deletePreconditions(o)
	if err != nil {
		return err
	}
	l := &v1alpha1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: o.name}}
	return k.c.Delete(ctx, l, client.Preconditions(*pre))
}

func (*dlKind) create(context.Context, object) (object, error) { return object{}, errNotSingleHolder }
func (*dlKind) update(context.Context, object) (object, error) { return object{}, errNotSingleHolder }
func (*dlKind) list(context.Context) ([]object, error)         { return nil, errNotSingleHolder }

func (k *dlKind) watch(ctx context.Context, name, rv string) (watch.Interface, error) {
	return k.c.Watch(ctx, &v1alpha1.DistributedLockList{}, &client.ListOptions{
		Namespace:     k.ns,
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name),
		Raw:           &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true},
	})
}
