package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-go/baton/backend"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// addOwnerLocked ties e to ctx: e is dropped once the contexts of all the
// attempts that used it have ended. s.fq.mu must be held.
func (s *Store) addOwnerLocked(e *entry, ctx context.Context) {
	done := ctx.Done()
	if done == nil {
		e.pinned = true // lives until the last Watch of the name ends
		return
	}
	for _, o := range e.owners {
		if o.done == done {
			return
		}
	}
	stop := context.AfterFunc(ctx, func() { s.ownerGone(e, done) })
	e.owners = append(e.owners, owner{done: done, stop: stop})
}

func (s *Store) ownerGone(e *entry, done <-chan struct{}) {
	s.fq.mu.Lock()
	defer s.fq.mu.Unlock()
	for i, o := range e.owners {
		if o.done == done {
			e.owners = append(e.owners[:i], e.owners[i+1:]...)
			break
		}
	}
	if len(e.owners) == 0 && !e.pinned && s.fq.entries[entryKey{e.name, e.holder}] == e {
		s.removeEntryLocked(e)
	}
}

// removeEntryLocked takes e out of the Store's books. Unless it acquired or
// its lease is gone, the session loop deletes its key and a claim handed to
// it (see dropOps); a lost place's key is gone already, but a claim may
// have been handed to it before. s.fq.mu must be held.
func (s *Store) removeEntryLocked(e *entry) {
	if k := (entryKey{e.name, e.holder}); s.fq.entries[k] == e {
		delete(s.fq.entries, k)
	}
	for _, o := range e.owners {
		o.stop()
	}
	e.owners = nil
	switch {
	case e.doomed:
	case e.consumed:
		s.pool.detachEntry(e) // its key stays as the holder's, deleted with the claim
	case s.pool.attachEntry(e): // stays on its lease until deleted
		e.doomed = true
		s.fq.doomed[e] = struct{}{}
		s.pool.wake()
	default: // the lease has ended: it took the key and any claim with it
	}
	s.hub.specChanged(e.name)
}

// dropEntriesLocked removes every entry of name (its last Watch ended).
// s.fq.mu must be held.
func (s *Store) dropEntriesLocked(name string) {
	for k, e := range s.fq.entries {
		if k.name == name {
			s.removeEntryLocked(e)
		}
	}
}

// entryChangedLocked wakes the waiters of e's lock after e was lost, so that
// their next attempt reports it. s.fq.mu must be held.
func (s *Store) entryChangedLocked(e *entry) {
	s.hub.wakeWaiters(e.name)
}

// dropEntry deletes an abandoned entry's key if it is still that entry's.
func (s *Store) dropEntry(ctx context.Context, e *entry, tries cleanupTries) {
	actx, cancel := context.WithTimeout(ctx, tries.timeout())
	_, err := s.client.Txn(actx).Then(s.dropOps(e)...).Commit()
	cancel()
	s.fq.mu.Lock()
	defer s.fq.mu.Unlock()
	e.deleting = false
	if err != nil {
		e.retryAt, e.tries = time.Now().Add(tries.pause()), tries+1
		if s.ctx.Err() == nil {
			s.log.Warn("etcdstore: cannot remove an abandoned queue entry; retrying", "lock", e.name, "key", e.key, "err", err)
		}
		return
	}
	delete(s.fq.doomed, e)
	s.pool.detachEntry(e)
}

// dropOps deletes, in one transaction, e's queue key if it is still e's,
// and the claim if a releasing holder handed it to e (it holds e's claim
// value on e's lease): a waiter that gave up must not keep the lock.
func (s *Store) dropOps(e *entry) []clientv3.Op {
	ops := []clientv3.Op{clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(e.key), "=", e.rev)},
		[]clientv3.Op{clientv3.OpDelete(e.key)}, nil)}
	if e.claimVal != "" {
		ck, _, _ := s.Keys(e.name)
		gk := s.guardKey(e.name)
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(ck), "=", e.claimVal),
				clientv3.Compare(clientv3.LeaseValue(ck), "=", int64(e.lease.id))},
			[]clientv3.Op{clientv3.OpDelete(ck), clientv3.OpPut(s.releasedKey(e.name), "0")}, nil),
			// The guard of that claim, even if its key was deleted by hand.
			clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Value(gk), "=", e.claimVal),
					clientv3.Compare(clientv3.LeaseValue(gk), "=", int64(e.lease.id))},
				[]clientv3.Op{clientv3.OpDelete(gk)}, nil))
	}
	return ops
}

