package kubestore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"sync"
	"time"

	"github.com/baton-go/baton/backend"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// store is the kind-independent part of LeaseStore (and the other kinds):
// the conditional-write protocol and the local observation of expiry.
type store struct {
	ns string
	k  kind
	o  options

	// adoptable: the kind's objects written by other tools can be judged
	// (Leases; see WithAdoption).
	adoptable bool
	// clientNote: facts about the store's own client (the ForConfig
	// constructors): the API server's 429 answers to it, its rate limiter
	// and its proxy; nil for a client the caller built.
	clientNote *clientNote

	mu      sync.Mutex
	seen    map[string]observation  // by object name; see sweepLocked
	sweepAt int                     // sweep seen when it grows past this
	watches map[string]*sharedWatch // by object name; see Watch
	denied  map[string]deniedWatch  // by object name; see Watch and sweepDeniedLocked
	// deniedSweepAt: sweep denied when it grows past this.
	deniedSweepAt int
}

// minSweep is the size below which seen or denied is never swept.
const minSweep = 64

// sweepLocked drops observations of claims that expired, as judged here,
// at least one lease duration ago, so that a process that touches many
// lock names (a scheduler's per-slot locks) does not keep one entry per
// name forever. Dropping one is safe: should the same version be seen
// again, its claim is counted from then, which only delays a takeover.
// s.mu must be held.
func (s *store) sweepLocked(now time.Time) {
	sweep(s.seen, &s.sweepAt, func(obs observation) bool { return now.Sub(obs.at) > 2*obs.ttl })
}

// sweepDeniedLocked drops the refused watches whose refusal is over, so
// that a process without "watch" that waits on many lock names (a lock per
// entity) does not keep one entry per name forever; a name watched again
// asks the API server again, as after the refusal's time anyway. s.mu must
// be held.
func (s *store) sweepDeniedLocked(now time.Time) {
	sweep(s.denied, &s.deniedSweepAt, func(d deniedWatch) bool { return !now.Before(d.until) })
}

// sweep deletes the entries of m that are over, once m has grown past
// *at (and minSweep), and sets *at to twice what is left: each entry is
// looked at a bounded number of times on average, however many names
// come and go.
func sweep[V any](m map[string]V, at *int, over func(V) bool) {
	if len(m) <= max(*at, minSweep) {
		return
	}
	maps.DeleteFunc(m, func(_ string, v V) bool { return over(v) })
	*at = 2 * len(m)
}

// observation is when this process first saw one version of an object, on
// its monotonic clock, or first saw the object missing after it had seen
// it held (gone).
type observation struct {
	rv  string
	uid string // the object's uid; "" if unknown
	at  time.Time
	ttl time.Duration // the object's lease duration
	// holder and token are the object's, for the HeldError of a gone
	// object. holder is empty if the version was free. nonce is the
	// holder's: with holder, it names one claim (one acquisition).
	holder string
	nonce  string
	token  uint64
	// pending: the token was the object's resourceVersion (a new object
	// whose creator has not written its token yet), which every write of
	// the object changes.
	pending bool
	// renew is the object's renewTime, the holder's wall clock: only
	// compared with another version's, to tell the holder's renewals
	// from other writes (see remaining).
	renew time.Time
	// gone: the object was deleted while (as last seen here) held; at is
	// when this process first saw it missing, rv is empty.
	gone bool
	// obj is the object as this process last wrote it (rv is its
	// version), or nil if the version was only seen.
	obj *object
	// released is the nonce of the claim that this process's write obj
	// released, or "": a watch view still showing that claim is older
	// than obj (see current).
	released string
}

func observe(o object, at time.Time) observation {
	return observation{rv: o.rv, uid: o.uid, at: at, ttl: o.ttl(), holder: o.holder, nonce: o.nonce, token: o.token, pending: o.pending, renew: o.renew}
}

func newStore(namespace string, k kind, opts []Option) (*store, error) {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return nil, fmt.Errorf("%w: namespace %q: %s", backend.ErrInvalidOptions, namespace, errs[0])
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return &store{ns: namespace, k: k, o: o, seen: map[string]observation{}, watches: map[string]*sharedWatch{}, denied: map[string]deniedWatch{}}, nil
}

// Namespace returns the namespace the store keeps its objects in.
func (s *store) Namespace() string { return s.ns }

// Application returns the application set with WithApplication.
func (s *store) Application() string { return s.o.app }

func (s *store) now() time.Time { return s.o.clock.Now() }

