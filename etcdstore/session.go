package etcdstore

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The session: the Store's side of its leases, which leasePool owns
// (leasepool.go): expired claims, abandoned queue entries, and the
// verification of the keys attached to each lease. See the package
// documentation, "Leases and renewal", for the rules.

const (
	// minHeadroom is the least time by which a lease's TTL exceeds the TTL
	// of the claims it carries.
	minHeadroom = 500 * time.Millisecond
	// taskTimeout bounds every background request (verify, reap, clean-up).
	taskTimeout = 10 * time.Second
	// maxBackoff bounds the wait before reopening a failed stream or
	// retrying a failed clean-up (see cleanupTries).
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

// cleanupTries counts the failed attempts of a clean-up that the session
// loop sends until etcd answers: the delete of an expired claim (reap) or
// of an abandoned queue entry (dropEntry). As with Release (releaseClaim),
// each attempt has its own timeout, short at first: a request stuck on a
// member whose raft leader died is answered only at etcd's own request
// timeout (7s by default), so waiting for that answer would hold the lock
// past its deadline for seconds after a new leader is elected. Both
// deletes are conditional, so sending one again is safe.
type cleanupTries int

// timeout bounds the next attempt: firstReleaseAttempt, doubled after
// each failure up to lastReleaseAttempt, so that a slow store still
// answers one.
func (n cleanupTries) timeout() time.Duration {
	return min(firstReleaseAttempt<<min(n, 3), lastReleaseAttempt)
}

// pause is the wait before the next attempt once this one failed:
// releaseBackoff, doubled after each failure up to maxBackoff.
func (n cleanupTries) pause() time.Duration {
	return min(releaseBackoff<<min(n, 6), maxBackoff)
}

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

// leaseLost implements leaseUser: every claim and queue entry that lost
// carried is lost; a claim's key goes with the lease, so it is not reaped.
func (s *Store) leaseLost(lost lostLease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fq.mu.Lock()
	defer s.fq.mu.Unlock()
	s.leaseLostLocked(lost)
}

// leaseLostLocked implements leaseLost. s.mu and s.fq.mu must be held.
func (s *Store) leaseLostLocked(lost lostLease) {
	for _, c := range lost.claims {
		s.loseLocked(c, lost.why)
		c.reap = false // the lease takes the key with it
	}
	for _, e := range lost.entries {
		if e.lost == nil && !e.doomed {
			e.lost = fmt.Errorf("the waiter's lease ended: %w", lost.why)
		}
		delete(s.fq.doomed, e) // its key went with the lease
		s.entryChangedLocked(e)
	}
}

// sweep implements leaseUser: it declares claims past their deadline
// expired, and starts the deletion of expired claims' keys (reap) and of
// abandoned queue entries (dropEntry), one at a time each (and at most
// maxReaps claims' at once), retried at their reapAt or retryAt. It
// returns when to look again.
func (s *Store) sweep(now time.Time) time.Duration {
	wake := time.Minute
	due := func(t time.Time) { wake = min(wake, t.Sub(now)) }
	s.sweepClaims(now, due)
	s.sweepDoomed(now, due)
	return wake
}

// sweepClaims is sweep's part for claims: it tells due when to look again.
func (s *Store) sweepClaims(now time.Time, due func(time.Time)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.claims {
		if c.lost == nil {
			if now.Before(c.deadline) {
				due(c.deadline)
				continue
			}
			s.loseLocked(c, fmt.Errorf("the claim expired: not renewed within its TTL %v", c.ttl))
			c.reap = true
		}
		switch {
		case !c.reap || c.reaping:
		case now.Before(c.reapAt):
			due(c.reapAt)
		case s.reaps < maxReaps:
			c.reaping, s.reaps = true, s.reaps+1
			tries := c.reapTries
			s.pool.goTask(func(ctx context.Context) { s.reap(ctx, c, tries) })
			// Otherwise a reap in flight wakes the loop when it ends.
		}
	}
}

// sweepDoomed is sweep's part for abandoned queue entries: it tells due
// when to look again.
func (s *Store) sweepDoomed(now time.Time, due func(time.Time)) {
	s.fq.mu.Lock()
	defer s.fq.mu.Unlock()
	for e := range s.fq.doomed {
		if !e.deleting {
			if now.Before(e.retryAt) {
				due(e.retryAt)
			} else {
				e.deleting = true
				tries := e.tries
				s.pool.goTask(func(ctx context.Context) { s.dropEntry(ctx, e, tries) })
			}
		}
	}
}

// maxReaps bounds the deletions of expired claims' keys in flight: a Store
// that held thousands of locks through an outage finds them all expired
// at once when it ends, and started a goroutine and a request per claim
// (10,000 at 10,000 locks).
const maxReaps = 16

// reapWarnEvery: failed deletions of expired claims' keys are logged as a
// warning at most this often, with the count of those since the last one;
// the others at debug level. An outage fails them all.
const reapWarnEvery = 10 * time.Second

// reapFailedLocked logs a failed deletion of c's key (err). s.mu must be
// held.
func (s *Store) reapFailedLocked(c *claim, err error) {
	if s.ctx.Err() != nil {
		return
	}
	s.reapFailures++
	if now := time.Now(); s.reapWarned.IsZero() || now.Sub(s.reapWarned) >= reapWarnEvery {
		s.log.Warn("etcdstore: cannot delete an expired claim; retrying", "lock", c.name, "token", c.token, "err", err,
			"failures_since_last_warning", s.reapFailures)
		s.reapWarned, s.reapFailures = now, 0
		return
	}
	s.log.Debug("etcdstore: cannot delete an expired claim; retrying", "lock", c.name, "token", c.token, "err", err)
}

// reap deletes the key of an expired claim if it is still that claim's
// (one conditional delete), so that the claim ends at its deadline even
// when other claims keep the shared lease alive. tries is the number of
// its earlier attempts that failed.
func (s *Store) reap(ctx context.Context, c *claim, tries cleanupTries) {
	actx, cancel := context.WithTimeout(ctx, tries.timeout())
	_, _, err := s.deleteClaim(actx, c, nil)
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	c.reaping, s.reaps = false, s.reaps-1
	if err != nil {
		c.reapAt, c.reapTries = time.Now().Add(tries.pause()), tries+1
		s.reapFailedLocked(c, err)
		return
	}
	c.reap = false
	s.pool.detachClaim(c)
}

// verify implements leaseUser: it asks etcd which keys are attached to
// lease l (id) and marks the claims and queue entries whose keys are no
// longer there as lost, after confirming each with a read. One request per
// lease and verification period, however many locks the lease carries.
func (s *Store) verify(ctx context.Context, l *lease, id clientv3.LeaseID) {
	sent := time.Now()
	resp, err := s.client.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
	s.mu.Lock()
	s.fq.mu.Lock()
	claims, entries, ok := s.verifiedLocked(l, id, sent, resp, err)
	s.fq.mu.Unlock()
	s.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		s.pool.noteRefusal(err)
		s.log.Debug("etcdstore: lease verification failed", "lease", fmt.Sprintf("%x", int64(id)), "err", err)
	}
	if ok {
		s.confirmGone(ctx, id, claims, entries)
		attached := make(map[string]bool, len(resp.Keys))
		for _, k := range resp.Keys {
			attached[string(k)] = true
		}
		s.clearOrphans(ctx, l, id, attached)
		s.clearStaleClaims(ctx, l, id, attached)
	}
}

