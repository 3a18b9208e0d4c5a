package schedule

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
)

// Errors of this package. Match them with errors.Is. Invalid options match
// backend.ErrInvalidOptions and invalid job names backend.ErrInvalidName.
var (
	// ErrInvalidSpec: a cron spec cannot be parsed or has no future slot.
	ErrInvalidSpec = errors.New("invalid cron spec")
	// ErrLockAtMostFor is the cause of a job's context when the job ran
	// for its LockAtMostFor.
	ErrLockAtMostFor = errors.New("job ran for its lock-at-most-for")
	// ErrStopped is the cause of a job's context when Run's context ended.
	ErrStopped = errors.New("scheduler stopped")
	// ErrRunning: Run was called while a Run is in progress, or Add after
	// Run started.
	ErrRunning = errors.New("scheduler is running")
)

// Defaults.
const (
	// DefaultLockAtMostFor bounds a run when LockAtMostFor is not given.
	DefaultLockAtMostFor = time.Hour
	// DefaultShutdownGrace is how long Run waits for running jobs after its
	// context ended.
	DefaultShutdownGrace = 10 * time.Second
	// MaxCatchUp is the largest number of missed slots CatchUp accepts.
	MaxCatchUp = 1000
)

// Internal timings.
const (
	// maxWait is the longest single timer wait: the wall clock is read
	// again at least this often, so a wall-clock step is noticed.
	maxWait = time.Minute
	// recordAttempts and recordRetry: Record is tried this many times,
	// this far apart, while the slot lock is held.
	recordAttempts = 3
	recordRetry    = 500 * time.Millisecond
	recordTimeout  = 10 * time.Second
	releaseTimeout = 5 * time.Second
)

// Option configures New.
type Option func(*config)

type config struct {
	clock    baton.Clock
	loc      *time.Location
	logger   *slog.Logger
	lockOpts []baton.Option
	grace    time.Duration
	observer func(Event)
	// lockObserver observes the slot locks under the job's name.
	lockObserver baton.Observer
	// keepLocks: do not remove slot lock records (KeepSlotLocks).
	keepLocks bool
}

// WithClock sets the clock that decides slot times (its Now is this
// replica's wall clock) and runs the scheduler's timers (waiting for a
// slot, LockAtMostFor, LockAtLeastFor). Default baton.SystemClock(). The
// locks' clock is baton's: set it with WithLockOptions(baton.WithClock(c)).
func WithClock(c baton.Clock) Option { return func(cfg *config) { cfg.clock = c } }

// WithLocation sets the time zone in which cron specs without a CRON_TZ=
// prefix are read. Default UTC, so that replicas with different local time
// zones compute the same slots.
func WithLocation(loc *time.Location) Option { return func(cfg *config) { cfg.loc = loc } }

// WithLogger sets the structured logger, also given to the slot locks.
// Default slog.Default(). The handler gets Run's context with each line
// (the slot locks' lines too), so that it can add values from it, such as
// a trace ID.
func WithLogger(l *slog.Logger) Option { return func(cfg *config) { cfg.logger = l } }

// WithLockOptions sets options for the lock of every slot (TTL, identity,
// clock, observer). They are validated by New. For metrics, prefer
// WithLockObserver to baton.WithObserver here.
func WithLockOptions(opts ...baton.Option) Option {
	return func(cfg *config) { cfg.lockOpts = append(cfg.lockOpts, opts...) }
}

// WithLockObserver has o observe the events of every slot's lock
// (acquisition, renew failures, loss, release: see baton.Event) with the
// job's name as the event's Name, so that a metrics collector such as
// batonprom's keeps one set of series per job. Given through
// WithLockOptions(baton.WithObserver(o)) instead, o would see each slot's
// own lock name ("nightly-report.20261130t030000z") and keep series for
// every slot ever run, which nothing removes. A lock has one observer:
// this one replaces an observer given through WithLockOptions (combine
// several with baton.Observers).
func WithLockObserver(o baton.Observer) Option {
	return func(cfg *config) { cfg.lockObserver = o }
}

// KeepSlotLocks keeps the record of every slot's lock in the store. By
// default, where the backend implements backend.Remover, the scheduler
// removes a slot's lock record once its lock is released (after
// LockAtLeastFor), whatever the run's outcome, since each slot has a lock
// name of its own and the records would otherwise pile up: one per run,
// failed runs included, for ever. Keep them to inspect them, on Kubernetes where the
// scheduler's identity may not delete lock objects (which would otherwise
// be logged once as a warning), or on the file backend while processes
// built with a version of filestore without Store.Remove share the lock
// directory (see filestore's "Removing locks").
func KeepSlotLocks() Option { return func(cfg *config) { cfg.keepLocks = true } }

