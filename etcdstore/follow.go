package etcdstore

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// deferFor bounds how long a waiter's wake-up waits for the claim watch to
// deliver the change that came with the deletion of the key ahead (see
// followLoop.deferRev).
const deferFor = 5 * time.Millisecond

// followLoop is the state of one follower's goroutine (Store.follow): the
// etcd watch on the key the follower's spec names (the target watch), in
// fair mode a second watch on the claim key, and their timers. Its fields
// are owned by that goroutine alone and are never guarded by a lock; the
// follower's own fields are guarded by watchHub.mu, and every method takes
// that lock itself where it touches them, with the queue's lock before it
// (lockSpec) where it needs the spec or the Store's places too.
type followLoop struct {
	s   *Store
	f   *follower
	ctx context.Context
	ck  string // the lock's claim key

	// The target watch.
	wch      clientv3.WatchChan
	wcancel  context.CancelFunc
	watching string
	created  int64 // revision at which the current watch started; 0 until etcd confirms it
	pureDone bool  // plain watchers were told that the watch is established
	retry    *time.Timer
	retryC   <-chan time.Time
	backoff  time.Duration

	// In fair mode a second watch follows the claim itself while this
	// Store waits, so that a claim handed to one of its places is
	// collected from the event (see claimChangedLocked).
	cwch     clientv3.WatchChan
	ccancel  context.CancelFunc
	cAfter   time.Time // no new claim watch before (after one broke)
	cCreated int64     // the claim watch's start revision; 0 until etcd confirms it
	// A deletion of the key ahead of a place that is next in line comes
	// with a change of the claim in the same transaction; its signal
	// waits (deferRev) for the claim watch to deliver that change, so that
	// a handed claim is collected from the event, but no longer than
	// deferFor.
	deferRev int64
	dTimer   *time.Timer
	dC       <-chan time.Time

	// The idle follower's linger timer (fair mode).
	lingerT *time.Timer
	lingerC <-chan time.Time
}

// follow runs f's etcd watch until f is stopped.
func (s *Store) follow(ctx context.Context, f *follower) {
	defer s.wg.Done()
	ck, _, _ := s.Keys(f.name)
	l := &followLoop{s: s, f: f, ctx: ctx, ck: ck, wcancel: func() {}, ccancel: func() {}}
	defer l.stop()
	l.run()
}

// stop ends both watches and stops every timer of the loop.
func (l *followLoop) stop() {
	l.dropTarget()
	l.dropClaim()
	for _, t := range []*time.Timer{l.retry, l.dTimer, l.lingerT} {
		if t != nil {
			t.Stop()
		}
	}
}

// run is the follower's loop: it brings both watches in line with the
// follower's spec, compares a new observation with the established watch,
// and handles one event (a wake-up, a timer, a watch response) per round.
// It returns when ctx ends or an idle follower's linger time is over.
func (l *followLoop) run() {
	for {
		spec, inflight, checked, idle, done := l.poll()
		if done {
			return
		}
		l.steerTarget(spec, inflight, idle)
		l.steerClaim(spec)
		if l.wch != nil && l.created != 0 && !l.checkEstablished(spec, checked, inflight) {
			return
		}
		if !l.wait() {
			return
		}
	}
}

// poll reads, under lockSpec, what the round works with: the follower's spec,
// its attempts in flight, the generation last checked and when it went
// idle. It arms the linger timer of an idle follower, and reports done
// (having removed the follower from the Store and cancelled it) once the
// follower has been idle for lingerFor.
func (l *followLoop) poll() (spec watchSpec, inflight int, checked uint64, idle time.Time, done bool) {
	s, f := l.s, l.f
	s.lockSpec()
	spec = s.specLocked(f)
	inflight, checked, idle = f.inflight, f.checked, f.idle
	if f.rejoined {
		f.rejoined, l.pureDone = false, false
	}
	if !idle.IsZero() {
		if time.Since(idle) >= lingerFor {
			if s.hub.followers[f.name] == f {
				delete(s.hub.followers, f.name)
			}
			s.unlockSpec()
			f.cancel()
			return spec, inflight, checked, idle, true
		}
		if l.lingerC == nil {
			if l.lingerT == nil {
				l.lingerT = time.NewTimer(lingerFor - time.Since(idle))
			} else {
				l.lingerT.Reset(lingerFor - time.Since(idle))
			}
			l.lingerC = l.lingerT.C
		}
	}
	s.unlockSpec()
	return spec, inflight, checked, idle, false
}