// unknownDurationRetry is the remaining time of a claim without a lease
// duration (see remaining): how soon a contender looks at it again.
const unknownDurationRetry = time.Second

// remaining is how long o's claim still lasts as judged from this process:
// the object's lease duration, counted from the moment this process first
// saw the object at its current resourceVersion (or sent the write that
// produced it). Any change to the claim restarts the count; a version
// that changes only other fields does not (see unrenewed). Zero for a
// free object or an expired claim.
//
// A claim's duration does not shrink here between two of its holder's
// renewals: if the version seen before was the same claim (holder and
// nonce) with the same renewTime and a longer lease duration, that one
// counts. A write that is not the holder's renewal (it leaves renewTime
// as it was) and shortens the duration is someone else's edit (kubectl
// edit), which the holder, still counting its validity with its own TTL,
// learns of at its next renewal at the earliest; from that renewal on the
// duration the holder writes counts again.
//
// A claim whose duration was removed by hand (kubectl edit), and which
// this process never saw with one, cannot be judged expired: it lasts
// until the object changes (the holder's next renewal writes its duration
// back) or a forced release frees it; retried every unknownDurationRetry.
func (s *store) remaining(o object) time.Duration {
	now := s.now()
	s.mu.Lock()
	obs, ok := s.seen[o.name]
	if ok && obs.rv != o.rv && unrenewed(obs, o) {
		// Another writer changed other fields: the claim counts on
		// from when this process first saw it.
		obs.rv, obs.uid, obs.token, obs.obj = o.rv, o.uid, o.token, nil
		s.seen[o.name] = obs
	}
	if !ok || obs.rv != o.rv {
		prev := obs
		obs = observe(o, now)
		if ok && sameClaim(prev, o) {
			obs.ttl = max(obs.ttl, prev.ttl)
		}
		s.seen[o.name] = obs
		s.sweepLocked(now)
	}
	s.mu.Unlock()
	if o.holder != "" && max(obs.ttl, o.ttl()) <= 0 {
		return unknownDurationRetry
	}
	if o.holder == "" {
		return 0
	}
	return max(0, obs.at.Add(max(obs.ttl, o.ttl())).Sub(now))
}

// sameClaim reports whether obs, an earlier version seen of o's object,
// records the claim o records, not renewed since: the same holder and
// nonce on the same object, with the same renewTime.
func sameClaim(obs observation, o object) bool {
	return !obs.gone && o.holder != "" && o.nonce != "" &&
		obs.holder == o.holder && obs.nonce == o.nonce && sameObject(obs.uid, o.uid) && obs.renew.Equal(o.renew)
}

// unrenewed reports whether o, a new version of the object obs saw,
// records the claim obs recorded exactly as it was: the same holder,
// nonce, renewTime, lease duration and token (or, on a new object, both
// the token its creator has yet to write). Its writer changed only what
// is no claim (labels, annotations other than baton's, owner references,
// a ConfigMap's data, the deletion mark): someone else's write, since
// every renewal writes a renewTime of its own (see Renew). Such a write
// does not restart the count of the claim, or a controller or GitOps tool
// that touched the object more often than its lease duration would keep a
// crashed holder's lock from everyone for ever.
func unrenewed(obs observation, o object) bool {
	return sameClaim(obs, o) && obs.ttl == o.ttl() && (obs.token == o.token || obs.pending && o.pending)
}

// missing records that the lock object name does not exist, as this
// process sees now, and returns the claim it last saw on it and how long
// that claim may still last: a holder's validity ends at most one lease
// duration after its last renewal, which the API server applied before the
// deletion, which happened before this process saw the object missing. So
// a deletion is treated like a new version of the record, first seen at
// the moment this process first saw the object missing: the wait is the
// claim's lease duration from then (on this process's monotonic clock,
// never compared with another machine's). last, if set, is the object's
// final state (a watch's Deleted event), which is newer than anything
// seen before. Zero if the final state was free, or the object was never seen.
func (s *store) missing(name string, last *object) (observation, time.Duration) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	obs, ok := s.seen[name]
	switch {
	case last != nil && last.holder == "":
		// It was free when deleted. An observation of another object of
		// this name (a lagging watch reports the deletion after this
		// process created the object again, say after Remove) is kept.
		if ok && sameObject(obs.uid, last.uid) {
			delete(s.seen, name)
		}
		return observation{}, 0
	case last != nil && ok && obs.gone:
		// Already seen missing: keep that moment, learn the final claim.
		obs.ttl, obs.holder, obs.token = max(obs.ttl, last.ttl()), last.holder, last.token
		s.seen[name] = obs
	case last != nil:
		ttl := last.ttl()
		if ok {
			ttl = max(ttl, obs.ttl) // a duration seen before may have been longer
		}
		obs, ok = observe(*last, now), true
		obs.ttl = ttl
	case !ok:
		return observation{}, 0
	}
	if !obs.gone {
		// Free when last seen here is not free when deleted: a claim made
		// after this process last looked (its watch lagging, or no watch)
		// may have been deleted with the object, and its holder may still
		// act. Only the object's final state (last, from a watch's Deleted
		// event) proves it free. So the wait is the same either way.
		obs = observation{uid: obs.uid, at: now, ttl: obs.ttl, holder: obs.holder, token: obs.token, gone: true}
		s.seen[name] = obs
		s.sweepLocked(now)
	}
	return obs, max(0, obs.at.Add(obs.ttl).Sub(now))
}

