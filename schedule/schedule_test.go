package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/memstore"
	"github.com/baton-go/baton/schedule"
)

// slotsIn counts the whole seconds s with a < s <= b.
func slotsIn(a, b time.Time) int {
	fl := func(t time.Time) int64 {
		u := t.Unix()
		if t.Before(time.Unix(u, 0)) {
			u--
		}
		return u
	}
	return int(fl(b) - fl(a))
}

// The test on the memory backend with a fake clock: three replicas
// whose wall clocks are off by 0, +2.5s and -5s run an every-second job;
// every slot runs exactly once.
func TestExactlyOnceSkewedReplicasFakeClock(t *testing.T) {
	env := newFakeEnv(t0)
	offs := []time.Duration{0, 2500 * time.Millisecond, -5 * time.Second}
	cnt := newCounter()
	rec := newRecorder()
	for i, off := range offs {
		s := env.replica(t, fmt.Sprintf("replica-%d", i), off, schedule.WithObserver(rec.observe))
		if err := s.Add("tick", "* * * * * *", cnt.job); err != nil {
			t.Fatal(err)
		}
		start(t, s)
	}
	awaitWaiters(t, env.wall, len(offs))

	seen := 0
	end := t0.Add(66 * time.Second)
	for env.wall.Now().Before(end) {
		env.wall.Step(250 * time.Millisecond)
		want := 0
		for _, off := range offs {
			want += slotsIn(t0.Add(off), env.wall.Now().Add(off))
		}
		// Every replica attempts every slot once, when its own wall clock
		// reaches it.
		for ; seen < want; seen++ {
			if e := rec.next(t); e.Outcome != schedule.Ran && e.Outcome != schedule.AlreadyDone {
				t.Fatalf("slot %v: outcome %v (err %v), want ran or already done", e.Slot, e.Outcome, e.Err)
			}
		}
		awaitWaiters(t, env.wall, len(offs))
	}
	rec.none(t)

	runs := cnt.snapshot()
	for i := 0; i < 60; i++ {
		slot := t0.Add(time.Duration(3+i) * time.Second)
		if runs[slot] != 1 {
			t.Errorf("slot %v ran %d times, want exactly once", slot, runs[slot])
		}
	}
	for slot, n := range runs {
		if n != 1 {
			t.Errorf("slot %v ran %d times", slot, n)
		}
	}
	// The replica whose clock is ahead ran every slot it saw first.
	if len(runs) < 66 {
		t.Errorf("%d slots ran, want every second from %v on", len(runs), t0.Add(-4*time.Second))
	}
}

// LockAtLeastFor keeps the slot locked after a quick run, so a replica
// whose clock is 5s behind skips the slot even though its done-record was
// lost; without it, that replica runs the slot again.
func TestLockAtLeastForStopsLateReplicaWithoutRecord(t *testing.T) {
	for _, tc := range []struct {
		atLeast  time.Duration
		late     schedule.Outcome
		wantRuns int
	}{
		{10 * time.Second, schedule.Held, 1},
		{0, schedule.Ran, 2},
	} {
		t.Run(fmt.Sprintf("atLeast=%v", tc.atLeast), func(t *testing.T) {
			start0 := t0.Add(30 * time.Second)
			slot := t0.Add(time.Minute)
			env := newFakeEnv(start0)
			cnt := newCounter()
			onTime, late := newRecorder(), newRecorder()
			opts := []schedule.JobOption{schedule.LockAtLeastFor(tc.atLeast), schedule.LockAtMostFor(time.Minute)}
			a := env.replica(t, "on-time", 0, schedule.WithObserver(onTime.observe))
			b := env.replica(t, "late", -5*time.Second, schedule.WithObserver(late.observe))
			for _, s := range []*schedule.Scheduler{a, b} {
				if err := s.Add("report", "0 * * * * *", cnt.job, opts...); err != nil {
					t.Fatal(err)
				}
				start(t, s)
			}
			awaitWaiters(t, env.wall, 2)
			env.wall.Step(30 * time.Second) // on-time's wall clock reaches the slot
			e := onTime.expect(t, slot, schedule.Ran)
			env.ledger.Forget("report", slot) // the record is lost
			// Both loops wait for the next slot; on-time holds the lock
			// (a timer of its own) or has released it.
			holds := 0
			if tc.atLeast > 0 {
				holds = 1
			}
			awaitWaiters(t, env.wall, 2+holds)
			env.wall.Step(5 * time.Second) // late's wall clock reaches the slot
			le := late.expect(t, slot, tc.late)
			if tc.late == schedule.Held && le.Holder != "on-time" {
				t.Errorf("late replica saw holder %q, want on-time", le.Holder)
			}
			if tc.late == schedule.Ran && le.Token <= e.Token {
				t.Errorf("second run's token %d is not larger than the first's %d", le.Token, e.Token)
			}
			if got := cnt.get(slot); got != tc.wantRuns {
				t.Errorf("slot ran %d times, want %d", got, tc.wantRuns)
			}
		})
	}
}

