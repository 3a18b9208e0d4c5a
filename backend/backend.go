// Package backend is the seam between baton's lock engine and the
// coordination stores, as database/sql/driver is between database/sql and
// the database drivers. Users of baton do not need it: they pass a store
// (package filestore, kubestore, etcdstore, redisstore, memstore) to
// baton.NewMutex, NewElector or NewSemaphore. Implementers of a store
// implement Backend and, where the store can, the optional interfaces
// below, and check themselves with the conformance suite in package
// batontest.
//
// # Errors
//
// A store reports outcomes with the sentinel errors of this package
// (ErrHeld with a *HeldError, ErrLost, ErrNotFound, ...), wrapped with the
// lock name, the address and the values involved. Package baton re-exports
// every one of them under the same name, so users match baton.ErrHeld and
// implementers return backend.ErrHeld: they are the same values.
//
// A store that owns connections implements io.Closer. After Close, and once
// a client it was given is closed, each of its methods returns promptly
// with an error matching ErrClosed, which the engine does not retry.
package backend

import (
	"context"
	"time"
)

// Backend is what a coordination store implements for baton's engine.
//
// A Backend performs atomic operations on one record per key and reports
// what it saw. Every decision about a lock's time lives in the engine
// (baton.Mutex, Lease, Elector, Semaphore): renew cadence, step-down,
// validity end, retry, logging and metrics. A Backend never ends, extends or hands over a claim
// on a timer of its own. It may run goroutines and timers for its
// connection to the store, and must say which in its documentation; the
// stores in this repository do:
//
//   - memstore and filestore: none beyond a call, except filestore's Watch
//     (an inotify reader per watched lock, ended with the watch's context);
//   - kubestore: a shared watch per watched lock object, re-established
//     after errors, ended with the last watch's context;
//   - redisstore: one subscriber connection for release notices, kept while
//     any lock was watched in the last minute, and a periodic health check
//     of it; and, for renewals batched together, a timer while a batch
//     waits for its 20 ms window and a goroutine per batch in flight;
//   - etcdstore: a session goroutine that keeps its etcd leases alive and
//     deletes claims at their deadline (the reaper), followers that watch
//     locks and the fair queue, and the timers that pace them. The claim's
//     validity is still the engine's: the reaper only removes a claim the
//     holder can no longer count as valid.
//
// Every method must be safe for concurrent use. Every state change must be a
// single conditional operation on the store (compare-and-swap on a version,
// a transaction, a script); never read-then-write without a condition.
//
// Implementations are checked by the conformance suite in package batontest.
type Backend interface {
	// TryAcquire takes key for req if it is free or its previous claim has
	// expired, atomically, and returns a Grant with a fencing token larger
	// than any token issued before for key. If another owner's claim is
	// still valid it returns an error that matches ErrHeld and can be
	// unwrapped to *HeldError. A key that is invalid for the store returns
	// an error matching ErrInvalidName.
	//
	// If the same owner (Holder and Nonce) already holds key, TryAcquire
	// returns ErrHeld too: a Grant is never handed out twice.
	TryAcquire(ctx context.Context, key string, req Request) (Grant, error)

	// Renew extends g's claim by g.TTL, measured by the store from the
	// moment it applies the renew. It returns the updated Grant (the token
	// never changes on renew), or an error matching ErrLost if the record
	// is no longer g's (expired and taken, released, force-released).
	// Other errors are transient: the engine retries until its deadline.
	Renew(ctx context.Context, g Grant) (Grant, error)

	// Release frees key if and only if it is still held by g's owner
	// (Holder and Nonce), atomically. It keeps the fencing counter: the next
	// TryAcquire gets a larger token. It returns an error matching ErrLost if
	// g no longer owns key.
	Release(ctx context.Context, g Grant) error

	// Get returns the record stored for key, held or not. It returns an
	// error matching ErrNotFound if the store has no record for key.
	Get(ctx context.Context, key string) (Record, error)
}

