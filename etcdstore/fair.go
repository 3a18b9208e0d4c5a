package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-go/baton"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// entryKey names a place in a queue: one per lock name and holder identity
// in a Store.
type entryKey struct{ name, holder string }

// entry is this Store's place in the fair queue of a lock: a key under
// <prefix><name>/queue/ attached to the Store's lease, ordered by its
// create revision. Fields are guarded by Store.mu.
type entry struct {
	name, holder string
	key          string // etcd key
	rev          int64  // its create revision: the place in the queue
	lease        *lease
	since        time.Time   // when it was created (verification judges older entries only)
	obs          observation // what its last attempt saw: the key just ahead of it, or the claim
	lost         error       // the key is gone (lease ended, deleted); reported once, then dropped
	consumed     bool        // an attempt acquired the lock with it
	doomed       bool        // abandoned: the session loop deletes the key
	deleting     bool
	retryAt      time.Time
	owners       []owner // contexts of the attempts that use it
	pinned       bool    // an attempt used it with a context that never ends
}

// owner is the context of an attempt that uses an entry: when every
// owner's context has ended, no Lock waits with the entry any more.
type owner struct {
	done <-chan struct{}
	stop func() bool
}

// headEntryLocked returns the Store's first live queue entry for name, or
// nil. s.mu must be held.
func (s *Store) headEntryLocked(name string) *entry {
	var head *entry
	for k, e := range s.entries {
		if k.name == name && e.lost == nil && (head == nil || e.rev < head.rev) {
			head = e
		}
	}
	return head
}

// addOwnerLocked ties e to ctx: e is dropped once the contexts of all the
// attempts that used it have ended. s.mu must be held.
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
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, o := range e.owners {
		if o.done == done {
			e.owners = append(e.owners[:i], e.owners[i+1:]...)
			break
		}
	}
	if len(e.owners) == 0 && !e.pinned && s.entries[entryKey{e.name, e.holder}] == e {
		s.removeEntryLocked(e)
	}
}

// removeEntryLocked takes e out of the Store's books; a live key of an entry
// that did not acquire is deleted by the session loop. s.mu must be held.
func (s *Store) removeEntryLocked(e *entry) {
	if k := (entryKey{e.name, e.holder}); s.entries[k] == e {
		delete(s.entries, k)
	}
	for _, o := range e.owners {
		o.stop()
	}
	e.owners = nil
	if e.lost == nil && !e.consumed && !e.doomed {
		e.doomed = true // stays on its lease until deleted
		s.pokeLocked()
	} else if !e.doomed {
		delete(e.lease.entries, e)
	}
	s.specChangedLocked(e.name)
}

// dropEntriesLocked removes every entry of name (its last Watch ended).
// s.mu must be held.
func (s *Store) dropEntriesLocked(name string) {
	for k, e := range s.entries {
		if k.name == name {
			s.removeEntryLocked(e)
		}
	}
}

// entryChangedLocked wakes the waiters of e's lock after e was lost, so that
// their next attempt reports it. s.mu must be held.
func (s *Store) entryChangedLocked(e *entry) {
	if f := s.followers[e.name]; f != nil {
		f.gen++
		f.fresh = 0
		f.signalLocked()
		f.poke()
	}
}

// dropEntry deletes an abandoned entry's key if it is still that entry's.
func (s *Store) dropEntry(ctx context.Context, e *entry) {
	_, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(e.key), "=", e.rev)).
		Then(clientv3.OpDelete(e.key)).
		Commit()
	s.mu.Lock()
	defer s.mu.Unlock()
	e.deleting = false
	if err != nil {
		e.retryAt = time.Now().Add(maxBackoff)
		if s.ctx.Err() == nil {
			s.log.Warn("etcdstore: cannot remove an abandoned queue entry; retrying", "lock", e.name, "key", e.key, "err", err)
		}
		return
	}
	delete(e.lease.entries, e)
}

