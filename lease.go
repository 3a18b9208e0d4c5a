package baton

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/baton-go/baton/backend"
)

// A Lease is a held lock: the result of Mutex.Lock or Mutex.TryLock, the
// term of an Elector, or one slot of a Semaphore (then Name is the slot's).
//
// # Clock model
//
// Validity is measured only on this process's monotonic clock (the
// configured clock), never by comparing timestamps across machines. Let S be
// the send time of the last successful acquire or renew request, as read on
// that clock just before the request left. The store starts the TTL no
// earlier than S, so the claim lasts at least until S + TTL on the store's
// clock. (A lock that a store handed to this waiter on a release, without
// a request of the waiter's, counts from the send time of the waiter's
// last request answered before the handoff: see backend.Grant.Age.) The
// holder treats it as valid only until
//
//	ValidUntil = S + TTL - margin
//
// where the margin (default max(2% of TTL, 50ms)) covers clock-rate drift.
// A renew that fails is retried every RetryPeriod; one that has had no
// answer for a RetryPeriod is reported as failed (EventRenewFailed, a
// warning in the log) and waited for. If none succeeds by S +
// RenewDeadline, the holder steps down. An acquire answered at or after
// S + RenewDeadline (a request that waited out an outage in the client or
// the network) yields no Lease: the engine releases the claim at once and
// Lock tries again, so no Lease is handed out with its renew deadline
// already behind it. Because RenewDeadline + margin < TTL is enforced at
// construction, the lease's context always ends before ValidUntil, so code
// that watches Context or Done stops before anyone else can acquire. A
// process paused (stopped, swapped out, in a long GC) past that point
// cannot be stopped by any lease: its late writes are what the fencing
// Token is for.
//
// The model assumes that the monotonic clock counts every moment the
// store's clock counts. On Linux, Go's monotonic clock (CLOCK_MONOTONIC)
// does not count time the machine spends suspended, nor, on some
// hypervisors, time a virtual machine spends paused. After such a pause
// the holder counts its lease valid for as long as it had left before,
// although the store's TTL ran on and another process may hold the lock;
// it learns of the loss at its next renew. To the protected resource that
// is a paused process, and only the fencing Token stops its writes.
//
// # Concurrency
//
// A Lease's methods are safe for concurrent use: any goroutine may call
// Unlock, not only the one that acquired the lease, and calls at once
// return the first one's result. Every method may be called after
// Unlock. Unlock waits for the lease's own goroutine, which calls the
// Observer and the logger: do not call Unlock from an Observer or a log
// handler (see Observer).
type Lease struct {
	m      *Mutex
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu         sync.Mutex
	grant      backend.Grant
	lastSend   time.Time
	validUntil time.Time
	lost       error // why the lease ended before Unlock; nil while held
	released   bool  // Unlock ended the lease: a later loss is none
	lastErr    error // last renew failure
	// reports counts the loss reports under way (reportLoss), which may
	// run in a goroutine other than the keeper (a store's loss notice,
	// Err); Unlock waits for them, so that no event of the lease comes
	// after Unlock returned. end adds to it under mu.
	reports sync.WaitGroup
	// rtt is how long the last successful acquire or renew (rttOf) took
	// to be answered, or 0 if unknown (a lock handed over by a release).
	rtt   time.Duration
	rttOf string
	// slowWarned says the keeper has warned that renewals take longer
	// than the retry period (see config.slowHint). The keeper's own.
	slowWarned bool

	stop       chan struct{}
	stopOnce   sync.Once
	keeperDone chan struct{}
	// start, if not nil, is the timer that starts the keeper at the first
	// renew: a lease unlocked before then never starts a goroutine. With
	// the real clock, the Mutex's shared keeperStarts does it instead
	// (deferred is true); startAt and startIdx are its bookkeeping, guarded
	// by its mutex.
	start    Timer
	deferred bool
	startAt  time.Time
	startIdx int

	unlockOnce sync.Once
	unlockErr  error

	// stopLoss, if not nil, cancels the store's loss notice (see
	// backend.LossNotifier).
	stopLoss func() bool
}