// Watcher is implemented by backends that can tell a waiter that a key's
// record changed, so it can retry at once instead of polling.
type Watcher interface {
	// Watch returns a channel that receives a value soon after key's holder
	// may have changed: an acquisition, a release, a takeover, a deletion
	// (spurious wake-ups are allowed; several changes may be folded into
	// one value; a renewal by the same holder need not wake it). The channel is closed when ctx ends or the
	// watch breaks; the engine then falls back to polling.
	Watch(ctx context.Context, key string) (<-chan struct{}, error)
}

// WaiterWatcher is implemented by Watchers that can watch on behalf of one
// waiting contender, holder, and leave out wake-ups that cannot let it
// acquire: another owner's acquisition, and a release the store reserved
// for another waiter (a FIFO handover). Such a watch must still wake
// holder no later than a reservation for another waiter can end, and on
// everything else Watch wakes for.
//
// baton.Mutex.Lock uses it; it is safe there because the engine never sleeps
// past the moment the claim (or reservation) seen at its last attempt can
// end (HeldError.RetryAfter): a claim taken after that attempt ends later,
// and is found by the retry at that moment. An Elector's campaign uses
// Watch, so that a standby hears of every new leader at once.
type WaiterWatcher interface {
	Watcher
	WatchWaiter(ctx context.Context, key, holder string) (<-chan struct{}, error)
}

// LossNotifier is implemented by backends that can learn, between a
// holder's renewals, that its claim was lost (etcd reports the claim's
// lease gone in a keepalive answer, or a check finds its key deleted), so
// that the holder stops at once rather than at its next renew, which may
// be a third of the TTL away.
type LossNotifier interface {
	// AfterLoss arranges for f to be called, in its own goroutine, once
	// the store knows that g's claim is lost, with why (an error that
	// the store's Renew of g would now wrap); at once if it knows already,
	// or if g is not a claim of this store. It is called at most once. stop
	// cancels the call, as the stop function of context.AfterFunc does:
	// it reports whether it stopped f from being called. A store need not
	// call f for a claim released through it.
	AfterLoss(g Grant, f func(why error)) (stop func() bool)
}

// StallExplainer is implemented by backends whose client can hold a
// request back on this side of the connection (a client-side rate
// limiter), so that the engine can say so when a renew has no answer in
// time instead of blaming the store. The engine asks only after the call
// has had no answer for a retry period, and at a step-down; it never
// waits on the answer, and it never changes when the engine steps down.
type StallExplainer interface {
	// Stall returns an error saying what holds this client's requests
	// back now, if something on this side of the connection has held one
	// back for a large part of waited (how long the engine's call has had
	// no answer), and nil otherwise. It must not block.
	Stall(waited time.Duration) error
}

// Lister is implemented by backends that can enumerate their records, for
// status views.
type Lister interface {
	List(ctx context.Context) ([]Record, error)
}

// ForceReleaser is implemented by backends that let an administrator free a
// lock whoever holds it. The fencing counter is kept, so the next holder
// gets a larger token. The former holder learns of it at its next renew,
// or sooner where its store notices (see LossNotifier); its lease then
// ends with an error matching ErrLost but not baton.ErrStepDown;
// until then it may still act, which is what fencing tokens are for.
// ForceRelease returns an error matching ErrNotFound if key has no record,
// and nil if key is already free.
type ForceReleaser interface {
	ForceRelease(ctx context.Context, key string) error
}

