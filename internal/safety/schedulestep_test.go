//go:build linux

package safety

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/filestore"
	"github.com/baton-go/baton/schedule"
)

// TestScheduleWallClockSteps is the schedule row of wall-clock steps: NTP,
// an operator's `date -s` or a resumed VM steps the wall clock of one of
// a job's replicas, back and forward, while the replicas run. Three
// replicas (as in TestScheduleNetworkStores, each with a store client of
// its own and one shared ledger) run an every-second job of 0.7 s with
// CatchUp(2, 10 s); two have steady clocks, 0 and -3 s off; the first
// starts 1 s ahead, and its wall clock (the clock the scheduler takes; the
// monotonic reading, which the lock and the timers use, does not move)
// steps by 2 to 6 s, back or forward, several times: at a random moment,
// just as a slot comes (right after the scheduler's reading that reached
// it) or in the middle of its running job. The row asserts what
// docs/cron.md promises:
//
//   - no slot runs twice (the ledger and the lock: a slot found done was
//     locked with a larger token than its run's), and every slot from the
//     first to the last the steady replicas reached runs exactly once;
//   - every replica's attempt ends as run, already done or held, never as
//     an error;
//   - each replica attempts its slots in increasing order: after a step
//     back, no slot it handled comes round again;
//   - the stepping replica attempts every slot its clock reached, by
//     running past it or by a step forward that carried it past, except
//     older slots that it left out of a full catch-up batch (more than
//     CatchUp's slots had passed when it noticed the step, or when it
//     became free): a step forward misses at most the slots it stepped
//     over, the newest is attempted, and after a step back it resumes
//     once its clock passes the slots it had handled.
//
// It runs on the file backend, Redis, etcd and the Kubernetes Lease
// backend.
func TestScheduleWallClockSteps(t *testing.T) {
	if err := checkWallShift(); err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		name string
		open func(t *testing.T) scheduleStore
	}{
		{"file", fileScheduleStore},
		{"redis", redisScheduleStore(1)},
		{"etcd", etcdScheduleStore},
		{"lease", kubeScheduleStore("lease")},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			runScheduleSteps(t, st.name, st.open(t))
		})
	}
}

const (
	// stepJobLength is the row's job: shorter than a slot, so that the
	// steady replicas keep up with the slots while the stepping one
	// waits after a step back, and long enough to be stepped in.
	stepJobLength = 700 * time.Millisecond
	// stepWait bounds the wait for an armed step's moment.
	stepWait = 10 * time.Second
	// stepTail: the stepping replica must have attempted the slots its
	// clock reached this long before it stopped.
	stepTail = 5 * time.Second
)

func runScheduleSteps(t *testing.T, name string, st scheduleStore) {
	seed := scenarioSeed(name, "schedule-wall-clock-steps")
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	clk := newStepClock(time.Second, rand.New(rand.NewPCG(uint64(seed), 2)))
	ty := newScheduleTally(st, 3)
	// Every replica is up, and the stores' clients connected, by the
	// first slot.
	first := time.Now().Truncate(time.Second).Add(4 * time.Second)
	firstSeen := ty.reached(1, first)
	started := time.Now()
	stops := []func(){
		ty.start(t, 0, clk, ty.job(0, stepJobLength, clk.duringJob)),
		ty.start(t, 1, skewedClock{baton.SystemClock(), 0}, ty.job(1, stepJobLength, nil)),
		ty.start(t, 2, skewedClock{baton.SystemClock(), -3 * time.Second}, ty.job(2, stepJobLength, nil)),
	}
	awaitSlot(t, firstSeen, first, 0, "the replica with the steady clock")
	steps := 6
	if long() {
		steps = 16
	}
	for range steps {
		time.Sleep(time.Duration(100+rng.IntN(800)) * time.Millisecond) // a random moment, not a synchronisation
		s := clk.nextStep(rng)
		clk.arm(s)
		select {
		case <-s.fired:
		case <-time.After(stepWait):
			if !clk.disarm(s) {
				t.Logf("step by %v %v: its moment did not come within %v; dropped", s.by, s.moment, stepWait)
			}
		}
	}
	// The steady replicas reach the slots of a few more seconds; the one
	// 3 s behind is the last.
	last := time.Now().Truncate(time.Second).Add(5 * time.Second)
	awaitSlot(t, ty.reached(1, last), last, 0, "the replica with the steady clock")
	awaitSlot(t, ty.reached(2, last), last, 3*time.Second, "the replica 3 s behind")
	stopped := time.Now()
	for _, stop := range stops {
		stop()
	}
	ty.check(t, first, last)
	checkSlotLocksLeft(t, st, 3)
	as, began := ty.replicaAttempts(0)
	sum := clk.checkAttempts(t, as, began, started, stopped)
	t.Logf("%d slots; steps made: %s; stepping replica: %d attempts (%s), %d slots left out of full catch-up batches (%d with a step forward, %d passed while busy)",
		int(last.Sub(first)/time.Second)+1, clk.describe(), len(as), outcomeSummary(as), sum.stepped+sum.busy, sum.stepped, sum.busy)
}