// sameObject reports whether two uids may be of the same object: they are
// equal, or one is unknown.
func sameObject(uid1, uid2 string) bool { return uid1 == "" || uid2 == "" || uid1 == uid2 }

// wrote records that this process produced version rv of name with a
// write sent at sent. The write was applied no earlier than sent, so
// counting the claim from sent never makes it last longer here than at any
// other observer.
func (s *store) wrote(o object, sent time.Time) {
	s.mu.Lock()
	obs := observe(o, sent)
	obs.obj = &o
	s.seen[o.name] = obs
	s.sweepLocked(sent)
	s.mu.Unlock()
}

// written returns the object at version rv if this process wrote it.
func (s *store) written(name, rv string) (object, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	obs, ok := s.seen[name]
	if !ok || obs.obj == nil || obs.rv != rv || rv == "" {
		return object{}, false
	}
	return *obs.obj, true
}

// TryAcquire takes the lock object key for req if it is free (never
// created, released) or its claim has expired as judged by this process,
// with a conditional write: a create that fails if the object exists, or an
// update on the resourceVersion read. A lost race (409 Conflict) re-reads
// and decides again, up to WithMaxConflicts times; if every attempt loses,
// the lock is contended and TryAcquire returns a *backend.HeldError without
// a holder (other contenders won those races).
//
// req.TTL is rounded up to whole seconds for leaseDurationSeconds; a TTL
// under one second is rejected with an error matching
// backend.ErrInvalidOptions. An object created by another application or
// tool returns an *ApplicationError. An object being deleted is never
// acquired: while its claim lasts TryAcquire returns a *backend.HeldError,
// and once the claim has expired it clears the claim, which removes
// FinalizerClaim and lets the deletion finish, and creates the object
// anew. A missing object that this process last saw held is not created
// before that claim could have expired. See Deleted lock objects in the
// package documentation.
func (s *store) TryAcquire(ctx context.Context, key string, req backend.Request) (backend.Grant, error) {
	const op = "acquire"
	if err := backend.ValidateName(key); err != nil {
		return backend.Grant{}, fmt.Errorf("kube: %s in namespace %s: %w", op, s.ns, err)
	}
	if err := s.ctxErr(ctx, op, key); err != nil {
		return backend.Grant{}, err
	}
	if req.Holder == "" || req.Nonce == "" {
		return backend.Grant{}, fmt.Errorf("kube: %s %s/%s: %w: empty holder or nonce", op, s.ns, key, backend.ErrInvalidOptions)
	}
	dur, err := durationSeconds(req.TTL)
	if err != nil {
		return backend.Grant{}, fmt.Errorf("kube: %s %s/%s: %w: %v", op, s.ns, key, backend.ErrInvalidOptions, err)
	}
	var lastErr error
	for attempt := range s.o.maxConflicts {
		cur, err := s.current(ctx, key, attempt == 0)
		var g backend.Grant
		switch {
		case apierrors.IsNotFound(err) && !isNamespaceNotFound(err):
			g, err = s.create(ctx, key, req, dur)
		case err != nil:
			return backend.Grant{}, s.fail(ctx, op, "get", key, err)
		default:
			g, err = s.take(ctx, cur, req, dur)
		}
		if errRetry(err) {
			lastErr = err
			continue
		}
		return g, err
	}
	// Every attempt lost its conditional write to another writer: the lock
	// is contended, and others won it (each conflict is a write that
	// landed first). Report it as held, by an owner unknown here, so that
	// the engine waits for the watch or its retry period instead of
	// treating contention as a failure.
	return backend.Grant{}, fmt.Errorf("kube: %s %s/%s: contended: lost %d conditional writes in a row to other writers (last: %v): %w",
		op, s.ns, key, s.o.maxConflicts, lastErr, &backend.HeldError{Key: key})
}

