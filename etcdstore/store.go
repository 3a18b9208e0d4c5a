package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/storeerr"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// ErrClosed is returned (wrapped) by every method of a Store after Close.
// It matches backend.ErrClosed, which the engine does not retry. Renew and
// Release of a claim made through a closed Store also match
// backend.ErrLost: the Store no longer keeps its lease alive.
var ErrClosed = fmt.Errorf("etcdstore: %w", backend.ErrClosed)

// Lock order. A Store's state has four owners, each with a mutex of its
// own: the Store itself, which keeps its claims and composes the other
// three (and runs one goroutine per Observe, which ends with the
// Observe's context or on Close), the fair queue, the watch hub and the
// lease pool:
//
//	Store.mu      closed, the claims and their fields (their watches of queues too), the claims seen (store.go, placeswatch.go)
//	fairQueue.mu  the places in fair queues, abandoned places, busy, tail, contended (fairqueue.go)
//	watchHub.mu   the followers behind Watch and their registrations (watchhub.go)
//	leasePool.mu  the leases, which claims and places sit on each, their orphans, the trust gate (leasepool.go, orphan.go)
//
// Code that needs more than one takes them in that order (any may be
// skipped) and never takes one while holding a later one. So the pool,
// innermost, calls out only after releasing its lock (leaseUser); the
// hub's methods take only its own; code that holds fairQueue.mu may call
// the hub and the pool but never takes Store.mu; and a follower's spec,
// which in fair mode is made of the queue's places, is read under
// fairQueue.mu and watchHub.mu together (lockSpec). Nothing holds a lock
// while it talks to etcd or waits (for a lease's change, a watch, a
// timer). Sections that once shared Store's single lock and now span two
// owners either hold both, in order (Close, cachedHeld, a lease's loss,
// a verification's answer), or are split where no reader can tell the
// difference: for instance a released claim is forgotten under Store.mu
// and its lock marked busy under fairQueue.mu after it.

// Store is a backend.Backend on etcd. It also implements backend.Watcher,
// backend.Lister, backend.ForceReleaser and backend.Remover.
//
// A Store keeps one etcd lease per distinct TTL for every claim and queue
// entry it makes, renews all of them with one keepalive stream, and runs a
// few goroutines for that (see the package documentation); Close ends them.
// Its methods are safe for concurrent use. A Store does not own its
// client: close the client after the Store.
type Store struct {
	client *clientv3.Client
	prefix string
	fair   bool
	log    *slog.Logger

	ctx       context.Context // ends on Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	ownClient bool       // made by OpenStore: Close closes the client; set before use
	pool      *leasePool // the etcd leases, and the session loop
	fq        *fairQueue // fair mode: this Store's places in queues
	hub       *watchHub  // the watches behind Watch

	// mu guards closed, claims (and every claim's fields but those that
	// never change), seen (with seenPruneAt and pruningSeen) and
	// placesWatches. See "Lock order" above.
	mu     sync.Mutex
	closed bool
	claims map[string]*claim // by lock name: claims made through this Store
	// seen: the last claim of another owner that an attempt found, per
	// lock, for the rule that a contender that has seen a claim does not
	// acquire before it could have expired, even if its key vanishes (see
	// ghost).
	seen map[string]*seenClaim
	// seenPruneAt and pruningSeen: seen is pruned in the background when
	// it grows past seenPruneAt, one prune at a time (see seenprune.go).
	seenPruneAt int
	pruningSeen bool
	// placesWatches: the claims' watches of queues open now (see
	// placeswatch.go).
	placesWatches int
	// reaps: the deletions of expired claims' keys in flight (at most
	// maxReaps, see sweepClaims); reapWarned and reapFailures: when a
	// failed one was last logged as a warning, and how many failed since.
	reaps        int
	reapWarned   time.Time
	reapFailures int
	// acquiring counts, per lock name, the acquires of this Store in
	// progress (see staleOwnClaim).
	acquiring map[string]int
}

// lockSpec takes the locks that a follower's spec needs (see specLocked):
// fairQueue.mu, for the queue's places, then watchHub.mu.
func (s *Store) lockSpec() {
	s.fq.mu.Lock()
	s.hub.mu.Lock()
}

// unlockSpec releases what lockSpec took.
func (s *Store) unlockSpec() {
	s.hub.mu.Unlock()
	s.fq.mu.Unlock()
}

// seenClaim is a claim an attempt found held.
type seenClaim struct {
	mod    int64 // its mod revision (token)
	lease  int64 // its etcd lease
	holder string
	ttl    time.Duration
	// gone is when an attempt first found its key gone without a
	// release (the release marker is older than mod), zero until then.
	gone time.Time
}

var (
	_ backend.Backend       = (*Store)(nil)
	_ backend.Watcher       = (*Store)(nil)
	_ backend.Lister        = (*Store)(nil)
	_ backend.ForceReleaser = (*Store)(nil)
	_ backend.Remover       = (*Store)(nil)
	_ backend.LossNotifier  = (*Store)(nil)
)

// claim is a lock this Store acquired and has not released.
type claim struct {
	name          string
	holder, nonce string
	token         int64 // the claim key's mod revision: the transaction that gave it to its holder
	ttl           time.Duration
	lease         *lease
	entry         string       // fair mode: the holder's queue key, deleted with the claim
	entryRev      int64        // fair mode: the queue key's create revision
	next          *successor   // fair mode: the waiter Release hands the claim to, if still there
	places        *placesWatch // fair mode, without a place or a next: the queue, watched (see placeswatch.go)
	// deadline is the send time of the last successful acquire or renew
	// plus ttl, on this process's monotonic clock. The lease is known to
	// live at least until then; after it the claim is expired: Renew and
	// Release fail and the reaper deletes the key.
	deadline time.Time
	since    time.Time     // when the acquire returned: verification judges only older claims
	rtt      time.Duration // the acquire's round trip (see readSuccessor)
	// verified is the send time of the latest request that found the
	// claim's key in place (the acquire, or a verification of its lease).
	// Renew answers only within unverifiedFor(ttl) of it, so a holder
	// whose key was deleted stops renewing within that bound (see
	// ghostGrace).
	verified  time.Time
	acquired  time.Time    // wall clock, for Record.AcquireTime
	renewed   time.Time    // wall clock of the last acquire or renew, for Record.RenewTime
	lost      error        // why the claim ended, once it did (set by loseLocked)
	onLost    *lossCall    // the holder's AfterLoss call, until it is made or stopped
	reap      bool         // its key must be deleted (expired, or its release failed)
	reaping   bool         // that delete is in flight
	reapAt    time.Time    // no retry of the delete before
	reapTries cleanupTries // failed attempts of that delete
	// releasing: a Release of the claim is in flight. Its transaction
	// may have deleted the key before its answer came, so a verification
	// that finds the key gone then is the release's, not a loss.
	releasing bool
}

