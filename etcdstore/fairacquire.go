package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-go/baton/backend"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fairClaimIdx is the index, in the success branch of a fair acquire
// transaction, of the read of the claim just written; a place's attempt
// reads the place behind it right after (fairClaimIdx+1).
const fairClaimIdx = 3

// tryAcquireFair is TryAcquire in fair mode; f is the name's follower if a
// Watch is open for it in this Store, else nil. See the package
// documentation, "Fair mode".
//
// Without a place in the queue, one transaction acquires if the claim is
// free and the queue is empty; otherwise, if the attempt waits
// (req.Waiting, or a Watch is open), the same transaction enqueues: it puts
// a queue key with the Store's lease and reads the key just ahead of it.
// With a place, the attempt first reads: if the releasing holder handed the
// lock to this place, the claim is collected without a write (collect);
// if the claim is free and no queue key is older, one transaction
// acquires on the same conditions. (A waiter whose place is first, woken
// by a change of the claim, skips the read.) The place's key stays as the
// holder's. A place whose key is gone never acquires: the attempt fails
// with an error matching backend.ErrLost.
func (s *Store) tryAcquireFair(ctx context.Context, name string, req backend.Request, f *follower) (backend.Grant, error) {
	ek := entryKey{name, req.Holder}
	s.fq.mu.Lock()
	e := s.fq.entries[ek]
	if e != nil && e.lost != nil {
		why := e.lost
		s.removeEntryLocked(e)
		s.fq.mu.Unlock()
		return backend.Grant{}, fmt.Errorf("etcdstore: lock %q: %w: the waiter's place in the queue is gone: %w", name, backend.ErrLost, why)
	}
	queue := f != nil || req.Waiting
	readFirst := false
	var (
		handed *mvccpb.KeyValue
		next   *successor
	)
	if e != nil {
		s.addOwnerLocked(e, ctx)
		if e.handed != nil {
			// The follower saw the lock handed to this place: collect
			// without a read (the release reads the waiter behind it if
			// it is not known by then).
			handed, next = e.handed, e.next
		}
		ck, _, _ := s.Keys(name)
		// Woken by a change of the claim itself that did not hand it to
		// this place (the waiter is first, and the release found no
		// waiter or read before this place queued), the claim is likely
		// free: write at once.
		readFirst = e.obs.target != ck || f == nil || s.hub.seen(f) <= e.obs.rev
	}
	s.fq.mu.Unlock()
	if handed != nil {
		return s.collect(ctx, name, req, ek, e, handed, next)
	}
	// Without a connection, ask etcd rather than the watch, which the
	// etcd client resumes silently (see TryAcquire); the place stays.
	if e != nil && s.connected() {
		if err := s.cachedHeld(f, name); err != nil {
			return backend.Grant{}, err
		}
	}
	if e != nil && readFirst {
		if g, done, err := s.readPlace(ctx, name, req, ek, e, f); done {
			return g, err
		}
		// Free, and this place is first: acquire.
	}
	if e == nil && !queue {
		if err := s.busyHeld(ctx, name); err != nil {
			return backend.Grant{}, err
		}
	}
	if err := s.siblingHolds(name, req); err != nil {
		return backend.Grant{}, err
	}
	return s.acquireFair(ctx, name, req, ek, e, queue)
}

