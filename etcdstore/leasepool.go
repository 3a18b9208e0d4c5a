package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/baton-go/baton/backend"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leasePool owns a Store's etcd leases: one per distinct TTL, kept alive
// on demand by one keepalive stream (see "Leases and renewal" in the
// package documentation for the rules; the code follows them here).
//
// Its lock, mu, guards the leases map, closed, the trust gate (which lease
// answers may extend a lease's life, see trust.go), and every field of
// every lease, including the membership sets lease.claims and
// lease.entries (which claims and queue entries sit on the lease) and
// lease.orphans (see orphan.go); the claims' and entries' own fields are
// their owners' (Store.mu, fairQueue.mu). mu is the innermost lock of the
// package (see "Lock order" in store.go): the pool never calls out of
// itself while holding it. What it must tell its user (the claims and
// entries of a lease that ended, a lease due for verification, a sweep of
// the Store's own clean-ups) it tells through leaseUser after releasing
// mu.
//
// It runs the session goroutine (run: keepalives, lease expiry, and the
// user's sweep), one goroutine per open keepalive stream (openStream,
// receive), and background tasks (goTask: verifications, reaps, clean-ups,
// revokes, the trust gate's confirming reads), each bounded by
// taskTimeout. All of them end when the Store's context ends (Close), and
// the Store's WaitGroup counts them.
type leasePool struct {
	client *clientv3.Client
	conns  *connTracker // the client's connections; nil if the user configured it
	prefix string       // the Store's: the trust gate's confirming read reads it
	log    *slog.Logger
	ctx    context.Context // the Store's: ends on Close
	wg     *sync.WaitGroup // the Store's: Close waits for it
	user   leaseUser
	poke   chan struct{} // wakes the session loop (capacity 1)

	mu     sync.Mutex
	closed bool
	leases map[time.Duration]*lease // the live lease for each TTL
	// trust decides which lease answers may extend a lease's life (see
	// trust.go).
	trust trustGate
	// refused is etcd's last refusal of a keepalive or a verification for
	// the credentials (ErrForbidden: a password changed, a user or its
	// permission removed since the client authenticated), until one is
	// answered again. Renew returns it rather than wait for an answer
	// that will not come, so that a holder's step-down names the cause.
	refused error
}

// leaseUser is what the pool calls back (the Store). The pool never holds
// its lock while it calls.
type leaseUser interface {
	// leaseLost marks the claims and queue entries of a lease that ended
	// (or may have ended) as lost.
	leaseLost(lost lostLease)
	// verify asks etcd which keys are attached to lease l (id); it runs
	// as a task (see goTask), one at a time per lease.
	verify(ctx context.Context, l *lease, id clientv3.LeaseID)
	// sweep runs the user's due clean-ups at now (expired claims,
	// abandoned queue entries) and returns when it must look again.
	sweep(now time.Time) time.Duration
	// recheck reads back the user's claims once lease answers are
	// trusted again after the keepalive stream failed; it runs as a task.
	recheck(ctx context.Context)
}

// lostLease is what a lease that ended carried: its claims and queue
// entries at that moment, and why it ended.
type lostLease struct {
	claims  []*claim
	entries []*entry
	why     error
}

func newLeasePool(client *clientv3.Client, prefix string, log *slog.Logger, ctx context.Context, wg *sync.WaitGroup) *leasePool {
	return &leasePool{
		client: client, conns: trackerOf(client), prefix: prefix, log: log, ctx: ctx, wg: wg,
		poke:   make(chan struct{}, 1),
		leases: make(map[time.Duration]*lease),
		trust:  trustGate{since: time.Now()},
	}
}