// steerTarget starts, moves or ends the target watch for spec: an idle
// follower with nothing to wait for keeps no target watch (the claim
// watch is enough); a broken watch is started again only when its backoff
// ends; while an attempt is in flight and nothing is observed yet, no
// watch starts (the attempt either acquires or says what to watch).
func (l *followLoop) steerTarget(spec watchSpec, inflight int, idle time.Time) {
	parked := !idle.IsZero() && !spec.waiting && !spec.guess
	if parked && l.wch != nil {
		l.dropTarget()
	}
	switch {
	case parked:
	case l.retryC != nil: // backing off after a broken watch
	case l.wch == nil:
		if spec.waiting || spec.guess || inflight == 0 {
			l.start(spec.obs.target)
		}
	case l.watching != spec.obs.target:
		l.start(spec.obs.target)
	}
}

// start replaces the target watch with one on target, from the present
// revision, and marks no spec generation as checked against it.
func (l *followLoop) start(target string) {
	l.dropTarget()
	wctx, cancel := l.watchContext()
	l.wcancel = cancel
	l.wch = l.s.startWatch(wctx, cancel, target, clientv3.WithCreatedNotify())
	l.watching, l.created, l.pureDone = target, 0, false
	l.s.hub.mu.Lock()
	l.f.checked = 0
	l.s.hub.mu.Unlock()
}

// watchContext is the context of a new watch of the loop: not a child of
// the loop's context, so that the watch ends only through dropTarget or
// dropClaim (see Store.dropWatch); the loop's end calls both (stop).
func (l *followLoop) watchContext() (context.Context, context.CancelFunc) {
	return context.WithCancel(clientv3.WithRequireLeader(context.WithoutCancel(l.ctx)))
}

// dropTarget ends the target watch, if any (see Store.dropWatch).
func (l *followLoop) dropTarget() {
	l.s.dropWatch(l.wch, l.wcancel, l.created != 0)
	l.wch, l.created, l.wcancel = nil, 0, func() {}
}

// dropClaim ends the claim watch, if any (see Store.dropWatch).
func (l *followLoop) dropClaim() {
	l.s.dropWatch(l.cwch, l.ccancel, l.cCreated != 0)
	l.cwch, l.cCreated, l.ccancel = nil, 0, func() {}
}

// steerClaim keeps the claim watch open exactly while the Store's first
// place is next in line (or was handed the lock and has not collected it
// yet), and not again before cAfter once one broke.
func (l *followLoop) steerClaim(spec watchSpec) {
	s, f := l.s, l.f
	s.fq.mu.Lock()
	head := s.headEntryLocked(f.name)
	wantClaim := s.fair && spec.waiting && spec.obs.target != l.ck && head != nil && (head.first || head.handed != nil)
	s.fq.mu.Unlock()
	switch {
	case wantClaim && l.cwch == nil && !time.Now().Before(l.cAfter):
		cctx, cancel := l.watchContext()
		l.ccancel = cancel
		l.cwch, l.cCreated = s.startWatch(cctx, cancel, l.ck, clientv3.WithCreatedNotify()), 0
	case !wantClaim && l.cwch != nil:
		l.dropClaim()
		s.hub.mu.Lock()
		f.claimUp = false
		s.hub.mu.Unlock()
		l.undefer()
	}
}

// checkEstablished runs while the target watch is established. A waiter's
// observation not yet compared with the watch is marked fresh if the
// watch covers it (or a read shows the target unchanged since), and the
// waiter is signalled otherwise; plain watchers are told once that the
// watch is up. It returns false if ctx ended during a read.
func (l *followLoop) checkEstablished(spec watchSpec, checked uint64, inflight int) bool {
	switch {
	case spec.waiting && checked != spec.gen:
		return l.compare(spec)
	case !spec.waiting && !spec.guess && !l.pureDone && inflight == 0:
		l.pureDone = true
		l.signal()
	}
	return true
}

