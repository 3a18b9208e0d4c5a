package etcdstore

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-go/baton/backend"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchMaxBackoff bounds the wait before a broken watch is started again:
// a raft election (about a second) breaks watches that require a leader,
// and a waiter must not sleep long past it.
const watchMaxBackoff = 500 * time.Millisecond

// observation is what an acquire attempt that found the lock held saw: the
// key whose deletion the waiter waits for (the claim, or in fair mode the
// queue entry just ahead), at which revision, and who held the claim.
type observation struct {
	target string // etcd key waited on
	mod    int64  // its mod revision as read (0: absent); a claim handed over in place changes it
	rev    int64  // header revision of the read
	holder string // the claim's holder ("" if the claim was absent)
	token  uint64 // the claim's token (0 if absent)
}

// watchSpec is what a follower watches.
type watchSpec struct {
	obs observation
	// waiting: an attempt observed obs, so only the target's deletion
	// matters, and only after obs.rev. Otherwise the follower serves plain
	// watchers: every change of the claim key is signalled.
	waiting bool
	// guess (fair mode): obs is where the next waiter of this Store will
	// likely queue, read just before; the watch starts on it while the
	// waiter's attempt is in flight, which saves a read after the attempt
	// if the guess was right. Nothing is signalled or cached from a guess.
	guess bool
	gen   uint64
}

// follower is the one etcd watch behind every Watch registration of one lock
// name in a Store. Fields are guarded by Store.mu.
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

// signalLocked wakes every registration without blocking. s.mu must be held.
func (f *follower) signalLocked() {
	for r := range f.regs {
		select {
		case r.ch <- struct{}{}:
		default: // a value is pending; this change folds into it
		}
	}
}

// closeAllLocked closes every registration and stops the follower. s.mu
// must be held.
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

// Watch implements backend.Watcher with an etcd watch. All Watch calls for one
// lock name in a Store share one etcd watch, which starts no earlier than
// needed: a plain watcher gets a value once the watch is established (a
// change may have happened before it) and after every change of the claim
// key. A waiter (an acquire attempt through this Store found the lock held
// since the Watch began) is woken only when the key it waits for is
// deleted: the claim (released, expired, force-released), or in fair mode
// the queue entry just ahead of it. The watch never starts from a past
// revision (etcd would deliver such a watch's events only at its next
// periodic resync, 100ms later): it starts from the present, and if the
// waiter's last read is older than the watch's start the follower reads
// the key again to catch a change in between.
//
// While the watch is established and no change arrived, an attempt through
// this Store answers ErrHeld from what it knows, without a request to etcd,
// so the engine's periodic retries cost nothing.
//
// In fair mode an open Watch also makes an acquire attempt queue, as
// backend.Request.Waiting does: see the package documentation. The channel is closed when ctx ends or the Store
// is closed; a watch that breaks is re-established after a short backoff,
// with a value sent, since a change may have been missed.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := s.check(ctx, name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("etcdstore: lock %q: %w", name, ErrClosed)
	}
	if !s.anchored {
		s.anchored = true
		s.wg.Add(1)
		go s.anchor()
	}
	f := s.followers[name]
	if f != nil && !f.idle.IsZero() {
		// The spec did not change: what the follower checked while idle
		// holds (a change it saw then raised seen, so the next attempt
		// reads).
		f.idle, f.rejoined = time.Time{}, true
		f.poke()
	}
	if f == nil {
		fctx, cancel := context.WithCancel(s.ctx)
		// gen starts at 1: fresh == 0 means "not known to be fresh", and a
		// place queued before the Watch began is already in the spec.
		f = &follower{name: name, regs: make(map[*reg]struct{}), wake: make(chan struct{}, 1), cancel: cancel, gen: 1}
		s.followers[name] = f
		s.wg.Add(1)
		go s.follow(fctx, f)
	}
	r := &reg{ch: make(chan struct{}, 1)}
	f.regs[r] = struct{}{}
	s.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { s.unwatch(f, r) })
	s.mu.Lock()
	r.stop = stop
	s.mu.Unlock()
	return r.ch, nil
}

// unwatch ends registration r. When the last registration of a name ends,
// the follower stops and, in fair mode, the Store's queue entries for the
// name are removed: nobody in this Store waits for the lock any more.
func (s *Store) unwatch(f *follower, r *reg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	close(r.ch)
	delete(f.regs, r)
	if len(f.regs) == 0 && s.followers[f.name] == f {
		if s.fair {
			f.idle = time.Now()
			f.poke()
		} else {
			delete(s.followers, f.name)
			f.cancel()
		}
		s.dropEntriesLocked(f.name)
	}
}

// lingerFor is how long an idle follower (fair mode) keeps its watches.
const lingerFor = time.Second

// watchingLocked reports whether a Watch of name is open in the Store.
// s.mu must be held.
func (s *Store) watchingLocked(name string) bool {
	f := s.followers[name]
	return f != nil && len(f.regs) > 0
}

// beginAttempt counts an acquire attempt for name, for the follower.
func (s *Store) beginAttempt(name string) *follower {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.followers[name]
	if f == nil || len(f.regs) == 0 {
		return nil // none, or idle
	}
	f.inflight++
	return f
}

func (s *Store) endAttempt(f *follower) {
	if f == nil {
		return
	}
	s.mu.Lock()
	f.inflight--
	s.mu.Unlock()
	f.poke()
}

// observeLocked records what an attempt that found name held saw (not fair
// mode). s.mu must be held.
func (s *Store) observeLocked(f *follower, obs observation) {
	if f == nil || s.fair || f.observed && f.obs.rev > obs.rev {
		return
	}
	f.obs, f.observed = obs, true
	f.gen++
	f.poke()
}