// ghostFair reports whether a failed acquire transaction (resp) found the
// lock free and the attempt first in line, so that only the release
// marker's condition failed. e is the attempt's place, or nil.
func ghostFair(e *entry, resp *clientv3.TxnResponse) bool {
	rs := resp.Responses
	if kvOrNil(rs[0].GetResponseRange().GetKvs()) != nil || kvOrNil(rs[1].GetResponseRange().GetKvs()) != nil || guardOf(resp) != nil {
		return false
	}
	return e == nil || kvOrNil(rs[2].GetResponseRange().GetKvs()) != nil
}

// guardOf returns the claim's guard (see guardKey) as a fair attempt's
// read or failed acquire transaction read it (always its last response),
// or nil.
func guardOf(resp *clientv3.TxnResponse) *mvccpb.KeyValue {
	rs := resp.Responses
	return kvOrNil(rs[len(rs)-1].GetResponseRange().GetKvs())
}

// handedTo reports whether claim (the claim key, or nil) was handed to the
// place e by a releasing holder: it holds e's claim value on e's lease.
func handedTo(e *entry, claim *mvccpb.KeyValue) bool {
	return claim != nil && e.claimVal != "" && string(claim.Value) == e.claimVal &&
		claim.Lease == int64(e.lease.id) && claim.ModRevision > e.rev
}

// nextOf returns the waiter behind e that the read r (of the first queue
// key after e's) found, or else the one e knows from an earlier read.
func (s *Store) nextOf(e *entry, r *etcdserverpb.ResponseOp) *successor {
	if n := successorOf(kvOrNil(r.GetResponseRange().GetKvs())); n != nil {
		return n
	}
	s.fq.mu.Lock()
	defer s.fq.mu.Unlock()
	return e.next
}

// collect returns the grant of a claim that a releasing holder handed to
// the place e (claim is the claim key as read or as a watch event
// delivered it; next, if not nil, the waiter behind e). The claim is on e's lease, which this Store keeps alive:
// collect makes sure, before it returns, that etcd keeps the lease for the
// request's TTL from a moment after the engine sent the request, as an
// acquire does; see "Fair mode" in the package documentation for why that
// keeps the engine's clock model. If the attempt's nonce or TTL is not the
// one the place queued with (another goroutine of the same holder queued
// it), one transaction rewrites the claim for the attempt first.
func (s *Store) collect(ctx context.Context, name string, req backend.Request, ek entryKey, e *entry, claim *mvccpb.KeyValue, next *successor) (backend.Grant, error) {
	v, err := decodeValue(claim.Value)
	if err != nil {
		ck, _, _ := s.Keys(name)
		return backend.Grant{}, s.corrupt(name, ck, err)
	}
	token := claim.ModRevision
	live := func() bool { return s.fq.entries[ek] == e && e.lost == nil && !e.doomed && !e.consumed }
	heldErr := fmt.Errorf("etcdstore: %w", &backend.HeldError{Key: name, Holder: v.holder, Token: uint64(token)})
	s.fq.mu.Lock()
	if !live() || e.collecting {
		// A sibling attempt collects it, or the place was abandoned (and
		// the clean-up deletes the claim with it).
		s.fq.mu.Unlock()
		return backend.Grant{}, heldErr
	}
	e.collecting = true
	s.fq.mu.Unlock()
	done := false
	defer func() {
		if !done {
			s.fq.mu.Lock()
			e.collecting = false
			s.fq.mu.Unlock()
		}
	}()
	l := e.lease
	var sent time.Time
	rewritten := false
	// The keepalive wait of alive is not bounded by callContext (see
	// acquireFair).
	if v.holder == req.Holder && v.nonce == req.Nonce && v.ttl == req.TTL {
		if sent, err = s.pool.alive(ctx, l); err != nil {
			return backend.Grant{}, s.wrap(name, "acquire", err)
		}
	} else {
		if l, sent, token, next, err = s.rewriteHanded(ctx, name, req, e, token); err != nil {
			return backend.Grant{}, s.wrap(name, "acquire", err)
		}
		rewritten = true
	}
	defer s.pool.unpin(l)
	s.fq.mu.Lock()
	e.collecting = false
	done = true
	if !live() && !rewritten {
		// Abandoned meanwhile: the clean-up deletes the claim, which still
		// holds the place's value. (A rewritten claim no longer does, and
		// is this attempt's: it is granted.)
		s.fq.mu.Unlock()
		return backend.Grant{}, heldErr
	}
	e.consumed = true
	if s.fq.entries[ek] == e {
		s.removeEntryLocked(e)
	}
	s.fq.busy[name] = true
	delete(s.fq.tail, name)
	s.fq.mu.Unlock()
	return s.granted(name, req, l, sent, token, e, next)
}