// readPlace is the read with which an attempt that has a place (e) begins.
// A read costs etcd no disk sync; most attempts with a place find the lock
// handed to them or still held. With the watch up, the read is
// serializable (served by the member without a round of consensus) if that
// member has caught up with the change the watch reported: a claim handed
// to this place stays this place's until its Store deletes it or its lease
// ends, so finding it in a member's state is enough to collect it (see
// collect), and the other answers are checked by a conditional write or by
// the watch.
//
// done reports that the attempt ends with g and err: the lock was handed
// to the place and is collected, it is held (or the place is gone), or the
// read failed. Otherwise the lock is free and the place first in line, and
// the attempt goes on to acquire.
func (s *Store) readPlace(ctx context.Context, name string, req backend.Request, ek entryKey, e *entry, f *follower) (g backend.Grant, done bool, err error) {
	ck, _, qp := s.Keys(name)
	gk := s.guardKey(name)
	rctx, cancel := callContext(ctx) // both reads: the place stays with ctx
	defer cancel()
	read := func(serializable bool) (*clientv3.TxnResponse, error) {
		var o []clientv3.OpOption
		if serializable {
			o = append(o, clientv3.WithSerializable())
		}
		return s.client.Txn(rctx).Then(
			clientv3.OpGet(ck, o...),
			clientv3.OpGet(qp, append(clientv3.WithLastCreate(), append(o, clientv3.WithMaxCreateRev(e.rev-1))...)...),
			clientv3.OpGet(e.key, o...),
			clientv3.OpGet(qp, append(clientv3.WithFirstCreate(), append(o, clientv3.WithMinCreateRev(e.rev+1))...)...),
			clientv3.OpGet(gk, o...)).Commit() // the guard last: see guardOf
	}
	// The member must also have this place's key and the last
	// observation, or it would report the place lost.
	s.lockSpec()
	atLeast, serializable := e.obs.rev, f != nil
	if f != nil {
		atLeast, serializable = max(atLeast, f.seen), !f.broken
	}
	s.unlockSpec()
	var resp *clientv3.TxnResponse
	if serializable {
		resp, err = read(true)
	}
	if !serializable || err == nil && resp.Header.Revision < atLeast {
		resp, err = read(false)
	}
	if err != nil {
		return backend.Grant{}, true, s.wrap(name, "acquire", err)
	}
	claimKV := kvOrNil(resp.Responses[0].GetResponseRange().GetKvs())
	aheadKV := kvOrNil(resp.Responses[1].GetResponseRange().GetKvs())
	ownKV := kvOrNil(resp.Responses[2].GetResponseRange().GetKvs())
	switch {
	case handedTo(e, claimKV):
		g, err = s.collect(ctx, name, req, ek, e, claimKV, s.nextOf(e, resp.Responses[3]))
		return g, true, err
	case claimKV != nil || aheadKV != nil || ownKV == nil:
		s.fq.mu.Lock()
		s.fq.busy[name] = true
		delete(s.fq.tail, name)
		s.fq.mu.Unlock()
		return backend.Grant{}, true, s.heldFair(ctx, name, req, ek, e, nil, "", resp)
	}
	return backend.Grant{}, false, nil
}

// busyHeld is the look before the write of an attempt that may not queue
// (TryLock): such an attempt acquires only if the lock is free and nobody
// waits. If the Store's last look found waiters, busyHeld reads first
// (under contention that saves a write, which costs etcd a disk sync) and
// returns a HeldError if the claim or a queue key is there, remembering
// the queue's tail as the guess for the Store's next waiter. It returns
// nil when the attempt should go on to its transaction.
func (s *Store) busyHeld(ctx context.Context, name string) error {
	s.fq.mu.Lock()
	busy := s.fq.busy[name]
	s.fq.mu.Unlock()
	if !busy {
		return nil
	}
	ck, _, qp := s.Keys(name)
	ctx, cancel := callContext(ctx)
	defer cancel()
	resp, err := s.client.Txn(ctx).Then(clientv3.OpGet(ck), clientv3.OpGet(qp, clientv3.WithLastCreate()...)).Commit()
	if err != nil {
		return s.wrap(name, "acquire", err)
	}
	claimKV := kvOrNil(resp.Responses[0].GetResponseRange().GetKvs())
	tailKV := kvOrNil(resp.Responses[1].GetResponseRange().GetKvs())
	if claimKV == nil && tailKV == nil {
		return nil
	}
	he := &backend.HeldError{Key: name}
	if claimKV != nil {
		v, err := decodeValue(claimKV.Value)
		if err != nil {
			return s.corrupt(name, ck, err)
		}
		he.Holder, he.Token = v.holder, uint64(claimKV.ModRevision)
	}
	guess := observation{target: ck, mod: modOf(resp.Responses[0].GetResponseRange().GetKvs()),
		rev: resp.Header.Revision, holder: he.Holder, token: he.Token}
	if tailKV != nil {
		guess.target, guess.mod = string(tailKV.Key), tailKV.ModRevision
	}
	s.fq.mu.Lock()
	s.fq.tail[name] = tailGuess{obs: guess, at: time.Now()}
	s.fq.mu.Unlock()
	return fmt.Errorf("etcdstore: %w", he)
}