// New returns a Store on client. It validates the options and starts the
// Store's session goroutine; it does not contact etcd (the first acquire
// does; OpenStore checks that etcd answers).
//
// On a client made by Open (or from Config.ClientConfig) the Store closes
// the connections that went silent when its lease keepalives stall, so
// that a connection dropped silently does not outlast a holder's renew
// deadline; on a client configured otherwise it cannot, and gRPC's own
// keepalive notices (see "Connections" in the package documentation).
//
// The etcd client waits for a connection until a request's context ends;
// the Store bounds each of its requests, so that while no endpoint can be
// reached a TryLock given context.Background() still ends: within about
// 8s, or, if the Store's lease for that TTL was granted before etcd went
// away, 8s after that lease's acknowledged life ends (a little over the
// TTL). The error matches backend.ErrUnavailable and names the endpoints.
// Give it a context with a deadline to bound it tighter.
func New(client *clientv3.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("etcdstore: %w: the etcd client is nil", backend.ErrInvalidOptions)
	}
	o := newOptions(opts)
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("etcdstore: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{
		client:    client,
		prefix:    o.prefix,
		fair:      o.fair,
		log:       o.logger,
		ctx:       ctx,
		cancel:    cancel,
		claims:    make(map[string]*claim),
		acquiring: make(map[string]int),
		fq:        newFairQueue(),
		hub:       newWatchHub(),
		seen:      make(map[string]*seenClaim),
	}
	s.pool = newLeasePool(client, o.prefix, o.logger, ctx, &s.wg)
	s.pool.user = s
	s.wg.Add(1)
	go s.pool.run()
	if conn := client.ActiveConnection(); conn != nil {
		s.wg.Add(1)
		go s.watchConnection(conn)
	}
	return s, nil
}

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.prefix }

// Fair reports whether the Store queues waiters (WithFair).
func (s *Store) Fair() bool { return s.fair }

// releasedKey is the release marker of lock name: put (with the released
// token as its value) by the transaction that deletes a claim on release,
// or hands it over (fair mode), or on clean-up after the claim's deadline. A claim key that vanished
// after the marker's last write was deleted by someone else (by hand, or
// ForceRelease) or with its lease.
func (s *Store) releasedKey(name string) string { return s.prefix + name + "/released" }

// guardKey is the guard of lock name's claim: every transaction that
// writes the claim key puts the guard with the same value, on the same
// lease, at the same revision (so its mod revision is the claim's token),
// and every one that ends the claim deletes it. An acquire requires both
// absent. Deleting the claim key by hand (etcdctl del) leaves the guard in
// place: it goes when the holder's Store ends the claim at its deadline
// (see reap), or with the holder's lease, so a contender that never saw
// the deleted claim still cannot acquire while its holder may be valid.
// It lives apart from the lock's own keys (lock names never start with a
// dot), so that deleting them all (etcdctl del --prefix PREFIX+NAME)
// leaves it too; only ForceRelease, or deleting it by name, frees a
// claim at once.
func (s *Store) guardKey(name string) string { return s.prefix + guardDir + name }

// guardDir is the part of the prefix under which guards live.
const guardDir = ".guard/"

// Keys returns the etcd keys of lock name:
//
//	claim:  <prefix><name>           exists while the lock is held; attached to the holder's lease
//	last:   <prefix><name>/last      the last acquisition; never expires
//	queue:  <prefix><name>/queue/    prefix of the fair-mode waiters' keys
//
// Two more keys are not returned: the release marker
// <prefix><name>/released and the claim's guard <prefix>.guard/<name>
// (see "Deleted claims" in the package documentation).
func (s *Store) Keys(name string) (claim, last, queue string) {
	return s.prefix + name, s.prefix + name + "/last", s.prefix + name + "/queue/"
}

// Close ends the Store: it stops keeping its leases alive, closes every
// Watch channel, removes its waiters from fair queues, revokes its leases
// that hold no claim, and waits for its goroutines. It waits at most about
// three seconds for etcd. Claims still held are not deleted: their leases
// expire after their TTL (plus the headroom described in the package
// documentation), and their Renew and Release now fail with ErrLost: a
// baton.Lease still running on this Store ends at once (AfterLoss), before
// anyone else can acquire. Close closes the etcd client only if the Store
// was made by OpenStore. Close the Store after every Lease was unlocked
// (and Elector's Run returned) and before the process exits: it finishes
// the removal of the places of waiters that gave up (see "Fair mode").
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, c := range s.claims {
		s.loseLocked(c, ErrClosed)
		s.stopPlacesWatch(c)
	}
	// Every lock, in order: whatever an attempt sees next, it sees closed.
	s.fq.mu.Lock()
	s.fq.closed = true
	for _, e := range s.fq.entries {
		if e.lost == nil {
			e.lost = ErrClosed
		}
	}
	s.hub.close()
	drop, revoke := s.pool.close()
	s.fq.mu.Unlock()
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, e := range drop {
		wg.Go(func() {
			_, _ = s.client.Txn(ctx).Then(s.dropOps(e)...).Commit()
		})
	}
	for _, id := range revoke {
		wg.Go(func() { _, _ = s.client.Revoke(ctx, id) })
	}
	wg.Wait()
	s.cancel()
	s.wg.Wait()
	if s.ownClient {
		return s.client.Close()
	}
	return nil
}

// TryAcquire implements backend.Backend with one transaction: if the claim
// key does not exist (CreateRevision == 0), put it with the Store's lease
// for req.TTL attached, and put the /last record; otherwise read the claim
// and report its holder. The fencing token is the claim key's mod revision
// (here equal to its create revision). Before the transaction, TryAcquire makes sure etcd keeps the
// lease for at least req.TTL from the moment the request leaves (see the
// package documentation); on the first acquisition with a TTL that costs
// a LeaseGrant.
//
// HeldError.RetryAfter is the remaining time of the claim if this Store
// holds it, and 0 otherwise (the watch wakes waiters on release or
// expiry). In fair mode see the package documentation.
func (s *Store) TryAcquire(ctx context.Context, name string, req backend.Request) (backend.Grant, error) {
	if err := s.check(ctx, name); err != nil {
		return backend.Grant{}, err
	}
	if err := checkRequest(name, req); err != nil {
		return backend.Grant{}, err
	}
	f := s.hub.beginAttempt(name)
	defer s.hub.endAttempt(f)
	defer s.beginAcquire(name)()
	if s.fair {
		return s.tryAcquireFair(ctx, name, req, f)
	}
	// Without a connection the watch behind f is down, and the etcd
	// client resumes it silently: nothing would tell f that what it saw
	// may be stale, and every attempt would be answered "held" for as
	// long as the connection stays down (a member whose certificate no
	// longer verifies: for ever). Ask etcd then: its answer, or why none
	// came, is the attempt's (watchConnection wakes the waiters once the
	// connection is lost; fair mode does the same in tryAcquireFair).
	if s.connected() {
		if err := s.cachedHeld(f, name); err != nil {
			return backend.Grant{}, err
		}
	}
	if err := s.siblingHolds(name, req); err != nil {
		return backend.Grant{}, err
	}
	return s.acquirePlain(ctx, name, req, f)
}

