package etcdstore

import (
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// fairQueue holds a Store's places in the fair queues of locks (fair
// mode; see "Fair mode" in the package documentation): one entry per lock
// name and holder identity, the entries abandoned but not yet deleted,
// and what the Store's last looks at each lock found. The transactions
// that make, use and remove the places are the Store's (fair.go,
// fairacquire.go); they hold no lock while they talk to etcd.
//
// Its lock, mu, guards every field below and every entry's fields (see
// entry). It comes after Store.mu and before watchHub.mu and
// leasePool.mu in the lock order (see "Lock order" in store.go): code
// that holds it may tell the hub that a spec changed or wake waiters, and
// put entries on leases or take them off, but never takes Store.mu.
//
// The queue runs no goroutine of its own. Its entries' keys are deleted by
// tasks of the session loop (see Store.sweepDoomed and dropEntry), the
// waiter behind a place is read by a task (nextInLineLocked), and each
// entry's owners end through context.AfterFunc (addOwnerLocked); the tasks
// end with the Store's context, the AfterFuncs are stopped when the entry
// is removed.
type fairQueue struct {
	mu     sync.Mutex
	closed bool
	// entries are the live places, by lock name and holder.
	entries map[entryKey]*entry
	// doomed are abandoned places whose keys the session loop deletes.
	doomed map[*entry]struct{}
	seq    uint64 // numbers queue entry keys
	// busy: the last look at a lock found it held or its queue not
	// empty; an attempt without a place then reads before it writes (see
	// tryAcquireFair). Only locks found busy have an entry (setBusy), so
	// a Store that takes many distinct names free keeps none of them.
	busy map[string]bool
	// tail: the last queue key (or the claim, if nobody queued) that such
	// a read found, and when: the key a waiter that queues next is likely
	// to wait for, so its watch can start early.
	tail map[string]tailGuess
	// contended: locks this Store has seen contended lately: it queued
	// for one, or its last release of one handed it over or found
	// waiters. A claim on such a lock taken free, even by TryLock,
	// watches the queue (see placeswatch.go); a release that looked and
	// found nobody drops it, and so does a sweep once it is older than
	// twice the TTL it was seen with (see setContended).
	contended map[string]contention
	// contendedSweepAt: sweep contended when it grows past this.
	contendedSweepAt int
}

// contention is when a lock was last seen contended, with the TTL of the
// claim or request that saw it.
type contention struct {
	at  time.Time
	ttl time.Duration
}

// minContendedSweep is the size of contended below which it is never
// swept.
const minContendedSweep = 64

// setContended records that name was seen contended at now by a claim or
// request of TTL ttl. Once contended has doubled since the last sweep, it
// drops the names seen contended longer than twice their TTL ago, so that
// a Store that hands over many distinct names once each (a lock per
// entity) does not keep one entry per name for ever. A dropped name only
// misses the early watch of its queue (its release still reads the
// oldest place). q.mu is held.
func (q *fairQueue) setContended(name string, ttl time.Duration, now time.Time) {
	q.contended[name] = contention{at: now, ttl: ttl}
	if len(q.contended) <= max(q.contendedSweepAt, minContendedSweep) {
		return
	}
	for n, c := range q.contended {
		if now.Sub(c.at) > 2*c.ttl {
			delete(q.contended, n)
		}
	}
	q.contendedSweepAt = 2 * len(q.contended)
}

func newFairQueue() *fairQueue {
	return &fairQueue{
		entries:   make(map[entryKey]*entry),
		doomed:    make(map[*entry]struct{}),
		busy:      make(map[string]bool),
		tail:      make(map[string]tailGuess),
		contended: make(map[string]contention),
	}
}

// setBusy records what the last look at name found. q.mu is held.
func (q *fairQueue) setBusy(name string, busy bool) {
	if busy {
		q.busy[name] = true
	} else {
		delete(q.busy, name)
	}
}

type tailGuess struct {
	obs observation
	at  time.Time
}

// entryKey names a place in a queue: one per lock name and holder identity
// in a Store.
type entryKey struct{ name, holder string }

// entry is this Store's place in the fair queue of a lock: a key under
// <prefix><name>/queue/ attached to the Store's lease, ordered by its
// create revision. Its fields are guarded by fairQueue.mu, but name,
// holder, key, rev, claimVal, lease and since, which never change.
type entry struct {
	name, holder string
	key          string // etcd key
	rev          int64  // its create revision: the place in the queue
	claimVal     string // the claim's value if a releasing holder hands the lock to it
	lease        *lease
	since        time.Time   // when it was created (verification judges older entries only)
	obs          observation // what its last attempt saw: the key just ahead of it, or the claim
	lost         error       // the key is gone (lease ended, deleted); reported once, then dropped
	consumed     bool        // an attempt acquired the lock with it
	collecting   bool        // an attempt is collecting a claim handed to it (see collect)
	doomed       bool        // abandoned: the session loop deletes the key
	deleting     bool
	retryAt      time.Time    // no retry of that delete before
	tries        cleanupTries // failed attempts of that delete
	owners       []owner      // contexts of the attempts that use it
	pinned       bool         // an attempt used it with a context that never ends
	// ahead names the owner (holder and nonce) of the queue key just ahead
	// of this place as last read, if that key takes handoffs: once the
	// claim shows that owner, this place is next in line.
	aheadHolder, aheadNonce string
	// handed is the claim as the follower's claim watch delivered it when
	// a releasing holder handed the lock to this place (see handedTo);
	// an attempt collects it without a read.
	handed *mvccpb.KeyValue
	// next is the oldest waiter behind this place as last read (nil if
	// none was found yet), for the release to hand the claim to.
	next        *successor
	nextReading bool // a read of next is in flight
	// first: the claim watch last delivered a claim of the owner just
	// ahead; that owner's release will put or delete the claim in the
	// transaction that deletes the key ahead.
	first bool
}

// owner is the context of an attempt that uses an entry: when every
// owner's context has ended, no Lock waits with the entry any more.
type owner struct {
	done <-chan struct{}
	stop func() bool
}

// headEntryLocked returns the Store's first live queue entry for name, or
// nil. s.fq.mu must be held.
func (s *Store) headEntryLocked(name string) *entry {
	var head *entry
	for k, e := range s.fq.entries {
		if k.name == name && e.lost == nil && (head == nil || e.rev < head.rev) {
			head = e
		}
	}
	return head
}