// lease is one etcd lease, shared by every claim and queue entry with the
// same TTL. Its fields are guarded by leasePool.mu; ttl, seconds, every,
// verifyEvery never change, and id does not once the lease is granted
// (before anyone else sees it).
type lease struct {
	ttl         time.Duration // the TTL of the claims it carries
	seconds     int64         // the lease TTL asked of etcd
	every       time.Duration // keepalive period while wanted
	verifyEvery time.Duration

	id       clientv3.LeaseID // 0 until granted
	granting bool
	// aliveUntil: etcd keeps the lease at least until then, on this
	// process's monotonic clock. It is the send time of the latest
	// acknowledged grant or keepalive plus the TTL etcd answered: etcd
	// refreshes a lease when it handles the request, which is after it
	// was sent.
	aliveUntil time.Time
	dead       error // why the lease is gone (or may be), once known
	lastSent   time.Time
	inflight   bool // a keepalive is on the stream, unanswered
	urgent     bool // a Renew or an acquire waits for a fresher keepalive
	pins       int  // acquisitions in progress
	lastUsed   time.Time
	claims     map[*claim]struct{}
	entries    map[*entry]struct{}
	verifying  bool
	nextVerify time.Time
	// verifyNow: a Renew waits for a verification (its claim's last one is
	// too old, see claim.verified); start one at once, but not sooner than
	// verifyPause after one failed.
	verifyNow    bool
	verifyFailed time.Time
	changed      chan struct{} // closed and replaced on every change
	// orphans: per lock name, the values of acquiring transactions on
	// this lease that went unanswered (see orphan.go).
	orphans map[string][]string
	// orphanPlaces: per lock name, the queue keys that unanswered fair
	// transactions may have put on this lease (see orphan.go).
	orphanPlaces map[string][]string

	// answeredSent and answerTook: the send time of the latest keepalive
	// that extended aliveUntil, and how long its answer took.
	answeredSent time.Time
	answerTook   time.Duration
}

func newLease(ttl time.Duration) *lease {
	sec, every, verify := leaseTiming(ttl)
	return &lease{
		ttl: ttl, seconds: sec, every: every, verifyEvery: verify,
		claims:  make(map[*claim]struct{}),
		entries: make(map[*entry]struct{}),
		changed: make(chan struct{}),
	}
}

func (l *lease) broadcast() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// busy reports whether keys or acquisitions depend on the lease.
func (l *lease) busy() bool { return l.pins > 0 || len(l.claims) > 0 || len(l.entries) > 0 }

// wanted reports whether the lease is to be kept alive: it carries keys,
// someone waits for a keepalive, or it was used within its TTL (so that a
// burst of short tenures does not pay a keepalive round trip each).
func (l *lease) wanted(now time.Time) bool {
	return l.busy() || l.urgent || now.Before(l.lastUsed.Add(time.Duration(l.seconds)*time.Second))
}

// stallAfter is how long a keepalive may go unanswered before the stream is
// reopened.
func (l *lease) stallAfter() time.Duration { return max(4*l.every, 2*time.Second) }

// acquire returns the live lease for claims of ttl, pinned (see unpin),
// and a time sent such that etcd keeps the lease at least until
// sent + ttl. sent is taken before the caller's request leaves, so it is
// the request's send time in the sense of the engine's clock model.
func (p *leasePool) acquire(ctx context.Context, ttl time.Duration) (*lease, time.Time, error) {
	var asked time.Time // when this call first asked for a fresher keepalive
	p.mu.Lock()
	for {
		if p.closed {
			p.mu.Unlock()
			return nil, time.Time{}, ErrClosed
		}
		l := p.leases[ttl]
		if l == nil || l.dead != nil {
			l = newLease(ttl)
			p.leases[ttl] = l
		}
		now := time.Now()
		if l.id != 0 && !l.aliveUntil.Before(now.Add(ttl)) {
			l.pins++
			l.lastUsed = now
			p.mu.Unlock()
			return l, now, nil
		}
		if l.id == 0 && !l.granting {
			if err := p.grantLocked(ctx, l); err != nil {
				return nil, time.Time{}, err
			}
			continue
		}
		if l.id != 0 {
			if err := p.askKeepaliveLocked(l, &asked, now); err != nil {
				p.mu.Unlock()
				return nil, time.Time{}, err
			}
		}
		changed := l.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, time.Time{}, fmt.Errorf("waiting for a lease keepalive: %w", ctx.Err())
		}
		p.mu.Lock()
	}
}

// askKeepaliveLocked asks the session loop for a keepalive of l, at once,
// for a caller that needs l to last a TTL from now and first asked at
// *asked (set to now if zero). It fails with tooSlow's error instead if a
// keepalive sent since *asked was answered too late to do. p.mu must be
// held.
func (p *leasePool) askKeepaliveLocked(l *lease, asked *time.Time, now time.Time) error {
	if err := tooSlow(l, *asked); err != nil {
		return err
	}
	if asked.IsZero() {
		*asked = now
	}
	l.urgent = true
	p.wake()
	return nil
}

