package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The session: one etcd lease per distinct TTL, kept alive on demand by one
// keepalive stream per Store. See the package documentation, "Leases and
// renewal", for the rules; the code follows them here.

const (
	// minHeadroom is the least time by which a lease's TTL exceeds the TTL
	// of the claims it carries.
	minHeadroom = 500 * time.Millisecond
	// taskTimeout bounds every background request (verify, reap, clean-up).
	taskTimeout = 10 * time.Second
	// maxBackoff bounds the wait before reopening a failed stream or
	// retrying a failed clean-up.
	maxBackoff = 2 * time.Second
	// verifyPause is the least time between a failed verification and
	// one that a waiting Renew asks for.
	verifyPause = 200 * time.Millisecond
	// maxEvery bounds the keepalive period: at most etcd's default
	// election timeout, so that a keepalive that a stopped raft leader
	// answers when it resumes, deposed, was sent before the new leader's
	// promotion plus its extension, which the new leader's expiry covers
	// (see trust.go).
	maxEvery = time.Second
)

// leaseTiming returns, for claims with TTL ttl, the TTL of their etcd lease
// in whole seconds (ttl plus a headroom of max(ttl/10, 500ms), rounded up),
// how often the lease is kept alive while wanted (half the headroom, at
// most maxEvery), and how often its attached keys are verified (ttl/3, at
// least as long as the keepalive period).
func leaseTiming(ttl time.Duration) (seconds int64, every, verify time.Duration) {
	head := max(ttl/10, minHeadroom)
	seconds = int64((ttl + head + time.Second - 1) / time.Second)
	every = min((time.Duration(seconds)*time.Second-ttl)/2, maxEvery)
	return seconds, every, max(ttl/3, every)
}

// lease is one etcd lease, shared by every claim and queue entry with the
// same TTL. Its fields are guarded by Store.mu.
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

// unverifiedFor is how long, for claims of TTL ttl, a Renew may be answered
// since the send time of the last request that found the claim's key in
// place (its acquire, or a verification of its lease): the TTL plus a
// verification period, so that slow verifications (they run every period)
// rarely hold a Renew up. A contender that sees the key vanish counts it
// as a claim for ttl plus this (plus a margin for clock rate drift), since
// the holder may renew without noticing for that long (see ghostGrace).
func unverifiedFor(ttl time.Duration) time.Duration {
	_, _, verify := leaseTiming(ttl)
	return ttl + verify
}

// ghostGrace is how long after a contender first finds a claim it saw
// gone, not released (deleted by hand or by ForceRelease), it still counts
// the claim as held: the holder's Renew succeeds for at most
// unverifiedFor(ttl) after its last verification, which was sent before
// the deletion, and its validity lasts ttl after its last Renew.
func ghostGrace(ttl time.Duration) time.Duration {
	return ttl + unverifiedFor(ttl) + max(ttl/50, 50*time.Millisecond)
}

// stallAfter is how long a keepalive may go unanswered before the stream is
// reopened.
func (l *lease) stallAfter() time.Duration { return max(4*l.every, 2*time.Second) }

// leaseFor returns the live lease for claims of ttl, pinned (see unpin),
// and a time sent such that etcd keeps the lease at least until
// sent + ttl. sent is taken before the caller's request leaves, so it is
// the request's send time in the sense of the engine's clock model.
func (s *Store) leaseFor(ctx context.Context, ttl time.Duration) (*lease, time.Time, error) {
	s.mu.Lock()
	for {
		if s.closed {
			s.mu.Unlock()
			return nil, time.Time{}, ErrClosed
		}
		l := s.leases[ttl]
		if l == nil || l.dead != nil {
			l = newLease(ttl)
			s.leases[ttl] = l
		}
		now := time.Now()
		if l.id != 0 && !l.aliveUntil.Before(now.Add(ttl)) {
			l.pins++
			l.lastUsed = now
			s.mu.Unlock()
			return l, now, nil
		}
		if l.id == 0 && !l.granting {
			l.granting = true
			s.mu.Unlock()
			sent := time.Now()
			resp, err := s.client.Grant(ctx, l.seconds)
			s.mu.Lock()
			l.granting = false
			if err == nil && resp.TTL <= 0 {
				err = fmt.Errorf("etcd granted lease %x with TTL %ds", int64(resp.ID), resp.TTL)
			}
			if err != nil {
				l.broadcast()
				s.mu.Unlock()
				return nil, time.Time{}, fmt.Errorf("lease grant (TTL %ds): %w", l.seconds, err)
			}
			if l.dead != nil { // the Store was closed meanwhile; the new lease expires unused
				s.mu.Unlock()
				return nil, time.Time{}, ErrClosed
			}
			l.id = resp.ID
			l.aliveUntil = sent.Add(time.Duration(resp.TTL) * time.Second)
			l.lastSent, l.lastUsed = sent, sent
			l.nextVerify = sent.Add(l.verifyEvery)
			l.broadcast()
			s.pokeLocked()
			continue
		}
		if l.id != 0 {
			l.urgent = true
			s.pokeLocked()
		}
		changed := l.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, time.Time{}, fmt.Errorf("waiting for a lease keepalive: %w", ctx.Err())
		}
		s.mu.Lock()
	}
}