// errFinished is returned by take after it let a deletion finish, or
// found the object deleted since it was read (Remove by another process,
// kubectl delete): the object is gone, and TryAcquire reads again.
var errFinished = errors.New("kube: the deletion of the lock object finished")

// errRetry reports whether TryAcquire reads again after err: a lost race
// (the object appeared, or changed, since it was read) or a deletion it
// finished.
func errRetry(err error) bool {
	return apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) || errors.Is(err, errFinished)
}

// create creates the missing lock object key for req, unless this process
// last saw a claim on it that may still last. The token is the
// resourceVersion the API server gives the new object, larger than that of
// every write before, so larger than every token issued on an earlier
// object of this name (see "Fencing tokens" in the package doc). A lost
// race returns the API server's AlreadyExists error as it is.
func (s *store) create(ctx context.Context, key string, req backend.Request, dur int32) (backend.Grant, error) {
	const op = "acquire"
	if gone, rem := s.missing(key, nil); rem > 0 {
		who := fmt.Sprintf("while %q held it (token %d)", gone.holder, gone.token)
		if gone.holder == "" {
			who = fmt.Sprintf("after this process last saw it free (token %d); a claim made since may have gone with it", gone.token)
		}
		return backend.Grant{}, fmt.Errorf("kube: %s %s/%s: the lock object was deleted %s; "+
			"its claim may last until one lease duration after this process first saw it missing: %w", op, s.ns, key,
			who, &backend.HeldError{Key: key, Holder: gone.holder, Token: gone.token, RetryAfter: rem})
	}
	wall := s.now()
	next := object{
		name: key, app: s.o.app, hasApp: true, baton: true,
		holder: req.Holder, nonce: req.Nonce, pending: true, durationSec: dur,
		acquire: wall, renew: wall,
	}
	sent := s.now()
	created, err := s.k.create(ctx, next)
	if apierrors.IsAlreadyExists(err) {
		return backend.Grant{}, err
	}
	if err != nil {
		s.releaseUnanswered(ctx, key, req)
		return backend.Grant{}, s.fail(ctx, op, "create", key, err)
	}
	s.wrote(created, sent)
	return s.granted(ctx, created, req, dur)
}

// granted returns the grant of o, the object an acquisition for req just
// wrote, unless the API server stored a shorter lease duration than dur,
// the one written: a mutating admission policy or webhook rewrote it.
// Every other process judges the claim by the stored duration while the
// holder's engine counts its TTL, so the lock would have two holders at
// once; the claim is released at once and the error matches
// backend.ErrMisconfigured.
func (s *store) granted(ctx context.Context, o object, req backend.Request, dur int32) (backend.Grant, error) {
	g := grant(o, req)
	if o.durationSec >= dur {
		return g, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unansweredRelease)
	defer cancel()
	_ = s.Release(rctx, g)
	return backend.Grant{}, fmt.Errorf("kube: acquire %s %s/%s: %w: %s", s.k.resource(), s.ns, o.name, backend.ErrMisconfigured, s.shortened(o, dur))
}

// shortened says that the API server stored o's lease duration shorter
// than dur, the one written, and what to do.
func (s *store) shortened(o object, dur int32) string {
	return fmt.Sprintf("the API server stored a lease duration of %ds, not the %ds written: a mutating admission policy or webhook rewrites it "+
		"(kubectl get mutatingadmissionpolicies,mutatingwebhookconfigurations), and every other process would judge the claim by %ds "+
		"while its holder counts %ds, two holders at once; exempt the %s of namespace %s from it, or use a TTL of at most %ds",
		o.durationSec, dur, o.durationSec, dur, s.k.resource(), s.ns, o.durationSec)
}

