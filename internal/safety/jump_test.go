//go:build linux

package safety

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/baton-go/baton"
)

// Wall-clock steps. A contender's clock is a jumpClock: SIGUSR1 steps its
// wall reading forward by an hour, SIGUSR2 back by an hour, the way
// settimeofday (or an NTP step) changes what time.Now returns: the wall
// reading moves, the monotonic reading does not. Every wall-clock reading
// the lock engine and the Kubernetes stores take goes through this clock
// (baton.WithClock, kubestore.WithClock): the engine measures with the
// monotonic reading only; the Kubernetes stores write the wall reading
// into acquireTime and renewTime, where a naive peer would compare it with
// its own clock. The file, Redis and etcd stores read no wall time at all
// (CLOCK_MONOTONIC, server-side expiry, etcd leases), so a step cannot
// reach them. Stepping the machine's real clock instead would step the
// test, the stores and the API server's certificates too, and needs
// CAP_SYS_TIME.
const (
	jumpForward = syscall.SIGUSR1
	jumpBack    = syscall.SIGUSR2
	jumpBy      = time.Hour
)

// jumpClock is inner with its wall reading offset by off.
type jumpClock struct {
	baton.Clock
	off atomic.Int64 // nanoseconds, whole seconds
}

func (c *jumpClock) Now() time.Time {
	return wallShifted(c.Clock.Now(), time.Duration(c.off.Load()))
}

// Since uses the monotonic reading, as time.Since does.
func (c *jumpClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// step moves the wall reading by d and returns the new offset.
func (c *jumpClock) step(d time.Duration) time.Duration {
	return time.Duration(c.off.Add(int64(d)))
}

// timeLayout mirrors time.Time's fields: wall holds, when bit 63
// (hasMonotonic) is set, 33 bits of seconds since 1885 and 30 bits of
// nanoseconds; ext holds the monotonic reading. checkWallShift verifies
// this at the contender's start, so a different layout fails the run
// instead of shifting the wrong bits.
type timeLayout struct {
	wall uint64
	ext  int64
	loc  *time.Location
}

const (
	hasMonotonic = 1 << 63
	nsecShift    = 30
)

// wallShifted returns t with its wall reading moved by d (whole seconds)
// and its monotonic reading kept: what time.Now returns after the system
// clock was stepped by d. The time package has no way to build such a
// value (Add moves both readings), hence the unsafe. A t without a
// monotonic reading is only wall time and is simply moved.
func wallShifted(t time.Time, d time.Duration) time.Time {
	if d == 0 {
		return t
	}
	p := (*timeLayout)(unsafe.Pointer(&t))
	if p.wall&hasMonotonic == 0 {
		return t.Add(d)
	}
	p.wall += uint64(int64(d/time.Second)) << nsecShift
	return t
}

// checkWallShift verifies wallShifted on this build: the wall reading
// moves by exactly the step, durations between readings do not.
func checkWallShift() error {
	now := time.Now()
	for _, d := range []time.Duration{jumpBy, -jumpBy} {
		s := wallShifted(now, d)
		if got := s.Round(0).Sub(now.Round(0)); got != d {
			return fmt.Errorf("wallShifted by %v moved the wall reading by %v", d, got)
		}
		if got := s.Sub(now); got != 0 {
			return fmt.Errorf("wallShifted by %v moved the monotonic reading by %v", d, got)
		}
	}
	return nil
}

// watchJumps steps c on SIGUSR1 and SIGUSR2 until ctx ends, and reports
// each step to the register as a "jumped" event whose Err field says by
// how much (the register records it; the harness waits for it).
func watchJumps(ctx context.Context, c *jumpClock, cl *client) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, jumpForward, jumpBack)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case s := <-sigs:
				d := jumpBy
				if s == jumpBack {
					d = -jumpBy
				}
				off := c.step(d)
				cl.event("jumped", 0, fmt.Errorf("wall clock stepped by %v: now %v off, reads %s",
					d, off, c.Now().Round(0).Format(time.RFC3339)))
			}
		}
	}()
	return func() { signal.Stop(sigs); cancel(); <-done }
}
