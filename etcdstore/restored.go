package etcdstore

import (
	"context"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A claim on this Store's lease that the Store neither holds nor is
// acquiring can only be one it released, or lost, and that came back:
// etcd restored from a snapshot (etcdutl snapshot restore) puts back the
// keys and leases of the snapshot, this Store's lease among them, and
// the Store keeps that lease alive for as long as it uses it (every
// acquire makes sure the lease lasts a TTL; every claim it holds renews
// it). Such a claim would stay until the process ended, holding the lock
// for nobody. Nobody works under it, as no lease of this Store's engine
// carries it, so the Store deletes it (claim and guard) where it finds
// one: an acquire of its lock, which then tries again, and the
// verification of the lease (every verification period, while the lease
// carries claims or places), which also deletes the places in fair queues
// that the Store no longer has (stalePlaces). An unanswered transaction of the acquiring call is
// taken over instead (ownOrphan); while another acquire of the same name
// runs in this Store, the claim may be that call's, not yet recorded, and
// is left alone.
//
// The deletion puts no release marker: the marker is per lock, not per
// claim, and would tell contenders that saw the claim of the last holder
// before the restore (gone from the restored store, its holder perhaps
// still valid by its own clock) that it was released. They go on waiting
// for that holder's marker, which its release puts (deleteClaim: the key
// then holds an older claim, or none), or for their grace (see ghost), as
// for a claim deleted by hand.

// beginAcquire counts an acquire of name in progress and returns the
// function that ends it.
func (s *Store) beginAcquire(name string) (end func()) {
	s.mu.Lock()
	s.acquiring[name]++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.acquiring[name]--; s.acquiring[name] == 0 {
			delete(s.acquiring, name)
		}
	}
}

// staleOwnClaim reports whether the claim kv on name is on lease l, this
// Store's, without being a claim the Store holds or one handed to one of
// its places in the queue, while no acquire of name runs in this Store
// but the caller's own (own: 1 for an acquire, 0 otherwise).
func (s *Store) staleOwnClaim(name string, l *lease, kv *mvccpb.KeyValue, own int) bool {
	if kv.Lease != int64(l.id) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.acquiring[name] > own {
		return false
	}
	if c := s.claims[name]; c != nil && c.token == kv.ModRevision {
		return false
	}
	return !s.handedLocked(name, string(kv.Value))
}

// handedLocked reports whether val is the claim value that a releasing
// holder writes when it hands lock name to one of this Store's places
// (waiting or abandoned): a claim handed over, not yet collected or
// deleted with its place. s.mu must be held; it takes s.fq.mu.
func (s *Store) handedLocked(name, val string) bool {
	s.fq.mu.Lock()
	defer s.fq.mu.Unlock()
	for _, e := range s.fq.entries {
		if e.name == name && e.claimVal == val {
			return true
		}
	}
	for e := range s.fq.doomed {
		if e.name == name && e.claimVal == val {
			return true
		}
	}
	return false
}

// dropStaleOwnClaim deletes the stale claim kv on name (staleOwnClaim)
// and its guard, if they are still kv's.
func (s *Store) dropStaleOwnClaim(ctx context.Context, name string, kv *mvccpb.KeyValue) error {
	ck, _, _ := s.Keys(name)
	gk := s.guardKey(name)
	mod := kv.ModRevision
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(ck), "=", mod)).
		Then(clientv3.OpDelete(ck),
			clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(gk), "=", mod)}, []clientv3.Op{clientv3.OpDelete(gk)}, nil)).
		Commit()
	if err != nil {
		return s.wrap(name, "acquire", err)
	}
	if resp.Succeeded {
		s.log.Warn("etcdstore: deleted a claim on this Store's lease that it no longer held (etcd restored from a snapshot?)",
			"lock", name, "token", mod)
	}
	return nil
}

// dropOlderOwnClaim returns, for the release of c (deleteClaim) when the
// claim key holds an older claim, the operations that delete that claim
// and its guard if they are on c's lease: a claim of this Store that a
// restore put back (see above), which nobody else would delete while the
// Store keeps the lease alive.
func (s *Store) dropOlderOwnClaim(c *claim) []clientv3.Op {
	if c.lease == nil || c.lease.id == 0 {
		return nil
	}
	ck, _, _ := s.Keys(c.name)
	gk := s.guardKey(c.name)
	ours := func(k string) []clientv3.Cmp {
		return []clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(k), "=", c.lease.id), clientv3.Compare(clientv3.ModRevision(k), "<", c.token)}
	}
	return []clientv3.Op{
		clientv3.OpTxn(ours(ck), []clientv3.Op{clientv3.OpDelete(ck)}, nil),
		clientv3.OpTxn(ours(gk), []clientv3.Op{clientv3.OpDelete(gk)}, nil),
	}
}

