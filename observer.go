package baton

import "time"

// EventKind says what happened to a lock.
type EventKind int

const (
	// EventAcquired: this process acquired the lock (Lock, TryLock or an
	// Elector's campaign); Duration is how long it waited.
	EventAcquired EventKind = iota + 1
	// EventHeld: an attempt found the lock held by Holder (a conflict).
	// Duration is the backend's estimate of how long that claim can still
	// last as judged from this process (HeldError.RetryAfter), 0 if it
	// gave none.
	EventHeld
	// EventRenewed: a renewal succeeded; Duration is its latency.
	EventRenewed
	// EventRenewFailed: a renewal failed with Err; the holder will retry
	// until the renew deadline. A renewal that has had no answer for a
	// retry period (a silent store) is reported once, with an Err matching
	// ErrUnavailable, and waited for until the renew deadline.
	EventRenewFailed
	// EventLost: the lock was lost (Err says why): the lease's context has ended.
	EventLost
	// EventReleased: the holder released the lock. Err is set if the
	// store's release failed: this process stopped holding it all the
	// same, and the claim expires in the store after the TTL.
	EventReleased
	// EventStartedLeading: an Elector's term started.
	EventStartedLeading
	// EventStoppedLeading: an Elector's term ended and its work returned; Err says why.
	EventStoppedLeading
	// EventNewLeader: an Elector observed a new leader, Holder.
	EventNewLeader
	// EventAcquireFailed: an acquire attempt (of Lock, TryLock, a
	// Semaphore's slot or an Elector's campaign) failed with Err: the store
	// could not be reached, or refused it. Holder is this process's
	// identity. A lock found held is EventHeld instead, and an attempt cut
	// short because its context ended is not reported.
	EventAcquireFailed
)

var eventNames = [...]string{
	EventAcquired: "acquired", EventHeld: "held", EventRenewed: "renewed",
	EventRenewFailed: "renew_failed", EventLost: "lost", EventReleased: "released",
	EventStartedLeading: "started_leading", EventStoppedLeading: "stopped_leading",
	EventNewLeader: "new_leader", EventAcquireFailed: "acquire_failed",
}

func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "unknown"
}

// Event is what an Observer receives.
type Event struct {
	Kind     EventKind
	Name     string // lock name
	Holder   string // this process's identity, or the observed holder for EventHeld and EventNewLeader
	Token    uint64
	Duration time.Duration
	Err      error
}

// Observer receives events, for metrics. Observe is called synchronously
// from baton's goroutines and must not block: a lease's own goroutine
// reports its renewals and its loss (and waits for Observe before its next
// renew or its step-down), and the caller's goroutine reports acquisitions,
// conflicts and releases. Leases, Mutexes and Electors that share an
// Observer call it from many goroutines at once, so it must be safe for
// concurrent use.
//
// Observe must not call a Lease's Unlock: Unlock waits for the goroutines
// that report the lease's renewals and loss, which may be the one running
// Observe (on EventRenewed, EventRenewFailed or EventLost), and for the
// Unlock in progress, which may be the one reporting EventReleased; either
// way it deadlocks, and that lease's context may never end. To release on
// an event, call Unlock in a goroutine of its own (go l.Unlock(ctx)).
// Observe may read a Lease (Err, Token, ValidUntil, Context). The same
// holds for the handler of the logger given WithLogger, which these
// goroutines also call.
//
// If Observe panics on an acquisition (or an Elector's OnNewLeader or
// OnStartedLeading does at the start of a term), the lease is abandoned
// before the panic goes on: its context ends, nothing renews it, and its
// claim expires after the TTL.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e). A nil ObserverFunc ignores e, as no Observer would:
// it would otherwise panic in the lease's own goroutine.
func (f ObserverFunc) Observe(e Event) {
	if f != nil {
		f(e)
	}
}

// Observers returns an Observer that passes every event to each of obs in
// turn, skipping nil entries, so that one lock can feed metrics and, say,
// Kubernetes Events (WithObserver takes one Observer). With no non-nil
// entry it returns nil, which WithObserver treats as no observer; with one,
// it returns that one. Each observer is called synchronously, so none of
// them may block.
//
// A nil pointer of a concrete type is not a nil Observer: pass only
// observers that were created.
func Observers(obs ...Observer) Observer {
	var list multiObserver
	for _, o := range obs {
		if o != nil {
			list = append(list, o)
		}
	}
	switch len(list) {
	case 0:
		return nil
	case 1:
		return list[0]
	}
	return list
}

type multiObserver []Observer

func (m multiObserver) Observe(e Event) {
	for _, o := range m {
		o.Observe(e)
	}
}
