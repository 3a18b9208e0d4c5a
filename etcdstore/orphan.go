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

// orphanNamesLocked returns the lock names with orphans on l.
// leasePool.mu must be held.
func (l *lease) orphanNamesLocked() []string {
	names := make([]string, 0, len(l.orphans))
	for name := range l.orphans {
		names = append(names, name)
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
	l.orphans[name] = slices.DeleteFunc(l.orphans[name], func(v string) bool { return v == val })
	if len(l.orphans[name]) == 0 {
		delete(l.orphans, name)
	}
}

// attachedOrphans returns the lock names with orphans on l whose claim key
// is in attached (a verification's answer).
func (s *Store) attachedOrphans(l *lease, attached map[string]bool) []string {
	var names []string
	for _, name := range s.pool.orphanNames(l) {
		if ck, _, _ := s.Keys(name); attached[ck] {
			names = append(names, name)
		}
	}
	return names
}

// clearOrphans deletes the claims of names on lease id whose values are
// orphans of l, and forgets each orphan it deleted. Failures are left to
// the next verification.
func (s *Store) clearOrphans(ctx context.Context, l *lease, id clientv3.LeaseID, names []string) {
	for _, name := range names {
		ck, _, _ := s.Keys(name)
		r, err := s.client.Get(ctx, ck)
		if err != nil {
			return
		}
		kv := kvOrNil(r.Kvs)
		if kv == nil || kv.Lease != int64(id) || !s.pool.isOrphan(l, name, string(kv.Value)) {
			continue
		}
		ours, _, err := s.deleteClaim(ctx, &claim{name: name, token: kv.ModRevision}, false)
		if err != nil {
			return
		}
		if ours {
			s.log.Warn("etcdstore: deleted a claim that an unanswered acquire left on this Store's lease", "lock", name, "token", kv.ModRevision)
		}
		s.pool.forgetOrphan(l, name, string(kv.Value))
	}
}