// take acquires the existing object cur for req if its claim has expired
// as judged here, with an update on cur's resourceVersion; a lost race
// returns the API server's Conflict error as it is, and an object deleted
// since cur was read errFinished. An object being deleted is never
// acquired; see finish.
func (s *store) take(ctx context.Context, cur object, req backend.Request, dur int32) (backend.Grant, error) {
	const op = "acquire"
	key := cur.name
	if !cur.baton && s.o.adopt && s.adoptable {
		var err error
		if cur, err = s.adopt(cur); err != nil {
			return backend.Grant{}, s.fail(ctx, op, "update", key, err)
		}
	}
	if err := s.checkApplication(cur); err != nil {
		return backend.Grant{}, err
	}
	if cur.holder != "" {
		if rem := s.remaining(cur); rem > 0 {
			being := ""
			if cur.deleting {
				being = "; the object is being deleted, which finishes when this claim ends"
			}
			if cur.durationSec <= 0 {
				being += "; its lease duration was removed by hand, so it counts as held until its holder's next renewal writes it back " +
					"(a holder that is gone never does: baton release " + key + " --force frees it)"
			}
			return backend.Grant{}, fmt.Errorf("kube: %s %s/%s%s: %w", op, s.ns, key, being, &backend.HeldError{
				Key: key, Holder: cur.holder, Token: cur.token, RetryAfter: rem,
			})
		}
	}
	if cur.deleting {
		return backend.Grant{}, s.finish(ctx, cur)
	}
	if cur.token == math.MaxUint64 {
		return backend.Grant{}, s.fail(ctx, op, "update", key, errCorrupt(fmt.Errorf("the fencing token is at its maximum")))
	}
	wall := s.now()
	next := cur
	next.holder, next.nonce = req.Holder, req.Nonce
	next.token, next.pending = cur.token+1, false
	next.durationSec = dur
	next.acquire, next.renew = wall, wall
	next.transitions = cur.transitions + 1
	sent := s.now()
	updated, err := s.k.update(ctx, next)
	switch {
	case apierrors.IsConflict(err):
		return backend.Grant{}, err
	case apierrors.IsNotFound(err) && !isNamespaceNotFound(err):
		return backend.Grant{}, errFinished // deleted since read (the view can lag)
	case err != nil:
		s.releaseUnanswered(ctx, key, req)
		return backend.Grant{}, s.fail(ctx, op, "update", key, err)
	}
	s.wrote(updated, sent)
	return s.granted(ctx, updated, req, dur)
}

// unansweredRelease bounds releaseUnanswered.
const unansweredRelease = 2 * time.Second

// releaseUnanswered releases the claim that req's create or update may
// have written although ctx ended before its answer came: the API server
// applies a request it received whether or not the client still waits,
// and the claim would keep everyone out, held by nobody, for its lease
// duration. It reads the object and releases it only if it names req's
// owner, as that owner's Release would, within unansweredRelease of ctx's
// end. (A write still queued at the API server when the read is served
// lands after it, and its claim lasts its lease duration.) It does
// nothing while ctx is live (the write failed for another reason, and
// the API server said so).
func (s *store) releaseUnanswered(ctx context.Context, key string, req backend.Request) {
	if ctx.Err() == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unansweredRelease)
	defer cancel()
	cur, err := s.k.get(rctx, key)
	if err != nil || cur.holder != req.Holder || cur.nonce != req.Nonce {
		return
	}
	_ = s.Release(rctx, grant(cur, req))
}

// adopt returns cur, a Lease another tool wrote (client-go leader
// election), as baton's: with this store's application and, as its last
// token, its resourceVersion, which is larger than every token issued on
// an earlier object of this name (see WithAdoption). Its claim, if any, is
// judged as any other.
func (s *store) adopt(cur object) (object, error) {
	rv, err := parseResourceVersion(cur.rv)
	if err != nil {
		return cur, errCorrupt(err)
	}
	if cur.holder != "" && cur.durationSec <= 0 {
		return cur, errCorrupt(fmt.Errorf("held by %q without spec.leaseDurationSeconds", cur.holder))
	}
	cur.baton, cur.app, cur.hasApp = true, s.o.app, true
	cur.token, cur.pending = rv, false
	return cur, nil
}

// finish clears the expired (or released) claim of cur, an object being
// deleted, with an update on its resourceVersion. That removes
// FinalizerClaim, so the API server completes the deletion unless other
// finalizers remain. It returns errFinished, a Conflict (someone wrote
// first) for TryAcquire to read again, or a *backend.HeldError while other
// finalizers keep the object.
func (s *store) finish(ctx context.Context, cur object) error {
	const op = "acquire"
	if !cur.claimed && cur.holder == "" {
		return fmt.Errorf("kube: %s %s/%s: the lock object is being deleted and waits for finalizers that are not baton's; "+
			"it can be acquired once it is gone: %w", op, s.ns, cur.name, &backend.HeldError{Key: cur.name, RetryAfter: time.Second})
	}
	next := cur
	next.holder, next.nonce = "", ""
	sent := s.now()
	updated, err := s.k.update(ctx, next)
	switch {
	case apierrors.IsConflict(err):
		return err
	case apierrors.IsNotFound(err) && !isNamespaceNotFound(err):
		return errFinished // someone else finished it
	case err != nil:
		return s.fail(ctx, op, "update", cur.name, err)
	}
	s.settled(updated, sent)
	return errFinished
}