// tooSlow returns an error matching backend.ErrUnavailable if a keepalive
// of l sent at or after asked was answered and still left l short of a
// TTL from now: its answer took longer than the lease's headroom over the
// TTL, and every keepalive that takes as long would too, so waiting for
// the next one would wait forever (an etcd grpc-proxy answers keepalives
// on its own schedule, up to a third of the lease's TTL late). It returns
// nil otherwise. p.mu must be held.
func tooSlow(l *lease, asked time.Time) error {
	if asked.IsZero() || l.answeredSent.Before(asked) {
		return nil
	}
	headroom := time.Duration(l.seconds)*time.Second - l.ttl
	return fmt.Errorf("%w: a lease keepalive took %v to be answered, more than the lease's headroom of %v over the TTL %v, so etcd would keep a new claim for less than its TTL: use a longer TTL, or reach etcd over a faster path (an etcd grpc-proxy answers keepalives on its own schedule, up to a third of the lease's TTL late: list the members instead)",
		backend.ErrUnavailable, l.answerTook.Round(time.Millisecond), headroom, l.ttl)
}

// grantTimeout bounds a lease grant, so that an acquisition given a
// context without a deadline ends while etcd cannot be reached (the etcd
// client waits for a connection until a request's context ends). It lets
// an etcd without a raft leader answer after its own request timeout (7s
// by default).
const grantTimeout = lastReleaseAttempt

// grantLocked asks etcd for lease l, within grantTimeout, releasing p.mu
// meanwhile. It returns with p.mu held if the grant succeeded, and
// released with its error otherwise. p.mu must be held.
func (p *leasePool) grantLocked(ctx context.Context, l *lease) error {
	l.granting = true
	p.mu.Unlock()
	sent := time.Now()
	gctx, cancel := context.WithTimeout(ctx, grantTimeout)
	resp, err := p.client.Grant(gctx, l.seconds)
	cancel()
	p.mu.Lock()
	l.granting = false
	if err == nil && resp.TTL <= 0 {
		err = fmt.Errorf("etcd granted lease %x with TTL %ds", int64(resp.ID), resp.TTL)
	}
	if err != nil {
		l.broadcast()
		p.mu.Unlock()
		return fmt.Errorf("lease grant (TTL %ds): %w", l.seconds, err)
	}
	if l.dead != nil { // the Store was closed meanwhile; the new lease expires unused
		p.mu.Unlock()
		return ErrClosed
	}
	l.id = resp.ID
	l.aliveUntil = sent.Add(time.Duration(resp.TTL) * time.Second)
	l.lastSent, l.lastUsed = sent, sent
	l.nextVerify = sent.Add(l.verifyEvery)
	l.broadcast()
	p.wake()
	return nil
}

// alive returns, with l pinned (see unpin), a time sent, read now, such
// that etcd keeps l at least until sent + l.ttl; it waits for a keepalive
// if the last one acknowledged is too old. It fails if l is gone.
func (p *leasePool) alive(ctx context.Context, l *lease) (time.Time, error) {
	var asked time.Time // when this call first asked for a fresher keepalive
	p.mu.Lock()
	for {
		switch {
		case p.closed:
			p.mu.Unlock()
			return time.Time{}, ErrClosed
		case l.dead != nil:
			p.mu.Unlock()
			return time.Time{}, fmt.Errorf("%w: the waiter's lease ended: %w", backend.ErrLost, l.dead)
		}
		now := time.Now()
		if !l.aliveUntil.Before(now.Add(l.ttl)) {
			l.pins++
			l.lastUsed = now
			p.mu.Unlock()
			return now, nil
		}
		if err := p.askKeepaliveLocked(l, &asked, now); err != nil {
			p.mu.Unlock()
			return time.Time{}, err
		}
		changed := l.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for a lease keepalive: %w", ctx.Err())
		}
		p.mu.Lock()
	}
}

// unpin ends an acquisition's use of l.
func (p *leasePool) unpin(l *lease) {
	p.mu.Lock()
	l.pins--
	l.lastUsed = time.Now()
	p.mu.Unlock()
}