// specChangedLocked tells name's follower that its spec may have changed.
// s.mu must be held.
func (s *Store) specChangedLocked(name string) {
	if f := s.followers[name]; f != nil {
		f.gen++
		f.poke()
	}
}

// specLocked returns what f watches now. s.mu must be held.
func (s *Store) specLocked(f *follower) watchSpec {
	if s.fair {
		if e := s.headEntryLocked(f.name); e != nil {
			return watchSpec{obs: e.obs, waiting: true, gen: f.gen}
		}
		if g, ok := s.tail[f.name]; ok && time.Since(g.at) < time.Second {
			return watchSpec{obs: g.obs, guess: true, gen: f.gen}
		}
	} else if f.observed {
		return watchSpec{obs: f.obs, waiting: true, gen: f.gen}
	}
	ck, _, _ := s.Keys(f.name)
	return watchSpec{obs: observation{target: ck}, gen: f.gen}
}

// cachedHeld returns a HeldError without asking etcd if f's watch shows that
// nothing changed since an attempt found name held, and nil otherwise.
func (s *Store) cachedHeld(f *follower, name string) error {
	if f == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	spec := s.specLocked(f)
	// In fair mode an observation the follower has yet to compare with its
	// watch counts as fresh: if anything changed since, the follower will
	// signal (see checked). So the attempt that follows the one that took
	// a place (the engine retries once the Watch is open) asks etcd
	// nothing.
	pending := s.fair && f.checked != f.gen && !f.broken && spec.obs.rev >= f.seen
	if !spec.waiting || f.fresh != f.gen && !pending {
		return nil
	}
	he := &backend.HeldError{Key: name, Holder: spec.obs.holder, Token: spec.obs.token}
	if c := s.claims[name]; c != nil && uint64(c.token) == he.Token && c.lost == nil {
		he.RetryAfter = max(time.Until(c.deadline), 0)
	}
	if sc := s.seen[name]; !s.fair && spec.obs.mod == 0 && sc != nil && !sc.gone.IsZero() {
		// Held by a claim whose key vanished (see ghost): ask etcd, for
		// the release marker the holder's Store puts.
		return nil
	}
	return fmt.Errorf("etcdstore: %w", he)
}

// anchor keeps one watch open, on a key nobody writes (the prefix itself:
// lock names are never empty), from the first Watch until Close. The etcd
// client closes its gRPC watch stream when the last watch on it ends and
// opens a new one for the next; without the anchor every uncontended Lock
// would open and close a stream on the server.
func (s *Store) anchor() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
		for range s.client.Watch(ctx, s.prefix) {
		}
		cancel()
		backoff = min(max(2*backoff, 50*time.Millisecond), maxBackoff)
		t := time.NewTimer(backoff)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func modOf(kvs []*mvccpb.KeyValue) int64 {
	if len(kvs) == 0 {
		return 0
	}
	return kvs[0].ModRevision
}

// Observe reports the record of lock name now and after every change of its
// claim (acquired, released, expired, taken over), until ctx ends or the
// Store is closed; then the channel is closed. It is how a process that
// does not campaign follows the leader of an election. The channel holds
// the latest record only: a reader that falls behind skips to it. A lock
// with no record yet is reported as a Record with only Key set.
func (s *Store) Observe(ctx context.Context, name string) (<-chan backend.Record, error) {
	if err := s.check(ctx, name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("etcdstore: lock %q: %w", name, ErrClosed)
	}
	s.wg.Add(1)
	s.mu.Unlock()
	ch := make(chan backend.Record, 1)
	go func() {
		defer s.wg.Done()
		defer close(ch)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.ctx, cancel)
		defer stop()
		s.observe(ctx, name, ch)
	}()
	return ch, nil
}

func (s *Store) observe(ctx context.Context, name string, ch chan backend.Record) {
	ck, lk, _ := s.Keys(name)
	var (
		last    backend.Record
		sent    bool
		backoff time.Duration
	)
	publish := func(r backend.Record) {
		if sent && r.Holder == last.Holder && r.Token == last.Token && r.Held() == last.Held() {
			return
		}
		last, sent = r, true
		for {
			select {
			case ch <- r:
				return
			default:
				select { // replace the value the reader has not taken
				case <-ch:
				default:
				}
			}
		}
	}
	pause := func() bool {
		backoff = min(max(2*backoff, 50*time.Millisecond), maxBackoff)
		t := time.NewTimer(backoff)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for ctx.Err() == nil {
		resp, err := s.client.Txn(ctx).Then(clientv3.OpGet(ck), clientv3.OpGet(lk)).Commit()
		if err != nil {
			if !pause() {
				return
			}
			continue
		}
		claimKV := kvOrNil(resp.Responses[0].GetResponseRange().Kvs)
		lastKV := kvOrNil(resp.Responses[1].GetResponseRange().Kvs)
		rec := backend.Record{Key: name}
		if claimKV != nil || lastKV != nil {
			r, err := s.record(ctx, name, claimKV, lastKV, map[int64]time.Duration{})
			if err == nil {
				rec = r
			}
		}
		publish(rec)
		// Watch from the revision after the read: if nothing changed
		// since, etcd treats the watch as current and delivers at once.
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.client.Watch(wctx, ck, clientv3.WithRev(resp.Header.Revision+1))
		broke := true
		for wr := range wch {
			if wr.Err() != nil || wr.Canceled {
				break
			}
			if len(wr.Events) > 0 {
				broke = false
				break
			}
		}
		wcancel()
		if broke {
			if !pause() {
				return
			}
		} else {
			backoff = 0
		}
	}
}