// acquireFair sends the acquiring transaction (fairTxn) for an attempt
// with place e (nil: none; queue: take one if the lock is busy) and acts
// on its answer: a grant, the lock handed to the place meanwhile
// (collected), or HeldError. It sends the transaction again only when its
// first attempt found the Store's lease gone (with a new lease, unless
// that took the place with it: then the attempt fails with an error
// matching backend.ErrLost), and after a claim that vanished without a
// release turned out to have been released (see ghost).
func (s *Store) acquireFair(ctx context.Context, name string, req backend.Request, ek entryKey, e *entry, queue bool) (backend.Grant, error) {
	for attempt := 0; ; attempt++ {
		// Not bounded by callContext: the grant has its own timeout, and a
		// keepalive wait ends when an answer shows keepalives too slow for
		// the TTL (tooSlow), which a slow path may take longer than a
		// request's bound to show; plain mode's acquire waits the same.
		l, sent, err := s.pool.acquire(ctx, req.TTL)
		if err != nil {
			return backend.Grant{}, s.wrap(name, "acquire", err)
		}
		resp, qk, sc, val, err := s.fairTxn(ctx, name, req, e, l, queue)
		s.pool.unpin(l)
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The transaction may still be applied: its claim, or its
			// place, would be nobody's (see orphan.go).
			s.pool.abandon(l, name, []string{val})
			s.pool.abandonPlace(l, name, qk)
		}
		if err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
				s.pool.gone(l, fmt.Errorf("etcd reports lease %x not found", int64(l.id)))
				s.fq.mu.Lock()
				e = s.fq.entries[ek]
				lostNow := e != nil && e.lost != nil
				s.fq.mu.Unlock()
				if !lostNow {
					continue
				}
				return backend.Grant{}, fmt.Errorf("etcdstore: lock %q: %w: the waiter's place in the queue is gone: its lease ended", name, backend.ErrLost)
			}
			return backend.Grant{}, s.wrap(name, "acquire", err)
		}
		s.fq.mu.Lock()
		s.fq.setBusy(name, !resp.Succeeded)
		delete(s.fq.tail, name)
		s.fq.mu.Unlock()
		if resp.Succeeded {
			s.mu.Lock()
			delete(s.seen, name)
			s.mu.Unlock()
		}
		if !resp.Succeeded && sc != nil && ghostFair(e, resp) {
			// Free but for the release marker: the claim seen last
			// vanished without a release.
			if err := s.ghostQueued(ctx, name, req, ek, e, l, qk, sc, resp); err != nil {
				return backend.Grant{}, err
			}
			continue
		}
		if resp.Succeeded {
			return s.grantedFair(name, req, e, l, sent, resp)
		}
		if e != nil {
			// The lock may have been handed to this place meanwhile.
			if claimKV := kvOrNil(resp.Responses[0].GetResponseRange().GetKvs()); handedTo(e, claimKV) {
				return s.collect(ctx, name, req, ek, e, claimKV, s.nextOf(e, resp.Responses[3]))
			}
		}
		return backend.Grant{}, s.heldFair(ctx, name, req, ek, e, l, qk, resp)
	}
}