// renewable reports whether etcd keeps l until at least now + ttl, and
// then marks l used. Otherwise it asks the session loop for what the
// caller needs, a verification (stale: the claim's key was not seen for
// too long; l's life is then not even looked at) or a keepalive, and
// returns the channel that is closed at l's next change.
func (p *leasePool) renewable(l *lease, now time.Time, ttl time.Duration, stale bool) (ok bool, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case stale:
		l.verifyNow = true
	case !l.aliveUntil.Before(now.Add(ttl)):
		l.lastUsed = now
		return true, nil
	default:
		l.urgent = true
	}
	p.wake()
	return false, l.changed
}

// keepUntil reports whether etcd keeps l until at least until; otherwise
// it asks for a keepalive and returns the channel closed at l's next
// change.
func (p *leasePool) keepUntil(l *lease, until time.Time) (ok bool, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !l.aliveUntil.Before(until) {
		return true, nil
	}
	l.urgent = true
	p.wake()
	return false, l.changed
}

// noteRefusal records err as the pool's refusal if etcd refused the
// credentials or a permission (see leasePool.refused), and wakes the
// renewals waiting on a lease so that they return it.
func (p *leasePool) noteRefusal(err error) {
	mapped := mapErr(err)
	if !errors.Is(mapped, backend.ErrForbidden) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refused = mapped
	for _, l := range p.leases {
		l.broadcast()
	}
}

// refusal returns etcd's refusal of the last keepalive or verification
// (see leasePool.refused), or nil.
func (p *leasePool) refusal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// deadErr returns why l ended, or nil while it lives.
func (p *leasePool) deadErr(l *lease) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return l.dead
}

// attachClaim puts c on its lease, taking old (the claim c replaces in its
// Store, or nil) off its own, and returns why c's lease ended if it did.
func (p *leasePool) attachClaim(c, old *claim) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old != nil && old.lease != nil {
		delete(old.lease.claims, old)
	}
	c.lease.claims[c] = struct{}{}
	return c.lease.dead
}

// detachClaim takes c off its lease.
func (p *leasePool) detachClaim(c *claim) {
	p.mu.Lock()
	delete(c.lease.claims, c)
	p.mu.Unlock()
}

// attachEntry puts e on its lease unless the lease has ended (its key went
// with it), and reports whether it did.
func (p *leasePool) attachEntry(e *entry) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e.lease.dead != nil {
		delete(e.lease.entries, e)
		return false
	}
	e.lease.entries[e] = struct{}{}
	return true
}

// detachEntry takes e off its lease.
func (p *leasePool) detachEntry(e *entry) {
	p.mu.Lock()
	delete(e.lease.entries, e)
	p.mu.Unlock()
}

// gone marks l as gone (or possibly gone) and has the user mark every
// claim and queue entry on it lost.
func (p *leasePool) gone(l *lease, why error) {
	p.mu.Lock()
	lost := p.goneLocked(l, why, false)
	p.mu.Unlock()
	if lost.why != nil {
		p.user.leaseLost(lost)
	}
}

// goneLocked implements gone, but returns the claims and entries l
// carried for the caller to pass to leaseLost once p.mu is released
// (none if l had ended already). revoke asks etcd to revoke the lease
// (when the Store only suspects it gone): its keys must not outlive the
// claims, which have all expired by then. p.mu must be held.
func (p *leasePool) goneLocked(l *lease, why error, revoke bool) lostLease {
	if l.dead != nil {
		return lostLease{}
	}
	l.dead = why
	if p.leases[l.ttl] == l {
		delete(p.leases, l.ttl)
	}
	lost := lostLease{why: why}
	for c := range l.claims {
		lost.claims = append(lost.claims, c)
	}
	clear(l.claims)
	for e := range l.entries {
		lost.entries = append(lost.entries, e)
	}
	clear(l.entries)
	l.broadcast()
	if l.id != 0 {
		p.log.Warn("etcdstore: lease lost; the locks it carried are lost", "lease", fmt.Sprintf("%x", int64(l.id)), "ttl", l.ttl, "err", why)
		if revoke {
			p.revokeLost(l.id)
		}
	}
	return lost
}

