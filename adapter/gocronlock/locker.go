package gocronlock

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/go-co-op/gocron/v2"
)

// releaseTimeout bounds the release at Unlock when gocron's context has
// already ended (the scheduler is shutting down).
const releaseTimeout = 5 * time.Second

// Locker implements gocron.Locker with one baton.Mutex per job: a run
// starts only on the scheduler that acquires its job's lock; the others
// skip it. Pass it to gocron.WithDistributedLocker (every job) or
// gocron.WithDistributedJobLocker (one job).
//
// gocron locks around each run and unlocks when the run returns. A run
// that ends sooner than the time between the schedulers' timers firing
// (their clocks' offset, scheduling delay) would let a second scheduler
// lock and run the same slot again; WithMinHold keeps the lock long enough
// to cover that. Set it for every job that can end quickly.
//
// Its methods are safe for concurrent use, as gocron calls them from the
// goroutines of its jobs.
type Locker struct {
	b       backend.Backend
	prefix  string
	minHold time.Duration
	log     *slog.Logger
	mopts   []baton.Option
}

// LockerOption configures a Locker.
type LockerOption func(*Locker)

// WithPrefix sets a prefix for the lock names: job "report" locks
// prefix+"report". Use it to keep the jobs of two applications on one store
// apart, e.g. WithPrefix("billing.").
func WithPrefix(p string) LockerOption { return func(l *Locker) { l.prefix = p } }

// WithMinHold makes Unlock keep the lock until d after the run's Lock, so
// that a scheduler whose timer fires up to d later than this one's finds
// the lock held and skips the run. Pick d shorter than the job's interval
// and longer than the skew between schedulers (a second is a good start
// for jobs that run every minute or less often). Default 0: Unlock
// releases at once. If the scheduler shuts down, Unlock releases at once.
func WithMinHold(d time.Duration) LockerOption { return func(l *Locker) { l.minHold = max(d, 0) } }

// WithLogger sets the logger of the Locker and of its mutexes (unless
// WithMutexOptions sets another). Default slog.Default().
func WithLogger(log *slog.Logger) LockerOption { return func(l *Locker) { l.log = log } }

// WithMutexOptions sets the options of every job's baton.Mutex: the TTL
// (the lease is renewed while the job runs, so the TTL bounds how long a
// crashed scheduler blocks the job, not how long the job may run), the
// identity (default: one baton.DefaultIdentity() per Locker), an Observer.
func WithMutexOptions(opts ...baton.Option) LockerOption {
	return func(l *Locker) { l.mopts = append(l.mopts, opts...) }
}

// NewLocker returns a Locker on b. It checks the options (the mutex options
// as baton.NewMutex does, and that the prefix can begin a lock name).
func NewLocker(b backend.Backend, opts ...LockerOption) (*Locker, error) {
	if rv := reflect.ValueOf(b); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return nil, fmt.Errorf("gocronlock: %w: backend is a nil %T (check the error of its constructor)", backend.ErrInvalidOptions, b)
	}
	l := &Locker{b: b}
	for _, o := range opts {
		if o != nil {
			o(l)
		}
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	// One identity for every job lock of this Locker (unless the mutex
	// options set one): baton's default identity is new for every Mutex,
	// which would show a different holder for each run.
	l.mopts = append([]baton.Option{baton.WithLogger(l.log), baton.WithIdentity(baton.DefaultIdentity())}, l.mopts...)
	if l.prefix != "" {
		if err := backend.ValidateName(l.prefix + "x"); err != nil {
			return nil, fmt.Errorf("gocronlock: prefix %q cannot begin a lock name: %w", l.prefix, err)
		}
	}
	// Check the options once, with a name that is always valid.
	if _, err := baton.NewMutex(b, "gocronlock", l.mopts...); err != nil {
		return nil, fmt.Errorf("gocronlock: %w", err)
	}
	return l, nil
}

// LockName returns the lock name for gocron's key (the job's name), or an
// error matching backend.ErrInvalidName. gocron names a job after its
// function ("main.report") unless gocron.WithName says otherwise, and such
// names are not valid lock names: name every distributed job. Call
// LockName at startup to find bad names early; at run time a bad name
// makes every run of the job fail to lock, which gocron treats as "skip".
func (l *Locker) LockName(key string) (string, error) {
	name := l.prefix + key
	if err := backend.ValidateName(name); err != nil {
		return "", fmt.Errorf("gocronlock: job %q: lock name %q: %w (name the job with gocron.WithName)", key, name, err)
	}
	return name, nil
}

// Lock implements gocron.Locker: one attempt (baton.Mutex.TryLock) to take
// the job's lock. If another scheduler holds it, the error matches
// backend.ErrHeld and names the holder; gocron skips the run and passes the
// error to the job's AfterLockError listeners. Any other error (the store
// is unreachable, the name is invalid) skips the run too: without the lock
// no run starts.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	name, err := l.LockName(key)
	if err != nil {
		l.log.Error("gocronlock: the job can never run: its name is not a valid lock name", "job", key, "err", err)
		return nil, err
	}
	m, err := baton.NewMutex(l.b, name, l.mopts...)
	if err != nil {
		return nil, fmt.Errorf("gocronlock: job %q: %w", key, err)
	}
	start := time.Now()
	lease, err := m.TryLock(ctx)
	if err != nil {
		return nil, fmt.Errorf("gocronlock: job %q: %w", key, err)
	}
	return &lock{lease: lease, holdUntil: start.Add(l.minHold)}, nil
}

// lock is a held job lock.
type lock struct {
	lease     *baton.Lease
	holdUntil time.Time
}

// Unlock implements gocron.Lock: it waits until the minimum hold has passed
// (or ctx ends), then releases the lock. It returns an error matching
// backend.ErrLost if the lock was lost while the job ran.
func (k *lock) Unlock(ctx context.Context) error {
	if wait := time.Until(k.holdUntil); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		case <-k.lease.Done(): // lost: nothing left to hold
			t.Stop()
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := k.lease.Unlock(rctx); err != nil {
		return fmt.Errorf("gocronlock: %w", err)
	}
	return nil
}
