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
// the lock or the claim's key vanishes. A Store that never touches the name
// again, as a replica does with the lock of each slot of a scheduled job
// that another replica ran, would keep one entry per name for ever.
//
// An entry matters only until its claim is released: from then on, the
// release marker's mod revision is above the claim's, which is the
// condition the entry adds to an acquiring transaction, and no ghost of
// that claim is left to guard. So when seen has doubled since the last
// prune, the Store reads the markers of the names in it and forgets the
// entries whose claim etcd shows released. Claims still held, and claims
// whose key vanished without a release, are kept.

const (
	// minSeenPrune is the size of seen below which it is never pruned.
	minSeenPrune = 256
	// seenPruneBatch is how many markers one transaction reads (etcd
	// refuses a transaction of more than --max-txn-ops operations, 128 by
	// default).
	seenPruneBatch = 64
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

// pruneSeen forgets the entries of snapshot (a copy of seen) whose claim
// etcd shows released, unless seen has a newer entry for the name by then,
// and drops the fair queue's hints for those names. A failed read leaves
// the rest for the next prune.
func (s *Store) pruneSeen(snapshot map[string]*seenClaim) {
	var released []string
	for chunk := range slices.Chunk(slices.Sorted(maps.Keys(snapshot)), seenPruneBatch) {
		ops := make([]clientv3.Op, len(chunk))
		for i, name := range chunk {
			ops[i] = clientv3.OpGet(s.releasedKey(name), clientv3.WithKeysOnly())
		}
		ctx, cancel := context.WithTimeout(s.ctx, seenPruneTimeout)
		resp, err := s.client.Txn(ctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			break
		}
		for i, name := range chunk {
			kvs := resp.Responses[i].GetResponseRange().GetKvs()
			if len(kvs) == 1 && kvs[0].ModRevision > snapshot[name].mod {
				released = append(released, name)
			}
		}
	}
	s.mu.Lock()
	for _, name := range released {
		if s.seen[name] == snapshot[name] {
			delete(s.seen, name)
		}
	}
	s.seenPruneAt = 2 * len(s.seen)
	s.pruningSeen = false
	kept := len(s.seen)
	s.mu.Unlock()
	s.log.Debug("etcdstore: forgot the claims seen on locks since released", "forgot", len(released), "kept", kept)
	s.fq.mu.Lock()
	for _, name := range released {
		delete(s.fq.busy, name)
		delete(s.fq.tail, name)
	}
	s.fq.mu.Unlock()
}
