package etcdstore

import (
	"context"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// An acquiring transaction whose answer never came (a timeout during a
// raft leader change, say) may still have been applied. Its claim is on
// this Store's lease, which the Store keeps alive while it uses it (a
// poller's TryAcquire calls use it every few seconds), so such an orphan
// would never expire, and nobody would hold it: the lock would be stuck.
// The safety suite's leader_paused_long row saw exactly that, under load.
//
// So a TryAcquire call may take over a claim that one of its own earlier
// transactions wrote (the same value, byte for byte: ownOrphan), but once
// it returns an error, every value it sent without an answer becomes an
// orphan of the lease (lease.orphans): no later call may take it (its
// value differs, as it carries its own send time), and every verification
// of the lease (which also runs for a lease with orphans alone) deletes a
// claim key attached to the lease whose value is an orphan, as a release
// would (claim and guard, conditionally on its mod revision, putting the
// release marker). An orphan is forgotten once deleted, or with its lease.
//
// In fair mode an unanswered transaction may also have put a place in the
// queue (its key is chosen before it is sent): nobody would wait in it,
// the waiters behind it would wait for it as long as the lease lives, and
// a release would hand it the lock (the claim then carries the orphan's
// value, so it is deleted as above). Such keys are orphan places of the
// lease (lease.orphanPlaces); the verification deletes each one still
// attached to the lease, which wakes the waiter behind it.
//
// Orphans live on the lease, so leasePool.mu guards them; the Store reaches
// them only through the pool's methods below, which take it.

// abandonLocked records the values of a TryAcquire's transactions that
// went unanswered on lease l (sent, per lock name) as orphans of l.
// leasePool.mu must be held.
func (l *lease) abandonLocked(name string, sent []string) {
	if len(sent) == 0 || l.dead != nil {
		return
	}
	if l.orphans == nil {
		l.orphans = make(map[string][]string)
	}
	l.orphans[name] = append(l.orphans[name], sent...)
}

// abandon is abandonLocked under p.mu.
func (p *leasePool) abandon(l *lease, name string, sent []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l.abandonLocked(name, sent)
}

// abandonPlace records qk, a queue key that a fair transaction on lease
// l for lock name may have put without an answer, as an orphan place of l.
// An empty qk (the transaction put none) is ignored.
func (p *leasePool) abandonPlace(l *lease, name, qk string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if qk == "" || l.dead != nil {
		return
	}
	if l.orphanPlaces == nil {
		l.orphanPlaces = make(map[string][]string)
	}
	l.orphanPlaces[name] = append(l.orphanPlaces[name], qk)
}

// orphanNamesLocked returns the lock names with orphans or orphan places
// on l. leasePool.mu must be held.
func (l *lease) orphanNamesLocked() []string {
	names := make([]string, 0, len(l.orphans)+len(l.orphanPlaces))
	for name := range l.orphans {
		names = append(names, name)
	}
	for name := range l.orphanPlaces {
		if _, ok := l.orphans[name]; !ok {
			names = append(names, name)
		}
	}
	return names
}

// orphanNames returns, under p.mu, the lock names with orphans on l.
func (p *leasePool) orphanNames(l *lease) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return l.orphanNamesLocked()
}

// isOrphan reports, under p.mu, whether val is an orphan of l on name.
func (p *leasePool) isOrphan(l *lease, name, val string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(l.orphans[name], val)
}

// forgetOrphan forgets, under p.mu, the orphan val of l on name (its claim
// was deleted).
func (p *leasePool) forgetOrphan(l *lease, name, val string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	forget(l.orphans, name, val)
}

// forget removes v from m[name], and name from m once nothing is left.
func forget(m map[string][]string, name, v string) {
	m[name] = slices.DeleteFunc(m[name], func(x string) bool { return x == v })
	if len(m[name]) == 0 {
		delete(m, name)
	}
}

// orphanPlaces returns, under p.mu, the orphan places of l on name.
func (p *leasePool) orphanPlaces(l *lease, name string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(l.orphanPlaces[name])
}

// forgetPlace forgets, under p.mu, the orphan place qk of l on name (its
// key was deleted).
func (p *leasePool) forgetPlace(l *lease, name, qk string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	forget(l.orphanPlaces, name, qk)
}

// clearOrphans deletes, for each lock name with orphans on l, the claim
// if it is attached to lease id (attached: a verification's answer) and
// its value is an orphan of l, and each orphan place of l that is
// attached; it forgets each orphan it deleted. An orphan not attached is
// kept: its transaction may not have been applied yet. Failures are left
// to the next verification.
func (s *Store) clearOrphans(ctx context.Context, l *lease, id clientv3.LeaseID, attached map[string]bool) {
	for _, name := range s.pool.orphanNames(l) {
		if ck, _, _ := s.Keys(name); attached[ck] && s.clearOrphanClaim(ctx, l, id, name) != nil {
			return
		}
		for _, qk := range s.pool.orphanPlaces(l, name) {
			if attached[qk] && s.clearOrphanPlace(ctx, l, id, name, qk) != nil {
				return
			}
		}
	}
}

// clearOrphanClaim deletes lock name's claim if it is on lease id and its
// value is an orphan of l.
func (s *Store) clearOrphanClaim(ctx context.Context, l *lease, id clientv3.LeaseID, name string) error {
	ck, _, _ := s.Keys(name)
	r, err := s.client.Get(ctx, ck)
	if err != nil {
		return err
	}
	kv := kvOrNil(r.Kvs)
	if kv == nil || kv.Lease != int64(id) || !s.pool.isOrphan(l, name, string(kv.Value)) {
		return nil
	}
	ours, _, err := s.deleteClaim(ctx, &claim{name: name, token: kv.ModRevision}, nil)
	if err != nil {
		return err
	}
	if ours {
		s.log.Warn("etcdstore: deleted a claim that an unanswered acquire left on this Store's lease", "lock", name, "token", kv.ModRevision)
	}
	s.pool.forgetOrphan(l, name, string(kv.Value))
	return nil
}

// clearOrphanPlace deletes the orphan place qk of l on lock name if its
// key is still on lease id (nobody else writes a key of that name), and
// forgets it: it was applied, so it is deleted now or was already.
func (s *Store) clearOrphanPlace(ctx context.Context, l *lease, id clientv3.LeaseID, name, qk string) error {
	deleted, err := s.deleteOnLease(ctx, id, qk)
	if err != nil {
		return err
	}
	if deleted {
		s.log.Warn("etcdstore: deleted a place in the queue that an unanswered acquire left on this Store's lease", "lock", name, "key", qk)
	}
	s.pool.forgetPlace(l, name, qk)
	return nil
}

// deleteOnLease deletes key k if it is still attached to lease id, and
// reports whether it did.
func (s *Store) deleteOnLease(ctx context.Context, id clientv3.LeaseID, k string) (bool, error) {
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(k), "=", id)).
		Then(clientv3.OpDelete(k)).
		Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}
