package baton

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/baton-go/baton/backend"
)

// An Elector runs work on at most one replica at a time: the leader.
//
// Run campaigns for the lock, starts work once per term with the term's
// context, cancels that context when the term ends (loss, step-down, or
// Run's context ending), waits up to the grace period for work to return,
// reports the end of the term, and campaigns again. A standby waits on the
// backend's watch where there is one, so it takes over within one round trip
// of a release, or once the old claim can be judged expired.
//
// An Elector is safe for concurrent use; Run may be active once at a time.
// Create it with NewElector: its zero value is not usable.
type Elector struct {
	mu      *Mutex
	running atomic.Bool

	// stuck is the work of a term that did not return within the grace
	// period, while it may still run; only Run uses it (running excludes
	// two Runs).
	stuck *stuckWork

	leaderMu sync.Mutex
	leader   string // the holder seen at the last attempt, or this elector's identity during a term
	term     *Lease // this elector's current term, nil between terms
}

// NewElector returns an Elector for the lock name on b. It accepts every
// Option; WithGrace, WithReleaseOnCancel, OnStartedLeading, OnStoppedLeading
// and OnNewLeader apply to electors only.
//
// Those three callbacks run in Run's goroutine, one at a time, and must not
// block: meanwhile Run does nothing else (work does not start, a standby
// does not try the lock; the lease goes on renewing). They may call the
// Elector's methods and the Lease's, Unlock included (a Run started from
// them returns ErrAlreadyRunning); the Observer runs under other rules
// (see Observer).
func NewElector(b backend.Backend, name string, opts ...Option) (*Elector, error) {
	m, err := newMutex(b, name, true, opts)
	if err != nil {
		return nil, err
	}
	return &Elector{mu: m}, nil
}

// Name returns the lock name.
func (e *Elector) Name() string { return e.mu.name }

// Identity returns this elector's holder identity.
func (e *Elector) Identity() string { return e.mu.cfg.identity }

// Leader returns the identity of the leader as last observed by this
// elector: its own identity while it leads, the holder seen at the last
// attempt while it waits, or "" if unknown. It is an observation, not a
// guarantee: only a Lease's context says that this process leads. While
// this elector waits, Leader may return its own identity, if another
// process was (mis)configured with the same one; IsLeader is then false.
func (e *Elector) Leader() string {
	e.leaderMu.Lock()
	defer e.leaderMu.Unlock()
	return e.leader
}

// IsLeader reports whether this elector is in a term of its own: it has
// acquired the lock and the term's Lease has not ended (Lease.Err, which
// reads the clock: false from the renew deadline on, even in a process
// just resumed from a pause whose lease goroutine has not run yet). It
// never judges by identity, so two electors misconfigured with one
// identity do not both report leading. Like any observation it can be
// stale the moment it returns; only the Lease's context ends in time to
// stop work.
func (e *Elector) IsLeader() bool {
	e.leaderMu.Lock()
	t := e.term
	e.leaderMu.Unlock()
	return t != nil && t.Err() == nil
}

// setLeader records id as the leader; self is true when id is this
// elector's own new term. ctx carries the values for the log line.
func (e *Elector) setLeader(ctx context.Context, id string, self bool) {
	e.leaderMu.Lock()
	changed := e.leader != id
	e.leader = id
	e.leaderMu.Unlock()
	if changed && id != "" {
		cfg := e.mu.cfg
		e.mu.observe(Event{Kind: EventNewLeader, Name: e.mu.name, Holder: id})
		if !self && id == cfg.identity {
			// Not this elector's term: its previous term's claim, still
			// in the store after a loss; an attempt of its own whose
			// answer it gave up on, which the store carried out (a
			// store that was paused or slow); or another process that
			// was given the same identity.
			cfg.logger.InfoContext(ctx, "baton: the lock is held under this elector's own identity, but not by its current term: "+
				"a claim of its previous term, or of an attempt of its own that got no answer in time but was carried out by the store "+
				"(which was slow or paused), until that claim ends; or another process configured with the same identity",
				"lock", e.mu.name, "leader", id, "self", false)
		} else {
			cfg.logger.InfoContext(ctx, "baton: new leader", "lock", e.mu.name, "leader", id, "self", self)
		}
		if cfg.onNewLeader != nil {
			cfg.onNewLeader(id)
		}
	}
}

