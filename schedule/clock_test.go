package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/clocktest"
	"github.com/baton-go/baton/memstore"
	"github.com/baton-go/baton/schedule"
)

// steppableClock is a wall clock that an "administrator" can set: its
// offset from base changes while timers keep running on base, as when NTP
// steps the wall clock of a real machine.
type steppableClock struct {
	baton.Clock
	off atomic.Int64
}

func (c *steppableClock) Now() time.Time                  { return c.Clock.Now().Add(time.Duration(c.off.Load())) }
func (c *steppableClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *steppableClock) set(d time.Duration)             { c.off.Add(int64(d)) }

// A forward step of the wall clock is noticed within a minute even while
// the replica waits for a slot hours away; the slots it jumped over are
// missed (skipped by default).
func TestWallClockStepForward(t *testing.T) {
	env := newFakeEnv(t0) // 03:00
	wall := &steppableClock{Clock: env.wall}
	rec := newRecorder()
	s, err := schedule.New(env.store, env.ledger, schedule.WithClock(wall), schedule.WithLogger(quiet),
		schedule.WithObserver(rec.observe), schedule.WithLockOptions(baton.WithClock(env.lockClk)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add("quarter", "*/15 * * * *", newCounter().job); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	awaitWaiters(t, env.wall, 1)
	wall.set(50*time.Minute + 10*time.Second) // the wall clock now reads 03:50:10
	rec.none(t)
	env.wall.Step(time.Minute) // the replica re-reads the wall clock: 03:51:10
	rec.expect(t, t0.Add(45*time.Minute), schedule.Ran)
	awaitWaiters(t, env.wall, 1)
	rec.none(t) // 03:15 and 03:30 were skipped
}

// After a backward step, slots this replica already handled are not
// attempted again, and the next slot comes when the wall clock reaches it.
func TestWallClockStepBackward(t *testing.T) {
	env := newFakeEnv(t0)
	wall := &steppableClock{Clock: env.wall}
	rec := newRecorder()
	cnt := newCounter()
	s, err := schedule.New(env.store, env.ledger, schedule.WithClock(wall), schedule.WithLogger(quiet),
		schedule.WithObserver(rec.observe), schedule.WithLockOptions(baton.WithClock(env.lockClk)))
	if err != nil {
		t.Fatal(err)
	}
	// With CatchUp, a replica that forgot what it handled would attempt
	// 03:00 again after the step (the ledger would refuse to run it, but
	// the attempt shows as an event).
	if err := s.Add("minute", "* * * * *", cnt.job, schedule.CatchUp(1, time.Hour)); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	rec.expect(t, t0, schedule.Ran) // caught up at start
	awaitWaiters(t, env.wall, 1)
	env.wall.Step(time.Minute)
	rec.expect(t, t0.Add(time.Minute), schedule.Ran)
	awaitWaiters(t, env.wall, 1)
	wall.set(-90 * time.Second) // 03:01:00 -> 02:59:30
	env.wall.Step(time.Minute)  // 03:00:30: slot 03:00 is behind the replica
	awaitWaiters(t, env.wall, 1)
	rec.none(t)
	env.wall.Step(time.Minute) // 03:01:30
	awaitWaiters(t, env.wall, 1)
	rec.none(t)
	env.wall.Step(30 * time.Second) // 03:02:00
	rec.expect(t, t0.Add(2*time.Minute), schedule.Ran)
}

// failingStore refuses every acquisition, as an unreachable store would.
type failingStore struct{ *memstore.Store }

func (failingStore) TryAcquire(context.Context, string, backend.Request) (backend.Grant, error) {
	return backend.Grant{}, errors.New("dial tcp: connection refused")
}

func TestLockStoreUnreachable(t *testing.T) {
	env := newFakeEnv(t0)
	rec := newRecorder()
	cnt := newCounter()
	s, err := schedule.New(failingStore{env.store}, env.ledger, schedule.WithClock(env.wall), schedule.WithLogger(quiet),
		schedule.WithObserver(rec.observe), schedule.WithLockOptions(baton.WithClock(env.lockClk)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add("report", "* * * * *", cnt.job); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	awaitWaiters(t, env.wall, 1)
	env.wall.Step(time.Minute)
	e := rec.expect(t, t0.Add(time.Minute), schedule.Error)
	if !strings.Contains(e.Err.Error(), "connection refused") || cnt.get(t0.Add(time.Minute)) != 0 {
		t.Fatalf("err = %v, runs = %d; want the store's error and no run", e.Err, cnt.get(t0.Add(time.Minute)))
	}
}

func TestRunWithoutJobs(t *testing.T) {
	s, err := schedule.New(memstore.New(), schedule.NewMemoryLedger(), schedule.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
}

// A daily 02:30 job in Berlin runs once on the night the clock falls back
// (02:30 comes twice) and once on the night it springs forward (02:30 is
// skipped: it runs at 03:00 CEST), with two replicas as with one.
func TestDailyJobAcrossOffsetChanges(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		start     time.Time // UTC
		slot      time.Time // UTC: the night's one run
		untilSlot time.Duration
	}{
		{"fall back", time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), 30 * time.Minute},
		{"spring forward", time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newFakeEnv(tc.start)
			cnt := newCounter()
			recs := []*recorder{newRecorder(), newRecorder()}
			for i, rec := range recs {
				s := env.replica(t, fmt.Sprintf("replica-%d", i), 0, schedule.WithLocation(berlin), schedule.WithObserver(rec.observe))
				if err := s.Add("nightly", "30 2 * * *", cnt.job, schedule.LockAtLeastFor(0)); err != nil {
					t.Fatal(err)
				}
				start(t, s)
			}
			// Two hours of the night, a minute at a time.
			for step := time.Minute; step <= 2*time.Hour; step += time.Minute {
				awaitWaiters(t, env.wall, len(recs))
				env.wall.Step(time.Minute)
				if step == tc.untilSlot {
					for _, rec := range recs {
						if e := rec.next(t); !e.Slot.Equal(tc.slot) {
							t.Fatalf("event for slot %v, want %v", e.Slot.UTC(), tc.slot)
						}
					}
				}
			}
			awaitWaiters(t, env.wall, len(recs))
			for _, rec := range recs {
				rec.none(t)
			}
			if runs := cnt.snapshot(); len(runs) != 1 || runs[tc.slot] != 1 {
				t.Errorf("runs per slot = %v, want one run at %v", runs, tc.slot)
			}
		})
	}
}

// monoClock is a replica's wall clock whose readings carry a monotonic
// reading, as time.Now's do, driven by a fake clock; step moves the wall
// reading alone, as settimeofday or an NTP step does to what time.Now
// returns (steppableClock moves both: Add cannot move one alone).
type monoClock struct {
	*clocktest.FakeClock
	base  time.Time // from time.Now: its monotonic reading runs with the fake clock
	start time.Time // the fake clock's reading at base
	off   atomic.Int64
}

func newMonoClock(t *testing.T, fake *clocktest.FakeClock) *monoClock {
	now := time.Now()
	w := now.Round(0).Add(-time.Hour - 1500*time.Millisecond)
	if got := withWall(now, w); !got.Round(0).Equal(w) || got.Sub(now) != 0 {
		t.Fatalf("withWall does not set the wall reading alone on this Go version (got %v from %v)", got, now)
	}
	return &monoClock{FakeClock: fake, base: now, start: fake.Now()}
}

func (c *monoClock) Now() time.Time {
	elapsed := c.FakeClock.Now().Sub(c.start)
	return withWall(c.base.Add(elapsed), c.start.Add(elapsed+time.Duration(c.off.Load())))
}

func (c *monoClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *monoClock) step(d time.Duration)            { c.off.Add(int64(d)) }

// withWall returns t, which must carry a monotonic reading, with its wall
// reading set to w and its monotonic reading kept. The time package has
// no way to build such a value, hence the unsafe; newMonoClock checks that
// it works. time.Time's wall field holds, with bit 63 set, 33 bits of
// seconds and 30 bits of nanoseconds; ext holds the monotonic reading.
func withWall(t, w time.Time) time.Time {
	p := (*struct {
		wall uint64
		ext  int64
		loc  *time.Location
	})(unsafe.Pointer(&t))
	const nsec = 1<<30 - 1
	p.wall += uint64(w.Unix()-t.Unix()) << 30
	p.wall = p.wall&^nsec | uint64(w.Nanosecond())
	return t
}

// A replica compares slot times by the wall clock only. After its wall
// clock stepped back while it waited, it does not attempt again the slots
// it handled before the step: readings carrying a monotonic reading (as
// the system clock's do) used to be compared by it, so the slots of the
// wall-clock time between the step and the cursor came round again.
func TestWallClockStepBackwardMonotonicReadings(t *testing.T) {
	env := newFakeEnv(t0.Add(500 * time.Millisecond))
	wall := newMonoClock(t, env.wall)
	rec := newRecorder()
	s, err := schedule.New(env.store, env.ledger, schedule.WithClock(wall), schedule.WithLogger(quiet),
		schedule.WithObserver(rec.observe), schedule.WithLockOptions(baton.WithClock(env.lockClk)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add("tens", "*/10 * * * * *", newCounter().job, schedule.CatchUp(3, time.Hour)); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	for _, d := range []time.Duration{-20 * time.Second, -10 * time.Second, 0} {
		rec.expect(t, t0.Add(d), schedule.Ran) // caught up at start
	}
	awaitWaiters(t, env.wall, 1)           // for 03:00:10
	wall.step(-30 * time.Second)           // 03:00:00.5 -> 02:59:30.5
	env.wall.Step(9500 * time.Millisecond) // 02:59:40
	awaitWaiters(t, env.wall, 1)
	rec.none(t)
	env.wall.Step(30 * time.Second) // 03:00:10
	rec.expect(t, t0.Add(10*time.Second), schedule.Ran)
	awaitWaiters(t, env.wall, 1)
	rec.none(t)
}

// stepAfterClock is a steppableClock that steps its wall reading by by
// just after the first reading at or after at: the step comes between
// the reading that tells the replica a slot has come and the next one.
type stepAfterClock struct {
	steppableClock
	at      time.Time
	by      time.Duration
	stepped atomic.Bool
}

func (c *stepAfterClock) Now() time.Time {
	now := c.steppableClock.Now()
	if !now.Before(c.at) && c.stepped.CompareAndSwap(false, true) {
		c.set(c.by)
	}
	return now
}

func (c *stepAfterClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// A step back that comes just as a slot came (between the reading that
// ends the wait and the next) does not move the replica back: the slot it
// handled last is not attempted again, and the slot that came runs when
// the wall clock reaches it again.
func TestWallClockStepBackwardAsSlotComes(t *testing.T) {
	env := newFakeEnv(t0)
	wall := &stepAfterClock{steppableClock: steppableClock{Clock: env.wall}, at: t0.Add(2 * time.Minute), by: -90 * time.Second}
	rec := newRecorder()
	s, err := schedule.New(env.store, env.ledger, schedule.WithClock(wall), schedule.WithLogger(quiet),
		schedule.WithObserver(rec.observe), schedule.WithLockOptions(baton.WithClock(env.lockClk)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add("minute", "* * * * *", newCounter().job); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	awaitWaiters(t, env.wall, 1)
	env.wall.Step(time.Minute) // 03:01
	rec.expect(t, t0.Add(time.Minute), schedule.Ran)
	awaitWaiters(t, env.wall, 1)
	env.wall.Step(time.Minute) // 03:02, read once, then 03:00:30
	for range 3 {              // 03:01:00, 03:01:30, 03:02:00
		awaitWaiters(t, env.wall, 1)
		rec.none(t)
		env.wall.Step(30 * time.Second)
	}
	rec.expect(t, t0.Add(2*time.Minute), schedule.Ran)
	awaitWaiters(t, env.wall, 1)
	rec.none(t)
}
