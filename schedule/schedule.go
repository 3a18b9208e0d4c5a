package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
)

// Func is a job. ctx ends when the slot's lock is lost (cause matching
// backend.ErrLost), when the run reaches LockAtMostFor (ErrLockAtMostFor), or
// when Run's context ends (ErrStopped); the job should return soon after.
// Returning nil marks the slot as done in the ledger; an error leaves it
// not done. A panic is not recovered: it ends the process, like any
// panic in a goroutine.
type Func func(ctx context.Context, run Run) error

// Run describes the slot a job runs for.
type Run struct {
	// Job is the job's name.
	Job string
	// Slot is the scheduled time this run is for, in the scheduler's
	// location (WithLocation) or the spec's CRON_TZ.
	Slot time.Time
	// Lock is the name of the slot's lock (see LockName).
	Lock string
	// Token is the fencing token of the slot's lock. Tokens are per lock,
	// hence per slot: compare a token only with tokens of the same Lock
	// (for example fence.SQLGuard with Lock as the name).
	Token uint64
}

// Scheduler runs cron jobs so that each slot of each job runs at most once
// across every replica that shares the backend and the ledger. Create it
// with New, add jobs with Add, then call Run. Its methods are safe for
// concurrent use; a job runs in a goroutine of its own, and may call them
// (Add and Run then return ErrRunning).
type Scheduler struct {
	b      backend.Backend
	ledger Ledger
	cfg    config

	mu      sync.Mutex
	jobs    []*job
	names   map[string]bool
	running bool
	// stuck is the end of an earlier Run that returned past its shutdown
	// grace while its jobs (or slot lock releases) went on, nil if none.
	stuck *stuckRun
	// removeForbidden is set once a removal was refused for lack of
	// permission (logged as a warning once).
	removeForbidden atomic.Bool
}

// stuckRun is what an earlier Run left running when its grace ended.
type stuckRun struct {
	done <-chan struct{} // closed when its jobs and releases have ended
	what string          // for the error: the jobs still running, or releases
}

type job struct {
	name string
	spec spec
	fn   Func
	jobConfig
}

// New returns a Scheduler that locks slots on b and records them in ledger.
// Every replica must use the same backend store and the same ledger. Errors
// match backend.ErrInvalidOptions and name the values involved.
func New(b backend.Backend, ledger Ledger, opts ...Option) (*Scheduler, error) {
	cfg := config{loc: time.UTC, grace: DefaultShutdownGrace}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case b == nil:
		return nil, fmt.Errorf("schedule: %w: backend is nil", backend.ErrInvalidOptions)
	case ledger == nil:
		return nil, fmt.Errorf("schedule: %w: ledger is nil", backend.ErrInvalidOptions)
	case isNilPointer(b):
		return nil, fmt.Errorf("schedule: %w: backend is a nil %T (check the error of its constructor)", backend.ErrInvalidOptions, b)
	case isNilPointer(ledger):
		return nil, fmt.Errorf("schedule: %w: ledger is a nil %T (check the error of its constructor)", backend.ErrInvalidOptions, ledger)
	case cfg.loc == nil:
		return nil, fmt.Errorf("schedule: %w: location is nil", backend.ErrInvalidOptions)
	case cfg.grace < 0:
		return nil, fmt.Errorf("schedule: %w: shutdown grace %v must not be negative", backend.ErrInvalidOptions, cfg.grace)
	}
	if cfg.clock == nil {
		cfg.clock = baton.SystemClock()
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	// One identity for every slot lock of this scheduler, unless the lock
	// options set one; the logger likewise.
	cfg.lockOpts = append([]baton.Option{baton.WithIdentity(baton.DefaultIdentity()), baton.WithLogger(cfg.logger)}, cfg.lockOpts...)
	if _, err := baton.NewMutex(b, "schedule-probe", cfg.lockOpts...); err != nil {
		return nil, fmt.Errorf("schedule: lock options: %w", err)
	}
	return &Scheduler{b: b, ledger: ledger, cfg: cfg, names: make(map[string]bool)}, nil
}

