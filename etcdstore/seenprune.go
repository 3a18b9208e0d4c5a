package etcdstore

import (
	"context"
	"maps"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Pruning seen. An attempt that finds a lock held by another owner records
// that claim in seen (see ghost), and keeps it until this Store acquires
// the lock or the claim could have expired. A Store that never touches the
// name again, as a replica does with the lock of each slot of a scheduled
// job that another replica ran, would keep one entry per name for ever.
//
// An entry matters only until its claim is released: from then on, the
// release marker's mod revision is above the claim's, which is the
// condition the entry adds to an acquiring transaction, and no ghost of
// that claim is left to guard. A claim whose key vanished without a
// release (deleted by hand, or the lock removed with its marker: see
// Store.Remove) matters until it could have expired: ghostGrace after this
// Store first found it gone. So when seen has doubled since the last
// prune, the Store reads the marker, the claim key and the guard of the
// names in it and forgets the entries whose claim etcd shows released, or
// gone for longer than that grace (a prune that finds one gone starts its
// grace, as an attempt would). Claims still held, or whose guard is still
// in place, are kept.

const (
	// minSeenPrune is the size of seen below which it is never pruned.
	minSeenPrune = 256
	// seenPruneBatch is how many names one transaction reads, three keys
	// each (etcd refuses a transaction of more than --max-txn-ops
	// operations, 128 by default).
	seenPruneBatch = 32
	// seenPruneTimeout bounds each of a prune's transactions.
	seenPruneTimeout = 10 * time.Second
)

// maybePruneSeenLocked starts a prune of seen in the background if seen
// has doubled since the last one and none is running. s.mu is held.
func (s *Store) maybePruneSeenLocked() {
	if s.closed || s.pruningSeen || len(s.seen) <= max(s.seenPruneAt, minSeenPrune) {
		return
	}
	s.pruningSeen = true
	snapshot := maps.Clone(s.seen)
	s.wg.Go(func() { s.pruneSeen(snapshot) })
}

// pruneSeen forgets the entries of snapshot (a copy of seen) that etcd
// shows released, or gone for their grace (see settleSeenLocked), unless
// seen has a newer entry for the name by then, and drops the fair queue's
// hints for those names. A failed read leaves the rest for the next
// prune.
func (s *Store) pruneSeen(snapshot map[string]*seenClaim) {
	var forgot []string
	for chunk := range slices.Chunk(slices.Sorted(maps.Keys(snapshot)), seenPruneBatch) {
		ops := make([]clientv3.Op, 0, 3*len(chunk))
		for _, name := range chunk {
			ck, _, _ := s.Keys(name)
			ops = append(ops, clientv3.OpGet(s.releasedKey(name), clientv3.WithKeysOnly()),
				clientv3.OpGet(ck, clientv3.WithKeysOnly()), clientv3.OpGet(s.guardKey(name), clientv3.WithKeysOnly()))
		}
		ctx, cancel := context.WithTimeout(s.ctx, seenPruneTimeout)
		resp, err := s.client.Txn(ctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			break
		}
		now := time.Now()
		s.mu.Lock()
		for i, name := range chunk {
			sc := snapshot[name]
			marker := kvOrNil(resp.Responses[3*i].GetResponseRange().GetKvs())
			released := marker != nil && marker.ModRevision > sc.mod
			gone := len(resp.Responses[3*i+1].GetResponseRange().GetKvs())+len(resp.Responses[3*i+2].GetResponseRange().GetKvs()) == 0
			if s.seen[name] == sc && settleSeenLocked(sc, released, gone, now) {
				delete(s.seen, name)
				forgot = append(forgot, name)
			}
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.seenPruneAt = 2 * len(s.seen)
	s.pruningSeen = false
	kept := len(s.seen)
	s.mu.Unlock()
	s.log.Debug("etcdstore: forgot the claims seen on locks since released or gone", "forgot", len(forgot), "kept", kept)
	s.fq.mu.Lock()
	for _, name := range forgot {
		delete(s.fq.busy, name)
		delete(s.fq.tail, name)
	}
	s.fq.mu.Unlock()
}

// settleSeenLocked applies a look at etcd to sc, a claim this Store saw:
// released (the release marker is newer than sc's token), or gone (neither
// the claim key nor the guard was there, at a revision after sc's). It
// reports whether sc may be forgotten: it was released, or it has been
// gone for ghostGrace since this Store first found it so (a first look
// that finds it gone starts that grace, as ghost does). s.mu must be held.
func settleSeenLocked(sc *seenClaim, released, gone bool, now time.Time) bool {
	switch {
	case released:
		return true
	case !gone:
		return false
	case sc.gone.IsZero():
		sc.gone = now
		return false
	}
	return !now.Before(sc.gone.Add(ghostGrace(sc.ttl)))
}