// rewriteHanded rewrites the claim handed to e at token as req's (its
// holder, nonce and TTL differ from the place's), on a lease of req's TTL,
// and returns that lease, pinned, with the claim's new token and the
// oldest waiter behind it. The keepalive wait of the pool's acquire is not
// bounded by callContext (see acquireFair); the transaction is.
func (s *Store) rewriteHanded(ctx context.Context, name string, req backend.Request, e *entry, token int64) (*lease, time.Time, int64, *successor, error) {
	ck, lk, qp := s.Keys(name)
	l, sent, err := s.pool.acquire(ctx, req.TTL)
	if err != nil {
		return nil, time.Time{}, 0, nil, err
	}
	val := value{holder: req.Holder, nonce: req.Nonce, ttl: req.TTL, at: time.Now()}.encode()
	cctx, cancel := callContext(ctx) // the place stays with ctx
	defer cancel()
	resp, err := s.client.Txn(cctx).
		If(clientv3.Compare(clientv3.ModRevision(ck), "=", token), clientv3.Compare(clientv3.Value(ck), "=", e.claimVal)).
		Then(clientv3.OpPut(ck, val, clientv3.WithLease(l.id)), clientv3.OpPut(lk, val), clientv3.OpGet(ck),
			clientv3.OpGet(qp, append(clientv3.WithFirstCreate(), clientv3.WithMinCreateRev(e.rev+1))...),
			clientv3.OpPut(s.guardKey(name), val, clientv3.WithLease(l.id))).
		Commit()
	if err == nil && !resp.Succeeded {
		err = errors.New("the claim handed to this waiter changed before it was collected")
	}
	var kv *mvccpb.KeyValue
	if err == nil {
		kv, err = firstKV(resp, 2)
	}
	if err != nil {
		s.pool.unpin(l)
		return nil, time.Time{}, 0, nil, err
	}
	return l, sent, kv.ModRevision, successorOf(kvOrNil(resp.Responses[3].GetResponseRange().GetKvs())), nil
}

// successor is the oldest waiter behind a claim's holder, as last read:
// the release hands the claim to it if its queue key is unchanged.
type successor struct {
	key      string
	rev, mod int64 // its queue key's create and mod revisions
	lease    int64 // its queue key's lease: the claim goes on it
	val      string
}

// successorOf returns the successor that queue key kv names, or nil if kv
// is nil or does not take handoffs.
func successorOf(kv *mvccpb.KeyValue) *successor {
	if kv == nil || kv.Lease == 0 {
		return nil
	}
	v, ok := handedValue(kv.Value)
	if !ok {
		return nil
	}
	return &successor{key: string(kv.Key), rev: kv.CreateRevision, mod: kv.ModRevision, lease: kv.Lease, val: v}
}