// revokeLost revokes lease id, which the Store gave up as possibly gone,
// in the background: it sends the request again after each transient
// failure until etcd answers or the pool closes, each attempt bounded by
// firstReleaseAttempt (a request stuck on a member without a leader is
// answered only at etcd's request timeout). The lease's claims have all
// expired by the Store's clock, but etcd may keep it: a cluster that lost
// its quorum extends every lease by its TTL when a new leader is elected,
// and a single attempt, made during such an outage, left the claims and
// queue places of a holder that had stepped down to keep the lock from
// everyone for a lease TTL after etcd was back. Revoking a lease that is
// gone is an answer too. It must be called as goTask is.
func (p *leasePool) revokeLost(id clientv3.LeaseID) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for tries := cleanupTries(0); ; tries++ {
			ctx, cancel := context.WithTimeout(p.ctx, firstReleaseAttempt)
			_, err := p.client.Revoke(ctx, id)
			cancel()
			if err == nil || !transient(err) || !sleepCtx(p.ctx, tries.pause()) {
				return
			}
		}
	}()
}

// keptAliveLocked applies a keepalive answer: ttl seconds, for a request
// sent at sent. It returns what a lease that etcd reports gone carried
// (see goneLocked). p.mu must be held.
func (p *leasePool) keptAliveLocked(l *lease, sent time.Time, ttl int64) lostLease {
	l.inflight = false
	if l.dead != nil {
		return lostLease{}
	}
	if ttl <= 0 {
		return p.goneLocked(l, fmt.Errorf("etcd reports lease %x expired or revoked", int64(l.id)), false)
	}
	if until := sent.Add(time.Duration(ttl) * time.Second); until.After(l.aliveUntil) {
		l.aliveUntil = until
	}
	l.answeredSent, l.answerTook = sent, time.Since(sent)
	l.broadcast()
	return lostLease{}
}

// verified applies the answer (resp, err) of the verification of lease l
// (id) sent at sent to l itself: it schedules the next one, wakes Renew
// calls that wait for it (they look once the caller, which holds
// Store.mu, has updated the claims' verified times), declares the lease
// gone if etcd says so (lost: what it carried, for the caller to mark),
// and extends its acknowledged life if the trust gate admits the answer
// (one it does not admit counts as a failed verification). It returns,
// with ok, the claims and entries on l, for the caller to compare with the
// attached keys; ok is false if the verification failed or the lease is
// gone.
func (p *leasePool) verified(l *lease, id clientv3.LeaseID, sent time.Time, resp *clientv3.LeaseTimeToLiveResponse, err error) (claims []*claim, entries []*entry, lost lostLease, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l.verifying = false
	l.nextVerify = time.Now().Add(l.verifyEvery)
	l.broadcast()
	if err != nil {
		l.verifyFailed = time.Now()
	} else {
		p.refused = nil
	}
	if err != nil || l.dead != nil {
		return nil, nil, lostLease{}, false
	}
	if resp.TTL < 0 {
		return nil, nil, p.goneLocked(l, fmt.Errorf("etcd reports lease %x expired or revoked", int64(id)), false), false
	}
	if !p.trust.admit(sent, resp.ResponseHeader) {
		// Perhaps a deposed leader's view of the lease and its keys (see
		// trust.go): counts as a failed verification.
		l.verifyFailed = time.Now()
		p.confirmLocked()
		return nil, nil, lostLease{}, false
	}
	if until := sent.Add(time.Duration(resp.TTL) * time.Second); until.After(l.aliveUntil) {
		l.aliveUntil = until // TTL is rounded down: a safe bound
	}
	for c := range l.claims {
		claims = append(claims, c)
	}
	for e := range l.entries {
		entries = append(entries, e)
	}
	return claims, entries, lostLease{}, true
}

// close ends the pool: no lease is handed out any more, every lease is
// dead (ErrClosed). It returns the queue entries on the leases (for Close
// to delete) and the leases that carry no claim (for Close to revoke).
func (p *leasePool) close() (drop []*entry, revoke []clientv3.LeaseID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, l := range p.leases {
		for e := range l.entries {
			drop = append(drop, e)
		}
		if l.id != 0 && len(l.claims) == 0 {
			revoke = append(revoke, l.id)
		}
		l.dead = ErrClosed
		l.broadcast()
	}
	return drop, revoke
}