// isNilPointer reports whether v holds a nil pointer: an interface that is
// not nil, but whose methods would panic at the first slot.
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// Add registers a job: fn runs for every slot of spec, on one replica.
//
// spec is a cron spec as parsed by github.com/robfig/cron/v3: five fields
// (minute hour day-of-month month day-of-week), or six with a leading
// seconds field; descriptors such as @daily or @every 15m; and an optional
// CRON_TZ=Zone prefix. Slots of "@every d" are the multiples of d since
// the Unix epoch, so that all replicas agree on them; d must be a positive
// whole number of seconds (cron's parser would run "@every 0s" or
// "@every 500ms" every second: Add refuses them).
//
// name is the job's name: a valid lock name (backend.ValidateName) of at most
// MaxJobNameLength characters, unique in the scheduler, and the same on
// every replica. It names the job's slot locks and ledger records, so two
// different jobs must not share a name on one backend or ledger, and no
// other lock of the backend should be named like a slot lock (see
// LockName). Errors match ErrInvalidSpec, backend.ErrInvalidName or
// backend.ErrInvalidOptions, and Add after Run started returns ErrRunning.
func (s *Scheduler) Add(name, cronSpec string, fn Func, opts ...JobOption) error {
	if err := validateJobName(name); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("schedule: job %q: %w: func is nil", name, backend.ErrInvalidOptions)
	}
	jc := jobConfig{atMost: DefaultLockAtMostFor}
	for _, o := range opts {
		if o != nil {
			o(&jc)
		}
	}
	if err := jc.validate(); err != nil {
		return fmt.Errorf("schedule: job %q: %w", name, err)
	}
	sp, err := parseSpec(cronSpec, s.cfg.loc)
	if err != nil {
		return fmt.Errorf("schedule: job %q: %w", name, err)
	}
	if now := s.cfg.clock.Now(); sp.next(now).IsZero() {
		return fmt.Errorf("schedule: job %q: %w %q: no slot within five years after %v", name, ErrInvalidSpec, cronSpec, now.In(s.cfg.loc))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.running:
		return fmt.Errorf("schedule: job %q: %w", name, ErrRunning)
	case s.names[name]:
		return fmt.Errorf("schedule: job %q: %w: a job of that name was already added", name, backend.ErrInvalidOptions)
	}
	s.names[name] = true
	s.jobs = append(s.jobs, &job{name: name, spec: sp, fn: fn, jobConfig: jc})
	return nil
}