// unpin ends an acquisition's use of l.
func (s *Store) unpin(l *lease) {
	s.mu.Lock()
	l.pins--
	l.lastUsed = time.Now()
	s.mu.Unlock()
}

// leaseGone marks l as gone (or possibly gone): every claim and queue entry
// on it is lost.
func (s *Store) leaseGone(l *lease, why error) {
	s.mu.Lock()
	s.leaseGoneLocked(l, why, false)
	s.mu.Unlock()
}

// leaseGoneLocked implements leaseGone. revoke asks etcd to revoke the lease
// (when the Store only suspects it gone): its keys must not outlive the
// claims, which have all expired by then. s.mu must be held.
func (s *Store) leaseGoneLocked(l *lease, why error, revoke bool) {
	if l.dead != nil {
		return
	}
	l.dead = why
	if s.leases[l.ttl] == l {
		delete(s.leases, l.ttl)
	}
	for c := range l.claims {
		if c.lost == nil {
			c.lost = why
		}
		c.reap = false // the lease takes the key with it
	}
	clear(l.claims)
	for e := range l.entries {
		if e.lost == nil && !e.doomed {
			e.lost = fmt.Errorf("the waiter's lease ended: %w", why)
		}
		s.entryChangedLocked(e)
	}
	clear(l.entries)
	l.broadcast()
	if l.id != 0 {
		s.log.Warn("etcdstore: lease lost; the locks it carried are lost", "lease", fmt.Sprintf("%x", int64(l.id)), "ttl", l.ttl, "err", why)
		if revoke {
			id := l.id
			s.goTask(func(ctx context.Context) { _, _ = s.client.Revoke(ctx, id) })
		}
	}
}

// keptAliveLocked applies a keepalive answer: ttl seconds, for a request
// sent at sent. s.mu must be held.
func (s *Store) keptAliveLocked(l *lease, sent time.Time, ttl int64) {
	l.inflight = false
	if l.dead != nil {
		return
	}
	if ttl <= 0 {
		s.leaseGoneLocked(l, fmt.Errorf("etcd reports lease %x expired or revoked", int64(l.id)), false)
		return
	}
	if until := sent.Add(time.Duration(ttl) * time.Second); until.After(l.aliveUntil) {
		l.aliveUntil = until
	}
	l.broadcast()
}

func (s *Store) pokeLocked() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// goTask runs f in a goroutine that Close waits for, with a context that
// ends on Close or after taskTimeout, and wakes the session loop after it.
// It must be called from a goroutine the WaitGroup counts (the session
// loop, a task, a follower) or under s.mu before Close.
func (s *Store) goTask(f func(ctx context.Context)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, taskTimeout)
		defer cancel()
		f(ctx)
		s.mu.Lock()
		s.pokeLocked()
		s.mu.Unlock()
	}()
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