// fairTxn sends one acquiring transaction on lease l, and returns the
// claim value it sent (see orphan.go) with its answer. It succeeds only if
// the claim and its guard are absent, the claim last seen by this Store
// (sc, returned) was released since, and either nobody waits (e nil) or
// place e is still there and first in line; the success branch writes
// the guard, the claim and the /last record and reads the claim back
// (fairClaimIdx) and, for a place, the place behind it. On failure it
// reads the claim, the key ahead (or the queue's tail), and the guard
// last (see guardOf); without a place, if queue is set, it also puts a
// new queue key (qk, returned) on l and reads it.
func (s *Store) fairTxn(ctx context.Context, name string, req backend.Request, e *entry, l *lease, queue bool) (resp *clientv3.TxnResponse, qk string, sc *seenClaim, val string, err error) {
	ck, lk, qp := s.Keys(name)
	gk := s.guardKey(name)
	ctx, cancel := callContext(ctx)
	defer cancel()
	val = value{holder: req.Holder, nonce: req.Nonce, ttl: req.TTL, at: time.Now()}.encode()
	acquire := []clientv3.Op{clientv3.OpPut(gk, val, clientv3.WithLease(l.id)),
		clientv3.OpPut(ck, val, clientv3.WithLease(l.id)), clientv3.OpPut(lk, val), clientv3.OpGet(ck)}
	free := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(ck), "=", 0), clientv3.Compare(clientv3.CreateRevision(gk), "=", 0)}
	// Free only if the claim last seen was released since (see ghost).
	var released []clientv3.Cmp
	s.mu.Lock()
	sc = s.seen[name]
	s.mu.Unlock()
	if sc != nil {
		released = append(released, clientv3.Compare(clientv3.ModRevision(s.releasedKey(name)), ">", sc.mod))
	}
	if e == nil {
		// Acquire if the lock is free and nobody waits; otherwise, if the
		// attempt waits, take a place at the end of the queue and read
		// the key just ahead of it.
		els := []clientv3.Op{clientv3.OpGet(ck), clientv3.OpGet(qp, clientv3.WithLastCreate()...)}
		if queue {
			s.fq.mu.Lock()
			s.fq.seq++
			qk = fmt.Sprintf("%s%016x-%d", qp, int64(l.id), s.fq.seq)
			s.fq.mu.Unlock()
			els = append(els, clientv3.OpPut(qk, val+handoffMark, clientv3.WithLease(l.id)), clientv3.OpGet(qk))
		}
		resp, err = s.client.Txn(ctx).
			If(append(append(free, clientv3.Compare(clientv3.CreateRevision(qp), "=", 0).WithPrefix()), released...)...).
			Then(acquire...).
			Else(append(els, clientv3.OpGet(gk))...). // the guard last: see guardOf
			Commit()
		return resp, qk, sc, val, err
	}
	// The waiter behind this place, for the release to hand over to.
	next := clientv3.OpGet(qp, append(clientv3.WithFirstCreate(), clientv3.WithMinCreateRev(e.rev+1))...)
	resp, err = s.client.Txn(ctx).
		If(append(append(free, clientv3.Compare(clientv3.CreateRevision(e.key), "=", e.rev),
			clientv3.Compare(clientv3.CreateRevision(qp), ">", e.rev-1).WithPrefix()), released...)...).
		Then(append(acquire, next)...).
		Else(clientv3.OpGet(ck),
			clientv3.OpGet(qp, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(e.rev-1))...),
			clientv3.OpGet(e.key), next, clientv3.OpGet(gk)).
		Commit()
	return resp, qk, sc, val, err
}

// ghostQueued handles a fair acquire that failed only on the release
// marker: the claim seen last (sc) vanished without a release. A new
// place the transaction put (qk) is registered first; then ghost decides.
// It returns nil if the attempt should send its transaction again, and
// otherwise the attempt's error: ghost's, or, if the attempt queued
// meanwhile, a HeldError that asks for a retry at once (the next attempt
// acquires with the place).
func (s *Store) ghostQueued(ctx context.Context, name string, req backend.Request, ek entryKey, e *entry, l *lease, qk string, sc *seenClaim, resp *clientv3.TxnResponse) error {
	var herr error
	if e == nil && qk != "" {
		herr = s.heldFair(ctx, name, req, ek, e, l, qk, resp) // registers the new place
	}
	if err := s.ghost(ctx, nil, name, sc, resp.Header.Revision); err != nil {
		return err
	}
	if herr != nil {
		var he *backend.HeldError
		if errors.As(herr, &he) {
			he.RetryAfter = time.Millisecond
		}
		return herr
	}
	return nil
}

// grantedFair records the claim that a successful fair acquire
// transaction (resp) wrote on lease l. With a place (e), the place is
// consumed: its key stays in the queue, as the holder's, until the claim
// ends (the waiter behind it waits for that key alone), and the place
// behind it, read by the transaction, is the one a release hands over to.
func (s *Store) grantedFair(name string, req backend.Request, e *entry, l *lease, sent time.Time, resp *clientv3.TxnResponse) (backend.Grant, error) {
	kv, err := firstKV(resp, fairClaimIdx)
	if err != nil {
		return backend.Grant{}, s.wrap(name, "acquire", err)
	}
	var next *successor
	if e != nil {
		s.fq.mu.Lock()
		e.consumed = true
		s.removeEntryLocked(e)
		s.fq.mu.Unlock()
		next = successorOf(kvOrNil(resp.Responses[fairClaimIdx+1].GetResponseRange().GetKvs()))
	}
	return s.granted(name, req, l, sent, kv.ModRevision, e, next)
}