// Remover is implemented by backends that can delete a free lock's record,
// for lock names that are used once: package schedule locks each slot of a
// job under its own name, and without Remove every slot would leave its
// record in the store for ever.
//
// Remove deletes key's record, atomically with the check, if and only if
// no claim on key is recorded (it was released or force-released, and
// nobody acquired it since) and nothing is reserved for a waiter. It
// returns nil if it deleted the record or key has none, and an error
// matching ErrHeld otherwise: a live claim, one that expired without a
// release (a store may judge such a claim expired and delete it instead,
// but only where it judges expiry itself, as Redis and etcd do, and the
// file backend on the machine's monotonic clock), or a waiter's place or
// reservation. A store that keeps a waiting queue beside the record may
// refuse while anyone is queued.
//
// Remove never resets the fencing counter: a later TryAcquire of key
// creates the record anew with a token larger than every token issued
// before for key, on the same terms as the store's tokens after a
// restart. But a store that saw key's record before (a contender's
// observation, a watch) may count the removal as a change it has to wait
// out, as it does for a record deleted by hand, so a key that will be
// locked again soon should not be removed.
type Remover interface {
	Remove(ctx context.Context, key string) error
}

// Request describes who asks for a key and for how long.
type Request struct {
	// Holder is the contender's identity, stable for a process (for
	// example the pod name plus a random suffix). Shown in status views.
	Holder string
	// Nonce is random per acquisition call: every attempt of one
	// Mutex.Lock call (or one campaign of an Elector) carries the same
	// nonce, since only one of them can acquire; TryLock and every other
	// call draw a new one. Holder and Nonce together name the owner of a
	// grant: only that owner can renew or release it. A store that serves
	// waiters in order may write a waiter's claim ahead of the attempt
	// that collects it, knowing the nonce that attempt will present.
	Nonce string
	// TTL is how long the claim lasts after the store applies an acquire
	// or renew, unless renewed again.
	TTL time.Duration
	// Waiting is true when the attempt comes from a caller that keeps
	// trying until it holds the lock (Mutex.Lock, an Elector's campaign)
	// and false for a one-shot TryLock or a Semaphore's attempt on one of
	// its slots. Only the engine knows which a call is, so this is part of
	// the request, not a store option. A store that serves waiters in
	// order may give a waiting contender its place in line at its first
	// refused attempt, before its watch is open; it must not do so for a
	// one-shot attempt, which may never come back.
	Waiting bool
}

// Grant is a successful acquisition, as returned by Backend.TryAcquire and
// Backend.Renew.
type Grant struct {
	Key    string
	Holder string
	Nonce  string
	// Token is the fencing token: strictly larger than every token issued
	// before for Key, as long as the store keeps its data.
	Token uint64
	TTL   time.Duration
	// Version is opaque backend state (a resourceVersion, a revision) that
	// the backend may use to make its next conditional write cheaper. The
	// engine only passes it back.
	Version string
	// Age is zero for a claim the store wrote for this TryAcquire call. A
	// store that hands a released lock to a waiter (writes the claim for
	// it, then tells it) may return that claim without a request; Age is
	// then how long before the call the claim's TTL may be counted from:
	// the time since the send time of a request of the waiter's own that
	// the store answered before the handoff, on this process's monotonic
	// clock. The store keeps the claim at least until that send time plus
	// TTL (the handoff came later and gave the full TTL). The engine counts
	// the holder's validity from its own send time minus Age, so it stays
	// within what the store keeps. Never negative.
	Age time.Duration
}

// Record is a key's state as read from the store.
type Record struct {
	Key string
	// Holder is the identity of the current or last holder; empty when the
	// key was released.
	Holder string
	// Nonce identifies the holder's acquisition.
	Nonce string
	// Token is the last fencing token issued for Key.
	Token uint64
	// TTL is the lease duration the holder asked for.
	TTL time.Duration
	// AcquireTime and RenewTime are wall-clock times written by the holder's
	// or the store's clock. They are for people reading status views only:
	// baton never compares them with another machine's clock.
	AcquireTime time.Time
	RenewTime   time.Time
	// Transitions counts how many times the key changed hands.
	Transitions uint64
	// Remaining is how long the claim still lasts as this backend judges it
	// from this process (store-side expiry, or local observation), or 0 if
	// the key is free or the claim has expired.
	Remaining time.Duration
	// Version is opaque backend state.
	Version string
}

// Held reports whether the record names a holder whose claim has not
// expired.
func (r Record) Held() bool { return r.Holder != "" && r.Remaining > 0 }