// acquirePlain sends TryAcquire's transaction (plainTxn) outside fair mode
// and acts on its answer. It sends it again once with a new lease if etcd
// reports the Store's lease not found; after a transient failure, with
// growing timeouts and pauses, for as long as a release would try
// (lastReleaseAttempt) and ctx allows; and after a claim seen last turned
// out to have been released (see ghost). f is the name's follower, or nil.
func (s *Store) acquirePlain(ctx context.Context, name string, req backend.Request, f *follower) (g backend.Grant, err error) {
	start := time.Now()
	timeout, pause := firstReleaseAttempt, releaseBackoff
	var (
		first      time.Time // the send time of the first attempt on the current lease
		cur        *lease
		unanswered []string // values sent on cur without an answer (see orphan.go)
	)
	defer func() {
		if err != nil && cur != nil {
			s.pool.abandon(cur, name, unanswered)
		}
	}()
	for attempt := 0; ; attempt++ {
		l, sent, err := s.pool.acquire(ctx, req.TTL)
		if err != nil {
			return backend.Grant{}, s.wrap(name, "acquire", err)
		}
		if l != cur {
			cur, unanswered = l, nil
		}
		if first.IsZero() {
			first = sent
		}
		resp, sc, val, err := s.plainTxn(ctx, name, req, l, timeout)
		s.pool.unpin(l)
		if err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
				s.pool.gone(l, fmt.Errorf("etcd reports lease %x not found", int64(l.id)))
				first = time.Time{}
				continue // once more, with a new lease
			}
			unanswered = append(unanswered, val)
			// A transient failure (a raft leader change, a member that
			// lost its leader: etcd would answer only after its own
			// request timeout) is retried for a while; an attempt that
			// was applied after all is recognised as ours below.
			if ctx.Err() == nil && transient(err) && time.Since(start)+pause < lastReleaseAttempt {
				if !sleepCtx(ctx, pause) {
					return backend.Grant{}, s.wrap(name, "acquire", fmt.Errorf("%w (after: %w)", ctx.Err(), err))
				}
				timeout, pause = min(2*timeout, lastReleaseAttempt), min(2*pause, firstReleaseAttempt)
				continue
			}
			return backend.Grant{}, s.wrap(name, "acquire", err)
		}
		if resp.Succeeded {
			kv, err := firstKV(resp, plainClaimIdx)
			if err != nil {
				return backend.Grant{}, s.wrap(name, "acquire", err)
			}
			s.mu.Lock()
			delete(s.seen, name)
			s.mu.Unlock()
			return s.granted(name, req, l, sent, kv.ModRevision, nil, nil)
		}
		g, again, err := s.plainHeld(ctx, name, req, f, l, first, sc, resp, unanswered)
		if again {
			continue // the claim seen last could have expired by now: acquire without the condition
		}
		return g, err
	}
}

// plainClaimIdx is the index, in the success branch of plainTxn, of the
// read of the claim just written.
const plainClaimIdx = 3

// plainTxn sends one acquiring transaction on lease l, within timeout. It
// succeeds only if the claim and its guard are absent and the claim last
// seen by this Store (sc, returned) was released since; the success branch
// puts the claim and the guard on l and the /last record, and reads the
// claim back (plainClaimIdx); the failure branch reads the claim and the
// guard. It also returns the claim value it sent (see orphan.go).
func (s *Store) plainTxn(ctx context.Context, name string, req backend.Request, l *lease, timeout time.Duration) (*clientv3.TxnResponse, *seenClaim, string, error) {
	ck, lk, _ := s.Keys(name)
	gk := s.guardKey(name)
	val := value{holder: req.Holder, nonce: req.Nonce, ttl: req.TTL, at: time.Now()}.encode()
	cond := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(ck), "=", 0), clientv3.Compare(clientv3.CreateRevision(gk), "=", 0)}
	s.mu.Lock()
	sc := s.seen[name]
	s.mu.Unlock()
	if sc != nil {
		// Free only if the claim last seen was released since.
		cond = append(cond, clientv3.Compare(clientv3.ModRevision(s.releasedKey(name)), ">", sc.mod))
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := s.client.Txn(actx).
		If(cond...).
		Then(clientv3.OpPut(ck, val, clientv3.WithLease(l.id)), clientv3.OpPut(gk, val, clientv3.WithLease(l.id)),
			clientv3.OpPut(lk, val), clientv3.OpGet(ck)).
		Else(clientv3.OpGet(ck), clientv3.OpGet(gk)).
		Commit()
	return resp, sc, val, err
}

// plainHeld acts on a plainTxn that failed (resp): a claim deleted by hand
// whose guard remains counts as held (see guarded); a claim seen last (sc)
// that vanished without a release is judged by ghost, and again reports
// that the transaction should be sent once more; a claim that an earlier
// transaction of this call wrote on l (one of unanswered), though its
// answer was lost, is granted with first, the call's first send time on
// l; any other claim is reported held.
func (s *Store) plainHeld(ctx context.Context, name string, req backend.Request, f *follower, l *lease, first time.Time, sc *seenClaim, resp *clientv3.TxnResponse, unanswered []string) (g backend.Grant, again bool, err error) {
	ck, _, _ := s.Keys(name)
	claimGone := len(resp.Responses[0].GetResponseRange().GetKvs()) == 0
	if guard := kvOrNil(resp.Responses[1].GetResponseRange().GetKvs()); claimGone && guard != nil {
		return backend.Grant{}, false, s.guarded(f, name, guard, resp.Header.Revision)
	}
	if sc != nil && claimGone {
		// The claim seen last vanished without a release.
		if err := s.ghost(ctx, f, name, sc, resp.Header.Revision); err != nil {
			return backend.Grant{}, false, err
		}
		return backend.Grant{}, true, nil
	}
	kv, err := firstKV(resp, 0)
	if err != nil {
		return backend.Grant{}, false, s.wrap(name, "acquire", err)
	}
	if s.ownOrphan(name, l, kv, unanswered) {
		// An earlier transaction of this call (the same value, on this
		// lease) was applied though its answer was lost: the claim is
		// ours since then, and first is no later than its send time.
		g, err = s.granted(name, req, l, first, kv.ModRevision, nil, nil)
		return g, false, err
	}
	if s.staleOwnClaim(name, l, kv, 1) {
		if err := s.dropStaleOwnClaim(ctx, name, kv); err != nil {
			return backend.Grant{}, false, err
		}
		return backend.Grant{}, true, nil // free now, unless someone was quicker
	}
	return backend.Grant{}, false, s.held(f, name, kv, observation{target: ck, mod: kv.ModRevision, rev: resp.Header.Revision})
}