// heldFair handles a fair attempt that did not acquire: it returns the
// HeldError that the failed transaction or read (resp) shows, after
// registering the place that the transaction put (qk, on lease l, for an
// attempt without a place e) or updating place e with what it saw; or an
// error matching backend.ErrLost if e's key is gone, or
// backend.ErrCorruptRecord for a value that does not parse.
func (s *Store) heldFair(ctx context.Context, name string, req backend.Request, ek entryKey, e *entry, l *lease, qk string, resp *clientv3.TxnResponse) error {
	he, obs, err := s.heldObservation(name, req, resp)
	if err != nil {
		return err
	}
	heldErr := fmt.Errorf("etcdstore: %w", he)
	s.fq.mu.Lock()
	defer s.fq.mu.Unlock()
	switch {
	case e == nil && qk != "": // enqueued now
		return s.enqueuedLocked(ctx, name, req, ek, l, qk, he, obs, resp, heldErr)
	case e != nil:
		return s.placeHeldLocked(name, req, e, he, obs, resp, heldErr)
	}
	return heldErr
}

// heldObservation reads, from a fair attempt's failed transaction or read
// (resp: the claim, the key ahead, ..., the guard last), who holds the
// lock and what the attempt waits for: the key ahead if any, else the
// guard of a claim deleted by hand, else the claim. It records a claim of
// another holder as the one this Store saw last (see ghost), and starts
// the grace of a claim seen last that is gone while a queue key ahead
// still waits.
func (s *Store) heldObservation(name string, req backend.Request, resp *clientv3.TxnResponse) (*backend.HeldError, observation, error) {
	ck, _, _ := s.Keys(name)
	claimKV := kvOrNil(resp.Responses[0].GetResponseRange().GetKvs())
	aheadKV := kvOrNil(resp.Responses[1].GetResponseRange().GetKvs())
	var guard *mvccpb.KeyValue
	he := &backend.HeldError{Key: name}
	if claimKV != nil {
		v, err := decodeValue(claimKV.Value)
		if err != nil {
			return nil, observation{}, s.corrupt(name, ck, err)
		}
		he.Holder, he.Token = v.holder, uint64(claimKV.ModRevision)
		if v.holder != req.Holder {
			s.mu.Lock()
			s.seen[name] = &seenClaim{mod: claimKV.ModRevision, lease: claimKV.Lease, holder: v.holder, ttl: v.ttl}
			s.maybePruneSeenLocked()
			s.mu.Unlock()
		}
	} else if guard = guardOf(resp); guard != nil {
		// Deleted by hand: held until its guard goes (see guarded).
		v, err := decodeValue(guard.Value)
		if err != nil {
			return nil, observation{}, s.corrupt(name, string(guard.Key), err)
		}
		_, _, poll := leaseTiming(v.ttl)
		he.Holder, he.Token, he.RetryAfter = v.holder, uint64(guard.ModRevision), poll
	} else {
		// The claim seen last is gone while a queue key ahead still
		// waits: its grace (see ghost) runs from now.
		s.mu.Lock()
		if sc := s.seen[name]; sc != nil && sc.gone.IsZero() {
			sc.gone = time.Now()
		}
		s.mu.Unlock()
	}
	obs := observation{target: ck, mod: modOf(resp.Responses[0].GetResponseRange().GetKvs()),
		rev: resp.Header.Revision, holder: he.Holder, token: he.Token}
	switch {
	case aheadKV != nil:
		obs.target, obs.mod = string(aheadKV.Key), aheadKV.ModRevision
	case guard != nil:
		obs.target, obs.mod = string(guard.Key), guard.ModRevision // its deletion frees the lock
	}
	return he, obs, nil
}