// clearStaleClaims deletes the stale claims (staleOwnClaim) and stale
// places in fair queues (stalePlaces) among the keys attached to lease l
// (id), as a verification found them; orphans are clearOrphans'.
// Failures are left to the next verification.
func (s *Store) clearStaleClaims(ctx context.Context, l *lease, id clientv3.LeaseID, attached map[string]bool) {
	for k, name := range s.stalePlaces(attached) {
		if s.dropStalePlace(ctx, id, name, k) != nil {
			return
		}
	}
	for k := range attached {
		name, ok := s.claimName(k)
		if !ok || !s.unclaimed(name) {
			continue
		}
		r, err := s.client.Get(ctx, k)
		if err != nil {
			return
		}
		kv := kvOrNil(r.Kvs)
		if kv == nil || kv.Lease != int64(id) || s.pool.isOrphan(l, name, string(kv.Value)) || !s.staleOwnClaim(name, l, kv, 0) {
			continue
		}
		if s.dropStaleOwnClaim(ctx, name, kv) != nil {
			return
		}
	}
}

// claimName returns the lock name whose claim key is k, and false for
// any other key under the prefix (guards, queues, records).
func (s *Store) claimName(k string) (string, bool) {
	name, ok := strings.CutPrefix(k, s.prefix)
	if !ok || name == "" || strings.Contains(name, "/") {
		return "", false
	}
	return name, true
}

// placeName returns the lock name whose fair queue holds the key k, and
// false for any other key.
func (s *Store) placeName(k string) (string, bool) {
	rest, ok := strings.CutPrefix(k, s.prefix)
	if !ok {
		return "", false
	}
	name, place, ok := strings.Cut(rest, "/queue/")
	if !ok || name == "" || place == "" || strings.Contains(name, "/") {
		return "", false
	}
	return name, true
}

// stalePlaces returns, by key, the lock names of the queue keys among
// keys (attached to this Store's lease) that are none of the Store's
// places (waiting, abandoned, or a holder's) while no acquire of their
// lock runs in this Store: places the Store left that a restore put back
// (see above). Waiters behind them would wait for as long as the Store
// keeps its lease alive.
func (s *Store) stalePlaces(keys map[string]bool) map[string]string {
	stale := make(map[string]string)
	for k := range keys {
		if name, ok := s.placeName(k); ok {
			stale[k] = name
		}
	}
	if len(stale) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, name := range stale {
		if s.acquiring[name] > 0 {
			delete(stale, k)
		}
	}
	for _, c := range s.claims {
		delete(stale, c.entry)
	}
	s.fq.mu.Lock()
	defer s.fq.mu.Unlock()
	for _, e := range s.fq.entries {
		delete(stale, e.key)
	}
	for e := range s.fq.doomed {
		delete(stale, e.key)
	}
	return stale
}

// dropStalePlace deletes the stale place k of lock name (stalePlace) if it
// is still on lease id.
func (s *Store) dropStalePlace(ctx context.Context, id clientv3.LeaseID, name, k string) error {
	deleted, err := s.deleteOnLease(ctx, id, k)
	if err != nil {
		return err
	}
	if deleted {
		s.log.Warn("etcdstore: deleted a place in a queue that this Store's lease carried but the Store no longer held (etcd restored from a snapshot?)",
			"lock", name, "key", k)
	}
	return nil
}

// unclaimed reports whether the Store holds no claim on name and runs no
// acquire of it: a claim key of name on its lease is then stale.
func (s *Store) unclaimed(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims[name] == nil && s.acquiring[name] == 0
}

// recheck reads back every claim of this Store once it trusts etcd's
// lease answers again after its keepalive stream failed or stalled (see
// trust.go): etcd restarted, a leader changed, or etcd was restored from a
// snapshot. A verification asks only which keys a lease carries, and a
// lease restored from a snapshot may carry the claim key again with an
// older claim of this Store (one it released after the snapshot, and took
// again since): the holder would take it for its own and hold on, unaware,
// while etcd shows another claim, and its release would leave that claim
// in place. A claim whose key is gone, on another lease or of another
// token is lost (claimGone). The reads go in transactions of
// seenPruneBatch.
func (s *Store) recheck(ctx context.Context) {
	var claims []*claim
	s.mu.Lock()
	for _, c := range s.claims {
		if c.lost == nil && !c.releasing {
			claims = append(claims, c)
		}
	}
	s.mu.Unlock()
	for batch := range slices.Chunk(claims, seenPruneBatch) {
		ops := make([]clientv3.Op, len(batch))
		for i, c := range batch {
			ck, _, _ := s.Keys(c.name)
			ops[i] = clientv3.OpGet(ck)
		}
		resp, err := s.client.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return // the claims' verifications go on as before
		}
		for i, c := range batch {
			kv := kvOrNil(resp.Responses[i].GetResponseRange().GetKvs())
			if kv == nil || kv.Lease != int64(c.lease.id) || kv.ModRevision != c.token {
				s.claimGone(c)
			}
		}
	}
}
