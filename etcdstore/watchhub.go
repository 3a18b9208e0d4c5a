package etcdstore

import (
	"context"
	"sync"
	"time"
)

// watchHub owns a Store's followers: the etcd watches behind Watch, one
// per lock name, and the registrations they serve (see Store.Watch).
//
// Its lock, mu, guards closed, anchored, the followers map and every
// follower's and registration's fields. It comes after Store.mu and
// fairQueue.mu and before leasePool.mu in the lock order (see "Lock
// order" in store.go): code that needs a follower's spec, which in fair
// mode is made of the queue's state (see specLocked), takes the queue's
// lock first. The hub's own methods take no other lock.
//
// Each follower runs one goroutine (Store.follow, see follow.go) that
// ends when its context is cancelled: when its last registration ends
// (in fair mode, lingerFor later), or on Close. That goroutine owns the
// follower's etcd watches and timers (a broken watch's retry, the
// deferred signal, the linger time) and stops them when it ends. The
// anchor watch (Store.anchor) runs from the first Watch until Close. The
// Store's WaitGroup counts these goroutines. Registrations end with their
// Watch's context (a context.AfterFunc, stopped on Close) or on Close.
type watchHub struct {
	mu        sync.Mutex
	closed    bool
	anchored  bool                 // the anchor watch runs (see Store.anchor)
	followers map[string]*follower // by lock name: the watches behind Watch
}

func newWatchHub() *watchHub {
	return &watchHub{followers: make(map[string]*follower)}
}

// watchingLocked reports whether a Watch of name is open. h.mu must be held.
func (h *watchHub) watchingLocked(name string) bool {
	f := h.followers[name]
	return f != nil && len(f.regs) > 0
}

// watching reports whether a Watch of name is open.
func (h *watchHub) watching(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.watchingLocked(name)
}

// beginAttempt counts an acquire attempt for name, for its follower, and
// returns that follower, or nil if none serves a Watch now.
func (h *watchHub) beginAttempt(name string) *follower {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.followers[name]
	if f == nil || len(f.regs) == 0 {
		return nil // none, or idle
	}
	f.inflight++
	return f
}

// endAttempt ends an attempt that beginAttempt counted for f (nil: none).
func (h *watchHub) endAttempt(f *follower) {
	if f == nil {
		return
	}
	h.mu.Lock()
	f.inflight--
	h.mu.Unlock()
	f.poke()
}

// observe records what an attempt that found the lock held saw (not fair
// mode: there the queue's places say what to watch).
func (h *watchHub) observe(f *follower, obs observation) {
	if f == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if f.observed && f.obs.rev > obs.rev {
		return
	}
	f.obs, f.observed = obs, true
	f.gen++
	f.poke()
}

// specChanged tells name's follower that its spec may have changed.
func (h *watchHub) specChanged(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f := h.followers[name]; f != nil {
		f.gen++
		f.poke()
	}
}

// wakeWaiters wakes the waiters of name after a place of theirs was
// lost, so that their next attempt reports it: nothing the follower knew
// is fresh any more.
func (h *watchHub) wakeWaiters(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f := h.followers[name]; f != nil {
		f.staleLocked()
	}
}

// wakeAll wakes the waiters of every watched lock (see wakeWaiters).
func (h *watchHub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.followers {
		if len(f.regs) > 0 {
			f.staleLocked()
		}
	}
}

// unregister ends registration r of f, and reports whether it was f's
// last: f then goes idle (fair: it lingers, see lingerFor) or stops.
func (h *watchHub) unregister(f *follower, r *reg, fair bool) (last bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.closed {
		return false
	}
	r.closed = true
	close(r.ch)
	delete(f.regs, r)
	if len(f.regs) > 0 || h.followers[f.name] != f {
		return false
	}
	if fair {
		f.idle = time.Now()
		f.poke()
	} else {
		delete(h.followers, f.name)
		f.cancel()
	}
	return true
}

// seen returns f.seen (see follower).
func (h *watchHub) seen(f *follower) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return f.seen
}

// close closes every registration and stops every follower; Watch fails
// from then on.
func (h *watchHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for name, f := range h.followers {
		f.closeAllLocked()
		delete(h.followers, name)
	}
}

// follower is the one etcd watch behind every Watch registration of one lock
// name in a Store. Its fields are guarded by watchHub.mu, but name, wake
// and cancel, which never change; the goroutine that runs its watches
// (Store.follow) keeps its own state in a followLoop.
type follower struct {
	name     string
	regs     map[*reg]struct{}
	inflight int         // acquire attempts in progress for name
	obs      observation // latest observation by an attempt (not fair mode)
	observed bool
	gen      uint64 // bumped whenever the spec may have changed
	// fresh == gen while the watch is known to cover the spec's
	// observation and no later change of the target arrived: an attempt
	// can then answer "held" without asking etcd.
	fresh uint64
	// seen is the latest revision of a change of the target that the
	// watch delivered after a waiter's observation, and broken is set while
	// the watch is down. An observation older than seen is never taken as
	// fresh: an attempt in flight when the change arrived reads the state
	// before it, and the waiter would sleep through the change. For the
	// same reason a read that may be served by a lagging member (see
	// tryAcquireFair) must be at least that recent.
	seen   int64
	broken bool
	// checked is the spec generation that the running watch was last
	// compared with (0: none since it started). A generation not yet
	// compared will be: the follower then either marks it fresh or
	// signals (a change after its observation, a read that failed, a
	// watch that broke), so until then an attempt may answer "held" from
	// that observation too (fair mode; see cachedHeld).
	checked uint64
	// idle (fair mode) is when the last registration ended, zero while
	// there are registrations. An idle follower keeps its claim watch for
	// lingerFor, so that the Store's next Lock of the name (a holder that
	// locks again) does not start another; it serves no Watch meanwhile.
	idle time.Time
	// rejoined: a registration was added to an idle follower; plain
	// watchers are told again once the watch is established.
	rejoined bool
	// claimUp (fair mode): the claim watch is established. Only tests
	// read it (export_test.go), to wait for it instead of sleeping.
	claimUp bool
	wake    chan struct{} // capacity 1: the spec or the attempts changed
	cancel  context.CancelFunc
}

// reg is one Watch registration.
type reg struct {
	ch     chan struct{}
	closed bool
	stop   func() bool // unregisters the context.AfterFunc
}

func (f *follower) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// signalLocked wakes every registration without blocking. watchHub.mu must
// be held.
func (f *follower) signalLocked() {
	for r := range f.regs {
		select {
		case r.ch <- struct{}{}:
		default: // a value is pending; this change folds into it
		}
	}
}

// staleLocked wakes f's waiters, whose next attempts ask etcd: nothing f
// knew is fresh any more. watchHub.mu must be held.
func (f *follower) staleLocked() {
	f.gen++
	f.fresh = 0
	f.signalLocked()
	f.poke()
}

// closeAllLocked closes every registration and stops the follower.
// watchHub.mu must be held.
func (f *follower) closeAllLocked() {
	for r := range f.regs {
		r.closed = true
		close(r.ch)
		if r.stop != nil {
			r.stop()
		}
	}
	clear(f.regs)
	f.cancel()
}
