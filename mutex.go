package baton

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"time"

	"github.com/baton-go/baton/backend"
)

// A Mutex is a distributed mutual-exclusion lock named Name on a Backend.
//
// Lock and TryLock return a *Lease: the proof of holding, with a fencing
// token and a context that ends no later than the holder's validity. A Mutex
// may be used by many goroutines at once; every Lock call is a separate
// contender with its own nonce, so two goroutines of one process exclude
// each other like two processes do.
//
// Create a Mutex with NewMutex: unlike a sync.Mutex, its zero value is not
// usable.
type Mutex struct {
	b      backend.Backend
	name   string
	cfg    *config
	starts keeperStarts // starts its leases' keepers (real clock)
}

// NewMutex returns a Mutex for the lock name on b. It validates b (not nil,
// nor a nil pointer), the name (see ValidateName) and the options; errors
// name the values involved and match ErrInvalidName or ErrInvalidOptions. Elector-only options
// (WithGrace, WithReleaseOnCancel and the On... callbacks) are refused: a
// Mutex would ignore them.
func NewMutex(b backend.Backend, name string, opts ...Option) (*Mutex, error) {
	return newMutex(b, name, false, opts)
}

// newMutex is NewMutex, and NewElector's Mutex if forElector.
func newMutex(b backend.Backend, name string, forElector bool, opts []Option) (*Mutex, error) {
	if err := checkBackend(b); err != nil {
		return nil, err
	}
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("baton: %w", err)
	}
	cfg, err := newConfig(opts)
	if err == nil {
		err = cfg.checkKind(forElector)
	}
	if err != nil {
		return nil, fmt.Errorf("baton: lock %q: %w", name, err)
	}
	return &Mutex{b: b, name: name, cfg: cfg}, nil
}

// checkBackend refuses a nil backend, and a nil pointer (a store whose
// constructor's error was ignored), whose methods would panic at the first
// Lock.
func checkBackend(b backend.Backend) error {
	if b == nil {
		return fmt.Errorf("baton: %w: backend is nil", ErrInvalidOptions)
	}
	if rv := reflect.ValueOf(b); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return fmt.Errorf("baton: %w: backend is a nil %T (check the error of its constructor)", ErrInvalidOptions, b)
	}
	return nil
}

// Name returns the lock name.
func (m *Mutex) Name() string { return m.name }

// Identity returns the holder identity this Mutex acquires with.
func (m *Mutex) Identity() string { return m.cfg.identity }

// TryLock makes one attempt to acquire the lock. If another owner holds it,
// the error matches ErrHeld and unwraps (errors.As) to *HeldError naming the
// holder.
//
// If the store grants the lock only at or after the renew deadline of the
// request (see Lease, "Clock model"), TryLock releases it and returns an
// error matching ErrUnavailable: the holder's validity would already be
// over.
//
// The Lease's context is derived from ctx's values but not its cancellation:
// ctx bounds the attempt, not the tenure. End the tenure with Lease.Unlock.
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) {
	start := m.cfg.clock.Now()
	l, err := m.try(ctx, context.WithoutCancel(ctx), NewNonce(), false)
	if err != nil {
		return nil, m.wrap(err)
	}
	m.cfg.observeAcquired(l, Event{Kind: EventAcquired, Name: m.name, Holder: m.cfg.identity, Token: l.Token(), Duration: m.cfg.clock.Since(start)})
	return l, nil
}

// Lock blocks until it holds the lock, ctx ends, or the backend returns an
// error that retrying cannot fix (invalid name, corrupt record, permission).
// While the lock is held by another owner it waits for the backend's watch
// (if the backend is a Watcher), retrying on its own only when the backend
// expects the current claim can first end (HeldError.RetryAfter); without a
// watch it retries every RetryPeriod with jitter, and no later than that.
//
// If ctx ends first, the error matches ctx.Err() and, if the lock was held
// at the last answered attempt, ErrHeld (unwrapping to *HeldError with the
// holder). If ctx ended an attempt that had no answer yet, the message
// says so and how long that attempt had waited: a store that went silent
// during the wait shows as an answer long overdue.
//
// As with TryLock, the Lease's context keeps ctx's values but not its
// cancellation.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	l, err := m.lock(ctx, context.WithoutCancel(ctx), nil)
	if err != nil {
		return nil, m.wrap(err)
	}
	return l, nil
}

// wrap prefixes err with the lock's name, unless err names it already (a
// HeldError does), so that no message says `lock "x": lock "x" is held`.
func (m *Mutex) wrap(err error) error {
	if strings.Contains(err.Error(), fmt.Sprintf("lock %q", m.name)) {
		return fmt.Errorf("baton: %w", err)
	}
	return fmt.Errorf("baton: lock %q: %w", m.name, err)
}