// ghost applies DESIGN invariant 3 to sc, a claim of another owner that
// an attempt saw and whose key is now gone without a release marker (it
// was deleted by hand or by ForceRelease, or went with its lease; or the
// lock was removed, marker and all, after its release): the holder may
// still hold it by its own clock. It returns a HeldError (with
// RetryAfter) while sc counts as held: until ghostGrace(sc.ttl) after this
// Store first found the key gone (rev is the revision of that read),
// unless etcd reports sc's lease gone (a holder's Store renews only while
// its lease lives). It returns nil, and forgets sc, once the claim could
// have expired.
func (s *Store) ghost(ctx context.Context, f *follower, name string, sc *seenClaim, rev int64) error {
	s.mu.Lock()
	first := sc.gone.IsZero()
	if first {
		sc.gone = time.Now()
	}
	wait := time.Until(sc.gone.Add(ghostGrace(sc.ttl)))
	s.mu.Unlock()
	if wait > 0 && s.leaseGone(ctx, sc) {
		// Its Store cannot renew the claim: the key went with the lease
		// (the holder died, or the lease was revoked), not by a hand.
		wait = 0
	}
	if first && wait > 0 {
		s.log.Warn("etcdstore: a claim's key vanished without a release (deleted by hand, or the lock removed?); it counts as held until it could have expired",
			"lock", name, "holder", sc.holder, "token", sc.mod, "for", ghostGrace(sc.ttl))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if wait <= 0 {
		if s.seen[name] == sc {
			delete(s.seen, name)
		}
		return nil
	}
	ck, _, _ := s.Keys(name)
	s.observeHeld(f, observation{target: ck, rev: rev, holder: sc.holder, token: uint64(sc.mod)})
	// Look again every verification period: the holder's Store puts the
	// release marker at the claim's deadline once it noticed, which is
	// usually well before the grace ends (the marker wakes no watch).
	_, _, poll := leaseTiming(sc.ttl)
	return fmt.Errorf("etcdstore: %w (its key was deleted without a release; it counts as held until it could have expired, %v from now)",
		&backend.HeldError{Key: name, Holder: sc.holder, Token: uint64(sc.mod), RetryAfter: min(wait, poll)}, wait.Round(time.Millisecond))
}

// leaseGone reports whether etcd says that sc's lease is gone (it expired
// or was revoked), so that no Store can renew sc any more.
func (s *Store) leaseGone(ctx context.Context, sc *seenClaim) bool {
	if sc.lease == 0 {
		return false
	}
	ctx, cancel := callContext(ctx)
	defer cancel()
	r, err := s.client.TimeToLive(ctx, clientv3.LeaseID(sc.lease))
	return err == nil && r.TTL < 0
}

// guarded returns the HeldError for a lock whose claim key is gone while
// its guard (see guardKey) is still in place: the claim was deleted by
// hand and its holder may still be valid. The guard goes at the claim's
// deadline or with its holder's lease, which wakes no watch: the attempt
// is retried every verification period of the claim's TTL.
func (s *Store) guarded(f *follower, name string, guard *mvccpb.KeyValue, rev int64) error {
	v, err := decodeValue(guard.Value)
	if err != nil {
		return s.corrupt(name, string(guard.Key), err)
	}
	_, _, poll := leaseTiming(v.ttl)
	he := &backend.HeldError{Key: name, Holder: v.holder, Token: uint64(guard.ModRevision), RetryAfter: poll}
	s.observeHeld(f, observation{target: string(guard.Key), mod: guard.ModRevision, rev: rev, holder: v.holder, token: he.Token})
	return fmt.Errorf("etcdstore: %w (its claim key was deleted without a release; its guard %q stays until the claim ends by its holder's clock)",
		he, guard.Key)
}

// siblingHolds returns a HeldError if this Store has a claim on name for
// another holder that has not passed its deadline, even if etcd lost it
// (its key deleted, its lease gone): that holder may not know yet, and
// its validity lasts until the deadline.
func (s *Store) siblingHolds(name string, req backend.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.claims[name]
	if c == nil || c.holder == req.Holder || c.lost == nil {
		return nil // a live claim of another holder is found in etcd
	}
	left := time.Until(c.deadline)
	if left <= 0 {
		return nil
	}
	return fmt.Errorf("etcdstore: %w (a claim of this Store, lost in etcd, until its deadline)",
		&backend.HeldError{Key: name, Holder: c.holder, Token: uint64(c.token), RetryAfter: left})
}

// ownOrphan reports whether the claim kv was written by an earlier
// transaction of the current TryAcquire call that did not learn its
// outcome: its value is one of unanswered (values carry their send time,
// so no other call's transaction has it), it is on lease l, and the Store
// knows no live claim with its token.
func (s *Store) ownOrphan(name string, l *lease, kv *mvccpb.KeyValue, unanswered []string) bool {
	if kv.Lease != int64(l.id) || !slices.Contains(unanswered, string(kv.Value)) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.claims[name]
	return c == nil || c.token != kv.ModRevision
}

// sleepCtx waits for d or for ctx to end, and reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// granted records a successful acquisition of name at token with lease l,
// sent at sent, and returns its grant. In fair mode place is the holder's
// place in the queue (nil if it did not queue) and next the waiter behind
// it, if known.
func (s *Store) granted(name string, req backend.Request, l *lease, sent time.Time, token int64, place *entry, next *successor) (backend.Grant, error) {
	now := time.Now()
	c := &claim{
		name: name, holder: req.Holder, nonce: req.Nonce, token: token, ttl: req.TTL, lease: l, next: next,
		deadline: sent.Add(req.TTL), since: now, rtt: now.Sub(sent), verified: sent, acquired: time.Now().Round(0),
	}
	if place != nil {
		c.entry, c.entryRev = place.key, place.rev
	}
	c.renewed = c.acquired
	// Read before Store.mu: no need to hold it while fairQueue.mu is taken.
	watchPlaces := s.fair && place == nil && next == nil && (req.Waiting || s.contended(name))
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.claims[name]
	dead := s.pool.attachClaim(c, old)
	if old != nil {
		s.stopPlacesWatch(old)
	}
	s.claims[name] = c
	var why error
	switch {
	case s.closed:
		why = ErrClosed
	case dead != nil:
		why = fmt.Errorf("the Store's lease ended while acquiring: %w", dead)
	case !now.Before(c.deadline):
		why = fmt.Errorf("the acquire took %v, longer than the TTL %v", now.Sub(sent), req.TTL)
	}
	if why != nil {
		// The key may exist; the reaper deletes it (conditionally).
		c.lost, c.reap = why, true
		s.pool.wake()
		return backend.Grant{}, fmt.Errorf("etcdstore: lock %q: acquired with token %d but %w", name, token, why)
	}
	if watchPlaces {
		s.armPlacesWatch(c)
	}
	return backend.Grant{
		Key: name, Holder: req.Holder, Nonce: req.Nonce, Token: uint64(token), TTL: req.TTL,
		Version: strconv.FormatInt(token, 10),
	}, nil
}

// held builds the error for a claim found held: kv is the claim key.
func (s *Store) held(f *follower, name string, kv *mvccpb.KeyValue, obs observation) error {
	v, err := decodeValue(kv.Value)
	if err != nil {
		return s.corrupt(name, string(kv.Key), err)
	}
	he := &backend.HeldError{Key: name, Holder: v.holder, Token: uint64(kv.ModRevision)}
	s.mu.Lock()
	if c := s.claims[name]; c != nil && c.token == kv.ModRevision && c.lost == nil {
		he.RetryAfter = max(time.Until(c.deadline), 0)
	}
	obs.holder, obs.token = he.Holder, he.Token
	s.observeHeld(f, obs)
	if c := s.claims[name]; c == nil || c.token != kv.ModRevision {
		s.seen[name] = &seenClaim{mod: kv.ModRevision, lease: kv.Lease, holder: v.holder, ttl: v.ttl}
		s.maybePruneSeenLocked()
	}
	s.mu.Unlock()
	return fmt.Errorf("etcdstore: %w", he)
}

// Renew implements backend.Backend without a request to etcd in the common
// case. A claim lives as long as the Store's lease for its TTL, which the
// session loop keeps alive with one keepalive stream for all claims (see
// the package documentation). Renew checks, on this process's monotonic
// clock, that the claim has not expired and that etcd has acknowledged a
// keepalive recent enough to keep the lease for g.TTL from now; then it
// extends the claim's deadline. If the last acknowledgement is not recent
// enough, Renew asks for a keepalive at once and waits for it (or for ctx).
//
// Renew returns an error matching backend.ErrLost if g was not acquired
// through this Store, was released, expired (not renewed within its TTL),
// if etcd reported the lease gone or the key deleted or replaced (checked
// periodically, see the package documentation), or after Close.
func (s *Store) Renew(ctx context.Context, g backend.Grant) (backend.Grant, error) {
	if err := s.check(ctx, g.Key); err != nil {
		return backend.Grant{}, err
	}
	s.mu.Lock()
	for {
		c, err := s.ownedLocked(g)
		if err != nil {
			s.mu.Unlock()
			return backend.Grant{}, err
		}
		now := time.Now()
		// No look at the key for too long (verifications failed or were
		// slow): ask for one and wait for it.
		stale := now.Sub(c.verified) > unverifiedFor(c.ttl)
		ok, changed := s.pool.renewable(c.lease, now, c.ttl, stale)
		if ok {
			c.deadline = now.Add(c.ttl)
			c.renewed = time.Now().Round(0)
			s.mu.Unlock()
			return g, nil
		}
		what := "a verification of its key"
		if !stale {
			what = "a lease keepalive"
		}
		s.mu.Unlock()
		if err := s.pool.refusal(); err != nil {
			return backend.Grant{}, fmt.Errorf("etcdstore: lock %q: renew: etcd refused %s: %w "+
				"(the user's password was changed, or the user or its role's permission on the prefix removed, since this client authenticated: "+
				"grant the permission again, or restart with the user's current credentials)", g.Key, what, err)
		}
		if err := s.tlsRefusal(); err != nil {
			return backend.Grant{}, fmt.Errorf("etcdstore: lock %q: renew: waiting for %s: %w", g.Key, what, err)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return backend.Grant{}, fmt.Errorf("etcdstore: lock %q: renew: waiting for %s: %w", g.Key, what, ctx.Err())
		}
		s.mu.Lock()
	}
}

// ownedLocked returns the live claim g names, or an error matching
// backend.ErrLost. s.mu must be held.
func (s *Store) ownedLocked(g backend.Grant) (*claim, error) {
	lost := func(format string, args ...any) error {
		return fmt.Errorf("etcdstore: lock %q: %w: "+format, append([]any{g.Key, backend.ErrLost}, args...)...)
	}
	c := s.claims[g.Key]
	switch {
	case c == nil && s.closed:
		return nil, lost("%w", ErrClosed)
	case c == nil:
		return nil, lost("not held through this Store (never acquired here, or released)")
	case c.holder != g.Holder || c.nonce != g.Nonce || uint64(c.token) != g.Token:
		return nil, lost("this Store holds it for %q (token %d), not for %q (token %d)", c.holder, c.token, g.Holder, g.Token)
	case c.lost != nil:
		return nil, lost("token %d: %w", c.token, c.lost)
	}
	if now := time.Now(); !now.Before(c.deadline) {
		s.loseLocked(c, fmt.Errorf("the claim expired %v ago: not renewed within its TTL %v", now.Sub(c.deadline), c.ttl))
		c.reap = true
		s.pool.wake()
		return nil, lost("token %d: %w", c.token, c.lost)
	}
	if dead := s.pool.deadErr(c.lease); dead != nil {
		s.loseLocked(c, dead)
		return nil, lost("token %d: %w", c.token, c.lost)
	}
	return c, nil
}

// Release implements backend.Backend with one transaction: delete the claim
// key if its mod revision is still g's token (in fair mode, or hand it to
// the next waiter: see the package documentation). The /last record keeps
// the token, so the next acquisition gets a larger one (etcd revisions
// only grow). It returns an error matching backend.ErrLost if g is not a live
// claim of this Store or etcd no longer has it. The same transaction puts
// the release marker (see "Deleted claims" in the package documentation).
// Transient failures (a raft leader change) are retried within ctx; see
// "Raft leader changes". If etcd cannot be reached the claim stays until
// its deadline, when the reaper deletes the key.
func (s *Store) Release(ctx context.Context, g backend.Grant) error {
	if err := s.check(ctx, g.Key); err != nil {
		return err
	}
	s.mu.Lock()
	c, err := s.ownedLocked(g)
	if err == nil {
		c.releasing = true
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	next, looked := c.next, false
	if s.fair && next == nil {
		s.mu.Lock()
		first, watched := c.watchedFirst()
		s.mu.Unlock()
		switch {
		case watched:
			next, looked = successorOf(first), true // nil if the oldest place takes no handoffs, as a read would say
		case c.entry != "" || time.Since(c.since) >= c.rtt:
			next, looked = s.readSuccessor(ctx, c), true
		}
	}
	ours, waiters, err := s.releaseClaim(ctx, c, next)
	if err != nil {
		s.mu.Lock()
		c.releasing = false
		s.mu.Unlock()
		return s.wrap(g.Key, "release", err)
	}
	s.mu.Lock()
	s.forgetLocked(c)
	s.mu.Unlock()
	if s.fair {
		s.fq.mu.Lock()
		if c.entry != "" && ours {
			s.fq.setBusy(c.name, waiters)
		}
		switch {
		case next != nil || waiters:
			s.fq.setContended(c.name, c.ttl, time.Now())
		case looked:
			delete(s.fq.contended, c.name)
		}
		s.fq.mu.Unlock()
	}
	if !ours {
		return fmt.Errorf("etcdstore: lock %q: %w: token %d: the claim key was deleted or replaced", g.Key, backend.ErrLost, c.token)
	}
	return nil
}

// Release retries its transaction (see releaseClaim) with these bounds.
const (
	// firstReleaseAttempt bounds the first attempt; each retry may take
	// twice as long as the one before, up to lastReleaseAttempt. The
	// first is short so that a request stuck on a member whose raft
	// leader died (etcd answers it only after its own request timeout,
	// 7s by default) is sent again once a new leader is elected (about a
	// second with etcd's default election timeout).
	firstReleaseAttempt = 2 * time.Second
	lastReleaseAttempt  = 8 * time.Second
	// releaseBackoff is the pause before the first retry (doubled each
	// time, up to firstReleaseAttempt).
	releaseBackoff = 50 * time.Millisecond
)

// releaseClaim runs c's release transaction (deleteClaim, handing the
// lock to next if it is not nil) until it gets an answer or ctx ends, sending it again after a transient
// failure: etcd unavailable, no leader, leader changed, a server-side
// request timeout, or no answer within the attempt's own timeout. The
// transaction is conditioned on the claim's mod revision, so sending it
// again never frees or hands over anyone else's claim; an attempt that
// failed may still have been applied, though, so once one has failed a
// claim found no longer c's counts as released by it (it could also have
// been deleted by someone else meanwhile: either way it is not c's). It
// stops retrying at c's deadline: the claim has expired then, and the
// reaper deletes its key.
func (s *Store) releaseClaim(ctx context.Context, c *claim, next *successor) (ours, waiters bool, err error) {
	unsure := false // an earlier attempt may have been applied
	timeout, pause := firstReleaseAttempt, releaseBackoff
	for {
		actx, cancel := context.WithTimeout(ctx, timeout)
		ours, waiters, err = s.deleteClaim(actx, c, next)
		cancel()
		switch {
		case err == nil && !ours && unsure:
			return true, true, nil // waiters unknown: assume some
		case err == nil:
			return ours, waiters, nil
		case ctx.Err() != nil || !transient(err):
			return false, false, err
		}
		s.mu.Lock()
		expired := !time.Now().Before(c.deadline)
		s.mu.Unlock()
		if expired {
			// Past its deadline the claim is the reaper's, which deletes
			// its key (conditionally) once etcd answers.
			return false, false, fmt.Errorf("%w (the claim has expired meanwhile; the Store deletes its key when etcd answers)", err)
		}
		unsure = true
		if s.ctx.Err() == nil {
			s.log.Warn("etcdstore: release failed; retrying", "lock", c.name, "token", c.token, "err", err, "retry_in", pause)
		}
		if !sleepCtx(ctx, pause) {
			return false, false, fmt.Errorf("%w (after: %w)", ctx.Err(), err)
		}
		timeout, pause = min(2*timeout, lastReleaseAttempt), min(2*pause, firstReleaseAttempt)
	}
}

// transient reports whether err is a failure that the same request may
// not meet again: etcd or the connection unavailable (gRPC Unavailable,
// which etcd uses for "no leader", "leader changed" and its request
// timeouts), or an attempt's own deadline.
func transient(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if st, ok := status.FromError(err); ok {
		return st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded
	}
	return false
}

// deleteClaim ends c's claim if it is still c's (its mod revision is c's
// token), and deletes c's queue key (fair mode) in any case: one
// transaction. If next is not nil (a waiter behind c's holder) and that
// waiter's queue key is unchanged, the same transaction hands the lock
// over instead of deleting the claim: it puts the claim with the waiter's
// value, on the waiter's lease, and the /last record (see "Fair mode" in
// the package documentation). ours reports whether the claim was still
// c's; waiters (fair mode, if ours) whether anyone still queues.
func (s *Store) deleteClaim(ctx context.Context, c *claim, next *successor) (ours, waiters bool, err error) {
	ck, lk, qp := s.Keys(c.name)
	gk := s.guardKey(c.name)
	release := []clientv3.Op{clientv3.OpDelete(ck), clientv3.OpDelete(gk)}
	// If the claim key was deleted by hand, its guard is still c's (same
	// mod revision): c has ended by its holder's clock, so it goes.
	els := []clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(gk), "=", c.token)},
		[]clientv3.Op{clientv3.OpDelete(gk)}, nil)}
	if c.entry != "" {
		// The queue key is unique to this claim: deleting it needs no condition.
		release = append(release, clientv3.OpDelete(c.entry), clientv3.OpGet(qp, clientv3.WithPrefix(), clientv3.WithCountOnly()))
		els = append(els, clientv3.OpDelete(c.entry))
	}
	// The marker tells contenders that saw the claim that it was released,
	// not deleted by someone else (see ghost). If someone else deleted the
	// key, the marker is put too (if the key is still absent): the holder
	// releases, or its claim's deadline has passed, so its claim has ended
	// by its own clock and waiters need not wait longer. Likewise if the
	// key holds a claim older than c (an absent key's mod revision is 0):
	// only a restore from a snapshot puts one back, and it had ended
	// before c was acquired (see restored.go).
	marker := clientv3.OpPut(s.releasedKey(c.name), strconv.FormatInt(c.token, 10))
	release = append(release, marker)
	els = append(els, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(ck), "<", c.token)},
		append(s.dropOlderOwnClaim(c), marker), nil))
	then := release
	n := next
	if n != nil {
		// The waiter's queue key is touched (its mod revision moves; value
		// and lease stay) so that the waiter behind it, which watches it,
		// learns that it is next in line (see "Fair mode").
		// The marker too: c's claim ends here, by its holder's release,
		// and a waiter that saw it (not the handed claim) must not take
		// the handed claim's later loss with its lease for a deletion of
		// c's by hand, and wait out c's grace (see ghost).
		hand := []clientv3.Op{clientv3.OpPut(ck, n.val, clientv3.WithLease(clientv3.LeaseID(n.lease))),
			clientv3.OpPut(gk, n.val, clientv3.WithLease(clientv3.LeaseID(n.lease))), clientv3.OpPut(lk, n.val),
			clientv3.OpPut(n.key, "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease()), marker}
		if c.entry != "" {
			hand = append(hand, clientv3.OpDelete(c.entry))
		}
		// etcd refuses a put and a delete of one key on one path of a
		// transaction; the two branches of a nested one are two paths.
		then = []clientv3.Op{clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(n.key), "=", n.rev),
				clientv3.Compare(clientv3.ModRevision(n.key), "=", n.mod)},
			hand, release)}
	}
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(ck), "=", c.token)).
		Then(then...).Else(els...).
		Commit()
	if err != nil || !resp.Succeeded {
		return false, false, err
	}
	rs := resp.Responses
	if n != nil {
		inner := rs[0].GetResponseTxn()
		if inner.GetSucceeded() {
			return true, true, nil
		}
		rs = inner.GetResponses()
	}
	if c.entry != "" && len(rs) > 3 {
		waiters = rs[3].GetResponseRange().GetCount() > 0 // after the claim's and guard's deletes and the entry's
	}
	return true, waiters, nil
}

