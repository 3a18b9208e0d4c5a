package backend

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors a Backend returns, wrapped with the lock name and the
// values involved; match them with errors.Is. Package baton re-exports each
// under the same name, and the engine passes them on to its callers.
var (
	// ErrHeld: another owner holds the lock. The error unwraps to *HeldError.
	ErrHeld = errors.New("lock is held")
	// ErrLost: the caller no longer holds the lock (expired, taken over,
	// released, force-released; or, from the engine, it stepped down
	// because renewals failed until the renew deadline).
	ErrLost = errors.New("lock lost")
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
	// ErrClosed: the Store was closed (its Close method was called, or the
	// client it was given was closed) and cannot be used again. The engine
	// does not retry it, and a Lease whose renewal gets it is lost at
	// once.
	ErrClosed = errors.New("store closed")
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
