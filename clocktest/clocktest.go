// Package clocktest provides a fake baton.Clock for tests: time moves only
// when the test says so, and a test can wait for the moment code under test
// starts waiting on the clock instead of polling for it.
//
// # Driving baton's engine
//
// Give the same FakeClock to baton.WithClock and memstore.WithClock, so
// that the store judges expiry on the test's time. A held Lease and a
// waiting Lock (or Acquire, or an Elector's campaign) each wait on one
// timer of the clock. A Lease sends each renew in a goroutine of its own
// and, while it is in flight, waits on a timer (the retry period, the
// renew deadline) too: a count of waiters does not tell that the renew
// was answered. After a Step that reaches a renew (every renew interval,
// TTL/3 by default), wait for its EventRenewed (or EventRenewFailed) from
// an Observer before the next Step. A test that steps on at once can pass
// the retry period and the renew deadline before the answer is read: the
// renew is reported as unanswered and the lease steps down, although the
// store renewed it. For the same reason, one Step past the renew deadline
// ends a held lease (no renew could be sent in the time it skipped): move
// time in steps no longer than the renew interval while a lease is held.
//
// To make a test's holder lose its lock:
//
//   - memstore's ForceRelease frees the claim; the holder learns it at its
//     next renew (Step to it), and its context ends with a cause matching
//     baton.ErrLost. A
//     waiter watching the lock takes it at once, while the old holder still
//     works until then: that is what fencing tokens are for.
//   - For an outage, wrap the store in a type of the test's that embeds
//     *memstore.Store and fails Renew and TryAcquire while a switch is on;
//     step through the failed renews (each reported as EventRenewFailed) to
//     the renew deadline, where the context ends with a cause matching
//     baton.ErrStepDown. A waiter with its own, working wrapper takes over
//     once the claim expired (the TTL after the store applied the last
//     acquire or renew).
//   - For a crash, an Elector with baton.WithReleaseOnCancel(false) whose
//     Run's context ends leaves its claim to expire; Step the TTL.
package clocktest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

// A FakeClock is a baton.Clock whose time moves only by Step and SetTime.
// Its readings carry no monotonic part, so they compare by wall time: a
// FakeClock is its own, single timeline. It is safe for concurrent use.
// The zero value is a FakeClock that reads the zero time.
type FakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*timer
	changed chan struct{} // closed and replaced when waiters change; nil until first needed
}

// NewFakeClock returns a FakeClock that reads t until it is moved. A
// monotonic reading in t (time.Now's) is dropped.
func NewFakeClock(t time.Time) *FakeClock {
	return &FakeClock{now: t.Round(0), changed: make(chan struct{})}
}

var _ baton.Clock = (*FakeClock)(nil)

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Since returns the time elapsed since t on this clock.
func (c *FakeClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// NewTimer returns a timer that fires once the clock has moved d past now.
func (c *FakeClock) NewTimer(d time.Duration) baton.Timer {
	return c.add(d, make(chan time.Time, 1), nil)
}

// AfterFunc calls f in its own goroutine once the clock has moved d past
// now, unless the timer is stopped first.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) baton.Timer {
	return c.add(d, nil, f)
}

// Step moves the clock forward by d and fires every timer that is due.
func (c *FakeClock) Step(d time.Duration) {
	c.mu.Lock()
	c.setLocked(c.now.Add(d))
}

// SetTime sets the clock to t (forward or back) and fires every timer that
// is then due. A monotonic reading in t is dropped.
func (c *FakeClock) SetTime(t time.Time) {
	c.mu.Lock()
	c.setLocked(t.Round(0))
}

// HasWaiters reports whether any timer waits on the clock.
func (c *FakeClock) HasWaiters() bool { return c.Waiters() > 0 }

// Waiters returns how many timers wait on the clock.
func (c *FakeClock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// AwaitWaiters blocks until ok accepts the number of timers waiting on the
// clock, or ctx ends; it returns ctx's error then. Tests call it before
// Step, so that the step reaches the timer the code under test is about to
// wait on, without polling.
func (c *FakeClock) AwaitWaiters(ctx context.Context, ok func(waiters int) bool) error {
	for {
		c.mu.Lock()
		got, changed := len(c.waiters), c.changedLocked()
		c.mu.Unlock()
		if ok(got) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *FakeClock) add(d time.Duration, ch chan time.Time, f func()) *timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, at: c.now.Add(d), ch: ch, f: f}
	if d <= 0 {
		t.fire(c.now)
		return t
	}
	c.waiters = append(c.waiters, t)
	c.notifyLocked()
	return t
}

// setLocked moves the clock to now, then fires the due timers after
// unlocking c.mu, so that a timer's function may use the clock.
func (c *FakeClock) setLocked(now time.Time) {
	c.now = now
	var due []*timer
	kept := c.waiters[:0]
	for _, t := range c.waiters {
		if !t.at.After(now) {
			due = append(due, t)
		} else {
			kept = append(kept, t)
		}
	}
	clear(c.waiters[len(kept):])
	c.waiters = kept
	if len(due) > 0 {
		c.notifyLocked()
	}
	c.mu.Unlock()
	for _, t := range due {
		t.fire(now)
	}
}

func (c *FakeClock) notifyLocked() {
	close(c.changedLocked())
	c.changed = make(chan struct{})
}

// changedLocked returns the channel that the next change of the waiters
// closes, making it if the clock is a zero FakeClock's. c.mu must be held.
func (c *FakeClock) changedLocked() chan struct{} {
	if c.changed == nil {
		c.changed = make(chan struct{})
	}
	return c.changed
}

// remove takes t off the waiters and reports whether it was there.
func (c *FakeClock) remove(t *timer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, w := range c.waiters {
		if w == t {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			c.notifyLocked()
			return true
		}
	}
	return false
}

type timer struct {
	c  *FakeClock
	at time.Time
	ch chan time.Time
	f  func()
}

func (t *timer) fire(now time.Time) {
	if t.f != nil {
		go t.f()
		return
	}
	t.ch <- now
}

func (t *timer) C() <-chan time.Time { return t.ch }
func (t *timer) Stop() bool          { return t.c.remove(t) }

// AwaitTimer waits until some timer waits on clk, so that a Step reaches
// it, and fails tb if none does within a minute.
func AwaitTimer(tb testing.TB, clk *FakeClock) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := clk.AwaitWaiters(ctx, func(n int) bool { return n > 0 }); err != nil {
		tb.Fatal("nothing waits on the fake clock after a minute")
	}
}