// enqueuedLocked registers the place that a failed fair acquire
// transaction (resp) put at qk on lease l, with what it saw (he, obs), and
// returns heldErr. The place becomes the holder's entry unless the Store
// is closed or the lease dead (the key then expires with the lease), or a
// sibling attempt of the same holder enqueued first or the last Watch
// ended meanwhile (the place is then doomed: the session removes it).
// s.fq.mu must be held.
func (s *Store) enqueuedLocked(ctx context.Context, name string, req backend.Request, ek entryKey, l *lease, qk string, he *backend.HeldError, obs observation, resp *clientv3.TxnResponse, heldErr error) error {
	claimKV := kvOrNil(resp.Responses[0].GetResponseRange().GetKvs())
	aheadKV := kvOrNil(resp.Responses[1].GetResponseRange().GetKvs())
	own := kvOrNil(resp.Responses[3].GetResponseRange().GetKvs())
	if own == nil {
		return fmt.Errorf("etcdstore: lock %q: unexpected transaction response: the queue key %q read after its put is missing", name, qk)
	}
	s.fq.setContended(name, req.TTL, time.Now())
	claimVal, _ := handedValue(own.Value)
	ne := &entry{name: name, holder: req.Holder, key: qk, rev: own.CreateRevision, claimVal: claimVal, lease: l, since: time.Now(), obs: obs}
	ne.aheadHolder, ne.aheadNonce = ownerOf(aheadKV)
	attached := s.pool.attachEntry(ne)
	if claimKV != nil && ne.aheadHolder != "" && he.Holder == ne.aheadHolder && claimNonce(claimKV) == ne.aheadNonce {
		ne.first = true // the key ahead is the holder's
	}
	switch {
	case s.fq.closed || !attached:
		s.pool.detachEntry(ne) // the key expires with the lease
	case s.fq.entries[ek] != nil || !s.hub.watching(name) && !req.Waiting:
		// A sibling attempt of the same holder enqueued first, or the
		// last Watch ended meanwhile: this place is not needed.
		ne.doomed = true
		s.fq.doomed[ne] = struct{}{}
		s.pool.wake()
	default:
		s.fq.entries[ek] = ne
		s.addOwnerLocked(ne, ctx)
		s.hub.specChanged(name)
	}
	return heldErr
}

// placeHeldLocked updates place e from a failed attempt's transaction or
// read (resp, which saw he and obs) and returns heldErr; or, if e's key
// is gone and no sibling attempt of the same holder acquired with it,
// removes e and returns an error matching backend.ErrLost. A newer
// observation replaces e's, which is then no longer known to be next in
// line. s.fq.mu must be held.
func (s *Store) placeHeldLocked(name string, req backend.Request, e *entry, he *backend.HeldError, obs observation, resp *clientv3.TxnResponse, heldErr error) error {
	if kvOrNil(resp.Responses[2].GetResponseRange().GetKvs()) == nil {
		if e.consumed || he.Holder == req.Holder {
			// A sibling attempt of the same holder acquired with this
			// place: the lock is held, by us.
			return heldErr
		}
		if e.lost == nil {
			e.lost = errors.New("its queue key was deleted (its lease expired, or an administrator removed it)")
		}
		why := e.lost
		s.removeEntryLocked(e)
		return fmt.Errorf("etcdstore: lock %q: %w: the waiter's place in the queue is gone: %w", name, backend.ErrLost, why)
	}
	if obs.rev > e.obs.rev {
		e.obs = obs
		e.aheadHolder, e.aheadNonce = ownerOf(kvOrNil(resp.Responses[1].GetResponseRange().GetKvs()))
		e.first = false
		if n := successorOf(kvOrNil(resp.Responses[3].GetResponseRange().GetKvs())); n != nil {
			e.next = n
		}
		s.hub.specChanged(name)
	}
	return heldErr
}

// ownerOf returns the holder and nonce of the queue key kv if it takes
// handoffs, and empty strings otherwise.
func ownerOf(kv *mvccpb.KeyValue) (holder, nonce string) {
	if kv == nil {
		return "", ""
	}
	v, ok := handedValue(kv.Value)
	if !ok {
		return "", ""
	}
	d, err := decodeValue([]byte(v))
	if err != nil {
		return "", ""
	}
	return d.holder, d.nonce
}

// claimChangedLocked applies a change of the claim that the follower's
// claim watch delivered (fair mode) to the Store's places in name's queue:
// a claim handed to a place is kept for its next attempt to collect (and
// its waiters are signalled); a claim that shows the owner of the key just
// ahead of a place makes that place next in line, and the Store reads the
// waiter behind it, for its release to hand the lock to, while the lock is
// still held. The locks lockSpec takes must be held.
func (s *Store) claimChangedLocked(f *follower, ev *clientv3.Event) {
	var owner value
	decoded := false
	kv := ev.Kv
	for k, e := range s.fq.entries {
		if k.name != f.name || e.lost != nil || e.consumed || e.doomed {
			continue
		}
		if ev.Type != mvccpb.PUT {
			e.first = false
			continue
		}
		if s.markHandedLocked(f, e, kv) {
			continue
		}
		e.first = false
		if e.aheadHolder == "" {
			continue
		}
		if !decoded {
			v, err := decodeValue(kv.Value)
			if err != nil {
				return
			}
			owner, decoded = v, true
		}
		if owner.holder != e.aheadHolder || owner.nonce != e.aheadNonce {
			continue
		}
		s.nextInLineLocked(f.name, e)
	}
}

