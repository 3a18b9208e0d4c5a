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

// abandonLocked records the values of a TryAcquire's transactions that
// went unanswered on lease l (sent, per lock name) as orphans of l.
// s.mu must be held.
func (l *lease) abandonLocked(name string, sent []string) {
	if len(sent) == 0 || l.dead != nil {
		return
	}
	if l.orphans == nil {
		l.orphans = make(map[string][]string)
	}
	l.orphans[name] = append(l.orphans[name], sent...)
}

// orphanNamesLocked returns the lock names with orphans whose claim key
// is in attached (a verification's answer). s.mu must be held.
func (s *Store) orphanNamesLocked(l *lease, attached map[string]bool) []string {
	var names []string
	for name := range l.orphans {
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
		if kv == nil || kv.Lease != int64(id) {
			continue
		}
		s.mu.Lock()
		orphan := slices.Contains(l.orphans[name], string(kv.Value))
		s.mu.Unlock()
		if !orphan {
			continue
		}
		ours, _, err := s.deleteClaim(ctx, &claim{name: name, token: kv.ModRevision}, false)
		if err != nil {
			return
		}
		if ours {
			s.log.Warn("etcdstore: deleted a claim that an unanswered acquire left on this Store's lease", "lock", name, "token", kv.ModRevision)
		}
		s.mu.Lock()
		l.orphans[name] = slices.DeleteFunc(l.orphans[name], func(v string) bool { return v == string(kv.Value) })
		if len(l.orphans[name]) == 0 {
			delete(l.orphans, name)
		}
		s.mu.Unlock()
	}
}