// Run campaigns and runs work once per term until ctx ends or work returns
// on its own.
//
// work receives the term's context, which ends no later than the holder's
// validity end (see Lease), and the term's Lease, whose Token fences the
// writes of this term. work should return soon after its context ends.
//
// Run returns:
//   - ctx's error when ctx ends. Once work has returned, Run releases the
//     lock (WithReleaseOnCancel, the default) so that a standby takes over
//     at once, and warns if the release finds it taken, as below.
//   - work's result (nil included) when work returns while the term is
//     still valid; the lock is released first (waiting at most 5 s for the
//     store: a release that fails leaves the lock to expire after its TTL,
//     logged; one that finds the lock taken or force-released during the
//     term, which no renewal told, logs a warning). To lead for as long as
//     the process runs, work blocks until its context ends. The same holds
//     when work released the term itself (Lease.Unlock) and then returned:
//     Run does not campaign again.
//   - an error matching ErrGraceExceeded when work did not return within
//     the grace period after its term ended. The lock is then not released
//     but left to expire, and Run does not campaign again, because a second
//     term must not start while the first one's work may still run. work's
//     goroutine is still running; the process should exit. A later Run
//     returns such an error at once for as long as that work runs.
//   - an error that retrying cannot fix (invalid name, corrupt record,
//     permission), ErrAlreadyRunning, or ErrInvalidOptions for a nil work.
//
// After a loss, Run campaigns again: a replica that lost its term (a network
// blip, a long pause) becomes a standby, not a dead process.
//
// work runs in a goroutine of its own, so a panic in work is not recovered
// by Run's caller: it ends the process, as a panic in any goroutine does.
// The term's claim is then left to expire after its TTL.
func (e *Elector) Run(ctx context.Context, work func(ctx context.Context, l *Lease) error) error {
	if work == nil {
		// Checked before campaigning: a nil work would panic in its own
		// goroutine once elected, which no caller can recover.
		return fmt.Errorf("baton: elector %q: %w: work is nil", e.mu.name, ErrInvalidOptions)
	}
	if !e.running.CompareAndSwap(false, true) {
		return fmt.Errorf("baton: elector %q: %w", e.mu.name, ErrAlreadyRunning)
	}
	defer e.running.Store(false)
	if err := e.stillRunning(); err != nil {
		return err
	}
	cfg := e.mu.cfg
	observeLeader := func(id string) { e.setLeader(ctx, id, false) } // the holder seen while campaigning
	for {
		l, err := e.mu.lock(ctx, ctx, observeLeader)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("baton: elector %q: %w", e.mu.name, err)
		}
		e.startTerm(l)
		done := make(chan error, 1)
		go func() { done <- work(l.Context(), l) }()

		workReturned := false
		select {
		case werr := <-done:
			if l.Err() == nil || errors.Is(l.Err(), ErrReleased) {
				// work returned while the term was valid, or after it
				// released the term itself: its own decision.
				e.releaseAfterWork(ctx, l)
				return werr
			}
			// The term had ended already (work returned because of it).
			workReturned = true
		case <-l.Done():
		}

		// The term ended: released by work itself, lost, stepped down, or
		// ctx ended.
		cause := l.Err()
		if !workReturned {
			werr, returned := e.waitGrace(done)
			if !returned {
				e.stuck = &stuckWork{done: done, token: l.Token()}
				l.abandon(cause)
				e.stopped(l, cause)
				return fmt.Errorf("baton: elector %q: %w (%v) after the term ended: %w", e.mu.name, ErrGraceExceeded, cfg.grace, cause)
			}
			if errors.Is(cause, ErrReleased) {
				// work released its term itself and then returned: its
				// decision to stop leading, as if it had returned first.
				e.stopped(l, cause)
				return werr
			}
		}
		if ctx.Err() != nil {
			e.endOnCancel(ctx, l, cause)
			return ctx.Err()
		}
		// Lost: the term is over, and says so at once; the release below
		// may wait for a store that does not answer, up to its timeout.
		// The claim may still be ours in the store (renewals failed but
		// the store may have kept it); releasing it lets others start
		// sooner and is harmless otherwise (compare-and-release).
		e.stopped(l, cause)
		rctx, cancel := context.WithTimeout(ctx, cfg.releaseTimeout)
		_ = l.Unlock(rctx)
		cancel()
	}
}

// releaseAfterWork ends term l after work returned on its own: it
// releases the lock, bounded like the other releases (a store that does
// not answer, a file lock's flock held by a stopped process, must not keep
// Run from returning), and reports the term's end.
func (e *Elector) releaseAfterWork(ctx context.Context, l *Lease) {
	cfg := e.mu.cfg
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.releaseTimeout)
	uerr := l.Unlock(rctx)
	cancel()
	e.stopped(l, ErrReleased)
	if !e.warnLostAtRelease(ctx, l, nil, uerr) && uerr != nil && !errors.Is(uerr, ErrLost) {
		cfg.logger.WarnContext(ctx, "baton: release after work returned failed", "lock", e.mu.name, "err", uerr)
	}
}