// run is the session loop: it keeps wanted leases alive on one stream,
// declares leases gone, verifies that claims' keys are still attached,
// deletes expired claims' keys and abandoned queue entries.
func (s *Store) run() {
	defer s.wg.Done()
	k := &keepalives{s: s, lc: clientv3.RetryLeaseClient(s.client), events: make(chan kaEvent)}
	defer func() {
		if k.st != nil {
			k.st.cancel()
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		s.mu.Lock()
		sw := s.sweepLocked(now, k.st != nil)
		s.mu.Unlock()
		if sw.stalled {
			k.reset(errors.New("no keepalive answer within the stall timeout"))
		}
		k.send(sw.sends)
		timer.Reset(max(k.open(sw), time.Millisecond))
		select {
		case <-s.ctx.Done():
			return
		case <-s.poke:
		case <-timer.C:
		case ev := <-k.events:
			k.handle(ev)
		}
	}
}

// keepalives is the session loop's keepalive stream state. It is owned by
// the loop's goroutine (run); the leases it touches are guarded by s.mu,
// which its methods take where they touch them.
type keepalives struct {
	s        *Store
	lc       pb.LeaseClient
	events   chan kaEvent // from openStream and receive
	st       *kaStream
	opening  bool
	pending  []kaSent // keepalives sent on st, in order; etcd answers them in order
	reopenAt time.Time
	backoff  time.Duration
}

// reset drops the stream (if any) after it failed for why: no keepalive is
// in flight any more, and a new stream opens after a growing backoff.
func (k *keepalives) reset(why error) {
	s := k.s
	if k.st == nil {
		return
	}
	k.st.cancel()
	k.st, k.pending = nil, nil
	s.mu.Lock()
	for _, l := range s.leases {
		l.inflight = false
	}
	s.distrustLocked()
	s.mu.Unlock()
	k.backoff = min(max(2*k.backoff, 50*time.Millisecond), maxBackoff)
	k.reopenAt = time.Now().Add(k.backoff)
	if s.ctx.Err() == nil {
		s.log.Warn("etcdstore: lease keepalive stream failed; reopening", "err", why, "retry_in", k.backoff)
	}
}

// send sends the keepalives the sweep decided on the stream, if there is
// one, recording each one's send time, in order; a failed send resets the
// stream.
func (k *keepalives) send(sends []kaSent) {
	if k.st == nil {
		return
	}
	for _, p := range sends {
		p.at = time.Now()
		if err := k.st.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(p.id)}); err != nil {
			k.reset(err)
			return
		}
		k.pending = append(k.pending, p)
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
			k.s.wg.Add(1)
			go k.s.openStream(k.lc, k.events)
		}
	}
	return wake
}

// handle acts on an event of the stream: an open attempt's result, an
// answer (matched to the oldest pending keepalive, which it acknowledges
// under s.mu), or a failure (which resets the stream). Events from a
// stream already reset are ignored; an answer out of order resets it.
func (k *keepalives) handle(ev kaEvent) {
	s := k.s
	switch {
	case ev.from == nil: // an open attempt ended
		k.opening = false
		if ev.err != nil {
			k.backoff = min(max(2*k.backoff, 50*time.Millisecond), maxBackoff)
			k.reopenAt = time.Now().Add(k.backoff)
			if s.ctx.Err() == nil {
				s.log.Warn("etcdstore: cannot open the lease keepalive stream", "err", ev.err, "retry_in", k.backoff)
			}
			return
		}
		k.st = ev.opened
		s.wg.Add(1)
		go s.receive(k.st, k.events)
	case ev.from != k.st: // from a stream already reset
	case ev.err != nil:
		k.reset(ev.err)
	case len(k.pending) == 0 || int64(k.pending[0].id) != ev.resp.ID:
		k.reset(fmt.Errorf("keepalive answer for lease %x out of order", ev.resp.ID))
	default:
		p := k.pending[0]
		k.pending = k.pending[1:]
		k.backoff = 0
		s.mu.Lock()
		if ev.resp.TTL <= 0 || s.trust.admit(p.at, ev.resp.Header) {
			s.keptAliveLocked(p.l, p.at, ev.resp.TTL)
		} else {
			// Not trusted (see trust.go): it acknowledges nothing, and
			// the next keepalive leaves at the usual period.
			p.l.inflight = false
			s.confirmLocked()
		}
		s.mu.Unlock()
	}
}

// openStream opens a keepalive stream and reports it on events. The stream
// requires a leader: a member cut off from the quorum ends it, so that the
// Store notices instead of waiting on a member that cannot renew.
func (s *Store) openStream(lc pb.LeaseClient, events chan<- kaEvent) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	stream, err := lc.LeaseKeepAlive(ctx)
	ev := kaEvent{err: err}
	if err == nil {
		ev.opened = &kaStream{stream: stream, cancel: cancel}
	} else {
		cancel()
	}
	select {
	case events <- ev:
	case <-s.ctx.Done():
		cancel()
	}
}

