package etcdstore

import (
	"context"
	"fmt"
	"maps"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// NextInLine reports, for tests, what s knows of holder's place in the fair
// queue of name: whether the place is next in line with its claim watch
// established, whether it knows the waiter behind it (for its release to
// hand over to), and whether a claim handed to it arrived on that watch.
// Tests wait for these instead of sleeping.
func NextInLine(s *Store, name, holder string) (watching, knowsNext, handed bool) {
	s.lockSpec()
	defer s.unlockSpec()
	e := s.fq.entries[entryKey{name, holder}]
	if e == nil {
		return false, false, false
	}
	f := s.hub.followers[name]
	return e.first && f != nil && f.claimUp, e.next != nil, e.handed != nil
}

// KeptAlive waits until etcd has acknowledged a keepalive (or grant) that
// keeps the lease of s's claim on name alive at least until until, asking
// for keepalives meanwhile, and reports the claim's loss if it ends first.
// Tests use it to prove that the Store reaches etcd (after a leader
// change, say), since Renew is usually answered without a request.
func KeptAlive(ctx context.Context, s *Store, name string, until time.Time) error {
	for {
		s.mu.Lock()
		c := s.claims[name]
		if c == nil || c.lost != nil {
			s.mu.Unlock()
			return fmt.Errorf("no live claim on %q", name)
		}
		ok, changed := s.pool.keepUntil(c.lease, until)
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// GuardKey returns the key of the guard of name's claim (see guardKey).
func GuardKey(s *Store, name string) string { return s.guardKey(name) }

// PlantOrphan makes s look as if one of its acquiring transactions on name
// had been applied while its TryAcquire call, which never saw the answer,
// gave up: a claim (and guard) on s's lease for ttl that no caller holds,
// recorded as an orphan of that lease (see orphan.go). The lease stays
// pinned, as a poller's attempts keep it in use, until unpin. It returns
// the claim's token.
func PlantOrphan(ctx context.Context, s *Store, name, holder string, ttl time.Duration) (token int64, unpin func(), err error) {
	l, _, err := s.pool.acquire(ctx, ttl)
	if err != nil {
		return 0, nil, err
	}
	ck, lk, _ := s.Keys(name)
	val := value{holder: holder, nonce: "0123456789abcdef", ttl: ttl, at: time.Now()}.encode()
	resp, err := s.client.Txn(ctx).Then(
		clientv3.OpPut(ck, val, clientv3.WithLease(l.id)), clientv3.OpPut(s.guardKey(name), val, clientv3.WithLease(l.id)),
		clientv3.OpPut(lk, val)).Commit()
	if err != nil {
		s.pool.unpin(l)
		return 0, nil, err
	}
	s.pool.abandon(l, name, []string{val})
	return resp.Header.Revision, func() { s.pool.unpin(l) }, nil
}

// PlantOrphanPlace makes fair Store s look as if one of its transactions
// on name had put a place in the queue (on s's lease, as fairTxn does)
// while its TryAcquire call, which never saw the answer, gave up: a queue
// key nobody waits in, recorded as an orphan place of the lease, with its
// value as an orphan (a release may hand it the lock). The lease stays
// pinned until unpin.
func PlantOrphanPlace(ctx context.Context, s *Store, name, holder string, ttl time.Duration) (unpin func(), err error) {
	l, _, err := s.pool.acquire(ctx, ttl)
	if err != nil {
		return nil, err
	}
	_, _, qp := s.Keys(name)
	val := value{holder: holder, nonce: "0123456789abcdef", ttl: ttl, at: time.Now()}.encode()
	qk := fmt.Sprintf("%s%016x-orphan", qp, int64(l.id))
	if _, err := s.client.Put(ctx, qk, val+handoffMark, clientv3.WithLease(l.id)); err != nil {
		s.pool.unpin(l)
		return nil, err
	}
	s.pool.abandon(l, name, []string{val})
	s.pool.abandonPlace(l, name, qk)
	return func() { s.pool.unpin(l) }, nil
}

// WatchedPlaces reports, for tests, the holders of the places that s's
// watch of the queue of name (see placeswatch.go) shows behind s's claim,
// oldest first, and whether a Release would trust them (the watch is open
// and has not failed). Tests wait for these instead of sleeping.
func WatchedPlaces(s *Store, name string) (holders []string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.claims[name]
	if c == nil || c.places == nil || c.places.cancel == nil || c.places.failed {
		return nil, false
	}
	for _, kv := range c.places.places {
		val, ok := handedValue(kv.Value)
		v, err := decodeValue([]byte(val))
		if !ok || err != nil {
			holders = append(holders, "?")
			continue
		}
		holders = append(holders, v.holder)
	}
	return holders, true
}

// HeldPastRoundTrip reports whether s holds name and has held it for
// its acquire's round trip: a fair Release that knows no waiter reads the
// queue only then (a shorter hold, as in a tight loop, frees the lock
// without a read).
func HeldPastRoundTrip(s *Store, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.claims[name]
	return c != nil && time.Since(c.since) >= c.rtt
}

// PlacesWatches returns the number of watches of queues s has open (see
// placeswatch.go), and their bound.
func PlacesWatches(s *Store) (open, bound int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.placesWatches, maxPlacesWatches
}

// MarkContended makes s take name for a lock it has seen contended (see
// fairQueue.contended), as a queued place or a release that handed it over
// would.
func MarkContended(s *Store, name string) {
	s.fq.mu.Lock()
	defer s.fq.mu.Unlock()
	s.fq.setContended(name, time.Hour, time.Now())
}

// FairMemory returns how many lock names s's fair queue keeps state for
// in its busy, contended and tail maps (see fairQueue).
func FairMemory(s *Store) (busy, contended, tail int) {
	s.fq.mu.Lock()
	defer s.fq.mu.Unlock()
	return len(s.fq.busy), len(s.fq.contended), len(s.fq.tail)
}

// MinSeenPrune is the size below which seen is never pruned.
const MinSeenPrune = minSeenPrune

// Seen returns the lock names for which s keeps the claim an attempt saw
// (see ghost and seenprune.go).
func Seen(s *Store) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make(map[string]bool, len(s.seen))
	for name := range s.seen {
		names[name] = true
	}
	return names
}

// PruneSeen runs a prune of the claims s saw (see seenprune.go) now, and
// returns when it is done.
func PruneSeen(s *Store) {
	s.mu.Lock()
	snapshot := maps.Clone(s.seen)
	s.pruningSeen = true
	s.mu.Unlock()
	s.pruneSeen(snapshot)
}

// AgeSeen makes s believe that it first found the claims it saw and found
// gone (see settleSeenLocked) d earlier than it did, so that a test need
// not sleep through their grace. It returns the names of those claims.
func AgeSeen(s *Store, d time.Duration) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	aged := map[string]bool{}
	for name, sc := range s.seen {
		if !sc.gone.IsZero() {
			sc.gone = sc.gone.Add(-d)
			aged[name] = true
		}
	}
	return aged
}

// GhostGrace is how long a Store counts a claim it saw as held after it
// first found its key gone without a release (see ghostGrace).
func GhostGrace(ttl time.Duration) time.Duration { return ghostGrace(ttl) }