// warnLostAtRelease logs, and reports, a release of term l (which ended
// for cause, nil if it was valid) that found the lock no longer the
// term's, taken or force-released during it, when no loss ended the term
// first: no renewal came between, and the release is the only sign.
func (e *Elector) warnLostAtRelease(ctx context.Context, l *Lease, cause, uerr error) bool {
	if !errors.Is(uerr, ErrLost) || errors.Is(cause, ErrLost) {
		return false
	}
	e.mu.cfg.logger.WarnContext(ctx, "baton: when work returned, the lock was no longer this term's (taken or force-released during it): work may have overlapped another holder's", "lock", e.mu.name, "token", l.Token(), "err", uerr)
	return true
}

// endOnCancel ends term l (which ended for cause) once Run's ctx ended and
// work returned: it releases the lock (WithReleaseOnCancel) or leaves it
// to expire, and reports the term's end.
func (e *Elector) endOnCancel(ctx context.Context, l *Lease, cause error) {
	cfg := e.mu.cfg
	if cfg.releaseOnCancel {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.releaseTimeout)
		if uerr := l.Unlock(rctx); !e.warnLostAtRelease(ctx, l, cause, uerr) && uerr != nil && !errors.Is(uerr, ErrLost) {
			cfg.logger.WarnContext(ctx, "baton: release on shutdown failed; the lock will expire after its TTL", "lock", e.mu.name, "err", uerr)
		}
		cancel()
	} else {
		l.abandon(ctx.Err())
	}
	e.stopped(l, cause)
}

// startTerm records l as the current term and reports it: the Observer,
// the log, OnNewLeader and OnStartedLeading. If one of them panics, l is
// abandoned before the panic goes on (see abandonOnPanic).
func (e *Elector) startTerm(l *Lease) {
	defer l.abandonOnPanic()
	cfg := e.mu.cfg
	e.leaderMu.Lock()
	e.term = l
	e.leaderMu.Unlock()
	e.setLeader(l.Context(), cfg.identity, true)
	e.mu.observe(Event{Kind: EventStartedLeading, Name: e.mu.name, Holder: cfg.identity, Token: l.Token()})
	cfg.logger.InfoContext(l.Context(), "baton: started leading", "lock", e.mu.name, "token", l.Token())
	if cfg.onStarted != nil {
		cfg.onStarted(l.Context(), l)
	}
}

// stuckWork is the work of a term that outlived its grace period.
type stuckWork struct {
	done  <-chan error // receives work's result when it returns
	token uint64       // the term's fencing token
}

// stillRunning returns an error matching ErrGraceExceeded while the work of
// an earlier term that outlived its grace period still runs: a new term
// must not start beside it.
func (e *Elector) stillRunning() error {
	if e.stuck == nil {
		return nil
	}
	select {
	case <-e.stuck.done:
		e.stuck = nil
		return nil
	default:
		return fmt.Errorf("baton: elector %q: %w: the work of an earlier term (token %d) still runs; Run campaigns again once it returns",
			e.mu.name, ErrGraceExceeded, e.stuck.token)
	}
}

// waitGrace waits up to the grace period for work to return, and returns
// its result.
func (e *Elector) waitGrace(done <-chan error) (werr error, returned bool) {
	cfg := e.mu.cfg
	if cfg.grace <= 0 {
		select {
		case werr = <-done:
			return werr, true
		default:
			return nil, false
		}
	}
	t := cfg.clock.NewTimer(cfg.grace)
	defer t.Stop()
	select {
	case werr = <-done:
		return werr, true
	case <-t.C():
		select { // a work that returned exactly at the deadline counts
		case werr = <-done:
			return werr, true
		default:
			return nil, false
		}
	}
}

func (e *Elector) stopped(l *Lease, cause error) {
	cfg := e.mu.cfg
	e.leaderMu.Lock()
	e.term = nil
	if e.leader == cfg.identity {
		e.leader = ""
	}
	e.leaderMu.Unlock()
	e.mu.observe(Event{Kind: EventStoppedLeading, Name: e.mu.name, Holder: cfg.identity, Token: l.Token(), Err: cause})
	cfg.logger.InfoContext(l.Context(), "baton: stopped leading", "lock", e.mu.name, "token", l.Token(), "cause", cause)
	if cfg.onStopped != nil {
		cfg.onStopped(l, cause)
	}
}