// forgetLocked drops c from the Store's books. s.mu must be held.
func (s *Store) forgetLocked(c *claim) {
	s.stopPlacesWatch(c)
	if s.claims[c.name] == c {
		delete(s.claims, c.name)
	}
	s.pool.detachClaim(c)
}

// ForceRelease implements backend.ForceReleaser: it deletes the claim key
// and its guard (see guardKey) whoever holds them, keeping the /last record (and with it the fencing
// token's history). The former holder's Store notices within its
// verification period (a third of the TTL; see the package documentation)
// and its Renew then fails with ErrLost. Contenders that saw the claim
// still count it as held until it could have expired, or until the
// holder's Store puts the release marker at the claim's deadline (see
// "Deleted claims"); a contender that never saw it may acquire at once.
// Fair-mode waiters keep their places: the first of them takes the lock.
func (s *Store) ForceRelease(ctx context.Context, name string) error {
	if err := s.check(ctx, name); err != nil {
		return err
	}
	ck, lk, _ := s.Keys(name)
	resp, err := s.client.Txn(ctx).
		Then(clientv3.OpDelete(ck), clientv3.OpDelete(s.guardKey(name)), clientv3.OpGet(lk, clientv3.WithCountOnly())).
		Commit()
	if err != nil {
		return s.wrap(name, "force release", err)
	}
	rs := resp.Responses
	if rs[0].GetResponseDeleteRange().Deleted+rs[1].GetResponseDeleteRange().Deleted+rs[2].GetResponseRange().Count == 0 {
		return fmt.Errorf("etcdstore: lock %q: %w", name, backend.ErrNotFound)
	}
	return nil
}