func outcomeSummary(as []slotAttempt) string {
	n := map[schedule.Outcome]int{}
	for _, a := range as {
		n[a.outcome]++
	}
	var parts []string
	for _, o := range []schedule.Outcome{schedule.Ran, schedule.AlreadyDone, schedule.Held} {
		parts = append(parts, fmt.Sprintf("%v %d", o, n[o]))
	}
	return strings.Join(parts, ", ")
}

// fileScheduleStore is a lock directory that every replica opens with a
// filestore of its own, as processes on one machine would; names lists
// the records in it.
func fileScheduleStore(t *testing.T) scheduleStore {
	dir := t.TempDir()
	return scheduleStore{
		replica: func(t *testing.T) backend.Backend {
			s, err := filestore.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		names: func(context.Context) ([]string, error) {
			files, err := filepath.Glob(filepath.Join(dir, "*.json"))
			for i, f := range files {
				files[i] = filepath.Base(f)
			}
			return files, err
		},
	}
}

// stepMoment is when an armed step of the wall clock is made.
type stepMoment int

const (
	stepAtOnce      stepMoment = iota // at a random moment
	stepAsSlotComes                   // right after the first reading at or past a slot
	stepMidJob                        // at a random moment of the replica's running job
)

func (m stepMoment) String() string {
	return [...]string{"at a random moment", "as a slot came", "in the middle of a run"}[m]
}

// wallStep is one step of the stepping replica's wall clock.
type wallStep struct {
	moment stepMoment
	by     time.Duration // whole seconds
	slot   time.Time     // stepAsSlotComes: the slot whose reading makes it
	fired  chan struct{} // closed once made
	// when is the moment the step was made (from time.Now, with a
	// monotonic reading), from and to the wall readings just before and
	// after it.
	when, from, to time.Time
}

// stepClock is the stepping replica's wall clock: a jumpClock, whose wall
// reading a step moves and whose monotonic reading, and so its timers, it
// does not. It makes each step the row arms at its moment and keeps them,
// so that what the clock read at any moment can be told afterwards.
type stepClock struct {
	jumpClock
	off0 time.Duration // the offset before any step

	mu    sync.Mutex
	rng   *rand.Rand // where in a run a stepMidJob step is made
	armed *wallStep
	made  []*wallStep
}

func newStepClock(off time.Duration, rng *rand.Rand) *stepClock {
	c := &stepClock{off0: off, rng: rng}
	c.Clock = baton.SystemClock()
	c.off.Store(int64(off))
	return c
}

// Now is the replica's wall reading. An armed stepAsSlotComes step is made
// right after the first reading at or past its slot: the scheduler learns
// from that reading that the slot came, and its next reading is stepped.
func (c *stepClock) Now() time.Time {
	now := c.jumpClock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.armed; a != nil && a.moment == stepAsSlotComes && !now.Before(a.slot) {
		c.makeLocked()
	}
	return now
}

// Since uses the monotonic reading, as time.Since does.
func (c *stepClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// peek is the wall reading; it makes no step.
func (c *stepClock) peek() time.Time { return c.jumpClock.Now() }

// nextStep draws the next step: 2 to 6 s back or forward, keeping the
// clock between 4 s behind and 10 s ahead, at one of the moments (in the
// middle of a run only while the replica is ahead of the others, and so
// runs slots).
func (c *stepClock) nextStep(rng *rand.Rand) *wallStep {
	off := time.Duration(c.off.Load())
	s := &wallStep{moment: stepMoment(rng.IntN(3)), by: time.Duration(2+rng.IntN(5)) * time.Second}
	back := rng.IntN(2) == 0
	if back && off-s.by < -4*time.Second || !back && off+s.by > 10*time.Second {
		back = !back
	}
	if back {
		s.by = -s.by
	}
	if s.moment == stepMidJob && off < time.Second {
		s.moment = stepAsSlotComes
	}
	if s.moment == stepAsSlotComes {
		s.slot = c.peek().Truncate(time.Second).Add(time.Second)
	}
	return s
}

// arm has s made at its moment: at once for stepAtOnce.
func (c *stepClock) arm(s *wallStep) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.fired = make(chan struct{})
	c.armed = s
	if s.moment == stepAtOnce {
		c.makeLocked()
	}
}

// disarm drops s if it was not made yet, and reports whether it was.
func (c *stepClock) disarm(s *wallStep) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed == s {
		c.armed = nil
		return false
	}
	return true
}