// newLease returns the lease of g, acquired by a request sent at sent that
// took rtt to be answered (0 if unknown).
func newLease(m *Mutex, parent context.Context, g backend.Grant, sent time.Time, rtt time.Duration) *Lease {
	ctx, cancel := context.WithCancelCause(parent)
	l := &Lease{
		m:          m,
		ctx:        ctx,
		cancel:     cancel,
		grant:      g,
		lastSend:   sent,
		rtt:        rtt,
		rttOf:      "the acquire",
		validUntil: sent.Add(m.cfg.ttl - m.cfg.margin),
		stop:       make(chan struct{}),
		keeperDone: make(chan struct{}),
	}
	// The keeper has nothing to do before the first renew, so where the
	// clock can run a function later, start it then: a short tenure (an
	// uncontended Lock and Unlock) costs no goroutine and no thread
	// wake-up. The keeper checks the renew deadline first thing, so a
	// late start never skips a step-down.
	if _, ok := m.cfg.clock.(systemClock); ok {
		l.deferred, l.startAt = true, sent.Add(m.cfg.renewInterval)
		m.starts.add(l)
	} else {
		l.start = m.cfg.clock.AfterFunc(sent.Add(m.cfg.renewInterval).Sub(m.cfg.clock.Now()), l.keep)
	}
	if ln, ok := m.b.(backend.LossNotifier); ok {
		l.stopLoss = ln.AfterLoss(g, func(why error) {
			l.lose(fmt.Errorf("%w: the store reports the claim lost: %w", ErrLost, why))
		})
	}
	return l
}

// Name returns the lock name.
func (l *Lease) Name() string { return l.m.name }

// Holder returns the identity that holds the lease.
func (l *Lease) Holder() string { return l.grant.Holder }

// Token returns the fencing token: strictly larger than the token of every
// earlier holder of this lock, as long as the store keeps its data. Pass it
// to the protected resource with every write and have it reject tokens
// smaller than the largest it has seen (see package fence).
func (l *Lease) Token() uint64 { return l.grant.Token }

// ValidUntil returns the end of the holder's validity on this process's
// monotonic clock: the send time of the last successful acquire or renew
// plus TTL minus the safety margin. It moves forward with every successful
// renew and freezes when the lease ends. Compare it only with times from
// the same clock (time.Now, or the clock given WithClock).
func (l *Lease) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Context returns a context that ends when the lease ends: on Unlock, on
// loss, or at the latest when renewals have failed for RenewDeadline, which
// is before ValidUntil. context.Cause tells why (ErrReleased, or an error
// matching ErrLost).
func (l *Lease) Context() context.Context { return l.ctx }

// Done is Context().Done().
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil while the lease is held, and afterwards why it ended: an
// error matching ErrReleased after Unlock, ErrLost after a loss (with
// ErrStepDown if renewals failed until the renew deadline; without it if the
// store said the claim is someone else's), or the parent context's error.
//
// Err reads the clock: once the renew deadline has passed without a
// successful renew, it ends the lease itself (as the lease's own goroutine
// would, with the same error), so that a process resumed from a pause past
// its deadline gets a non-nil Err at once, even before that goroutine has
// run. Done and Context end only when one of them has noticed.
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		l.mu.Lock()
		stepDown := l.lastSend.Add(l.m.cfg.renewDeadline)
		l.mu.Unlock()
		if l.m.cfg.clock.Now().Before(stepDown) {
			return nil
		}
		// The observer and the log hear of it in their own goroutine:
		// Err's caller may hold a lock that an observer takes (as
		// gocronlock's Term does).
		if err := l.stepDownError(); l.end(err) {
			go l.reportLoss(err)
		}
	}
	return context.Cause(l.ctx)
}

// stepDownError is the cause of a lease that reached its renew deadline:
// it names the last renew failure, if any, and a store whose last answer
// came too slowly for the timings (see config.slowHint).
func (l *Lease) stepDownError() error {
	l.mu.Lock()
	lastErr, rtt, rttOf := l.lastErr, l.rtt, l.rttOf
	l.mu.Unlock()
	err := fmt.Errorf("%w: %w %v: no renew succeeded", ErrLost, ErrStepDown, l.m.cfg.renewDeadline)
	if lastErr != nil {
		err = fmt.Errorf("%w (last error: %w)", err, lastErr)
	}
	if hint := l.m.cfg.slowHint(rttOf, rtt); hint != "" {
		err = fmt.Errorf("%w; %s", err, hint)
	}
	return err
}

// Unlock ends the lease: it stops renewing, ends the lease's context, and
// only then releases the lock in the store (compare-and-release: it frees
// the lock only if this lease still owns it), so that the next holder can
// start at once. It returns an error matching ErrLost if the lease had
// already been lost, or the store's error if the release failed (the lock
// then expires after the TTL). Later calls return the first call's result.
// Once Unlock has returned, the lease reports no more events: Unlock
// waits for the EventLost of a loss that the store's notice or Err found
// in another goroutine.
// ctx bounds the release: a release the store does not answer before
// ctx's deadline (a silent or distant store) fails, its error saying so,
// and the lock stays held until the TTL ends. Given a context that has
// already ended (a request's, cancelled), Unlock does not release, and
// the lock stays held until the TTL ends; its error matches ctx's and
// says so. To release after a cancellation, pass
// context.WithoutCancel(ctx) with a timeout.
// Given the lease's own context (or one made from it), which Unlock ends
// first, the release gets the default release timeout (5 s) instead of
// failing at once. The release of a lease already lost waits at most that
// long too, whatever ctx allows: Unlock returns the loss whatever the
// release's outcome.
func (l *Lease) Unlock(ctx context.Context) error {
	l.unlockOnce.Do(func() { l.unlockErr = l.unlock(ctx) })
	return l.unlockErr
}

func (l *Lease) unlock(ctx context.Context) error {
	l.stopKeeper()
	l.mu.Lock()
	lost, g := l.lost, l.grant
	l.mu.Unlock()
	if lost == nil {
		lost = l.markReleased()
	}
	l.reports.Wait() // from here on, end adds no report
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrReleased) {
		// ctx is the lease's own context, or made from it (work that
		// unlocks with the context it was given), which markReleased
		// ended: release all the same, bounded as the engine's releases.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), l.m.cfg.releaseTimeout)
		defer cancel()
	}
	if lost != nil {
		// Unlock returns the loss whatever the release's outcome, and the
		// claim it would free ends by its TTL anyway: no longer wait for it
		// than the engine's own releases (a client-side rate limiter can
		// queue it for longer than the TTL).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.m.cfg.releaseTimeout)
		defer cancel()
	}
	endedBefore := ctx.Err() != nil // else an error of ctx's is the store's slowness
	err := l.m.b.Release(ctx, g)
	if lost != nil {
		return fmt.Errorf("baton: unlock %q: %w", l.m.name, lost)
	}
	if err != nil {
		// This process no longer holds the lock (its context has ended);
		// the claim stays in the store until it expires.
		l.m.observe(Event{Kind: EventReleased, Name: l.m.name, Holder: g.Holder, Token: g.Token, Err: err})
		switch {
		case endedBefore:
			return fmt.Errorf("baton: unlock %q: %w: the context given to Unlock ended, so the lock may stay held until its TTL (%v) ends; "+
				"to release after a cancellation, pass context.WithoutCancel(ctx) with a timeout", l.m.name, err, l.m.cfg.ttl)
		case ctx.Err() != nil:
			return fmt.Errorf("baton: unlock %q: %w: the store did not answer the release before the deadline Unlock had for it "+
				"(a silent store, or one slower than that deadline), so the lock may stay held until its TTL (%v) ends", l.m.name, err, l.m.cfg.ttl)
		}
		return fmt.Errorf("baton: unlock %q: %w", l.m.name, err)
	}
	l.m.observe(Event{Kind: EventReleased, Name: l.m.name, Holder: g.Holder, Token: g.Token})
	if l.m.cfg.logger.Enabled(ctx, slog.LevelDebug) { // spare the arguments' allocation on every Unlock
		l.m.cfg.logger.DebugContext(ctx, "baton: released", "lock", l.m.name, "holder", g.Holder, "token", g.Token)
	}
	return nil
}

// markReleased records that Unlock ends the lease and ends its context
// with ErrReleased, so that a loss found from then on (by the store's
// notice, or Err) is none, and returns nil; if a loss was recorded since
// the caller read l.lost, it returns that loss instead. The context ends
// under mu, as in end: Err, which finds a lease neither lost nor released
// past its renew deadline through end, then never sees it ended without a
// cause.
func (l *Lease) markReleased() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		l.released = true
		l.cancel(ErrReleased)
	}
	return l.lost
}

// abandon stops renewing and ends the context without releasing: the claim
// then expires after the TTL. The Elector uses it when work did not stop in
// time, so that nobody else starts while it may still run.
func (l *Lease) abandon(cause error) {
	l.stopKeeper()
	l.cancel(cause)
}

// abandonOnPanic, deferred while code of the caller's (an Observer, an
// Elector's callbacks) runs with l acquired but not yet handed over, ends
// l if that code panics, so that no keeper goes on renewing a lock that
// nobody holds (a process that recovers the panic, as net/http does, would
// otherwise keep the lock from every other process for as long as it
// runs). The claim expires after its TTL; the panic goes on.
func (l *Lease) abandonOnPanic() {
	if r := recover(); r != nil {
		l.abandon(fmt.Errorf("%w: a panic before the lease was handed over: %v", ErrLost, r))
		panic(r)
	}
}

func (l *Lease) stopKeeper() {
	l.stopOnce.Do(func() {
		if l.stopLoss != nil {
			l.stopLoss()
		}
		close(l.stop)
		if l.deferred && l.m.starts.remove(l) || l.start != nil && l.start.Stop() {
			close(l.keeperDone) // the keeper never started
		}
	})
	<-l.keeperDone
}

type renewResult struct {
	g    backend.Grant
	err  error
	sent time.Time
}

// pendingRenew is the renew call in flight.
type pendingRenew struct {
	ch     <-chan renewResult
	cancel context.CancelFunc
	sent   time.Time
	late   bool // reported as failed for want of an answer
}

// keep renews the lease every renew interval and ends it at the renew
// deadline. It is the only goroutine a Lease starts; it exits on stop or
// loss, after any renew call it started has returned.
func (l *Lease) keep() {
	defer close(l.keeperDone)
	cfg, clk := l.m.cfg, l.m.cfg.clock
	var p *pendingRenew
	defer func() {
		if p != nil {
			p.cancel()
			<-p.ch
		}
	}()
	l.mu.Lock()
	nextRenew := l.lastSend.Add(cfg.renewInterval)
	l.mu.Unlock()
	for {
		l.mu.Lock()
		g, stepDown := l.grant, l.lastSend.Add(cfg.renewDeadline)
		l.mu.Unlock()
		now := clk.Now()
		if !now.Before(stepDown) {
			l.noteStall(p, now)
			l.lose(l.stepDownError())
			return
		}
		if p == nil && !now.Before(nextRenew) {
			p = l.startRenew(g)
		}
		wake := stepDown
		var answer <-chan renewResult
		if p == nil {
			wake = earliest(wake, nextRenew)
		} else {
			answer = p.ch
			l.checkUnanswered(p, g, now)
			if !p.late {
				wake = earliest(wake, p.sent.Add(cfg.retryPeriod))
			}
		}
		t := clk.NewTimer(wake.Sub(now))
		select {
		case <-l.stop:
			t.Stop()
			return
		case r := <-answer:
			t.Stop()
			p.cancel()
			late := p.late
			p = nil
			var ended bool
			if nextRenew, ended = l.renewAnswered(g, r, late); ended {
				return
			}
		case <-t.C():
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// checkUnanswered reports the renew in flight as failed once it has had no
// answer for a retry period: a silent store (stopped, or its packets
// dropped) gives no error until the renew deadline cuts the call short, and
// metrics and the log would show nothing before the step-down. The call
// goes on; it is reported once.
func (l *Lease) checkUnanswered(p *pendingRenew, g backend.Grant, now time.Time) {
	cfg := l.m.cfg
	if p.late || now.Before(p.sent.Add(cfg.retryPeriod)) {
		return
	}
	p.late = true
	err := fmt.Errorf("%w: a renew had no answer after %v (the retry period)", ErrUnavailable, cfg.retryPeriod)
	if stall := l.stall(cfg.retryPeriod); stall != nil {
		err = fmt.Errorf("%w: %w", err, stall)
	}
	l.mu.Lock()
	l.lastErr = err
	stepDown := l.lastSend.Add(cfg.renewDeadline)
	l.mu.Unlock()
	l.m.observe(Event{Kind: EventRenewFailed, Name: l.m.name, Holder: g.Holder, Token: g.Token, Err: err})
	cfg.logger.WarnContext(l.ctx, "baton: renew has no answer; waiting for it until the renew deadline", "lock", l.m.name, "token", g.Token, "err", err, "step_down_in", stepDown.Sub(now))
}

// stall is what the store says holds back on its client's side a call
// that has had no answer for waited (backend.StallExplainer), or nil.
func (l *Lease) stall(waited time.Duration) error {
	if se, ok := l.m.b.(backend.StallExplainer); ok {
		return se.Stall(waited)
	}
	return nil
}

// noteStall records as the last error, at a step-down, what the store
// says holds back the renew p still in flight (nil: none), if anything:
// by then the renew may have waited on the client's side for longer than
// the retry period after which checkUnanswered asked, or only since. It
// does not change when the lease steps down.
func (l *Lease) noteStall(p *pendingRenew, now time.Time) {
	if p == nil {
		return
	}
	waited := now.Sub(p.sent)
	if stall := l.stall(waited); stall != nil {
		l.mu.Lock()
		l.lastErr = fmt.Errorf("%w: a renew had no answer after %v: %w", ErrUnavailable, waited.Round(time.Millisecond), stall)
		l.mu.Unlock()
	}
}

// renewAnswered applies a renew's answer and returns when to renew next,
// or ended if the lease is lost. late says the renew was already reported
// as failed for want of an answer: its error is logged, not counted again.
func (l *Lease) renewAnswered(g backend.Grant, r renewResult, late bool) (next time.Time, ended bool) {
	cfg, clk := l.m.cfg, l.m.cfg.clock
	switch {
	case r.err == nil:
		took := clk.Since(r.sent)
		l.mu.Lock()
		l.grant.Version = r.g.Version
		l.lastSend = r.sent
		l.validUntil = r.sent.Add(cfg.ttl - cfg.margin)
		l.lastErr = nil
		l.rtt, l.rttOf = took, "a renew"
		l.mu.Unlock()
		l.m.observe(Event{Kind: EventRenewed, Name: l.m.name, Holder: g.Holder, Token: g.Token, Duration: took})
		l.warnSlow(g, took)
		return r.sent.Add(cfg.renewInterval), false
	case errors.Is(r.err, ErrLost):
		l.lose(fmt.Errorf("renew: %w", r.err))
		return time.Time{}, true
	case errors.Is(r.err, ErrClosed):
		// A closed store renews nothing any more: waiting for the renew
		// deadline would only keep work running on a claim that cannot
		// last.
		l.lose(fmt.Errorf("renew: %w: %w", ErrLost, r.err))
		return time.Time{}, true
	}
	l.mu.Lock()
	l.lastErr = r.err
	l.mu.Unlock()
	if !late {
		l.m.observe(Event{Kind: EventRenewFailed, Name: l.m.name, Holder: g.Holder, Token: g.Token, Err: r.err})
	}
	cfg.logger.WarnContext(l.ctx, "baton: renew failed; retrying", "lock", l.m.name, "token", g.Token, "err", r.err, "retry_in", cfg.retryPeriod)
	return clk.Now().Add(cfg.retryPeriod), false
}

// warnSlow warns, once per lease, of a renew that succeeded but took took,
// longer than the retry period (see config.slowHint): the store answers,
// and the warnings that renewals had no answer, or a step-down, would
// otherwise leave the slow link unnamed.
func (l *Lease) warnSlow(g backend.Grant, took time.Duration) {
	if l.slowWarned {
		return
	}
	hint := l.m.cfg.slowHint("a renew", took)
	if hint == "" {
		return
	}
	l.slowWarned = true
	l.m.cfg.logger.WarnContext(l.ctx, "baton: the store answers too slowly for these timings", "lock", l.m.name, "token", g.Token, "round_trip", took, "why", hint)
}

// startRenew sends one renew in its own goroutine, so that the keeper stays
// on time while the store is slow. The call is cancelled by p.cancel.
func (l *Lease) startRenew(g backend.Grant) *pendingRenew {
	ctx, cancel := context.WithCancel(context.WithoutCancel(l.ctx))
	ch := make(chan renewResult, 1)
	sent := l.m.cfg.clock.Now()
	go func() {
		ng, err := l.m.b.Renew(ctx, g)
		ch <- renewResult{ng, err, sent}
	}()
	return &pendingRenew{ch: ch, cancel: cancel, sent: sent}
}

// lose ends the lease because it is no longer (certainly) held.
func (l *Lease) lose(cause error) {
	if l.end(cause) {
		l.reportLoss(cause)
	}
}

// end records cause as why the lease ended and ends its context, unless
// it ended already (lost, or released by Unlock: a loss notice or a
// step-down found by Err while Unlock releases is no loss of a lease
// whose holder let it go); it reports whether it did. If it did, the
// caller must call reportLoss.
func (l *Lease) end(cause error) bool {
	l.mu.Lock()
	if l.lost != nil || l.released {
		l.mu.Unlock()
		return false
	}
	l.lost = cause
	l.reports.Add(1)
	l.cancel(cause) // under mu: see markReleased
	l.mu.Unlock()
	return true
}

// reportLoss tells the observer and the log that the lease was lost.
func (l *Lease) reportLoss(cause error) {
	defer l.reports.Done()
	holder, token := l.Holder(), l.Token() // fixed; the keeper writes only the grant's Version
	l.m.observe(Event{Kind: EventLost, Name: l.m.name, Holder: holder, Token: token, Err: cause})
	l.m.cfg.logger.WarnContext(l.ctx, "baton: lock lost", "lock", l.m.name, "holder", holder, "token", token, "err", cause)
}