// Get implements backend.Backend with one read (a transaction of two gets,
// so the claim and the /last record are from one revision). Remaining is
// the claim's own deadline if this Store holds it; otherwise it comes from
// the holder's lease (LeaseTimeToLive, whole seconds rounded up), capped
// at the claim's TTL. Transitions counts acquisitions after the first
// (the /last record's version minus one). AcquireTime is the holder's wall
// clock at the acquisition; RenewTime is the last renew as this Store saw
// it, and zero for another Store's claim or a free lock: renewals keep the
// claim's etcd lease alive and write nothing that says when (the
// acquisition's time in its place read, in status views, as a holder
// that had stopped renewing).
func (s *Store) Get(ctx context.Context, name string) (backend.Record, error) {
	if err := s.check(ctx, name); err != nil {
		return backend.Record{}, err
	}
	ck, lk, _ := s.Keys(name)
	resp, err := s.client.Txn(ctx).Then(clientv3.OpGet(ck), clientv3.OpGet(lk), clientv3.OpGet(s.guardKey(name))).Commit()
	if err != nil {
		return backend.Record{}, s.wrap(name, "get", err)
	}
	claimKV := kvOrNil(resp.Responses[0].GetResponseRange().Kvs)
	lastKV := kvOrNil(resp.Responses[1].GetResponseRange().Kvs)
	if claimKV == nil {
		// A claim deleted by hand is held until its guard goes.
		claimKV = kvOrNil(resp.Responses[2].GetResponseRange().Kvs)
	}
	if claimKV == nil && lastKV == nil {
		return backend.Record{}, fmt.Errorf("etcdstore: lock %q: %w", name, backend.ErrNotFound)
	}
	return s.record(ctx, name, claimKV, lastKV, map[int64]time.Duration{})
}