// receive passes every answer on st to the session loop until st fails or
// is reset.
func (s *Store) receive(st *kaStream, events chan<- kaEvent) {
	defer s.wg.Done()
	for {
		resp, err := st.stream.Recv()
		select {
		case events <- kaEvent{from: st, resp: resp, err: err}:
		case <-s.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// sweep is what one pass of the session loop decided.
type sweep struct {
	sends      []kaSent
	wake       time.Duration
	needStream bool
	stalled    bool
}

// sweepLocked decides which leases get a keepalive now, declares leases
// gone whose acknowledged life ended, starts verifications, reaps and
// clean-ups, and returns when the loop must look again. s.mu must be held.
func (s *Store) sweepLocked(now time.Time, haveStream bool) sweep {
	sw := sweep{wake: time.Minute}
	due := func(t time.Time) { sw.wake = min(sw.wake, t.Sub(now)) }
	for _, l := range s.leases {
		if l.id == 0 {
			continue // being granted
		}
		if !now.Before(l.aliveUntil) {
			if !l.busy() {
				l.dead = errors.New("idle lease left to expire")
				delete(s.leases, l.ttl)
				l.broadcast()
				continue
			}
			s.leaseGoneLocked(l, fmt.Errorf("no keepalive of lease %x was acknowledged in time (TTL %ds): etcd may have expired it",
				int64(l.id), l.seconds), true)
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
				sw.stalled = true
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
		s.leaseTasksLocked(l, now, due)
	}
	for _, c := range s.claims {
		if c.lost == nil {
			if now.Before(c.deadline) {
				due(c.deadline)
				continue
			}
			c.lost, c.reap = fmt.Errorf("the claim expired: not renewed within its TTL %v", c.ttl), true
		}
		if c.reap && !c.reaping {
			if now.Before(c.reapAt) {
				due(c.reapAt)
			} else {
				c.reaping = true
				s.goTask(func(ctx context.Context) { s.reap(ctx, c) })
			}
		}
	}
	return sw
}

// leaseTasksLocked starts the background work that lease l is due for at
// now: a verification of its attached keys (at most one at a time, every
// verification period, sooner when asked for but not within verifyPause
// of a failed one), and the deletion of its abandoned queue entries (one
// at a time each, retried at their retryAt). It tells due when to look
// again. s.mu must be held.
func (s *Store) leaseTasksLocked(l *lease, now time.Time, due func(time.Time)) {
	if len(l.claims)+len(l.entries)+len(l.orphans) > 0 && !l.verifying {
		retry := l.verifyFailed.Add(verifyPause)
		if now.Before(l.nextVerify) && (!l.verifyNow || now.Before(retry)) {
			due(l.nextVerify)
			if l.verifyNow {
				due(retry)
			}
		} else {
			l.verifying, l.verifyNow = true, false
			id := l.id
			s.goTask(func(ctx context.Context) { s.verify(ctx, l, id) })
		}
	}
	for e := range l.entries {
		if e.doomed && !e.deleting {
			if now.Before(e.retryAt) {
				due(e.retryAt)
			} else {
				e.deleting = true
				s.goTask(func(ctx context.Context) { s.dropEntry(ctx, e) })
			}
		}
	}
}

// reap deletes the key of an expired claim if it is still that claim's
// (one conditional delete), so that the claim ends at its deadline even
// when other claims keep the shared lease alive.
func (s *Store) reap(ctx context.Context, c *claim) {
	_, _, err := s.deleteClaim(ctx, c, false)
	s.mu.Lock()
	defer s.mu.Unlock()
	c.reaping = false
	if err != nil {
		c.reapAt = time.Now().Add(maxBackoff)
		if s.ctx.Err() == nil {
			s.log.Warn("etcdstore: cannot delete an expired claim; retrying", "lock", c.name, "token", c.token, "err", err)
		}
		return
	}
	c.reap = false
	delete(c.lease.claims, c)
}

// verify asks etcd which keys are attached to lease l (id) and marks the
// claims and queue entries whose keys are no longer there as lost, after
// confirming each with a read. One request per lease and verification
// period, however many locks the lease carries.
func (s *Store) verify(ctx context.Context, l *lease, id clientv3.LeaseID) {
	sent := time.Now()
	resp, err := s.client.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
	s.mu.Lock()
	claims, entries, ok := s.verifiedLocked(l, id, sent, resp, err)
	s.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		s.log.Debug("etcdstore: lease verification failed", "lease", fmt.Sprintf("%x", int64(id)), "err", err)
	}
	if ok {
		s.confirmGone(ctx, id, claims, entries)
		attached := make(map[string]bool, len(resp.Keys))
		for _, k := range resp.Keys {
			attached[string(k)] = true
		}
		s.mu.Lock()
		names := s.orphanNamesLocked(l, attached)
		s.mu.Unlock()
		s.clearOrphans(ctx, l, id, names)
	}
}

// verifiedLocked applies the answer (resp, err) of the verification of
// lease l (id) sent at sent: it schedules the next one, wakes Renew calls
// that wait for it (they look once s.mu is released, after the claims'
// verified times are updated here), declares the lease gone if etcd says
// so, extends its acknowledged life, and marks as verified at sent the
// claims whose keys are attached. It returns, with ok, the claims and
// queue entries created before sent whose keys are missing; ok is false
// if the verification failed or the lease is gone. s.mu must be held.
func (s *Store) verifiedLocked(l *lease, id clientv3.LeaseID, sent time.Time, resp *clientv3.LeaseTimeToLiveResponse, err error) (claims []*claim, entries []*entry, ok bool) {
	l.verifying = false
	l.nextVerify = time.Now().Add(l.verifyEvery)
	l.broadcast()
	if err != nil {
		l.verifyFailed = time.Now()
	}
	if err != nil || l.dead != nil {
		return nil, nil, false
	}
	if resp.TTL < 0 {
		s.leaseGoneLocked(l, fmt.Errorf("etcd reports lease %x expired or revoked", int64(id)), false)
		return nil, nil, false
	}
	if !s.trust.admit(sent, resp.ResponseHeader) {
		// Perhaps a deposed leader's view of the lease and its keys (see
		// trust.go): counts as a failed verification.
		l.verifyFailed = time.Now()
		s.confirmLocked()
		return nil, nil, false
	}
	if until := sent.Add(time.Duration(resp.TTL) * time.Second); until.After(l.aliveUntil) {
		l.aliveUntil = until // TTL is rounded down: a safe bound
	}
	attached := make(map[string]bool, len(resp.Keys))
	for _, k := range resp.Keys {
		attached[string(k)] = true
	}
	for c := range l.claims {
		ck, _, _ := s.Keys(c.name)
		switch {
		case c.lost != nil || !c.since.Before(sent):
		case attached[ck]:
			// The key was in place when etcd answered, after sent: a
			// deletion of it, if any, comes later than sent.
			if sent.After(c.verified) {
				c.verified = sent
			}
		default:
			claims = append(claims, c)
		}
	}
	for e := range l.entries {
		if e.lost == nil && !e.doomed && e.since.Before(sent) && !attached[e.key] {
			entries = append(entries, e)
		}
	}
	return claims, entries, true
}

// confirmGone confirms, with a linearizable read each, that the keys of
// claims and entries missing from lease id's attached keys are gone
// (absent, on another lease, or rewritten: a claim is named by its mod
// revision, its token, a queue key by its create revision), and only then
// marks them lost. A read that fails proves nothing: the key is left to
// the next verification.
func (s *Store) confirmGone(ctx context.Context, id clientv3.LeaseID, claims []*claim, entries []*entry) {
	gone := func(key string, rev int64, claim bool) bool {
		r, err := s.client.Get(ctx, key)
		if err != nil {
			return false
		}
		kv := kvOrNil(r.Kvs)
		return kv == nil || kv.Lease != int64(id) || claim && kv.ModRevision != rev || !claim && kv.CreateRevision != rev
	}
	for _, c := range claims {
		ck, _, _ := s.Keys(c.name)
		if !gone(ck, c.token, true) {
			continue
		}
		s.mu.Lock()
		if c.lost == nil {
			c.lost = fmt.Errorf("the claim key %q (token %d) was deleted or replaced in etcd (a forced release?)", ck, c.token)
			// At the claim's deadline, when the holder's validity has
			// ended by its own clock (Renew fails from now on, so the
			// deadline stays), the reaper deletes its queue key (which
			// blocks the waiters behind it until then) and puts the
			// release marker, so that contenders that saw the claim need
			// not wait for its grace (see ghost).
			c.reap, c.reapAt = true, c.deadline
			s.log.Warn("etcdstore: claim key gone; the lock is lost", "lock", c.name, "token", c.token)
		}
		s.mu.Unlock()
	}
	for _, e := range entries {
		if !gone(e.key, e.rev, false) {
			continue
		}
		s.mu.Lock()
		if e.lost == nil && !e.doomed {
			e.lost = fmt.Errorf("the waiter's queue key %q was deleted", e.key)
			delete(e.lease.entries, e)
			s.entryChangedLocked(e)
		}
		s.mu.Unlock()
	}
}