// duringJob is the stepping replica's job's hook: at a random moment
// before the run ends, it makes an armed stepMidJob step.
func (c *stepClock) duringJob(ctx context.Context, end time.Time) {
	c.mu.Lock()
	wait := time.Duration(c.rng.Int64N(int64(max(time.Until(end), time.Millisecond))))
	c.mu.Unlock()
	if sleepCtx(ctx, wait) != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.armed; a != nil && a.moment == stepMidJob {
		c.makeLocked()
	}
}

// makeLocked makes the armed step. c.mu must be held.
func (c *stepClock) makeLocked() {
	s := c.armed
	c.armed = nil
	s.when = time.Now()
	s.from = wallShifted(s.when, time.Duration(c.off.Load())).Round(0)
	s.to = wallShifted(s.when, c.step(s.by)).Round(0)
	c.made = append(c.made, s)
	close(s.fired)
}

// wallAt returns what the clock read at moment t (from time.Now).
func (c *stepClock) wallAt(t time.Time) time.Time {
	off := c.off0
	for _, s := range c.made {
		if !s.when.After(t) {
			off += s.by
		}
	}
	return t.Round(0).Add(off)
}

// reach returns the first moment after start (the replica's) at which
// the clock read slot or later: the moment it ran past slot, or that of
// the step that carried it past slot; stepped tells which.
func (c *stepClock) reach(start, slot time.Time) (at time.Time, stepped bool) {
	hwm := c.wallAt(start) // the latest reading so far
	if !slot.After(hwm) {
		return start, false
	}
	from, read := start, hwm // the current run of the clock: since from, from read
	for _, s := range c.made {
		if s.when.Before(start) {
			continue
		}
		if !slot.After(s.from) {
			return from.Add(slot.Sub(read)), false
		}
		if hwm.Before(s.from) {
			hwm = s.from
		}
		if !slot.After(s.to) {
			return s.when, true
		}
		if hwm.Before(s.to) {
			hwm = s.to
		}
		from, read = s.when, s.to
	}
	return from.Add(slot.Sub(read)), false
}

// reachedLast returns the moment from which, up to end, the clock read
// slot or later (it does at end): the moment it last ran past slot, or
// that of the step that last carried it past slot; stepped tells which.
// A step back below slot after the clock first reached it sets it back:
// the replica attempts slot when its clock reaches it again.
func (c *stepClock) reachedLast(start, slot, end time.Time) (at time.Time, stepped bool) {
	from, read := start, c.wallAt(start) // the current run of the clock
	at = start
	for _, s := range c.made {
		if s.when.Before(start) || s.when.After(end) {
			continue
		}
		if read.Before(slot) && !s.from.Before(slot) {
			at, stepped = from.Add(slot.Sub(read)), false
		}
		if s.from.Before(slot) && !s.to.Before(slot) {
			at, stepped = s.when, true
		}
		from, read = s.when, s.to
	}
	if read.Before(slot) {
		at, stepped = from.Add(slot.Sub(read)), false
	}
	return at, stepped
}

// maxWall returns the latest reading of the clock from moment t0 to t1.
func (c *stepClock) maxWall(t0, t1 time.Time) time.Time {
	m := c.wallAt(t1)
	for _, s := range c.made {
		if s.when.After(t0) && !s.when.After(t1) && s.from.After(m) {
			m = s.from
		}
	}
	return m
}

// steppedForward reports whether a step forward was made from moment t0
// to t1.
func (c *stepClock) steppedForward(t0, t1 time.Time) bool {
	for _, s := range c.made {
		if s.by > 0 && !s.when.Before(t0) && !s.when.After(t1) {
			return true
		}
	}
	return false
}

// stepSummary counts the slots the stepping replica left out of full
// catch-up batches: those its clock reached by a step forward, or before
// a step forward it noticed with them, and those its clock ran past while
// it was busy.
type stepSummary struct{ stepped, busy int }