// compare checks the waiter's observation in spec against the established
// target watch, records spec.gen as checked, and marks the observation
// fresh unless a change may have been missed, in which case it signals
// the waiter. It returns false if ctx ended during a read.
func (l *followLoop) compare(spec watchSpec) bool {
	s, f := l.s, l.f
	s.hub.mu.Lock()
	f.checked = spec.gen
	s.hub.mu.Unlock()
	fresh := spec.obs.rev >= l.created
	if !fresh {
		// The watch started after the read: a change in between is not in
		// it. Read the target again: serializably (no round of consensus)
		// if the member has caught up with the watch's start, as the watch
		// covers what follows.
		r, err := s.client.Get(l.ctx, spec.obs.target, clientv3.WithSerializable())
		if err == nil && r.Header.Revision < l.created {
			r, err = s.client.Get(l.ctx, spec.obs.target)
		}
		switch {
		case err != nil:
			if l.ctx.Err() != nil {
				return false
			}
			l.signal() // let the waiter ask etcd itself
		case modOf(r.Kvs) != spec.obs.mod:
			s.hub.mu.Lock()
			f.seen = max(f.seen, r.Header.Revision)
			s.hub.mu.Unlock()
			l.signal()
		default:
			fresh = true
		}
	}
	if fresh {
		s.hub.mu.Lock()
		if f.gen == spec.gen && spec.obs.rev >= f.seen {
			f.fresh = spec.gen
		}
		s.hub.mu.Unlock()
	}
	return true
}

// signal drops the follower's freshness and wakes every registration.
func (l *followLoop) signal() {
	l.s.hub.mu.Lock()
	l.f.fresh = 0
	l.f.signalLocked()
	l.s.hub.mu.Unlock()
}

// undefer sends the deferred signal, if any, at once.
func (l *followLoop) undefer() {
	if l.deferRev != 0 {
		l.deferRev, l.dC = 0, nil
		l.dTimer.Stop()
		l.s.hub.mu.Lock()
		l.f.signalLocked()
		l.s.hub.mu.Unlock()
	}
}

// wait blocks until something happens (ctx ends, the follower is poked, a
// timer fires, a watch responds) and handles it. It returns false when
// the loop must end.
func (l *followLoop) wait() bool {
	select {
	case <-l.ctx.Done():
		return false
	case <-l.f.wake:
	case <-l.retryC:
		l.retryC = nil
	case <-l.dC:
		l.undefer()
	case <-l.lingerC:
		l.lingerC = nil
	case wr, ok := <-l.cwch:
		return l.claimResponse(wr, ok)
	case wr, ok := <-l.wch:
		return l.targetResponse(wr, ok)
	}
	return true
}

// claimResponse handles a response of the claim watch: a broken watch is
// dropped (a new one waits maxBackoff, and no place counts as next in line
// until it is up); its confirmation marks it up; its events are applied
// to the Store's places, and end a deferred signal they reach. It returns
// false if ctx ended.
func (l *followLoop) claimResponse(wr clientv3.WatchResponse, ok bool) bool {
	s, f := l.s, l.f
	if !ok || wr.Err() != nil || wr.Canceled {
		l.ccancel()
		l.cwch, l.cCreated, l.cAfter = nil, 0, time.Now().Add(maxBackoff)
		if l.ctx.Err() != nil {
			return false
		}
		s.lockSpec()
		f.claimUp = false
		for k, e := range s.fq.entries {
			if k.name == f.name {
				e.first = false // a new claim watch may miss the next change
			}
		}
		s.unlockSpec()
		l.undefer()
		return true
	}
	if wr.Created {
		l.cCreated = max(wr.Header.Revision, 1)
		s.hub.mu.Lock()
		f.claimUp = true
		s.hub.mu.Unlock()
		return true
	}
	reached := false
	s.lockSpec()
	for _, ev := range wr.Events {
		s.claimChangedLocked(f, ev)
		reached = reached || l.deferRev != 0 && ev.Kv.ModRevision >= l.deferRev
	}
	s.unlockSpec()
	if reached {
		l.undefer()
	}
	return true
}