// lock waits for the lock; parent is the parent of the Lease's context;
// observe (optional) is told the holder seen at every conflict.
func (m *Mutex) lock(ctx, parent context.Context, observe func(holder string)) (*Lease, error) {
	_, canWatch := m.b.(backend.Watcher)
	// One nonce for every attempt of this call: only one of them can
	// acquire, and a store that hands the lock to a waiter in order can
	// then write the claim with the nonce the waiter will present.
	return m.cfg.await(ctx, parent, m.name, lockAttempts{m, NewNonce(), observe}, canWatch, observe)
}

// lockAttempts are the attempts of one Mutex.lock call.
type lockAttempts struct {
	m       *Mutex
	nonce   string
	observe func(holder string)
}

func (a lockAttempts) claim(ctx, parent context.Context) (*Lease, error) {
	return a.m.try(ctx, parent, a.nonce, true)
}

func (a lockAttempts) watch(ctx context.Context) (<-chan struct{}, error) {
	if ww, ok := a.m.b.(backend.WaiterWatcher); ok && a.observe == nil {
		// Only this contender's chances matter, not who else holds.
		return ww.WatchWaiter(ctx, a.m.name, a.m.cfg.identity)
	}
	return a.m.b.(backend.Watcher).Watch(ctx, a.m.name)
}

// try makes one attempt with nonce; waiting says whether the caller will
// keep trying.
func (m *Mutex) try(ctx, parent context.Context, nonce string, waiting bool) (*Lease, error) {
	req := backend.Request{Holder: m.cfg.identity, Nonce: nonce, TTL: m.cfg.ttl, Waiting: waiting}
	sent := m.cfg.clock.Now()
	g, err := m.b.TryAcquire(ctx, m.name, req)
	if err != nil {
		var held *HeldError
		switch {
		case errors.As(err, &held):
			m.observe(Event{Kind: EventHeld, Name: m.name, Holder: held.Holder, Token: held.Token, Duration: held.RetryAfter})
		case ctx.Err() == nil:
			m.observe(Event{Kind: EventAcquireFailed, Name: m.name, Holder: req.Holder, Err: err})
		}
		return nil, err
	}
	if g.Holder != req.Holder || g.Nonce != req.Nonce || g.Key != m.name {
		// A backend bug; refuse to build a lease on a grant that is not ours.
		return nil, fmt.Errorf("backend returned a grant for %q/%q on %q, asked for %q/%q on %q",
			g.Holder, g.Nonce, g.Key, req.Holder, req.Nonce, m.name)
	}
	if g.Age < 0 {
		return nil, fmt.Errorf("backend returned a grant on %q with negative age %v", m.name, g.Age)
	}
	// A lock handed to this waiter counts from a request sent before the
	// handoff (backend.Grant.Age), not from this call.
	from := sent.Add(-g.Age)
	took := m.cfg.clock.Since(from)
	if took >= m.cfg.renewDeadline {
		err := m.refuseLate(ctx, g, took)
		m.observe(Event{Kind: EventAcquireFailed, Name: m.name, Holder: req.Holder, Err: err})
		return nil, err
	}
	if g.Age > 0 {
		took = 0 // a wait for the handoff, not a round trip
	}
	return newLease(m, parent, g, from, took), nil
}

// refuseLate releases g, a grant that came at or after the renew deadline
// of the request it counts from, and says why it is not handed out. Its
// holder would step down the moment its keeper first ran, and until then
// its context would be live past the renew deadline, with less than the
// margin the deadline keeps before ValidUntil (a store that answered after
// a long outage or a long queue of retries does this). The caller retries
// as it would after any store error; the token it consumed is not reused.
func (m *Mutex) refuseLate(ctx context.Context, g backend.Grant, took time.Duration) error {
	err := fmt.Errorf("%w: the store granted token %d %v after the request it counts from was sent, not before the renew deadline %v: its validity was as good as over, so it was not handed out",
		ErrUnavailable, g.Token, took.Round(time.Millisecond), m.cfg.renewDeadline)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.renewDeadline)
	defer cancel()
	if rerr := m.b.Release(rctx, g); rerr != nil {
		err = fmt.Errorf("%w; releasing it failed too, so the claim lasts until its TTL ends: %w", err, rerr)
	} else {
		err = fmt.Errorf("%w, and was released", err)
	}
	if hint := m.cfg.slowHint("the acquire", took); hint != "" && g.Age == 0 {
		err = fmt.Errorf("%w; %s", err, hint)
	}
	return err
}

func (m *Mutex) observe(e Event) { m.cfg.observe(e) }

func (c *config) observe(e Event) {
	if c.observer != nil {
		c.observer.Observe(e)
	}
}

// observeAcquired reports e, the acquisition of l, before l reaches the
// caller. If the Observer panics, l is abandoned first (see
// abandonOnPanic).
func (c *config) observeAcquired(l *Lease, e Event) {
	defer l.abandonOnPanic()
	c.observe(e)
}

// jitter returns d scaled by a random factor in [0.9, 1.1), so that
// contenders do not retry in lockstep.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}
