package fence

import (
	"errors"
	"fmt"
)

// ErrStaleToken means a write carried a fencing token smaller than the
// largest one the resource has accepted for that name: a newer holder has
// written, and the write must not take effect. Errors returned by
// SQLGuard.Check, SQLGuard.Exec, Register.Write and Register.Do match it
// with errors.Is; errors.As with *StaleTokenError gives the details.
var ErrStaleToken = errors.New("fence: stale fencing token")

// StaleTokenError is the error for a rejected token.
type StaleTokenError struct {
	// Name is the fenced name (normally the lock name).
	Name string
	// Token is the rejected token.
	Token uint64
	// Stored is the largest token accepted so far for Name, if Known.
	Stored uint64
	// Known reports whether Stored could be read. An SQLGuard reads it with
	// a second query after the rejection; under REPEATABLE READ or
	// SERIALIZABLE the transaction's snapshot may not show it.
	Known bool
}

func (e *StaleTokenError) Error() string {
	if e.Known {
		return fmt.Sprintf("fence: stale fencing token for %q: %d rejected, %d already accepted", e.Name, e.Token, e.Stored)
	}
	return fmt.Sprintf("fence: stale fencing token for %q: %d rejected, a larger one was already accepted", e.Name, e.Token)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }
