package schedule_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/clocktest"
	"github.com/baton-go/baton/memstore"
	"github.com/baton-go/baton/schedule"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	quiet     = slog.New(slog.DiscardHandler)
	quietLock = baton.WithLogger(quiet)
	// t0 is on a whole minute.
	t0 = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
)

// offsetClock is a replica's wall clock: base's time plus off. Timers run
// on base, so every replica waits on the same (possibly fake) time.
type offsetClock struct {
	baton.Clock
	off time.Duration
}

func (c offsetClock) Now() time.Time                  { return c.Clock.Now().Add(c.off) }
func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// awaitWaiters waits until exactly n timers wait on clk.
func awaitWaiters(t *testing.T, clk *clocktest.FakeClock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := clk.AwaitWaiters(ctx, func(got int) bool { return got == n }); err != nil {
		t.Fatalf("%d timers wait on the fake clock after a minute, want %d", clk.Waiters(), n)
	}
}

// recorder collects observer events.
type recorder struct {
	mu     sync.Mutex
	events []schedule.Event
	ch     chan schedule.Event
}

func newRecorder() *recorder { return &recorder{ch: make(chan schedule.Event, 1024)} }

func (r *recorder) observe(e schedule.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	r.ch <- e
}

// next returns the next event, failing the test if none comes in 10s.
func (r *recorder) next(t *testing.T) schedule.Event {
	t.Helper()
	select {
	case e := <-r.ch:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no schedule event within 10s")
		return schedule.Event{}
	}
}

// expect reads the next event and checks its slot and outcome.
func (r *recorder) expect(t *testing.T, slot time.Time, o schedule.Outcome) schedule.Event {
	t.Helper()
	e := r.next(t)
	if !e.Slot.Equal(slot) || e.Outcome != o {
		t.Fatalf("event = slot %v %v (err %v), want slot %v %v", e.Slot, e.Outcome, e.Err, slot, o)
	}
	return e
}

// none checks that no event is pending.
func (r *recorder) none(t *testing.T) {
	t.Helper()
	select {
	case e := <-r.ch:
		t.Fatalf("unexpected event: slot %v %v (err %v)", e.Slot, e.Outcome, e.Err)
	default:
	}
}

// counter counts runs per slot.
type counter struct {
	mu   sync.Mutex
	runs map[time.Time]int
}

func newCounter() *counter { return &counter{runs: make(map[time.Time]int)} }

func (c *counter) job(ctx context.Context, run schedule.Run) error {
	c.mu.Lock()
	c.runs[run.Slot.UTC()]++
	c.mu.Unlock()
	return nil
}

func (c *counter) get(slot time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[slot.UTC()]
}

func (c *counter) snapshot() map[time.Time]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[time.Time]int, len(c.runs))
	for k, v := range c.runs {
		m[k] = v
	}
	return m
}

// fakeEnv is a memory backend whose locks never expire on their own (the
// lock clock only moves when a test steps it) and a fake wall clock.
type fakeEnv struct {
	wall    *clocktest.FakeClock // base of every replica's wall clock and timers
	lockClk *clocktest.FakeClock
	store   *memstore.Store
	ledger  *schedule.MemoryLedger
}

func newFakeEnv(start time.Time) *fakeEnv {
	lockClk := clocktest.NewFakeClock(start)
	return &fakeEnv{
		wall:    clocktest.NewFakeClock(start),
		lockClk: lockClk,
		store:   memstore.New(memstore.WithClock(lockClk)),
		ledger:  schedule.NewMemoryLedger(),
	}
}

// replica returns a scheduler whose wall clock is off from the base.
func (e *fakeEnv) replica(t *testing.T, id string, off time.Duration, opts ...schedule.Option) *schedule.Scheduler {
	t.Helper()
	return e.replicaOn(t, e.store, id, off, opts...)
}

// replicaOn is replica with b, which must wrap the environment's store,
// as its backend.
func (e *fakeEnv) replicaOn(t *testing.T, b backend.Backend, id string, off time.Duration, opts ...schedule.Option) *schedule.Scheduler {
	t.Helper()
	s, err := schedule.New(b, e.ledger, append([]schedule.Option{
		schedule.WithClock(offsetClock{e.wall, off}),
		schedule.WithLogger(quiet.With("replica", id)),
		schedule.WithLockOptions(baton.WithClock(e.lockClk), baton.WithIdentity(id)),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// start runs s until the test ends, and fails the test if Run returns
// anything but context.Canceled.
func start(t *testing.T, s *schedule.Scheduler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != context.Canceled {
					t.Errorf("Run = %v, want context.Canceled", err)
				}
			case <-time.After(20 * time.Second):
				t.Error("Run did not return 20s after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