// wake wakes the session loop. It needs no lock.
func (p *leasePool) wake() {
	select {
	case p.poke <- struct{}{}:
	default:
	}
}

// goTask runs f in a goroutine that Close waits for, with a context that
// ends on Close or after taskTimeout, and wakes the session loop after it.
// It must be called from a goroutine the WaitGroup counts (the session
// loop, a task, a follower), or before Close ends the pool (for instance
// under a lock that Close takes, having checked that it did not close).
func (p *leasePool) goTask(f func(ctx context.Context)) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(p.ctx, taskTimeout)
		defer cancel()
		f(ctx)
		p.wake()
	}()
}

// run is the session loop: it keeps wanted leases alive on one stream,
// declares leases gone, starts verifications, and has the user sweep its
// expired claims and abandoned queue entries.
func (p *leasePool) run() {
	defer p.wg.Done()
	k := &keepalives{p: p, lc: clientv3.RetryLeaseClient(p.client), events: make(chan kaEvent)}
	defer func() {
		if k.st != nil {
			k.st.cancel()
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		p.mu.Lock()
		sw, lost := p.sweepLocked(now, k.st != nil)
		p.mu.Unlock()
		for _, ll := range lost {
			if ll.why != nil {
				p.user.leaseLost(ll)
			}
		}
		sw.wake = min(sw.wake, p.user.sweep(now))
		if !sw.stalled.IsZero() {
			k.reset(errors.New("no keepalive answer within the stall timeout"))
			p.closeSilent(sw.stalled)
		}
		k.send(sw.sends)
		timer.Reset(max(k.open(sw), time.Millisecond))
		select {
		case <-p.ctx.Done():
			return
		case <-p.poke:
		case <-timer.C:
		case ev := <-k.events:
			k.handle(ev)
		}
	}
}

// closeSilent closes the client's connections that received nothing since
// a keepalive sent at sent, which has had no answer for its stall timeout:
// a connection dropped silently (a NAT or a firewall forgot the flow)
// would otherwise carry the next stream, and the Store's watches, until
// gRPC's keepalive noticed, after the renew deadline of TTLs under about
// 45s. gRPC dials again at once. A client the user configured is not
// tracked (see connTracker), and left to gRPC.
func (p *leasePool) closeSilent(sent time.Time) {
	if n := p.conns.closeSilent(sent); n > 0 {
		p.log.Warn("etcdstore: closed connections to etcd that received nothing since a lease keepalive that stalled; the client dials again", "connections", n, "silent_for", time.Since(sent).Round(time.Millisecond))
	}
}

// sweep is what one pass of the session loop decided.
type sweep struct {
	sends      []kaSent
	wake       time.Duration
	needStream bool
	stalled    time.Time // the send time of a keepalive unanswered for too long; zero if none
}

// sweepLocked decides which leases get a keepalive now, declares leases
// gone whose acknowledged life ended (returning what they carried), starts
// verifications, and returns when the loop must look again. p.mu must be
// held.
func (p *leasePool) sweepLocked(now time.Time, haveStream bool) (sweep, []lostLease) {
	sw := sweep{wake: time.Minute}
	due := func(t time.Time) { sw.wake = min(sw.wake, t.Sub(now)) }
	var lost []lostLease
	for _, l := range p.leases {
		if l.id == 0 {
			continue // being granted
		}
		if !now.Before(l.aliveUntil) {
			if !l.busy() {
				l.dead = errors.New("idle lease left to expire")
				delete(p.leases, l.ttl)
				l.broadcast()
				continue
			}
			lost = append(lost, p.goneLocked(l, fmt.Errorf("no keepalive of lease %x was acknowledged in time (TTL %ds): etcd may have expired it",
				int64(l.id), l.seconds), true))
			continue
		}
		due(l.aliveUntil)
		if !l.wanted(now) {
			continue
		}
		sw.needStream = true
		switch {
		case l.inflight:
			if stall := l.lastSent.Add(l.stallAfter()); now.After(stall) {
				if sw.stalled.IsZero() || l.lastSent.Before(sw.stalled) {
					sw.stalled = l.lastSent
				}
			} else {
				due(stall)
			}
		case l.urgent || !now.Before(l.lastSent.Add(l.every)):
			if haveStream {
				l.inflight, l.urgent, l.lastSent = true, false, now
				sw.sends = append(sw.sends, kaSent{l: l, id: l.id})
				due(now.Add(l.stallAfter()))
			}
		default:
			due(l.lastSent.Add(l.every))
		}
		p.verifyTaskLocked(l, now, due)
	}
	return sw, lost
}

// verifyTaskLocked starts a verification of l's attached keys if it is
// due at now (l carries claims, queue entries or orphans, see orphan.go):
// at most one at a time, every verification period, sooner when asked for
// but not within verifyPause of a failed one. It tells due when to look
// again. p.mu must be held.
func (p *leasePool) verifyTaskLocked(l *lease, now time.Time, due func(time.Time)) {
	if len(l.claims)+len(l.entries)+len(l.orphans)+len(l.orphanPlaces) == 0 || l.verifying {
		return
	}
	retry := l.verifyFailed.Add(verifyPause)
	if now.Before(l.nextVerify) && (!l.verifyNow || now.Before(retry)) {
		due(l.nextVerify)
		if l.verifyNow {
			due(retry)
		}
		return
	}
	l.verifying, l.verifyNow = true, false
	id := l.id
	p.goTask(func(ctx context.Context) { p.user.verify(ctx, l, id) })
}

// kaStream is one LeaseKeepAlive stream.
type kaStream struct {
	stream pb.Lease_LeaseKeepAliveClient
	cancel context.CancelFunc
}

// kaEvent is what the opener and receiver goroutines tell the session loop.
type kaEvent struct {
	opened *kaStream // an open attempt ended: the stream, or nil with err
	from   *kaStream // a receive on this stream: resp or err
	resp   *pb.LeaseKeepAliveResponse
	err    error
}

type kaSent struct {
	l  *lease
	id clientv3.LeaseID
	at time.Time
}

// keepalives is the session loop's keepalive stream state. It is owned by
// the loop's goroutine (run); the leases it touches are guarded by p.mu,
// which its methods take where they touch them.
type keepalives struct {
	p        *leasePool
	lc       pb.LeaseClient
	events   chan kaEvent // from openStream and receive
	st       *kaStream
	opening  bool
	pending  []kaSent // keepalives sent on st, in order; etcd answers them in order
	reopenAt time.Time
	backoff  time.Duration
	// Since the last answered keepalive: when the stream first failed
	// (zero if it has not), when that was last warned of, and the
	// failures since (see failed).
	downSince time.Time
	warned    time.Time
	failures  int
}

// kaWarnEvery: failures of the keepalive stream are logged as a warning at
// most this often, with the count of those since the last warning, and the
// others at debug level: while etcd is down every reopening fails, one
// every maxBackoff, for as long as the outage lasts.
const kaWarnEvery = 10 * time.Second

// failed logs a failure of the stream (msg, err), after which it opens
// again in k.backoff.
func (k *keepalives) failed(msg string, err error) {
	p := k.p
	if p.ctx.Err() != nil {
		return
	}
	p.noteRefusal(err)
	now := time.Now()
	if k.downSince.IsZero() {
		k.downSince = now
	}
	k.failures++
	if k.warned.IsZero() || now.Sub(k.warned) >= kaWarnEvery {
		p.log.Warn(msg, "err", err, "retry_in", k.backoff, "failures_since_last_warning", k.failures)
		k.warned, k.failures = now, 0
		return
	}
	p.log.Debug(msg, "err", err, "retry_in", k.backoff)
}

// answered notes an answered keepalive, and logs the end of the failures
// that were warned of.
func (k *keepalives) answered() {
	k.backoff = 0
	k.p.mu.Lock()
	k.p.refused = nil
	k.p.mu.Unlock()
	if k.downSince.IsZero() {
		return
	}
	k.p.log.Info("etcdstore: lease keepalives answered again", "failing_for", time.Since(k.downSince).Round(time.Millisecond))
	k.downSince, k.warned, k.failures = time.Time{}, time.Time{}, 0
}

// reset drops the stream (if any) after it failed for why: no keepalive is
// in flight any more, and a new stream opens after a growing backoff.
func (k *keepalives) reset(why error) {
	p := k.p
	if k.st == nil {
		return
	}
	k.st.cancel()
	k.st, k.pending = nil, nil
	p.mu.Lock()
	for _, l := range p.leases {
		l.inflight = false
	}
	p.distrustLocked()
	p.mu.Unlock()
	k.backoff = min(max(2*k.backoff, 50*time.Millisecond), maxBackoff)
	k.reopenAt = time.Now().Add(k.backoff)
	k.failed("etcdstore: lease keepalive stream failed; reopening", why)
}

// send sends the keepalives the sweep decided on the stream, if there is
// one, recording each one's send time, in order; a failed send resets the
// stream.
func (k *keepalives) send(sends []kaSent) {
	if k.st == nil {
		return
	}
	for _, s := range sends {
		s.at = time.Now()
		if err := k.st.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(s.id)}); err != nil {
			k.reset(err)
			return
		}
		k.pending = append(k.pending, s)
	}
}