// WithShutdownGrace sets how long Run waits for running jobs to return
// after its context ended (their contexts end at once). Default
// DefaultShutdownGrace.
func WithShutdownGrace(d time.Duration) Option { return func(cfg *config) { cfg.grace = d } }

// WithObserver sets a function that receives an Event for every slot this
// replica attempted, for metrics and tests. It is called synchronously
// from the job's goroutine and must not block. Every job has a goroutine
// of its own, so the jobs of one Scheduler (and Schedulers that share the
// function) call it at once: it must be safe for concurrent use. Slots
// skipped by the misfire policy are logged, not observed.
func WithObserver(f func(Event)) Option { return func(cfg *config) { cfg.observer = f } }

// JobOption configures a job added with Scheduler.Add.
type JobOption func(*jobConfig)

type jobConfig struct {
	atLeast, atMost time.Duration
	catchUp         int
	within          time.Duration
}

// LockAtLeastFor keeps a slot's lock held until at least d after the slot
// time (as read on this replica's wall clock), even if the job returned
// sooner. A replica whose wall clock is behind by less than d then finds
// the slot's lock held and skips the slot, even if the ledger lost the
// slot's record or Record failed. Default 0. It must not exceed
// LockAtMostFor. The hold does not delay this replica's next slots, and it
// ends early when Run's context ends.
func LockAtLeastFor(d time.Duration) JobOption { return func(c *jobConfig) { c.atLeast = d } }

// LockAtMostFor bounds a run: the job's context ends d after the slot's
// lock was acquired, with cause ErrLockAtMostFor. Default
// DefaultLockAtMostFor; must be positive.
func LockAtMostFor(d time.Duration) JobOption { return func(c *jobConfig) { c.atMost = d } }

// CatchUp sets the misfire policy: when this replica finds that slots
// passed without it attempting them (it was not running, or busy with an
// earlier run of the job, or its wall clock jumped), it attempts at most n
// of them, the newest ones, oldest first, and only those not older than
// within. Slots the ledger records as done are skipped as always. CatchUp(0,
// 0), the default, skips every missed slot.
//
// When the replica becomes free again or notices a jump of its wall clock,
// the newest slot that has passed is the current one, not a missed one: it
// is attempted however late, under every policy (an hourly job whose 04:00
// run lasted until 06:50 runs the 06:00 slot at 06:50, unless another
// replica ran it).
func CatchUp(n int, within time.Duration) JobOption {
	return func(c *jobConfig) { c.catchUp, c.within = n, within }
}

func (c *jobConfig) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{backend.ErrInvalidOptions}, args...)...)
	}
	switch {
	case c.atMost <= 0:
		return bad("lock-at-most-for %v must be positive", c.atMost)
	case c.atLeast < 0:
		return bad("lock-at-least-for %v must not be negative", c.atLeast)
	case c.atLeast > c.atMost:
		return bad("lock-at-least-for %v must not exceed lock-at-most-for %v", c.atLeast, c.atMost)
	case c.catchUp < 0:
		return bad("catch-up count %d must not be negative", c.catchUp)
	case c.catchUp > MaxCatchUp:
		return bad("catch-up count %d exceeds the maximum %d", c.catchUp, MaxCatchUp)
	case c.catchUp > 0 && c.within <= 0:
		return bad("catch-up of %d slots needs a positive window, got %v", c.catchUp, c.within)
	case c.catchUp == 0 && c.within != 0:
		return bad("catch-up window %v given with a catch-up count of 0", c.within)
	}
	return nil
}

// Outcome says what a replica did with a slot.
type Outcome int

const (
	// Ran: the job returned nil and the slot was recorded.
	Ran Outcome = iota + 1
	// Failed: the job returned an error (Event.Err); the slot was not
	// recorded.
	Failed
	// Unrecorded: the job returned nil but Record failed (Event.Err).
	Unrecorded
	// AlreadyDone: the ledger records the slot as done; the job did not run.
	AlreadyDone
	// Held: another owner held the slot's lock; the job did not run.
	Held
	// Error: the lock or the ledger failed (Event.Err); the job did not run.
	Error
)

var outcomeNames = [...]string{Ran: "ran", Failed: "failed", Unrecorded: "unrecorded", AlreadyDone: "already_done", Held: "held", Error: "error"}

func (o Outcome) String() string {
	if o > 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Event is what an observer (WithObserver) receives for each slot this
// replica attempted.
type Event struct {
	Job     string
	Slot    time.Time
	Outcome Outcome
	// Token is the fencing token of the slot's lock, if this replica got it.
	Token uint64
	// Holder is the lock's holder when Outcome is Held.
	Holder string
	Err    error
}