// tryAcquireFair is TryAcquire in fair mode; f is the name's follower if a
// Watch is open for it in this Store (a Lock is waiting), else nil. See the
// package documentation, "Fair mode".
//
// Without a place in the queue, one transaction acquires if the claim is
// free and the queue is empty; otherwise, if a Lock waits (f != nil), the
// same transaction enqueues: it puts a queue key with the Store's lease
// and reads the key just ahead of it. With a place, one transaction
// acquires if the claim is free, the place's key still exists, and no
// queue key is older; the place's key stays as the holder's. A place whose
// key is gone never acquires: the attempt fails with an error matching
// baton.ErrLost.
func (s *Store) tryAcquireFair(ctx context.Context, name string, req baton.Request, f *follower) (baton.Grant, error) {
	ek := entryKey{name, req.Holder}
	s.mu.Lock()
	e := s.entries[ek]
	if e != nil && e.lost != nil {
		why := e.lost
		s.removeEntryLocked(e)
		s.mu.Unlock()
		return baton.Grant{}, fmt.Errorf("etcdstore: lock %q: %w: the waiter's place in the queue is gone: %w", name, baton.ErrLost, why)
	}
	queue := f != nil
	if e != nil {
		s.addOwnerLocked(e, ctx)
	}
	s.mu.Unlock()
	if e != nil {
		if err := s.cachedHeld(f, name); err != nil {
			return baton.Grant{}, err
		}
	}
	ck, lk, qp := s.Keys(name)
	if e == nil && !queue {
		// An attempt that may not queue (TryLock, or Lock's first
		// attempt) acquires only if the lock is free and nobody waits. If
		// the last look found waiters, find out with a read first: under
		// contention it saves a write, which costs etcd a disk sync.
		s.mu.Lock()
		busy := s.busy[name]
		s.mu.Unlock()
		if busy {
			resp, err := s.client.Txn(ctx).Then(clientv3.OpGet(ck), clientv3.OpGet(qp, clientv3.WithLastCreate()...)).Commit()
			if err != nil {
				return baton.Grant{}, s.wrap(name, "acquire", err)
			}
			claimKV := kvOrNil(resp.Responses[0].GetResponseRange().GetKvs())
			tailKV := kvOrNil(resp.Responses[1].GetResponseRange().GetKvs())
			if claimKV != nil || tailKV != nil {
				he := &baton.HeldError{Key: name}
				if claimKV != nil {
					v, err := decodeValue(claimKV.Value)
					if err != nil {
						return baton.Grant{}, s.corrupt(name, ck, err)
					}
					he.Holder, he.Token = v.holder, uint64(claimKV.CreateRevision)
				}
				guess := observation{target: ck, create: createOf(resp.Responses[0].GetResponseRange().GetKvs()),
					rev: resp.Header.Revision, holder: he.Holder, token: he.Token}
				if tailKV != nil {
					guess.target, guess.create = string(tailKV.Key), tailKV.CreateRevision
				}
				s.mu.Lock()
				s.tail[name] = tailGuess{obs: guess, at: time.Now()}
				s.mu.Unlock()
				return baton.Grant{}, fmt.Errorf("etcdstore: %w", he)
			}
		}
	}
	for attempt := 0; ; attempt++ {
		l, sent, err := s.leaseFor(ctx, req.TTL)
		if err != nil {
			return baton.Grant{}, s.wrap(name, "acquire", err)
		}
		val := value{holder: req.Holder, nonce: req.Nonce, ttl: req.TTL, at: time.Now()}.encode()
		acquire := []clientv3.Op{clientv3.OpPut(ck, val, clientv3.WithLease(l.id)), clientv3.OpPut(lk, val), clientv3.OpGet(ck)}
		const getIdx = 2 // the claim read in the success branch
		var (
			resp *clientv3.TxnResponse
			qk   string // the queue key this attempt may put
		)
		if e == nil {
			// Acquire if the lock is free and nobody waits; otherwise, if a
			// Lock waits through this Store, take a place at the end of the
			// queue and read the key just ahead of it.
			els := []clientv3.Op{clientv3.OpGet(ck), clientv3.OpGet(qp, clientv3.WithLastCreate()...)}
			if queue {
				s.mu.Lock()
				s.seq++
				qk = fmt.Sprintf("%s%016x-%d", qp, int64(l.id), s.seq)
				s.mu.Unlock()
				els = append(els, clientv3.OpPut(qk, val, clientv3.WithLease(l.id)), clientv3.OpGet(qk))
			}
			resp, err = s.client.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(ck), "=", 0),
					clientv3.Compare(clientv3.CreateRevision(qp), "=", 0).WithPrefix()).
				Then(acquire...).
				Else(els...).
				Commit()
		} else {
			resp, err = s.client.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(ck), "=", 0),
					clientv3.Compare(clientv3.CreateRevision(e.key), "=", e.rev),
					clientv3.Compare(clientv3.CreateRevision(qp), ">", e.rev-1).WithPrefix()).
				Then(acquire...).
				Else(clientv3.OpGet(ck),
					clientv3.OpGet(qp, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(e.rev-1))...),
					clientv3.OpGet(e.key)).
				Commit()
		}
		s.unpin(l)
		if err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
				s.leaseGone(l, fmt.Errorf("etcd reports lease %x not found", int64(l.id)))
				s.mu.Lock()
				e = s.entries[ek]
				lostNow := e != nil && e.lost != nil
				s.mu.Unlock()
				if !lostNow {
					continue
				}
				return baton.Grant{}, fmt.Errorf("etcdstore: lock %q: %w: the waiter's place in the queue is gone: its lease ended", name, baton.ErrLost)
			}
			return baton.Grant{}, s.wrap(name, "acquire", err)
		}
		s.mu.Lock()
		s.busy[name] = !resp.Succeeded
		delete(s.tail, name)
		s.mu.Unlock()
		if resp.Succeeded {
			kv, err := firstKV(resp, getIdx)
			if err != nil {
				return baton.Grant{}, s.wrap(name, "acquire", err)
			}
			held := "" // the holder's queue key: none if it did not queue
			if e != nil {
				// The place stays in the queue, as the holder's, until the
				// claim ends: the waiter behind it waits for that key alone.
				s.mu.Lock()
				e.consumed = true
				s.removeEntryLocked(e)
				s.mu.Unlock()
				held = e.key
			}
			return s.granted(name, req, l, sent, kv.CreateRevision, held)
		}
		return baton.Grant{}, s.heldFair(ctx, name, req, ek, e, l, qk, resp)
	}
}