// A replica busy with a long run misses slots; the misfire policy decides
// which of them it attempts afterwards.
func TestMisfireBusy(t *testing.T) {
	min := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	for _, tc := range []struct {
		name    string
		opts    []schedule.JobOption
		startup []time.Time // slots before the start, caught up at once
		want    []time.Time // slots attempted after the long run of slot 1
	}{
		{"skip", nil, nil, []time.Time{min(5)}},
		{"catch-up-2", []schedule.JobOption{schedule.CatchUp(2, time.Hour)}, []time.Time{min(-1), min(0)}, []time.Time{min(3), min(4), min(5)}},
		{"catch-up-2-within-90s", []schedule.JobOption{schedule.CatchUp(2, 90*time.Second)}, []time.Time{min(-1), min(0)}, []time.Time{min(4), min(5)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newFakeEnv(t0)
			rec := newRecorder()
			started, release := make(chan struct{}), make(chan struct{})
			job := func(ctx context.Context, run schedule.Run) error {
				if run.Slot.Equal(min(1)) {
					close(started)
					<-release
				}
				return nil
			}
			s := env.replica(t, "r", 0, schedule.WithObserver(rec.observe))
			if err := s.Add("report", "* * * * *", job, tc.opts...); err != nil {
				t.Fatal(err)
			}
			start(t, s)
			for _, slot := range tc.startup {
				rec.expect(t, slot, schedule.Ran)
			}
			awaitWaiters(t, env.wall, 1)
			env.wall.Step(time.Minute)
			<-started
			env.wall.Step(4 * time.Minute) // slots 2..5 pass while slot 1 runs
			close(release)
			rec.expect(t, min(1), schedule.Ran)
			for _, slot := range tc.want {
				rec.expect(t, slot, schedule.Ran)
			}
			awaitWaiters(t, env.wall, 1) // waiting for slot 6
			rec.none(t)
		})
	}
}