// record builds the Record of name from its claim and /last keys (either
// may be nil). ttls caches the remaining time of foreign leases.
func (s *Store) record(ctx context.Context, name string, claimKV, lastKV *mvccpb.KeyValue, ttls map[int64]time.Duration) (backend.Record, error) {
	rec := backend.Record{Key: name}
	if lastKV != nil {
		v, err := decodeValue(lastKV.Value)
		if err != nil {
			return backend.Record{}, s.corrupt(name, string(lastKV.Key), err)
		}
		rec.Token = uint64(lastKV.ModRevision)
		rec.TTL = v.ttl
		rec.AcquireTime = v.at
		rec.Transitions = uint64(max(lastKV.Version-1, 0))
		rec.Version = strconv.FormatInt(lastKV.ModRevision, 10)
	}
	if claimKV == nil {
		return rec, nil
	}
	v, err := decodeValue(claimKV.Value)
	if err != nil {
		return backend.Record{}, s.corrupt(name, string(claimKV.Key), err)
	}
	rec.Holder, rec.Nonce, rec.TTL = v.holder, v.nonce, v.ttl
	rec.Token = uint64(claimKV.ModRevision)
	rec.AcquireTime = v.at
	rec.Version = strconv.FormatInt(claimKV.ModRevision, 10)
	s.mu.Lock()
	c := s.claims[name]
	if c != nil && c.token == claimKV.ModRevision && c.lost == nil {
		rec.Remaining = max(time.Until(c.deadline), 0)
		rec.RenewTime = c.renewed
		s.mu.Unlock()
		return rec, nil
	}
	s.mu.Unlock()
	id := claimKV.Lease
	if id == 0 {
		rec.Remaining = v.ttl // not attached to a lease: it never expires
		return rec, nil
	}
	left, ok := ttls[id]
	if !ok {
		left = v.ttl // if etcd cannot tell, assume the claim is fresh
		if r, err := s.client.TimeToLive(ctx, clientv3.LeaseID(id)); err == nil {
			switch {
			case r.TTL < 0:
				left = 0 // the lease is gone; the key goes with it
			default:
				left = time.Duration(r.TTL+1) * time.Second // r.TTL is rounded down
			}
		}
		ttls[id] = left
	}
	rec.Remaining = min(left, v.ttl)
	return rec, nil
}

// List implements backend.Lister with one range read of the prefix (plus a
// LeaseTimeToLive per distinct foreign lease, for Remaining): every lock
// with a claim or a /last record, sorted by name. Fair-mode queue entries
// are not records; keys under the prefix that baton did not write are
// skipped. Records that do not decode are left out and reported in the
// error (an errors.Join of backend.ErrCorruptRecord errors, each naming its
// key); the others are still returned.
func (s *Store) List(ctx context.Context) ([]backend.Record, error) {
	if err := s.checkOpen(ctx); err != nil {
		return nil, fmt.Errorf("etcdstore: list: %w", err)
	}
	resp, err := s.client.Get(ctx, s.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list %q: %w", s.prefix, mapErr(err))
	}
	type pair struct{ claim, last, guard *mvccpb.KeyValue }
	byName := map[string]*pair{}
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), s.prefix)
		name, suffix, sub := strings.Cut(rest, "/")
		if guarded, ok := strings.CutPrefix(rest, guardDir); ok {
			name, suffix, sub = guarded, "", false
		}
		if backend.ValidateName(name) != nil || sub && suffix != "last" {
			continue
		}
		p := byName[name]
		if p == nil {
			p = &pair{}
			byName[name] = p
		}
		switch {
		case !sub && rest != name:
			p.guard = kv
		case !sub:
			p.claim = kv
		default:
			p.last = kv
		}
	}
	ttls := map[int64]time.Duration{}
	recs := make([]backend.Record, 0, len(byName))
	var corrupt []error
	for name, p := range byName {
		if p.claim == nil {
			p.claim = p.guard // a claim deleted by hand is held until its guard goes
		}
		r, err := s.record(ctx, name, p.claim, p.last, ttls)
		switch {
		case errors.Is(err, backend.ErrCorruptRecord):
			corrupt = append(corrupt, err)
		case err != nil:
			return nil, err
		default:
			recs = append(recs, r)
		}
	}
	slices.SortFunc(recs, func(a, b backend.Record) int { return strings.Compare(a.Key, b.Key) })
	slices.SortFunc(corrupt, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return recs, errors.Join(corrupt...)
}

