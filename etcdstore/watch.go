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
	h := s.hub
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, fmt.Errorf("etcdstore: lock %q: %w", name, ErrClosed)
	}
	if !h.anchored {
		h.anchored = true
		s.wg.Add(1)
		go s.anchor()
	}
	f := h.followers[name]
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
		h.followers[name] = f
		s.wg.Add(1)
		go s.follow(fctx, f)
	}
	r := &reg{ch: make(chan struct{}, 1)}
	f.regs[r] = struct{}{}
	h.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { s.unwatch(f, r) })
	h.mu.Lock()
	r.stop = stop
	h.mu.Unlock()
	return r.ch, nil
}

// unwatch ends registration r. When the last registration of a name ends,
// the follower stops and, in fair mode, the Store's queue entries for the
// name are removed: nobody in this Store waits for the lock any more.
func (s *Store) unwatch(f *follower, r *reg) {
	// The queue's lock is taken first and kept until the entries are gone,
	// so that no attempt sees the follower idle and the entries still there.
	s.fq.mu.Lock()
	defer s.fq.mu.Unlock()
	if s.hub.unregister(f, r, s.fair) {
		s.dropEntriesLocked(f.name)
	}
}

// lingerFor is how long an idle follower (fair mode) keeps its watches.
const lingerFor = time.Second

// observeHeld records what an attempt that found name held saw (not fair
// mode: there the queue's places say what to watch). f is name's
// follower, or nil.
func (s *Store) observeHeld(f *follower, obs observation) {
	if !s.fair {
		s.hub.observe(f, obs)
	}
}

// specLocked returns what f watches now: in fair mode the observation of
// the Store's first place in name's queue, or a guess of where its next
// waiter will queue (see tail); otherwise the last observation of an
// attempt, or else the claim key. The locks lockSpec takes must be held.
func (s *Store) specLocked(f *follower) watchSpec {
	if s.fair {
		if e := s.headEntryLocked(f.name); e != nil {
			return watchSpec{obs: e.obs, waiting: true, gen: f.gen}
		}
		if g, ok := s.fq.tail[f.name]; ok && time.Since(g.at) < time.Second {
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
	s.mu.Lock() // for the claims and the claims seen
	defer s.mu.Unlock()
	s.lockSpec()
	defer s.unlockSpec()
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
	if spec.obs.mod == 0 {
		// The attempt found no key to wait for: held by a claim whose
		// key vanished (see ghost), or by none at all (ghost forgot the
		// claim as expired after this attempt took a place). Ask etcd,
		// for the release marker the holder's Store puts, or for the
		// free lock: neither wakes a watch, nor, in fair mode, does
		// anything else when no queue key is ahead of this waiter's
		// place: the key of the holder's place, whose deletion wakes the
		// waiter behind it, may be gone too (with its lease, or by
		// `etcdctl del --prefix`).
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