// settled records updated, an object this process wrote at sent. An
// object being deleted that it left without a claim is gone (or waits for
// finalizers of others, never to be acquired again): its final state is
// free, so it costs no wait once missing.
func (s *store) settled(updated object, sent time.Time) {
	if updated.deleting && updated.holder == "" {
		s.missing(updated.name, &updated)
		return
	}
	s.wrote(updated, sent)
}

// current returns the object key: from the live watch's view if useView,
// a watch of key is established and the view does not show a claim this
// process released since (no request; every write that follows is
// conditional, so a stale view costs a conflict, never exclusion),
// otherwise read from the API server.
func (s *store) current(ctx context.Context, key string, useView bool) (object, error) {
	if useView {
		if o, exists, ok := s.view(key); ok && !s.releasedHere(o) {
			if !exists {
				return object{}, apierrors.NewNotFound(schema.GroupResource{Resource: s.k.resource()}, key)
			}
			return o, nil
		}
	}
	return s.k.get(ctx, key)
}

func grant(o object, req backend.Request) backend.Grant {
	return backend.Grant{Key: o.name, Holder: o.holder, Nonce: o.nonce, Token: o.token, TTL: req.TTL, Version: versionOf(o.rv, o.uid)}
}

// checkApplication refuses objects of another application or tool.
func (s *store) checkApplication(o object) error {
	if o.baton && o.app == s.o.app {
		return nil
	}
	return &ApplicationError{
		Namespace: s.ns, Name: o.name, Resource: s.k.resource(),
		Want: s.o.app, Have: o.app, Foreign: !o.baton, Holder: o.holder,
	}
}

// Renew bumps renewTime (and sets leaseDurationSeconds from g.TTL) with an
// update conditional on the resourceVersion read, if the object still
// names g's holder and nonce, is not being deleted, and the claim has not
// expired as judged by this process (counted from the send time of its own
// last write). It returns an error matching backend.ErrLost otherwise.
func (s *store) Renew(ctx context.Context, g backend.Grant) (backend.Grant, error) {
	const op = "renew"
	dur, err := durationSeconds(g.TTL)
	if err != nil {
		return backend.Grant{}, fmt.Errorf("kube: %s %s/%s: %w: %v", op, s.ns, g.Key, backend.ErrInvalidOptions, err)
	}
	next, err := s.change(ctx, op, g, func(o *object) error {
		if o.deleting {
			return fmt.Errorf("%w: the lock object is being deleted (kubectl delete?); it is freed when this claim ends "+
				"(only baton release --force frees a lock safely)", backend.ErrLost)
		}
		o.durationSec = dur
		// A renewTime of its own, after the one it replaces: other
		// processes tell a renewal from other writers' changes by it
		// (see unrenewed).
		o.renew = microNow(s.now(), microTime(o.renew)).Time
		return nil
	})
	if err != nil {
		return backend.Grant{}, err
	}
	if next.durationSec < dur {
		// Others count this renewal by the shorter duration: stop now.
		return backend.Grant{}, fmt.Errorf("kube: %s %s/%s (holder %q, token %d): %w: %s",
			op, s.ns, g.Key, g.Holder, g.Token, backend.ErrLost, s.shortened(next, dur))
	}
	return grant(next, backend.Request{TTL: g.TTL}), nil
}

// Release clears holderIdentity and the nonce (and removes FinalizerClaim)
// with an update conditional on the resourceVersion read, if the object
// still names g's holder and nonce and the claim has not expired as judged
// by this process. The object and its fencing token stay, unless someone
// deleted the object meanwhile: then the release lets the deletion finish.
// It returns an error matching backend.ErrLost otherwise.
func (s *store) Release(ctx context.Context, g backend.Grant) error {
	_, err := s.change(ctx, "release", g, func(o *object) error {
		o.holder, o.nonce = "", ""
		return nil
	})
	if err == nil {
		s.noteReleased(g.Key, g.Nonce)
	}
	return err
}

// noteReleased records that this process's last write of name released
// the claim with nonce.
func (s *store) noteReleased(name, nonce string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if obs, ok := s.seen[name]; ok && obs.obj != nil && obs.obj.holder == "" {
		obs.released = nonce
		s.seen[name] = obs
	}
}