// Run runs the jobs until ctx ends. Each job has its own loop: it waits
// for the job's next slot on this replica's wall clock and attempts it
// (see the package documentation); a replica runs one slot of a job at a
// time.
//
// When ctx ends, the contexts of running jobs end with cause ErrStopped,
// and Run waits up to the shutdown grace (WithShutdownGrace) for them to
// return. It then returns ctx.Err(), or, if a job is still running, an
// error matching baton.ErrGraceExceeded that names it; that job keeps its
// slot's lock until it returns, and the process should exit. A later Run
// returns such an error at once for as long as that job runs, so that no
// job runs twice at once on this replica. If no job runs when the grace
// ends but slot locks are still being released, Run waits for those
// releases (each is bounded by a few seconds).
func (s *Scheduler) Run(ctx context.Context) error {
	s.mu.Lock()
	if err := s.busyLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	s.running = true
	jobs := s.jobs
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
	}()

	var (
		wg     sync.WaitGroup
		busyMu sync.Mutex
		busy   = make(map[string]bool)
	)
	for _, j := range jobs {
		wg.Go(func() {
			s.loop(ctx, j, &wg, func(b bool) {
				busyMu.Lock()
				busy[j.name] = b
				busyMu.Unlock()
			})
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	<-ctx.Done()
	t := s.cfg.clock.NewTimer(s.cfg.grace)
	defer t.Stop()
	select {
	case <-done:
		return ctx.Err()
	case <-t.C():
	}
	select {
	case <-done: // returned just at the deadline
		return ctx.Err()
	default:
	}
	busyMu.Lock()
	var names []string
	for _, j := range jobs {
		if busy[j.name] {
			names = append(names, j.name)
		}
	}
	busyMu.Unlock()
	if len(names) == 0 {
		// No job runs: what is left are releases of slot locks whose
		// hold ended with ctx, each bounded by releaseTimeout. Wait for
		// them rather than report jobs that do not run.
		rt := s.cfg.clock.NewTimer(releaseTimeout)
		defer rt.Stop()
		select {
		case <-done:
			return ctx.Err()
		case <-rt.C():
		}
		s.leftRunning(done, "slot locks are still being released")
		return fmt.Errorf("schedule: %w (%v): slot locks still being released %v later", baton.ErrGraceExceeded, s.cfg.grace, releaseTimeout)
	}
	s.leftRunning(done, fmt.Sprintf("jobs still running: %q", names))
	return fmt.Errorf("schedule: %w (%v): jobs still running: %q", baton.ErrGraceExceeded, s.cfg.grace, names)
}

// busyLocked returns ErrRunning while a Run is in progress, and an error
// matching baton.ErrGraceExceeded while what an earlier Run left running
// past its grace still runs: a job's loop started again beside it would
// run the job twice at once on this replica. s.mu must be held.
func (s *Scheduler) busyLocked() error {
	if s.running {
		return fmt.Errorf("schedule: %w", ErrRunning)
	}
	if s.stuck == nil {
		return nil
	}
	select {
	case <-s.stuck.done:
		s.stuck = nil
		return nil
	default:
		return fmt.Errorf("schedule: %w: an earlier Run's %s; Run starts again once they end", baton.ErrGraceExceeded, s.stuck.what)
	}
}

// leftRunning records that Run returns past its grace while what goes on
// until done is closed.
func (s *Scheduler) leftRunning(done <-chan struct{}, what string) {
	s.mu.Lock()
	s.stuck = &stuckRun{done: done, what: what}
	s.mu.Unlock()
}

// loop runs one job's slots until ctx ends.
func (s *Scheduler) loop(ctx context.Context, j *job, wg *sync.WaitGroup, setBusy func(bool)) {
	log := s.cfg.logger.With("job", j.name)
	clk := s.cfg.clock
	now := clk.Now()
	cursor := now
	if j.catchUp > 0 {
		// Slots that passed before this replica started count as missed.
		cursor = now.Add(-j.within)
		slots, left := j.spec.newest(cursor, now, j.catchUp)
		if left {
			log.InfoContext(ctx, "schedule: missed slots skipped", "before", slots[0], "catch_up", j.catchUp)
		}
		for _, slot := range slots {
			if ctx.Err() != nil {
				return
			}
			s.attempt(ctx, j, slot, wg, setBusy)
		}
		cursor = now
	}
	for {
		next := j.spec.next(cursor)
		if next.IsZero() {
			log.WarnContext(ctx, "schedule: no slot within five years; the job's loop ends", "after", cursor)
			return
		}
		if !s.sleepUntil(ctx, next) {
			return
		}
		now := clk.Now()
		slots, left := j.spec.newest(cursor, now, j.catchUp+1)
		if len(slots) == 0 {
			// The wall clock went back since it reached next. The
			// cursor stays: moved back with it, it would bring round
			// again the slots handled before the step.
			continue
		}
		cursor = now
		// The newest due slot is the current one; older ones were missed
		// and are attempted only if CatchUp allows and they are recent
		// enough.
		if j.catchUp > 0 {
			oldest := now.Add(-j.within)
			for len(slots) > 1 && slots[0].Before(oldest) {
				slots, left = slots[1:], true
			}
		}
		if left {
			log.InfoContext(ctx, "schedule: missed slots skipped", "before", slots[0], "catch_up", j.catchUp)
		}
		for _, slot := range slots {
			if ctx.Err() != nil {
				return
			}
			s.attempt(ctx, j, slot, wg, setBusy)
		}
	}
}

// sleepUntil waits until the wall clock reads at least t, re-reading it at
// least every maxWait. It reports false if ctx ended first.
func (s *Scheduler) sleepUntil(ctx context.Context, t time.Time) bool {
	for {
		if ctx.Err() != nil {
			return false
		}
		d := t.Sub(s.cfg.clock.Now())
		if d <= 0 {
			return true
		}
		timer := s.cfg.clock.NewTimer(min(d, maxWait))
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-timer.C():
		}
	}
}

func (s *Scheduler) observe(e Event) {
	if s.cfg.observer != nil {
		s.cfg.observer(e)
	}
}

// attempt runs one slot if this replica gets its lock and the ledger does
// not record it as done.
func (s *Scheduler) attempt(ctx context.Context, j *job, slot time.Time, wg *sync.WaitGroup, setBusy func(bool)) {
	key := lockName(j.name, slot)
	log := s.cfg.logger.With("job", j.name, "slot", slot, "lock", key)
	ev := Event{Job: j.name, Slot: slot}
	setBusy(true)
	defer setBusy(false)
	fail := func(msg string, err error) {
		log.ErrorContext(ctx, msg, "err", err)
		ev.Outcome, ev.Err = Error, err
		s.observe(ev)
	}
	m, err := baton.NewMutex(s.b, key, s.lockOptions(j)...)
	if err != nil {
		fail("schedule: cannot make the slot's lock", err)
		return
	}
	lease, err := m.TryLock(ctx)
	if err != nil {
		var held *backend.HeldError
		switch {
		case errors.As(err, &held):
			log.DebugContext(ctx, "schedule: slot lock held by another replica; skipping", "holder", held.Holder)
			ev.Outcome, ev.Holder = Held, held.Holder
			s.observe(ev)
		case ctx.Err() != nil:
		default:
			fail("schedule: cannot lock the slot; skipping it", err)
		}
		return
	}
	ev.Token = lease.Token()
	log = log.With("token", lease.Token())
	runCtx, end := s.runContext(ctx, j, lease)
	done, err := s.ledger.Done(runCtx, j.name, slot)
	if err != nil {
		err = withCause(runCtx, err)
		end()
		s.release(ctx, lease, key, log)
		if ctx.Err() == nil {
			fail("schedule: cannot read the ledger; not running the slot", err)
		}
		return
	}
	if done {
		end()
		s.release(ctx, lease, key, log)
		log.DebugContext(ctx, "schedule: slot already done")
		ev.Outcome = AlreadyDone
		s.observe(ev)
		return
	}

	jobErr := j.fn(runCtx, Run{Job: j.name, Slot: slot, Lock: key, Token: lease.Token()})
	end()
	ev.Outcome, ev.Err = s.recordRun(ctx, j, slot, lease, jobErr, log)
	s.observe(ev)
	s.hold(ctx, slot.Add(j.atLeast), lease, func() { s.release(ctx, lease, key, log) }, wg)
}

// withCause adds to err, the error of a call made with ctx, why ctx
// ended, if it did and err does not say it already. A ledger that does not
// answer (a paused pooler, an unreachable database) fails only with the
// driver's "context canceled", which names neither LockAtMostFor nor the
// loss of the slot's lock.
func withCause(ctx context.Context, err error) error {
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(err, cause) {
		return err
	}
	return fmt.Errorf("%w (the run's context ended: %w)", err, cause)
}

// recordRun records slot in the ledger if j's run returned nil (jobErr),
// and returns the slot's outcome: Ran, Failed or Unrecorded, with the
// error.
func (s *Scheduler) recordRun(ctx context.Context, j *job, slot time.Time, lease *baton.Lease, jobErr error, log *slog.Logger) (Outcome, error) {
	if jobErr != nil {
		log.ErrorContext(ctx, "schedule: job failed; the slot is not recorded", "err", jobErr)
		return Failed, jobErr
	}
	if lerr := lease.Err(); lerr != nil {
		log.WarnContext(ctx, "schedule: job returned after its slot lock ended; recording the slot anyway", "lease_err", lerr)
	}
	if err := s.record(ctx, j.name, slot, lease.Token(), log); err != nil {
		log.ErrorContext(ctx, "schedule: job ran but its slot could not be recorded; it may run again", "err", err)
		return Unrecorded, err
	}
	log.InfoContext(ctx, "schedule: job ran")
	return Ran, nil
}

// release releases a slot's lock, within releaseTimeout even after ctx
// ended, then removes the lock's record under the same timeout, so that a
// shutdown waits no longer for both than for a release. A claim the
// release could not clear stays until it expires, and so does the record.
func (s *Scheduler) release(ctx context.Context, lease *baton.Lease, key string, log *slog.Logger) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := lease.Unlock(rctx); err != nil && !errors.Is(err, backend.ErrLost) {
		log.WarnContext(ctx, "schedule: releasing the slot lock failed; it will expire", "err", err)
		return
	}
	s.removeLock(rctx, key, log)
}

