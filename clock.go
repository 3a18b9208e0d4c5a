package baton

import "time"

// A Clock is the time source the engine measures validity and runs its
// timers on. Now must carry a monotonic reading (as time.Now's does), so
// that a step of the wall clock moves no deadline: every validity end is
// computed from Now and compared only with later readings of the same
// Clock. The default is the system clock; package clocktest has a fake
// one for tests.
type Clock interface {
	PassiveClock
	// NewTimer returns a Timer that sends on its channel once d has
	// passed.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine once d has passed, unless the
	// returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// A PassiveClock only tells the time. Stores that judge expiry locally
// (package memstore) need no more.
type PassiveClock interface {
	Now() time.Time
	Since(t time.Time) time.Duration
}

// A Timer is a Clock's timer, as time.Timer is the system clock's.
type Timer interface {
	// C is the channel the timer sends on; nil for an AfterFunc timer.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether it stopped
	// the timer (false if it had fired or been stopped already).
	Stop() bool
}

// SystemClock returns the system clock: time.Now and the runtime's timers.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time                  { return time.Now() }
func (systemClock) Since(t time.Time) time.Duration { return time.Since(t) }
func (systemClock) NewTimer(d time.Duration) Timer  { return systemTimer{time.NewTimer(d)} }
func (systemClock) AfterFunc(d time.Duration, f func()) Timer {
	return systemTimer{time.AfterFunc(d, f)}
}

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }
