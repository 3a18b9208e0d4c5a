package baton

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A claimer makes the attempts that a waiting Mutex.Lock or
// Semaphore.Acquire repeats: on one lock, or on every slot of a semaphore.
type claimer interface {
	// claim makes one attempt. parent is the parent of the Lease's context.
	// If everything it tried is held, the error matches ErrHeld and
	// unwraps to the *HeldError that can end first.
	claim(ctx, parent context.Context) (*Lease, error)
	// watch opens a watch of what claim contends for (see backend.Watcher). It is
	// called only if the backend is a Watcher.
	watch(ctx context.Context) (<-chan struct{}, error)
}

// await repeats c's attempts until one acquires, ctx ends, or an attempt
// fails with an error that retrying cannot fix (invalid name, corrupt
// record, permission, misconfiguration). name names the lock or semaphore
// in log lines; observe (optional) is told the holder seen at every
// conflict.
//
// While everything is held it waits for the backend's watch, if canWatch,
// retrying on its own only when the backend expects the claim seen to end
// first (HeldError.RetryAfter); without a watch it retries every
// RetryPeriod with jitter, and no later than that.
func (c *config) await(ctx, parent context.Context, name string, cl claimer, canWatch bool, observe func(holder string)) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := c.clock.Now()
	w := watching{open: cl.watch}
	defer w.stop()
	var lastErr error // why the last attempt before ctx ended did not acquire
	var fails failureLog
	// stopped keeps the last attempt's cause (a HeldError only if the
	// lock was held at that attempt; an unreachable store otherwise).
	stopped := func() error {
		if lastErr != nil {
			return fmt.Errorf("%w; stopped waiting: %w", lastErr, ctx.Err())
		}
		return ctx.Err()
	}
	for {
		sent := c.clock.Now()
		l, err := cl.claim(ctx, parent)
		if err == nil {
			fails.answered(ctx, c, name)
			c.observeAcquired(l, Event{Kind: EventAcquired, Name: l.Name(), Holder: c.identity, Token: l.Token(), Duration: c.clock.Since(start)})
			return l, nil
		}
		var held *HeldError
		wait := jitter(c.retryPeriod)
		switch {
		case errors.As(err, &held):
			fails.answered(ctx, c, name)
			lastErr = held
			if observe != nil {
				observe(held.Holder)
			}
			wait = c.heldWait(held, w.changes != nil, c.clock.Since(sent))
		case ctx.Err() != nil && err == ctx.Err():
			// ctx ended before the attempt was sent (the store checked it).
			return nil, stopped()
		case ctx.Err() != nil:
			return nil, cutShort(ctx, err, lastErr, c.clock.Since(sent))
		case isPermanent(err):
			return nil, err
		default:
			lastErr = err
			fails.failed(ctx, c, name, err, wait)
		}
		if canWatch && w.changes == nil && held != nil {
			// Watch only once the lock is found held, so that an
			// uncontended Lock costs one acquire and nothing more. The
			// first time, try again at once: a release between that
			// attempt and the watch's start would otherwise be missed
			// until the retry. (A watch that broke is restarted too, but
			// then the wait below bounds the retries.)
			if w.start(ctx, c, name) && w.started == 1 {
				continue
			}
		}
		if !c.sleep(ctx, wait, &w) {
			return nil, stopped()
		}
	}
}

// failureWarnEvery: await warns of failed attempts at most this often, with
// the count since the last warning, and logs the others at debug level:
// while the store is down every attempt fails, one every RetryPeriod, for
// as long as the outage lasts.
const failureWarnEvery = 10 * time.Second

// failureLog is what await logs of the failed attempts of one wait.
type failureLog struct {
	since  time.Time // the first failure since an attempt was answered; zero if none
	warned time.Time // the last warning
	count  int       // failures since the last warning
	total  int       // failures since since
}

func (f *failureLog) failed(ctx context.Context, c *config, name string, err error, retryIn time.Duration) {
	now := c.clock.Now()
	if f.since.IsZero() {
		f.since = now
	}
	f.count++
	f.total++
	if !f.warned.IsZero() && now.Sub(f.warned) < failureWarnEvery {
		c.logger.DebugContext(ctx, "baton: acquire failed; retrying", "lock", name, "err", err, "retry_in", retryIn)
		return
	}
	c.logger.WarnContext(ctx, "baton: acquire failed; retrying", "lock", name, "err", err, "retry_in", retryIn, "failures_since_last_warning", f.count)
	f.warned, f.count = now, 0
}

// answered logs the end of failures that were warned of: an attempt got
// an answer (the lock, or its holder).
func (f *failureLog) answered(ctx context.Context, c *config, name string) {
	if f.since.IsZero() {
		return
	}
	c.logger.InfoContext(ctx, "baton: the store answers again", "lock", name, "failed_attempts", f.total, "failing_for", c.clock.Since(f.since).Round(time.Millisecond))
	*f = failureLog{}
}

// cutShort is await's error when ctx ended during an attempt, which failed
// with err after waiting d for an answer. Like stopped, it matches the last
// answered attempt's error (last: ErrHeld if the lock was held then) and
// ctx.Err(); its message also says how long the attempt cut short had
// waited, which tells a store gone silent during the wait (an answer long
// overdue) from a cancellation that fell during a prompt attempt.
func cutShort(ctx context.Context, err, last error, d time.Duration) error {
	if last == nil {
		return fmt.Errorf("%w (the attempt in flight got no answer in %v); stopped waiting: %w", err, d.Round(time.Millisecond), ctx.Err())
	}
	return fmt.Errorf("%w (the attempt in flight got no answer in %v: %v); stopped waiting: %w", last, d.Round(time.Millisecond), err, ctx.Err())
}

// heldWait is how long to wait after finding the lock held: with a watch,
// until the claim can first end (the watch reports releases and takeovers
// before that, so an idle standby makes no requests of its own), or a TTL
// as a safety net for a silent watch; without one, the retry period or
// less. The claim's end (HeldError.RetryAfter) counts from the attempt's
// send, took ago, not from the timer's start: time that passed since (a
// pause, an Observer's work on EventHeld) shortens the wait, which at
// worst retries a little early. The other waits pace the retries, and
// stay whole.
func (c *config) heldWait(held *HeldError, watched bool, took time.Duration) time.Duration {
	wait := jitter(c.retryPeriod)
	switch {
	case watched && held.RetryAfter > 0:
		return held.RetryAfter - took
	case watched:
		return jitter(c.ttl)
	case held.RetryAfter > 0 && held.RetryAfter < wait:
		return held.RetryAfter - took
	}
	return wait
}

// sleep waits for d, a change reported by w, or the end of ctx. It returns
// false if ctx ended: woken by the watch (closed because ctx ended) or the
// timer just as ctx ended, the caller reports the wait, not a fresh
// attempt.
func (c *config) sleep(ctx context.Context, d time.Duration, w *watching) bool {
	t := c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case _, ok := <-w.changes:
		if !ok {
			w.changes = nil
		}
	case <-t.C():
	}
	return ctx.Err() == nil
}

// watching is await's watch: opened once the lock is found held, in a
// context that await's return ends.
type watching struct {
	open    func(ctx context.Context) (<-chan struct{}, error)
	changes <-chan struct{} // nil until opened, and after it broke
	started int
	refused bool // a watch was refused for good, and warned of
	// The watches' context is made at the first watch: an uncontended
	// Lock never watches, and a child of a cancellable ctx costs a
	// registration with it.
	ctx    context.Context
	cancel context.CancelFunc
}

// start opens the watch and reports whether it is open.
func (w *watching) start(ctx context.Context, c *config, name string) bool {
	w.started++
	if w.ctx == nil {
		w.ctx, w.cancel = context.WithCancel(ctx)
	}
	ch, err := w.open(w.ctx)
	switch {
	case (errors.Is(err, ErrForbidden) || errors.Is(err, ErrMisconfigured)) && !w.refused:
		// The store refuses watches (a permission, its configuration):
		// every release is then found up to a retry period late, which
		// nothing else would say.
		w.refused = true
		c.logger.WarnContext(ctx, "baton: the store refused to watch the lock; polling every retry period instead of waking at its release", "lock", name, "err", err, "retry_period", c.retryPeriod)
		return false
	case err != nil:
		c.logger.DebugContext(ctx, "baton: watch failed; polling", "lock", name, "err", err)
		return false
	}
	w.changes = ch
	return true
}

func (w *watching) stop() {
	if w.cancel != nil {
		w.cancel()
	}
}