// releasedHere reports whether o, a watch's view, shows a claim that this
// process has released since: the watch has not delivered the release
// yet, and o must not be taken for the current object (TryAcquire would
// report the lock held by the claim just released).
func (s *store) releasedHere(o object) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	obs, ok := s.seen[o.name]
	return ok && o.holder != "" && obs.obj != nil && obs.released != "" && o.nonce == obs.released
}

// change applies f to g's object if it is still g's, with a conditional
// update, retrying conflicts. If this process wrote the version named by
// g.Version, the first attempt updates that version without reading it
// first (one round trip instead of two): the precondition on the
// resourceVersion makes the update fail if anything changed since.
func (s *store) change(ctx context.Context, op string, g backend.Grant, f func(*object) error) (object, error) {
	if err := backend.ValidateName(g.Key); err != nil {
		return object{}, fmt.Errorf("kube: %s in namespace %s: %w", op, s.ns, err)
	}
	if err := s.ctxErr(ctx, op, g.Key); err != nil {
		return object{}, err
	}
	lost := func(why string, args ...any) error {
		return fmt.Errorf("kube: %s %s/%s (holder %q, token %d): %w: %s",
			op, s.ns, g.Key, g.Holder, g.Token, backend.ErrLost, fmt.Sprintf(why, args...))
	}
	rv, uid := splitVersion(g.Version)
	var lastErr error
	for attempt := range s.o.maxConflicts {
		cur, cached := s.written(g.Key, rv)
		if !cached || attempt > 0 {
			var err error
			cur, err = s.k.get(ctx, g.Key)
			if apierrors.IsNotFound(err) && !isNamespaceNotFound(err) {
				s.missing(g.Key, nil)
				return object{}, lost("the lock object was deleted (only baton release --force frees a lock safely)")
			}
			if err != nil {
				return object{}, s.fail(ctx, op, "get", g.Key, err)
			}
		}
		switch {
		case uid != "" && cur.uid != uid:
			return object{}, lost("the lock object was deleted and created again (uid %s, granted on uid %s)", cur.uid, uid)
		case cur.holder != g.Holder && cur.nonce == g.Nonce && cur.nonce != "" && !s.o.adopt:
			// (Under WithAdoption, client-go's leader election writes
			// the holder of an expired claim and keeps the annotations.)
			return object{}, lost("%s", s.otherWriter(cur))
		case cur.holder == "":
			return object{}, lost("the lock was released")
		case cur.holder == g.Holder && cur.nonce != g.Nonce:
			return object{}, lost("it is held by %q (token %d) under nonce %q, not this claim's: another process with the same identity took it, "+
				"or annotation %s was edited (by hand?)", cur.holder, cur.token, cur.nonce, AnnotationNonce)
		case cur.holder != g.Holder || !cur.baton:
			return object{}, lost("it is held by %q (token %d)", cur.holder, cur.token)
		case s.remaining(cur) <= 0:
			return object{}, lost("the claim expired (not renewed for %v as seen from this process)", cur.ttl())
		}
		next := cur
		if next.pending {
			// Write the creator's token (the object's resourceVersion
			// at creation) as the number it is; no other token was
			// issued on this object, and it is no larger than the
			// current resourceVersion that readers took meanwhile.
			next.token, next.pending = min(g.Token, cur.token), false
		}
		if err := f(&next); err != nil {
			return object{}, fmt.Errorf("kube: %s %s/%s: %w", op, s.ns, g.Key, err)
		}
		sent := s.now()
		updated, err := s.k.update(ctx, next)
		if apierrors.IsConflict(err) {
			lastErr = err
			continue
		}
		if apierrors.IsNotFound(err) && !isNamespaceNotFound(err) {
			s.missing(g.Key, nil)
			return object{}, lost("the lock object was deleted (only baton release --force frees a lock safely)")
		}
		if err != nil {
			return object{}, s.fail(ctx, op, "update", g.Key, err)
		}
		s.settled(updated, sent)
		return updated, nil
	}
	return object{}, fmt.Errorf("kube: %s %s/%s: the object kept changing under us; gave up after %d conflicts: %w",
		op, s.ns, g.Key, s.o.maxConflicts, lastErr)
}

// otherWriter says what a write that was not baton's did to cur, whose
// holder it cleared or replaced and whose nonce, still the claim's, it
// kept: every write of baton's (an acquisition, a release, baton release
// --force) writes both. Another tool writes the object, such as kubectl
// apply or a GitOps tool with a manifest of the same name.
func (s *store) otherWriter(cur object) string {
	what := fmt.Sprintf("set to %q", cur.holder)
	if cur.holder == "" {
		what = "cleared"
	}
	return fmt.Sprintf("its holder was %s by a write that was not baton's, which kept this claim's nonce (an acquisition, a release and "+
		"baton release --force write both): another tool writes this object, such as kubectl apply or a GitOps tool with a manifest "+
		"of that name (kubectl get %s %s -n %s --show-managed-fields names the writers); give the lock a name no other tool writes",
		what, s.k.resource(), cur.name, s.ns)
}