// checkAttempts asserts that the replica whose clock this is attempted
// every slot its clock reached from its first attempt on, but those it
// left out of a full catch-up batch: as (its attempts, in order; checked
// to increase by tally.check) skips a slot between two attempts A and B
// only if, from the moment its clock reached the slot to the moment B's
// attempt began (its run began, or its event came), the clock read at
// least CatchUp slots past B, so that B was the oldest slot of a batch
// that left older ones out; and it attempted every slot its clock reached
// stepTail before it stopped.
func (c *stepClock) checkAttempts(t *testing.T, as []slotAttempt, began map[time.Time]time.Time, start, stopped time.Time) stepSummary {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var sum stepSummary
	if len(as) == 0 {
		t.Errorf("the stepping replica attempted no slot; its steps: %s", c.describeLocked())
		return sum
	}
	for k := 1; k < len(as); k++ {
		a, b := as[k-1], as[k]
		begin := b.at
		if r, ok := began[b.slot]; ok && b.outcome == schedule.Ran {
			begin = r
		}
		for s := a.slot.Add(time.Second); s.Before(b.slot); s = s.Add(time.Second) {
			at, stepped := c.reach(start, s)
			if c.maxWall(at, begin).Before(b.slot.Add(scheduleCatchUp * time.Second)) {
				t.Errorf("the stepping replica did not attempt slot %v (its clock reached it %v, at %v), between %v (%v) and %v (%v, begun at %v, when its clock read %v); its steps: %s",
					s, reachedBy(stepped), at.Round(0).Format(time.TimeOnly+".000"), a.slot, a.outcome, b.slot, b.outcome,
					begin.Round(0).Format(time.TimeOnly+".000"), c.wallAt(begin).Format(time.TimeOnly+".000"), c.describeLocked())
				continue
			}
			if stepped || c.steppedForward(at, begin) {
				sum.stepped++
			} else {
				sum.busy++
			}
		}
	}
	for s := as[len(as)-1].slot.Add(time.Second); !s.After(c.wallAt(stopped)); s = s.Add(time.Second) {
		at, stepped := c.reachedLast(start, s, stopped)
		if at.Before(stopped.Add(-stepTail)) {
			t.Errorf("the stepping replica did not attempt slot %v, which its clock had read since %v (reached %v), %v before it stopped; its steps: %s",
				s, at.Round(0).Format(time.TimeOnly+".000"), reachedBy(stepped), stopped.Sub(at).Round(time.Millisecond), c.describeLocked())
		}
	}
	return sum
}

// TestStepClockTrajectory checks the row's reading of a stepping clock's
// history (pure logic): a clock 1 s ahead, stepped 5 s forward 2 s after
// start and 4 s back 2 s later.
func TestStepClockTrajectory(t *testing.T) {
	t0 := time.Now()
	w0 := t0.Round(0)
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	c := newStepClock(time.Second, nil)
	c.made = []*wallStep{
		{by: sec(5), when: t0.Add(sec(2)), from: w0.Add(sec(3)), to: w0.Add(sec(8))},
		{by: sec(-4), when: t0.Add(sec(4)), from: w0.Add(sec(10)), to: w0.Add(sec(6))},
	}
	if got := c.wallAt(t0.Add(sec(3))); !got.Equal(w0.Add(sec(9))) {
		t.Errorf("wallAt(3 s) = %v, want w0+9s", got.Sub(w0))
	}
	for _, tc := range []struct {
		slot    int // seconds after w0
		at      int // seconds after t0
		stepped bool
	}{{2, 1, false}, {5, 2, true}, {8, 2, true}, {9, 3, false}, {11, 9, false}} {
		at, stepped := c.reach(t0, w0.Add(sec(tc.slot)))
		if at.Sub(t0) != sec(tc.at) || stepped != tc.stepped {
			t.Errorf("reach(w0+%ds) = %v, %v; want %v, %v", tc.slot, at.Sub(t0), stepped, sec(tc.at), tc.stepped)
		}
	}
	// w0+7 was first reached by the step forward; the step back set the
	// clock below it, and it ran past it again 5 s after start.
	if at, stepped := c.reachedLast(t0, w0.Add(sec(7)), t0.Add(sec(6))); at.Sub(t0) != sec(5) || stepped {
		t.Errorf("reachedLast(w0+7s) = %v, %v; want 5s, false", at.Sub(t0), stepped)
	}
	if at, stepped := c.reachedLast(t0, w0.Add(sec(5)), t0.Add(sec(6))); at.Sub(t0) != sec(2) || !stepped {
		t.Errorf("reachedLast(w0+5s) = %v, %v; want 2s, true", at.Sub(t0), stepped)
	}
	if got := c.maxWall(t0.Add(sec(3)), t0.Add(sec(5))); !got.Equal(w0.Add(sec(10))) {
		t.Errorf("maxWall(3 s, 5 s) = w0+%v, want w0+10s (the reading before the step back)", got.Sub(w0))
	}
	if !c.steppedForward(t0.Add(sec(1)), t0.Add(sec(3))) || c.steppedForward(t0.Add(sec(3)), t0.Add(sec(5))) {
		t.Error("steppedForward: want the step at 2 s only")
	}
}

func reachedBy(stepped bool) string {
	if stepped {
		return "by a step forward"
	}
	return "running"
}

// describe lists the steps made: when, by how much, from which reading.
func (c *stepClock) describe() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.describeLocked()
}

func (c *stepClock) describeLocked() string {
	var parts []string
	for _, s := range c.made {
		parts = append(parts, s.by.String()+" "+s.moment.String()+" at "+s.from.Format(time.TimeOnly+".000"))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
