package baton

import (
	"errors"

	"github.com/baton-go/baton/backend"
)

// Sentinel errors. Match them with errors.Is; errors returned by baton and
// its backends wrap them with the lock name and the values involved. The
// errors a store reports are defined in package backend and re-exported
// here under the same names: baton.ErrHeld and backend.ErrHeld are one
// value.
var (
	// ErrHeld: another owner holds the lock. The error unwraps to *HeldError.
	ErrHeld = backend.ErrHeld
	// ErrLost: the caller no longer holds the lock (expired, taken over,
	// released, or it stepped down because renewals failed until the renew
	// deadline).
	ErrLost = backend.ErrLost
	// ErrStepDown: the holder stepped down because no renew succeeded
	// within the renew deadline. It comes with ErrLost. A loss without it
	// means the store said the claim is no longer ours (taken over after
	// expiry, or force-released): someone else may already hold the lock.
	ErrStepDown = errors.New("stepped down at the renew deadline")
	// ErrReleased is the cause of a Lease's context after Unlock.
	ErrReleased = errors.New("lock released")
	// ErrNotFound: the store has no record for the key.
	ErrNotFound = backend.ErrNotFound
	// ErrInvalidName: the lock name is not acceptable (see ValidateName).
	ErrInvalidName = backend.ErrInvalidName
	// ErrInvalidOptions: a timing or identity option is impossible.
	ErrInvalidOptions = backend.ErrInvalidOptions
	// ErrCorruptRecord: the stored record cannot be decoded. baton never
	// overwrites such a record on its own: doing so could reset the fencing
	// counter. An administrator must inspect and remove it.
	ErrCorruptRecord = backend.ErrCorruptRecord
	// ErrForbidden: the store refused the operation for lack of permission,
	// or did not accept the credentials. The engine does not retry it.
	ErrForbidden = backend.ErrForbidden
	// ErrUnavailable: the store could not be reached. The engine retries
	// it (the store may come back); a caller that wants to give up sooner
	// bounds the wait with its context.
	ErrUnavailable = backend.ErrUnavailable
	// ErrMisconfigured: the store answers, but the setup cannot work as
	// given; the wrapping error names the cause and the fix. The engine
	// does not retry it.
	ErrMisconfigured = backend.ErrMisconfigured
	// ErrClosed: the store was closed and cannot be used again. The engine
	// does not retry it, and a Lease whose renewal gets it is lost at
	// once: a Lock, Run or Acquire on a closed store returns it instead of
	// retrying until its context ends.
	ErrClosed = backend.ErrClosed
	// ErrGraceExceeded: an Elector's work did not return within the grace
	// period after its term ended.
	ErrGraceExceeded = errors.New("work did not stop within the grace period")
	// ErrAlreadyRunning: Elector.Run was called while a Run is in progress.
	ErrAlreadyRunning = errors.New("elector is already running")
)

// HeldError reports that a lock is held by another owner: the holder and
// token the store saw, and how long the claim can still last as judged
// from this process. It is backend.HeldError.
type HeldError = backend.HeldError

// isPermanent reports errors that retrying cannot fix.
func isPermanent(err error) bool {
	return errors.Is(err, ErrInvalidName) || errors.Is(err, ErrCorruptRecord) ||
		errors.Is(err, ErrForbidden) || errors.Is(err, ErrInvalidOptions) || errors.Is(err, ErrMisconfigured) ||
		errors.Is(err, ErrClosed)
}