// Slots before a replica started: skipped by default; with CatchUp, the
// newest ones within the window are attempted, oldest first, and those the
// ledger records as done are not run again.
func TestMisfireAtStartup(t *testing.T) {
	now := t0.Add(30 * time.Second)
	for _, tc := range []struct {
		name string
		opts []schedule.JobOption
		want []schedule.Event
	}{
		{"skip", nil, nil},
		{"catch-up-3-within-150s", []schedule.JobOption{schedule.CatchUp(3, 150*time.Second)}, []schedule.Event{
			{Slot: t0.Add(-time.Minute), Outcome: schedule.AlreadyDone},
			{Slot: t0, Outcome: schedule.Ran},
		}},
		{"catch-up-1", []schedule.JobOption{schedule.CatchUp(1, 24*time.Hour)}, []schedule.Event{
			{Slot: t0, Outcome: schedule.Ran},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newFakeEnv(now)
			if err := env.ledger.Record(context.Background(), "report", t0.Add(-time.Minute), 7); err != nil {
				t.Fatal(err)
			}
			rec := newRecorder()
			cnt := newCounter()
			s := env.replica(t, "r", 0, schedule.WithObserver(rec.observe))
			if err := s.Add("report", "* * * * *", cnt.job, tc.opts...); err != nil {
				t.Fatal(err)
			}
			start(t, s)
			for _, w := range tc.want {
				rec.expect(t, w.Slot, w.Outcome)
			}
			awaitWaiters(t, env.wall, 1)
			rec.none(t)
			env.wall.Step(30 * time.Second)
			rec.expect(t, t0.Add(time.Minute), schedule.Ran)
			if got := cnt.get(t0.Add(-time.Minute)); got != 0 {
				t.Errorf("the slot recorded as done ran %d times", got)
			}
		})
	}
}

// blockingJob signals each run and blocks until its context ends, then
// returns the context's cause.
func blockingJob(started chan<- schedule.Run) schedule.Func {
	return func(ctx context.Context, run schedule.Run) error {
		started <- run
		<-ctx.Done()
		return context.Cause(ctx)
	}
}

func TestJobContextEndsWhenLeaseIsLost(t *testing.T) {
	env := newFakeEnv(t0)
	rec := newRecorder()
	started := make(chan schedule.Run, 1)
	s := env.replica(t, "r", 0, schedule.WithObserver(rec.observe))
	if err := s.Add("report", "* * * * *", blockingJob(started)); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	awaitWaiters(t, env.wall, 1)
	env.wall.Step(time.Minute)
	run := <-started
	if run.Job != "report" || !run.Slot.Equal(t0.Add(time.Minute)) || run.Lock != "report.20261130t030100z" || run.Token != 1 {
		t.Fatalf("run = %+v", run)
	}
	awaitWaiters(t, env.lockClk, 1) // the lease's renew timer
	if err := env.store.ForceRelease(context.Background(), run.Lock); err != nil {
		t.Fatal(err)
	}
	env.lockClk.Step(5 * time.Second) // the renew finds the lock gone
	e := rec.expect(t, run.Slot, schedule.Failed)
	if !errors.Is(e.Err, backend.ErrLost) {
		t.Fatalf("job's context cause = %v, want backend.ErrLost", e.Err)
	}
	if done, _ := env.ledger.Done(context.Background(), "report", run.Slot); done {
		t.Fatal("a run that ended with its lease lost was recorded as done")
	}
}

