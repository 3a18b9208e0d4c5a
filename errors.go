package baton

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Match them with errors.Is; errors returned by baton and
// its backends wrap them with the lock name and the values involved.
var (
	// ErrHeld: another owner holds the lock. The error unwraps to *HeldError.
	ErrHeld = errors.New("lock is held")
	// ErrLost: the caller no longer holds the lock (expired, taken over,
	// released, or it stepped down because renewals failed until the renew
	// deadline).
	ErrLost = errors.New("lock lost")
	// ErrStepDown: the holder stepped down because no renew succeeded
	// within the renew deadline. It comes with ErrLost. A loss without it
	// means the store said the claim is no longer ours (taken over after
	// expiry, or force-released): someone else may already hold the lock.
	ErrStepDown = errors.New("stepped down at the renew deadline")
	// ErrReleased is the cause of a Lease's context after Unlock.
	ErrReleased = errors.New("lock released")
	// ErrNotFound: the store has no record for the key.
	ErrNotFound = errors.New("lock record not found")
	// ErrInvalidName: the lock name is not acceptable (see ValidateName).
	ErrInvalidName = errors.New("invalid lock name")
	// ErrInvalidOptions: a timing or identity option is impossible.
	ErrInvalidOptions = errors.New("invalid options")
	// ErrCorruptRecord: the stored record cannot be decoded. baton never
	// overwrites such a record on its own: doing so could reset the fencing
	// counter. An administrator must inspect and remove it.
	ErrCorruptRecord = errors.New("corrupt lock record")
	// ErrForbidden: the store refused the operation for lack of permission,
	// or did not accept the credentials. The engine does not retry it.
	ErrForbidden = errors.New("permission denied by the store")
	// ErrUnavailable: the store could not be reached: connection refused,
	// no route, a name that does not resolve, no answer in time. The
	// engine retries it (the store may come back); a caller that wants to
	// give up sooner bounds the wait with its context. Backends wrap it
	// with the address they tried.
	ErrUnavailable = errors.New("store unavailable")
	// ErrMisconfigured: the store answers, but the setup cannot work as
	// given: a missing namespace or custom resource definition, a TLS
	// failure (unknown authority, wrong host name, TLS spoken to a plain
	// server), an invalid address. The engine does not retry it. Backends
	// name the cause and the fix in the wrapping error.
	ErrMisconfigured = errors.New("store misconfigured")
	// ErrGraceExceeded: an Elector's work did not return within the grace
	// period after its term ended.
	ErrGraceExceeded = errors.New("work did not stop within the grace period")
	// ErrAlreadyRunning: Elector.Run was called while a Run is in progress.
	ErrAlreadyRunning = errors.New("elector is already running")
)

// HeldError reports that a lock is held by another owner.
type HeldError struct {
	Key    string
	Holder string
	Token  uint64
	// RetryAfter, if positive, is the backend's estimate of how long the
	// current claim can still last as judged from this process. The engine
	// retries no later than that.
	RetryAfter time.Duration
}

func (e *HeldError) Error() string {
	if e.Holder == "" {
		return fmt.Sprintf("lock %q is held", e.Key)
	}
	return fmt.Sprintf("lock %q is held by %q (token %d)", e.Key, e.Holder, e.Token)
}

// Is makes errors.Is(err, ErrHeld) true for a *HeldError.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// isPermanent reports errors that retrying cannot fix.
func isPermanent(err error) bool {
	return errors.Is(err, ErrInvalidName) || errors.Is(err, ErrCorruptRecord) ||
		errors.Is(err, ErrForbidden) || errors.Is(err, ErrInvalidOptions) || errors.Is(err, ErrMisconfigured)
}