// Get returns the lock's record. Remaining is judged by local observation:
// a claim this process has not seen before counts as lasting its full
// lease duration from now.
func (s *store) Get(ctx context.Context, key string) (backend.Record, error) {
	const op = "get"
	if err := backend.ValidateName(key); err != nil {
		return backend.Record{}, fmt.Errorf("kube: %s in namespace %s: %w", op, s.ns, err)
	}
	if err := s.ctxErr(ctx, op, key); err != nil {
		return backend.Record{}, err
	}
	o, err := s.k.get(ctx, key)
	if apierrors.IsNotFound(err) {
		return backend.Record{}, fmt.Errorf("kube: %s %s %s/%s: %w", op, s.k.resource(), s.ns, key, backend.ErrNotFound)
	}
	if err != nil {
		return backend.Record{}, s.fail(ctx, op, "get", key, err)
	}
	return s.record(o), nil
}

// List returns the records of every lock object in the namespace (objects
// with the baton.dev/app label, of any application). It needs the "list"
// verb, which the Role for running replicas does not: only status views
// use it. Objects whose record does not decode are left out and reported
// in the error (backend.ErrCorruptRecord, naming each); the others are
// still returned.
func (s *store) List(ctx context.Context) ([]backend.Record, error) {
	if err := s.ctxErr(ctx, "list", "*"); err != nil {
		return nil, err
	}
	objs, err := s.k.list(ctx)
	if err != nil && !errors.Is(err, backend.ErrCorruptRecord) {
		return nil, s.fail(ctx, "list", "list", "", err)
	}
	out := make([]backend.Record, 0, len(objs))
	for _, o := range objs {
		if o.baton {
			out = append(out, s.record(o))
		}
	}
	if err != nil {
		return out, fmt.Errorf("kube: list %s in namespace %s: %w", s.k.resource(), s.ns, err)
	}
	return out, nil
}

func (s *store) record(o object) backend.Record {
	return backend.Record{
		Key: o.name, Holder: o.holder, Nonce: o.nonce, Token: o.token, TTL: o.ttl(),
		AcquireTime: o.acquire, RenewTime: o.renew, Transitions: uint64(max(0, o.transitions)),
		Remaining: s.remaining(o), Version: o.rv,
	}
}

// ForceRelease implements backend.ForceReleaser: it clears the holder of key
// whoever holds it, with an update conditional on the resourceVersion read
// (conflicts re-read and retry). The object and its fencing token stay, so
// the next holder gets a larger token; on an object being deleted, it lets
// the deletion finish (the next object's tokens are larger still). It
// removes FinalizerClaim, also one left without a holder. An object of
// another application is refused, as for TryAcquire. It returns an error
// matching backend.ErrNotFound if the object does not exist, and nil if it
// is already free.
func (s *store) ForceRelease(ctx context.Context, key string) error {
	const op = "force-release"
	if err := backend.ValidateName(key); err != nil {
		return fmt.Errorf("kube: %s in namespace %s: %w", op, s.ns, err)
	}
	if err := s.ctxErr(ctx, op, key); err != nil {
		return err
	}
	var lastErr error
	for attempt := range s.o.maxConflicts {
		cur, err := s.current(ctx, key, attempt == 0)
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("kube: %s %s %s/%s: %w", op, s.k.resource(), s.ns, key, backend.ErrNotFound)
		}
		if err != nil {
			return s.fail(ctx, op, "get", key, err)
		}
		if err := s.checkApplication(cur); err != nil {
			return err
		}
		if cur.holder == "" && !cur.claimed {
			return nil
		}
		next := cur
		next.holder, next.nonce = "", ""
		next.pending = false // keeps cur.token: the current resourceVersion, at least the creator's
		sent := s.now()
		updated, err := s.k.update(ctx, next)
		if apierrors.IsConflict(err) {
			lastErr = err
			continue
		}
		if err != nil {
			return s.fail(ctx, op, "update", key, err)
		}
		s.settled(updated, sent)
		return nil
	}
	return fmt.Errorf("kube: %s %s/%s: the object kept changing under us; gave up after %d conflicts: %w",
		op, s.ns, key, s.o.maxConflicts, lastErr)
}