// open starts opening a stream if the sweep needs one, none is open or
// opening, and the backoff has passed. It returns how long the loop may
// sleep: the sweep's wake-up, or sooner if the backoff ends first.
func (k *keepalives) open(sw sweep) time.Duration {
	wake := sw.wake
	if k.st == nil && sw.needStream && !k.opening {
		if d := time.Until(k.reopenAt); d > 0 {
			wake = min(wake, d)
		} else {
			k.opening = true
			k.p.wg.Add(1)
			go k.p.openStream(k.lc, k.events)
		}
	}
	return wake
}

// handle acts on an event of the stream: an open attempt's result, an
// answer (matched to the oldest pending keepalive, which it acknowledges
// under p.mu), or a failure (which resets the stream). Events from a
// stream already reset are ignored; an answer out of order resets it.
func (k *keepalives) handle(ev kaEvent) {
	p := k.p
	switch {
	case ev.from == nil: // an open attempt ended
		k.opening = false
		if ev.err != nil {
			k.backoff = min(max(2*k.backoff, 50*time.Millisecond), maxBackoff)
			k.reopenAt = time.Now().Add(k.backoff)
			k.failed("etcdstore: cannot open the lease keepalive stream", ev.err)
			return
		}
		k.st = ev.opened
		p.wg.Add(1)
		go p.receive(k.st, k.events)
	case ev.from != k.st: // from a stream already reset
	case ev.err != nil:
		k.reset(ev.err)
	case len(k.pending) == 0 || int64(k.pending[0].id) != ev.resp.ID:
		k.reset(fmt.Errorf("keepalive answer for lease %x out of order", ev.resp.ID))
	default:
		s := k.pending[0]
		k.pending = k.pending[1:]
		k.answered()
		var lost lostLease
		p.mu.Lock()
		if ev.resp.TTL <= 0 || p.trust.admit(s.at, ev.resp.Header) {
			lost = p.keptAliveLocked(s.l, s.at, ev.resp.TTL)
		} else {
			// Not trusted (see trust.go): it acknowledges nothing, and
			// the next keepalive leaves at the usual period.
			s.l.inflight = false
			p.confirmLocked()
		}
		p.mu.Unlock()
		if lost.why != nil {
			p.user.leaseLost(lost)
		}
	}
}

// openStream opens a keepalive stream and reports it on events. The stream
// requires a leader: a member cut off from the quorum ends it, so that the
// Store notices instead of waiting on a member that cannot renew.
func (p *leasePool) openStream(lc pb.LeaseClient, events chan<- kaEvent) {
	defer p.wg.Done()
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(p.ctx))
	stream, err := lc.LeaseKeepAlive(ctx)
	ev := kaEvent{err: err}
	if err == nil {
		ev.opened = &kaStream{stream: stream, cancel: cancel}
	} else {
		cancel()
	}
	select {
	case events <- ev:
	case <-p.ctx.Done():
		cancel()
	}
}

// receive passes every answer on st to the session loop until st fails or
// is reset.
func (p *leasePool) receive(st *kaStream, events chan<- kaEvent) {
	defer p.wg.Done()
	for {
		resp, err := st.stream.Recv()
		select {
		case events <- kaEvent{from: st, resp: resp, err: err}:
		case <-p.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}