// markHandedLocked records that the claim kv, as a watch delivered it, was
// handed to place e, and wakes e's waiter, if it was; it reports whether.
// The locks lockSpec takes must be held.
func (s *Store) markHandedLocked(f *follower, e *entry, kv *mvccpb.KeyValue) bool {
	if !handedTo(e, kv) {
		return false
	}
	e.handed = kv
	f.fresh = 0
	f.seen = max(f.seen, kv.ModRevision)
	f.signalLocked()
	return true
}

// nextInLineLocked marks e as next in line: its predecessor holds the
// lock (the claim showed its owner, or the releasing transaction that
// handed the lock to it touched its queue key). The follower then watches
// the claim too, and the Store reads the waiter behind e, for e's release
// to hand over to. The locks lockSpec takes must be held.
func (s *Store) nextInLineLocked(name string, e *entry) {
	if !e.first {
		e.first = true
		if f := s.hub.followers[name]; f != nil {
			f.poke()
		}
	}
	if e.next != nil || e.nextReading || s.fq.closed {
		return
	}
	e.nextReading = true
	_, _, qp := s.Keys(name)
	s.pool.goTask(func(ctx context.Context) {
		// Serializable: a stale answer names a waiter that may have left
		// since, and the release's conditions check that.
		r, err := s.client.Get(ctx, qp, append(clientv3.WithFirstCreate(), clientv3.WithMinCreateRev(e.rev+1), clientv3.WithSerializable())...)
		s.fq.mu.Lock()
		defer s.fq.mu.Unlock()
		e.nextReading = false
		if err == nil && e.next == nil {
			e.next = successorOf(kvOrNil(r.Kvs))
		}
	})
}

// claimNonce returns the nonce of the claim kv, or "" if it does not parse.
func claimNonce(kv *mvccpb.KeyValue) string {
	v, err := decodeValue(kv.Value)
	if err != nil {
		return ""
	}
	return v.nonce
}

// successorReadTimeout bounds Release's read of the waiter to hand over
// to: without an answer it releases plainly.
const successorReadTimeout = time.Second

// readSuccessor returns the oldest place behind c's holder (behind its own
// place, or any place if it did not queue), or nil if there is none or the
// read fails: Release hands the lock to it. It is read when Release needs
// it, because a holder learns of the waiters behind it only from a read or
// from its watch of the queue (see placeswatch.go): one that acquired a free
// lock and whose watch shows none (or was never opened) knows none, and one
// whose read (at its acquisition, or when it became next in line) found
// nobody knows none that queued later. The read is serializable: no round of
// consensus, so it costs etcd far less than the write that the waiter would
// otherwise send after a plain release. Release skips it for a claim taken
// without a place (the lock was free) and held for less than its acquire's
// round trip: a place written meanwhile is unlikely (a write takes about
// that long), and a tight uncontended loop would pay the read on every
// cycle; a waiter it misses acquires after the plain release, as without the
// read. A stale answer is safe: the handoff's condition (the place's key
// unchanged) fails for a place that left since, and a place missing from a
// member's older state is younger than every place in it, so arrival order
// is kept.
func (s *Store) readSuccessor(ctx context.Context, c *claim) *successor {
	_, _, qp := s.Keys(c.name)
	opts := append(clientv3.WithFirstCreate(), clientv3.WithSerializable())
	if c.entry != "" {
		opts = append(opts, clientv3.WithMinCreateRev(c.entryRev+1))
	}
	rctx, cancel := context.WithTimeout(ctx, successorReadTimeout)
	defer cancel()
	r, err := s.client.Get(rctx, qp, opts...)
	if err != nil {
		s.log.Debug("etcdstore: reading the next waiter failed; releasing without a handoff", "lock", c.name, "err", err)
		return nil
	}
	return successorOf(kvOrNil(r.Kvs))
}