// heldFair handles a fair attempt that did not acquire.
func (s *Store) heldFair(ctx context.Context, name string, req baton.Request, ek entryKey, e *entry, l *lease, qk string, resp *clientv3.TxnResponse) error {
	ck, _, _ := s.Keys(name)
	claimKV := kvOrNil(resp.Responses[0].GetResponseRange().GetKvs())
	aheadKV := kvOrNil(resp.Responses[1].GetResponseRange().GetKvs())
	he := &baton.HeldError{Key: name}
	if claimKV != nil {
		v, err := decodeValue(claimKV.Value)
		if err != nil {
			return s.corrupt(name, ck, err)
		}
		he.Holder, he.Token = v.holder, uint64(claimKV.CreateRevision)
	}
	obs := observation{target: ck, create: createOf(resp.Responses[0].GetResponseRange().GetKvs()),
		rev: resp.Header.Revision, holder: he.Holder, token: he.Token}
	if aheadKV != nil {
		obs.target, obs.create = string(aheadKV.Key), aheadKV.CreateRevision
	}
	heldErr := fmt.Errorf("etcdstore: %w", he)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case e == nil && qk != "": // enqueued now
		own := kvOrNil(resp.Responses[3].GetResponseRange().GetKvs())
		if own == nil {
			return fmt.Errorf("etcdstore: lock %q: unexpected transaction response: the queue key %q read after its put is missing", name, qk)
		}
		ne := &entry{name: name, holder: req.Holder, key: qk, rev: own.CreateRevision, lease: l, since: time.Now(), obs: obs}
		l.entries[ne] = struct{}{}
		switch {
		case s.closed || l.dead != nil:
			delete(l.entries, ne) // the key expires with the lease
		case s.entries[ek] != nil || s.followers[name] == nil:
			// A sibling attempt of the same holder enqueued first, or the
			// last Watch ended meanwhile: this place is not needed.
			ne.doomed = true
			s.pokeLocked()
		default:
			s.entries[ek] = ne
			s.addOwnerLocked(ne, ctx)
			s.specChangedLocked(name)
		}
		return heldErr
	case e != nil:
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
			return fmt.Errorf("etcdstore: lock %q: %w: the waiter's place in the queue is gone: %w", name, baton.ErrLost, why)
		}
		if obs.rev > e.obs.rev {
			e.obs = obs
			s.specChangedLocked(name)
		}
	}
	return heldErr
}