// removeLock removes the record of a slot's lock, released by this
// replica, where the backend can (backend.Remover) and KeepSlotLocks was
// not given, whatever the slot's outcome. Each slot has a lock name of its
// own, and the ledger, not the lock's record, says whether the slot is
// done: a replica that reaches the slot later (its clock behind) creates
// the record again, with a larger token, and runs the slot only if the
// ledger does not record it (a slot that failed, or whose recording
// failed, runs again as it would with the record kept), then removes the
// record in turn. So removal changes nothing about which slots run; it
// keeps the store from keeping a record per run for ever, failed runs
// included (on Kubernetes, one object per failed night would count
// against a ResourceQuota until creates are refused). A failure leaves
// the record, as before. ctx bounds the call.
func (s *Scheduler) removeLock(ctx context.Context, key string, log *slog.Logger) {
	rm, ok := s.b.(backend.Remover)
	if !ok || s.cfg.keepLocks {
		return
	}
	err := rm.Remove(ctx, key)
	switch {
	case err == nil:
	case errors.Is(err, backend.ErrHeld):
		log.DebugContext(ctx, "schedule: slot lock held again before its removal; its holder removes it", "err", err)
	case errors.Is(err, backend.ErrForbidden):
		// The same answer for every slot: say it once per scheduler.
		lvl := slog.LevelDebug
		if s.removeForbidden.CompareAndSwap(false, true) {
			lvl = slog.LevelWarn
		}
		log.Log(ctx, lvl, "schedule: the store does not let this replica remove slot lock records, so they pile up, "+
			"one per run; grant the permission the error names, or give schedule.KeepSlotLocks()", "err", err)
	default:
		log.WarnContext(ctx, "schedule: removing the slot lock's record failed; it stays in the store", "err", err)
	}
}