func TestJobContextEndsAtLockAtMostFor(t *testing.T) {
	env := newFakeEnv(t0)
	rec := newRecorder()
	started := make(chan schedule.Run, 1)
	s := env.replica(t, "r", 0, schedule.WithObserver(rec.observe))
	if err := s.Add("report", "* * * * *", blockingJob(started), schedule.LockAtMostFor(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	awaitWaiters(t, env.wall, 1)
	env.wall.Step(time.Minute)
	run := <-started
	awaitWaiters(t, env.wall, 1) // the lock-at-most-for timer
	env.wall.Step(30*time.Second - time.Nanosecond)
	rec.none(t)
	env.wall.Step(time.Nanosecond)
	e := rec.expect(t, run.Slot, schedule.Failed)
	if !errors.Is(e.Err, schedule.ErrLockAtMostFor) || !strings.Contains(e.Err.Error(), "30s") {
		t.Fatalf("job's context cause = %v, want ErrLockAtMostFor naming 30s", e.Err)
	}
	// The lock was released (before the loop waits for the next slot):
	// another owner can take the slot.
	awaitWaiters(t, env.wall, 1)
	if rec, err := env.store.Get(context.Background(), run.Lock); !errors.Is(err, baton.ErrNotFound) {
		t.Fatalf("slot lock after the run: %+v, %v; want released and its record removed", rec, err)
	}
}

func TestShutdownEndsJobContext(t *testing.T) {
	env := newFakeEnv(t0)
	rec := newRecorder()
	started := make(chan schedule.Run, 1)
	s := env.replica(t, "r", 0, schedule.WithObserver(rec.observe))
	if err := s.Add("report", "* * * * *", blockingJob(started)); err != nil {
		t.Fatal(err)
	}
	stop := start(t, s)
	awaitWaiters(t, env.wall, 1)
	env.wall.Step(time.Minute)
	run := <-started
	stop() // fails the test unless Run returns context.Canceled
	e := rec.expect(t, run.Slot, schedule.Failed)
	if !errors.Is(e.Err, schedule.ErrStopped) || !errors.Is(e.Err, context.Canceled) {
		t.Fatalf("job's context cause = %v, want ErrStopped and context.Canceled", e.Err)
	}
	if rec, err := env.store.Get(context.Background(), run.Lock); !errors.Is(err, baton.ErrNotFound) {
		t.Fatalf("slot lock after shutdown: %+v, %v; want released and its record removed", rec, err)
	}
}

func TestShutdownGraceExceeded(t *testing.T) {
	env := newFakeEnv(t0)
	started, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	job := func(ctx context.Context, run schedule.Run) error {
		defer wg.Done()
		close(started)
		<-release // ignores its context
		return nil
	}
	s := env.replica(t, "r", 0, schedule.WithShutdownGrace(5*time.Second))
	if err := s.Add("stubborn", "* * * * *", job); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	awaitWaiters(t, env.wall, 1)
	env.wall.Step(time.Minute)
	<-started
	cancel()
	awaitWaiters(t, env.wall, 2) // lock-at-most-for and the grace timer
	env.wall.Step(5*time.Second - time.Nanosecond)
	select {
	case err := <-errc:
		t.Fatalf("Run returned %v before the grace ended", err)
	default:
	}
	env.wall.Step(time.Nanosecond)
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return at the end of the grace")
	}
	if !errors.Is(err, baton.ErrGraceExceeded) || !strings.Contains(err.Error(), `"stubborn"`) || !strings.Contains(err.Error(), "5s") {
		t.Fatalf("Run = %v, want ErrGraceExceeded naming the job and the grace", err)
	}
	// The slot's lock stays held while the job runs.
	key, _ := schedule.LockName("stubborn", t0.Add(time.Minute))
	if rec, err := env.store.Get(context.Background(), key); err != nil || !rec.Held() {
		t.Fatalf("slot lock while the job still runs: %+v, %v; want held", rec, err)
	}
	close(release)
	wg.Wait()
	// The job's goroutine then records, releases, removes the lock's record
	// and ends (goleak checks).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := env.store.Get(context.Background(), key); errors.Is(err, baton.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("slot lock not released and removed after the job returned")
		}
		time.Sleep(time.Millisecond)
	}
}

// slowRelease delays every Release until gate is closed.
type slowRelease struct {
	*memstore.Store
	gate chan struct{}
}