// claimGone marks c lost: its key was found deleted or replaced.
func (s *Store) claimGone(c *claim) {
	ck, _, _ := s.Keys(c.name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.lost != nil || c.releasing {
		return
	}
	s.loseLocked(c, fmt.Errorf("the claim key %q (token %d) was deleted or replaced in etcd (a forced release?)", ck, c.token))
	// At the claim's deadline, when the holder's validity has ended by
	// its own clock (Renew fails from now on, so the deadline stays), the
	// reaper deletes its queue key (which blocks the waiters behind it
	// until then) and puts the release marker, so that contenders that
	// saw the claim need not wait for its grace (see ghost).
	c.reap, c.reapAt = true, c.deadline
	s.log.Warn("etcdstore: claim key gone; the lock is lost", "lock", c.name, "token", c.token)
}

// verifiedLocked applies the answer (resp, err) of the verification of
// lease l (id) sent at sent: the pool updates the lease (see
// leasePool.verified; a Renew it wakes looks once s.mu is released, after
// the claims' verified times are updated here), and the claims whose keys
// are attached are marked verified at sent. It returns, with ok, the
// claims and queue entries created before sent whose keys are missing; ok
// is false if the verification failed or the lease is gone. s.mu and
// s.fq.mu must be held.
func (s *Store) verifiedLocked(l *lease, id clientv3.LeaseID, sent time.Time, resp *clientv3.LeaseTimeToLiveResponse, err error) (claims []*claim, entries []*entry, ok bool) {
	onLease, entriesOn, lost, ok := s.pool.verified(l, id, sent, resp, err)
	if lost.why != nil {
		s.leaseLostLocked(lost)
	}
	if !ok {
		return nil, nil, false
	}
	attached := make(map[string]bool, len(resp.Keys))
	for _, k := range resp.Keys {
		attached[string(k)] = true
	}
	for _, c := range onLease {
		ck, _, _ := s.Keys(c.name)
		switch {
		case c.lost != nil || c.releasing || !c.since.Before(sent):
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
	for _, e := range entriesOn {
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
		if gone(ck, c.token, true) {
			s.claimGone(c)
		}
	}
	for _, e := range entries {
		if !gone(e.key, e.rev, false) {
			continue
		}
		s.fq.mu.Lock()
		if e.lost == nil && !e.doomed {
			e.lost = fmt.Errorf("the waiter's queue key %q was deleted", e.key)
			s.pool.detachEntry(e)
			s.entryChangedLocked(e)
		}
		s.fq.mu.Unlock()
	}
}