// check validates name and reports an ended context or a closed Store.
func (s *Store) check(ctx context.Context, name string) error {
	if err := backend.ValidateName(name); err != nil {
		return fmt.Errorf("etcdstore: %w", err)
	}
	if err := s.checkOpen(ctx); err != nil {
		return fmt.Errorf("etcdstore: lock %q: %w", name, err)
	}
	return nil
}

// checkOpen reports an ended context, a closed Store, and a client closed
// by its owner (whose requests etcd's client would retry for seconds before
// failing).
func (s *Store) checkOpen(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case s.client.Ctx().Err() != nil:
		return fmt.Errorf("%w: the etcd client was closed; open a new client and Store", backend.ErrClosed)
	}
	return nil
}

// checkRequest validates the owner and TTL of a request.
func checkRequest(name string, req backend.Request) error {
	bad := func(err error) error {
		return fmt.Errorf("etcdstore: lock %q: %w: %w", name, backend.ErrInvalidOptions, err)
	}
	if err := checkToken("holder", req.Holder); err != nil {
		return bad(err)
	}
	if err := checkToken("nonce", req.Nonce); err != nil {
		return bad(err)
	}
	if req.TTL <= 0 {
		return bad(fmt.Errorf("TTL %v must be positive", req.TTL))
	}
	return nil
}

// wrap names the lock and the operation, and adds backend.ErrForbidden to
// etcd's permission errors, and backend.ErrClosed to any error once the
// client is closed (by its owner, behind this Store's back): no request
// through it can succeed again.
func (s *Store) wrap(name, op string, err error) error {
	if s.client.Ctx().Err() != nil && !errors.Is(err, backend.ErrClosed) {
		return fmt.Errorf("etcdstore: lock %q: %s: %w: the etcd client was closed (%w); open a new client and Store", name, op, backend.ErrClosed, err)
	}
	if why := s.disconnected(err); why != "" {
		if tlsErr := s.tlsRefusal(); tlsErr != nil {
			return fmt.Errorf("etcdstore: lock %q: %s: %w: %w", name, op, tlsErr, err)
		}
		return fmt.Errorf("etcdstore: lock %q: %s: %w: %s: %w", name, op, backend.ErrUnavailable, why, err)
	}
	return fmt.Errorf("etcdstore: lock %q: %s: %w", name, op, mapErr(err))
}

// disconnected says why err, a request that its context ended, got no
// answer, if the client has no connection to etcd: the client waits for
// one until the context ends, and the bare context error would name no
// cause. It returns "" for other errors, and while connected.
func (s *Store) disconnected(err error) string {
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) || errors.Is(err, backend.ErrUnavailable) {
		return ""
	}
	conn := s.client.ActiveConnection()
	if conn == nil {
		return ""
	}
	state := conn.GetState()
	if state == connectivity.Ready {
		return ""
	}
	why := fmt.Sprintf("no connection to etcd at %s (gRPC %s)", strings.Join(s.client.Endpoints(), ", "), state)
	if host := unresolved(s.client.Endpoints()); host != "" {
		// gRPC's state hides why it cannot connect; a name that does not
		// resolve (any more) is the cause most worth naming.
		return fmt.Sprintf("%s: the host name %q does not resolve: check the endpoints and DNS", why, host)
	}
	return why + ": is etcd running, and are the endpoints right?"
}

// callContext bounds one etcd request of an acquire attempt by
// lastReleaseAttempt (see grantTimeout): the etcd client waits for a
// connection until a request's context ends, and an attempt's context,
// which may have no deadline, also owns its waiter's place in a fair
// queue (see addOwnerLocked), so it must not end with the request.
func callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, lastReleaseAttempt)
}

// connected reports whether the client has a connection to etcd (or
// says nothing of it).
func (s *Store) connected() bool {
	conn := s.client.ActiveConnection()
	return conn == nil || conn.GetState() == connectivity.Ready
}

// tlsRefusal returns why the client has no connection to etcd if its last
// TLS handshake failed in a way that trying again does not mend (the
// server's certificate not verified, or the client's refused), matching
// backend.ErrMisconfigured; nil while it is connected, or otherwise.
func (s *Store) tlsRefusal() error {
	if s.connected() {
		return nil
	}
	err := storeerr.Classify(trackerOf(s.client).lastHandshakeErr())
	if !errors.Is(err, backend.ErrMisconfigured) {
		return nil
	}
	return fmt.Errorf("no connection to etcd at %s: the TLS handshake fails: %w", strings.Join(s.client.Endpoints(), ", "), err)
}

// unresolved returns the first host name among endpoints that DNS (or the
// hosts file) says does not exist, or "".
func unresolved(endpoints []string) string {
	for _, ep := range endpoints {
		network, address := DialTarget(ep)
		host, _, err := net.SplitHostPort(address)
		if network != "tcp" || err != nil || net.ParseIP(host) != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err = net.DefaultResolver.LookupHost(ctx, host)
		cancel()
		var dns *net.DNSError
		if errors.As(err, &dns) && dns.IsNotFound {
			return host
		}
	}
	return ""
}

// mapErr adds baton's sentinels to etcd's errors: backend.ErrForbidden to
// authorization errors, so that the engine stops retrying, and
// backend.ErrUnavailable to a store that cannot be reached (gRPC
// Unavailable: no connection, no leader), as storeerr does for the
// transport errors every backend meets.
func mapErr(err error) error {
	var ee rpctypes.EtcdError
	if errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrAuthFailed) ||
		errors.Is(err, rpctypes.ErrUserEmpty) || errors.As(err, &ee) && ee.Code() == codes.PermissionDenied {
		return fmt.Errorf("%w: %w", backend.ErrForbidden, err)
	}
	if errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace) {
		return fmt.Errorf("%w: %w (etcd's database reached its quota, and its NOSPACE alarm refuses writes until an operator compacts and defragments it and runs etcdctl alarm disarm; holders keep their locks, whose renewals need no writes, but no lock can be acquired, and a release leaves the claim to expire at its TTL)",
			backend.ErrUnavailable, err)
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable && !errors.Is(err, backend.ErrUnavailable) {
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	return storeerr.Classify(err)
}

func (s *Store) corrupt(name, key string, err error) error {
	if errors.Is(err, errNewerValue) {
		return fmt.Errorf("etcdstore: lock %q: %w: key %q: %w (baton never overwrites it; run that version, or a later one, in every process that uses the lock: the key is not damaged, do not delete it)",
			name, backend.ErrCorruptRecord, key, err)
	}
	return fmt.Errorf("etcdstore: lock %q: %w: key %q: %w (baton never overwrites it; inspect it with `etcdctl get %s` and delete it)",
		name, backend.ErrCorruptRecord, key, err, key)
}

// firstKV returns the first key of the i-th response of a transaction,
// which must be a range that found one.
func firstKV(resp *clientv3.TxnResponse, i int) (*mvccpb.KeyValue, error) {
	if i >= len(resp.Responses) {
		return nil, fmt.Errorf("unexpected transaction response: %d results, want more than %d", len(resp.Responses), i)
	}
	kvs := resp.Responses[i].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return nil, errors.New("unexpected transaction response: the key read after the compare is missing")
	}
	return kvs[0], nil
}

func kvOrNil(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}