// targetResponse handles a response of the target watch: a broken watch
// signals the waiters (a change may be missed) and is started again after
// a backoff; its confirmation records its start revision; its events go
// to targetEventsLocked. It returns false if ctx ended.
func (l *followLoop) targetResponse(wr clientv3.WatchResponse, ok bool) bool {
	s, f := l.s, l.f
	if !ok || wr.Err() != nil || wr.Canceled {
		l.wcancel()
		l.wch, l.created = nil, 0
		if l.ctx.Err() != nil {
			return false
		}
		s.hub.mu.Lock()
		f.broken = true
		s.hub.mu.Unlock()
		l.signal()
		// Short: a watch breaks while its member has no leader, and the
		// waiter learns of a release only once it is back.
		l.backoff = min(max(2*l.backoff, 50*time.Millisecond), watchMaxBackoff)
		if l.retry == nil {
			l.retry = time.NewTimer(l.backoff)
		} else {
			l.retry.Reset(l.backoff)
		}
		l.retryC = l.retry.C
		err := wr.Err()
		if err == nil {
			err = errors.New("watch channel closed")
		}
		s.log.Debug("etcdstore: watch broke; re-establishing", "lock", f.name, "err", err, "retry_in", l.backoff)
		return true
	}
	if wr.Created {
		s.hub.mu.Lock()
		f.broken = false
		s.hub.mu.Unlock()
		l.created = max(wr.Header.Revision, 1)
		l.backoff = 0
		return true
	}
	s.lockSpec()
	l.targetEventsLocked(wr.Events)
	s.unlockSpec()
	return true
}

// targetEventsLocked applies the target watch's events to the follower,
// if the spec still names the watched key: each change after the waiter's
// observation ends its freshness and, if it is one the waiter cares for,
// wakes it (or arms the deferred signal, see deferRev); in fair mode a
// touch of the key ahead marks the Store's first place next in line.
// The locks lockSpec takes must be held.
func (l *followLoop) targetEventsLocked(events []*clientv3.Event) {
	s, f := l.s, l.f
	spec := s.specLocked(f)
	if spec.obs.target != l.watching || spec.guess {
		return
	}
	for _, ev := range events {
		if spec.waiting && ev.Kv.ModRevision <= spec.obs.rev {
			continue // the waiter's read already reflects it
		}
		if s.fair && spec.waiting && l.watching != l.ck && ev.Type == mvccpb.PUT {
			// The key ahead was touched: the lock was handed to its owner
			// (see deleteClaim), and the Store's first place is next in
			// line. Nothing to retry yet.
			if e := s.headEntryLocked(f.name); e != nil && e.obs.target == l.watching {
				s.nextInLineLocked(f.name, e)
			}
			continue
		}
		if s.fair && spec.waiting && l.watching == l.ck && ev.Type == mvccpb.PUT {
			// A holder without a place ahead handed the lock over: to a
			// place of this Store, it is collected from the event.
			if e := s.headEntryLocked(f.name); e != nil && !e.consumed && !e.doomed && s.markHandedLocked(f, e, ev.Kv) {
				continue
			}
		}
		f.fresh = 0
		f.seen = max(f.seen, ev.Kv.ModRevision)
		// A waiter cares for the deletion of the key it waits for, or
		// (fair mode) a claim put over the one it waits for: a holder
		// without a place handed it over.
		if !spec.waiting || ev.Type == mvccpb.DELETE || s.fair && l.watching == l.ck {
			if l.deferLocked(ev) {
				continue
			}
			f.signalLocked()
		}
	}
}

// deferLocked arms the deferred signal for ev, the deletion of the key
// ahead of the Store's first place while it is next in line, if the claim
// watch started before it (so it will deliver the claim's change of the
// same transaction) and nothing is deferred yet. It reports whether it
// did; the caller signals otherwise. The locks lockSpec takes must be
// held.
func (l *followLoop) deferLocked(ev *clientv3.Event) bool {
	e := l.s.headEntryLocked(l.f.name)
	if ev.Type != mvccpb.DELETE || l.watching == l.ck || l.cCreated == 0 ||
		l.cCreated >= ev.Kv.ModRevision || e == nil || !e.first || e.handed != nil || l.deferRev != 0 {
		return false
	}
	l.deferRev = ev.Kv.ModRevision
	if l.dTimer == nil {
		l.dTimer = time.NewTimer(deferFor)
	} else {
		l.dTimer.Reset(deferFor)
	}
	l.dC = l.dTimer.C
	return true
}