func (r slowRelease) Release(ctx context.Context, g backend.Grant) error {
	select {
	case <-r.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.Store.Release(ctx, g)
}

// When the grace ends with no job running, only a held slot lock still
// being released, Run waits for the release and returns ctx's error: it
// does not report the grace exceeded by "jobs still running: []".
func TestShutdownGraceOnlyReleasesLeft(t *testing.T) {
	env := newFakeEnv(t0)
	rec := newRecorder()
	b := slowRelease{Store: env.store, gate: make(chan struct{})}
	s := env.replicaOn(t, b, "r", 0, schedule.WithShutdownGrace(time.Second), schedule.WithObserver(rec.observe))
	if err := s.Add("quick", "* * * * *", newCounter().job, schedule.LockAtLeastFor(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	awaitWaiters(t, env.wall, 1)
	env.wall.Step(time.Minute)
	rec.expect(t, t0.Add(time.Minute), schedule.Ran)
	awaitWaiters(t, env.wall, 2) // the next slot and the hold of this one
	cancel()                     // the hold ends and its release blocks
	awaitWaiters(t, env.wall, 1) // the grace timer
	env.wall.Step(time.Second)
	select {
	case err := <-errc:
		t.Fatalf("Run = %v while no job ran and a slot lock was being released; want it to wait for the release", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(b.gate)
	select {
	case err := <-errc:
		if err != context.Canceled {
			t.Fatalf("Run = %v, want context.Canceled: no job was running", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the release")
	}
}

// failingLedger fails Record (or Done) always. If records is not nil,
// each Record call sends on it before it returns.
type failingLedger struct {
	*schedule.MemoryLedger
	doneErr, recordErr error
	records            chan struct{}
}

func (l failingLedger) Done(ctx context.Context, job string, slot time.Time) (bool, error) {
	if l.doneErr != nil {
		return false, l.doneErr
	}
	return l.MemoryLedger.Done(ctx, job, slot)
}

func (l failingLedger) Record(ctx context.Context, job string, slot time.Time, token uint64) error {
	if l.records != nil {
		select {
		case l.records <- struct{}{}:
		case <-ctx.Done():
		}
	}
	if l.recordErr != nil {
		return l.recordErr
	}
	return l.MemoryLedger.Record(ctx, job, slot, token)
}

// When Record fails after the job ran, the scheduler retries, reports
// Unrecorded, and still holds the lock for LockAtLeastFor.
func TestRecordFails(t *testing.T) {
	env := newFakeEnv(t0)
	ledger := failingLedger{MemoryLedger: env.ledger, recordErr: errors.New("disk full"), records: make(chan struct{})}
	rec := newRecorder()
	cnt := newCounter()
	s, err := schedule.New(env.store, ledger, schedule.WithClock(env.wall), schedule.WithLogger(quiet),
		schedule.WithObserver(rec.observe), schedule.WithLockOptions(baton.WithClock(env.lockClk)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add("report", "* * * * *", cnt.job, schedule.LockAtLeastFor(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	awaitWaiters(t, env.wall, 1)
	env.wall.Step(time.Minute)
	// Three attempts, 500ms apart. Each retry's timer is awaited only
	// after the failed attempt it follows: while the job runs, its
	// LockAtMostFor timer also counts as one waiter.
	for i := range 3 {
		select {
		case <-ledger.records:
		case <-time.After(time.Minute):
			t.Fatalf("record attempt %d not made within a minute", i+1)
		}
		if i == 2 {
			break
		}
		awaitWaiters(t, env.wall, 1)
		rec.none(t)
		env.wall.Step(500 * time.Millisecond)
	}
	e := rec.expect(t, t0.Add(time.Minute), schedule.Unrecorded)
	if e.Err == nil || !strings.Contains(e.Err.Error(), "disk full") || cnt.get(t0.Add(time.Minute)) != 1 {
		t.Fatalf("event err = %v, runs = %d", e.Err, cnt.get(t0.Add(time.Minute)))
	}
	key, _ := schedule.LockName("report", t0.Add(time.Minute))
	if r, err := env.store.Get(context.Background(), key); err != nil || !r.Held() {
		t.Fatalf("slot lock %v, %v; want held until lock-at-least-for", r, err)
	}
}

// When the ledger cannot be read, the slot is not run.
func TestLedgerUnreadableDoesNotRun(t *testing.T) {
	env := newFakeEnv(t0)
	ledger := failingLedger{MemoryLedger: env.ledger, doneErr: errors.New("connection refused")}
	rec := newRecorder()
	cnt := newCounter()
	s, err := schedule.New(env.store, ledger, schedule.WithClock(env.wall), schedule.WithLogger(quiet),
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
		t.Fatalf("err = %v, runs = %d; want the ledger's error and no run", e.Err, cnt.get(t0.Add(time.Minute)))
	}
	key, _ := schedule.LockName("report", t0.Add(time.Minute))
	if r, err := env.store.Get(context.Background(), key); !errors.Is(err, baton.ErrNotFound) {
		t.Fatalf("slot lock %v, %v; want released and its record removed", r, err)
	}
}

func TestRunTwiceAndAddWhileRunning(t *testing.T) {
	env := newFakeEnv(t0)
	s := env.replica(t, "r", 0)
	if err := s.Add("report", "* * * * *", newCounter().job); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	awaitWaiters(t, env.wall, 1)
	if err := s.Run(context.Background()); !errors.Is(err, schedule.ErrRunning) {
		t.Errorf("second Run = %v, want ErrRunning", err)
	}
	if err := s.Add("other", "* * * * *", newCounter().job); !errors.Is(err, schedule.ErrRunning) {
		t.Errorf("Add while running = %v, want ErrRunning", err)
	}
}

// blockingLedger's Done blocks until its context ends, like a database
// that does not answer.
type blockingLedger struct {
	*schedule.MemoryLedger
	called chan struct{}
}

func (l blockingLedger) Done(ctx context.Context, job string, slot time.Time) (bool, error) {
	l.called <- struct{}{}
	<-ctx.Done()
	return false, context.Cause(ctx)
}

// A ledger that hangs does not keep Run from returning at shutdown.
func TestShutdownWhileLedgerHangs(t *testing.T) {
	env := newFakeEnv(t0)
	ledger := blockingLedger{MemoryLedger: env.ledger, called: make(chan struct{}, 1)}
	rec := newRecorder()
	cnt := newCounter()
	s, err := schedule.New(env.store, ledger, schedule.WithClock(env.wall), schedule.WithLogger(quiet),
		schedule.WithObserver(rec.observe), schedule.WithLockOptions(baton.WithClock(env.lockClk)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add("report", "* * * * *", cnt.job); err != nil {
		t.Fatal(err)
	}
	stop := start(t, s)
	awaitWaiters(t, env.wall, 1)
	env.wall.Step(time.Minute)
	<-ledger.called
	stop() // fails the test unless Run returns context.Canceled at once
	rec.none(t)
	if cnt.get(t0.Add(time.Minute)) != 0 {
		t.Fatal("the job ran although the ledger did not answer")
	}
}

// WithLockObserver sees the slot locks' events under the job's name: one
// name for every slot, so that metrics keep one set of series per job.
func TestLockObserverNamesTheJob(t *testing.T) {
	env := newFakeEnv(t0)
	var mu sync.Mutex
	kinds := map[baton.EventKind]int{}
	names := map[string]bool{}
	released := make(chan struct{}, 16)
	obs := baton.ObserverFunc(func(e baton.Event) {
		mu.Lock()
		defer mu.Unlock()
		kinds[e.Kind]++
		names[e.Name] = true
		if e.Kind == baton.EventReleased {
			released <- struct{}{}
		}
	})
	rec := newRecorder()
	s := env.replica(t, "a", 0, schedule.WithObserver(rec.observe), schedule.WithLockObserver(obs))
	if err := s.Add("tick", "* * * * * *", newCounter().job); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	for i := 1; i <= 3; i++ {
		awaitWaiters(t, env.wall, 1)
		env.wall.Step(time.Second)
		rec.expect(t, t0.Add(time.Duration(i)*time.Second), schedule.Ran)
		select {
		case <-released:
		case <-time.After(10 * time.Second):
			t.Fatalf("slot %d's lock was not released within 10s", i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(names) != 1 || !names["tick"] {
		t.Errorf("lock events named %v, want only the job's name %q", names, "tick")
	}
	if kinds[baton.EventAcquired] != 3 || kinds[baton.EventReleased] != 3 {
		t.Errorf("events by kind %v, want 3 acquisitions and 3 releases", kinds)
	}
}