// lockOptions returns the options of j's slot locks: WithLockOptions's,
// and WithLockObserver's observer under j's name.
func (s *Scheduler) lockOptions(j *job) []baton.Option {
	o := s.cfg.lockObserver
	if o == nil {
		return s.cfg.lockOpts
	}
	rename := baton.ObserverFunc(func(e baton.Event) {
		e.Name = j.name
		o.Observe(e)
	})
	return append(slices.Clip(s.cfg.lockOpts), baton.WithObserver(rename))
}

// runContext returns the context of a slot's run (the ledger check and
// the job): the lease's context, ended also LockAtMostFor from now and when
// ctx ends. end stops its timer and goroutine.
func (s *Scheduler) runContext(ctx context.Context, j *job, lease *baton.Lease) (runCtx context.Context, end func()) {
	runCtx, cancel := context.WithCancelCause(lease.Context())
	stop := context.AfterFunc(ctx, func() { cancel(fmt.Errorf("%w: %w", ErrStopped, context.Cause(ctx))) })
	timer := s.cfg.clock.NewTimer(j.atMost)
	returned, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-timer.C():
			cancel(fmt.Errorf("%w (%v)", ErrLockAtMostFor, j.atMost))
		case <-returned:
		}
	}()
	return runCtx, func() {
		stop()
		timer.Stop()
		close(returned)
		<-exited
		cancel(nil)
	}
}

// record calls Ledger.Record, retrying a few times. It does not stop when
// ctx ends: the job has run, and the record is what keeps it from running
// again.
func (s *Scheduler) record(ctx context.Context, job string, slot time.Time, token uint64, log *slog.Logger) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	var err error
	for i := range recordAttempts {
		if i > 0 {
			t := s.cfg.clock.NewTimer(recordRetry)
			select {
			case <-t.C():
			case <-rctx.Done():
				t.Stop()
				return err
			}
		}
		if err = s.ledger.Record(rctx, job, slot, token); err == nil {
			return nil
		}
		log.WarnContext(ctx, "schedule: recording the slot failed", "attempt", i+1, "err", err)
	}
	return err
}

// hold keeps the lease until the wall clock reads until, then releases
// it. It does not block: the wait runs in a goroutine counted in wg. The
// hold ends early when ctx ends or the lease is lost.
func (s *Scheduler) hold(ctx context.Context, until time.Time, lease *baton.Lease, release func(), wg *sync.WaitGroup) {
	d := until.Sub(s.cfg.clock.Now())
	if d <= 0 || ctx.Err() != nil || lease.Err() != nil {
		release()
		return
	}
	t := s.cfg.clock.NewTimer(d)
	wg.Go(func() {
		defer release()
		defer t.Stop()
		select {
		case <-t.C():
		case <-ctx.Done():
		case <-lease.Done():
		}
	})
}
