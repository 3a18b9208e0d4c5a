package redisstore

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Direct handoff: a release hands the lock to the longest-waiting waiter
// in the same script (releaseScript) and publishes "handed <token> <ttl>
// <owner>". The waiter's Store then returns the claim from the notice,
// without a request; see waiters.collect for the clock model.

// waiters are this Store's waiting attempts that a release may hand the
// lock to, by notice channel and owner (ownerArg: holder and nonce, one
// Lock call or campaign).
type waiters struct {
	// leave gives up a waiter's place, and the lock if it was handed to it
	// and not collected (releaseScript with leaving = "1"). Run in its own
	// goroutine with a context that Close cancels.
	leave func(ctx context.Context, k *keys, holder, owner string)

	mu        sync.Mutex
	m         map[string]map[string]*waiting // by notice channel, then owner
	lastSweep time.Time
	closed    bool
	ctx       context.Context // cancelled by close
	cancel    context.CancelFunc
	wg        sync.WaitGroup // running leaves
}

type waiterKey struct{ channel, owner string }

// waiting is one owner's state between its attempts.
type waiting struct {
	k      *keys
	holder string
	ttl    time.Duration // of the latest attempt
	// sent is the send time of the latest attempt (on this process's
	// monotonic clock); inflight is true until it is answered, refused
	// then.
	sent     time.Time
	inflight bool
	refused  bool
	// held is the refusal's answer (held.token: the claim's that refused
	// it); mark is the hub's mark of the lock's channel taken before the
	// attempt was sent (markOK if confirmed).
	held   acquireResult
	mark   hubMark
	markOK bool
	// seen is the newest claim a handoff notice named for another owner
	// (seen.pttl: the claim's TTL), if this Store heard one: it hears
	// handoffs to other holders only while it watches the lock with Watch,
	// or from an earlier version's release.
	seen acquireResult
	// handed and handedTTL come from a handoff notice for this owner; 0
	// if none arrived.
	handed    uint64
	handedTTL time.Duration
	// gaveUp is set when ctx ended while an attempt was in flight: its
	// answer then runs the leave.
	gaveUp bool
	ctx    context.Context // the attempts' context; its end means the waiter gave up
	stop   func() bool     // stops the context.AfterFunc for ctx
}

func newWaiters(leave func(ctx context.Context, k *keys, holder, owner string)) *waiters {
	ctx, cancel := context.WithCancel(context.Background())
	return &waiters{leave: leave, m: map[string]map[string]*waiting{}, ctx: ctx, cancel: cancel}
}

// get returns key's waiter, or nil. ws.mu is held.
func (ws *waiters) get(key waiterKey) *waiting { return ws.m[key.channel][key.owner] }

// put records w as key's waiter. ws.mu is held.
func (ws *waiters) put(key waiterKey, w *waiting) {
	byOwner := ws.m[key.channel]
	if byOwner == nil {
		byOwner = map[string]*waiting{}
		ws.m[key.channel] = byOwner
	}
	byOwner[key.owner] = w
}

// sending records that an attempt of owner, which waits and may be handed
// the lock, is about to be sent. Its end of ctx gives up the place.
func (ws *waiters) sending(ctx context.Context, k *keys, holder, owner string, ttl time.Duration, mark hubMark, markOK bool) {
	now := time.Now()
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return
	}
	key := waiterKey{k.channel, owner}
	w := ws.get(key)
	if w == nil {
		ws.sweep(now)
		w = &waiting{k: k, holder: holder}
		ws.put(key, w)
	}
	w.sent, w.ttl, w.inflight, w.refused = now, ttl, true, false
	w.mark, w.markOK = mark, markOK
	if w.ctx != ctx {
		if w.stop != nil {
			w.stop()
		}
		w.ctx, w.stop = ctx, context.AfterFunc(ctx, func() { ws.giveUp(key, w) })
	}
}

// answered records the answer to the attempt in flight: acquired (the
// waiter is done), refused (r; its place is kept), or neither (an error:
// it may or may not have run).
func (ws *waiters) answered(channel, owner string, acquired, refused bool, r acquireResult) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	key := waiterKey{channel, owner}
	w := ws.get(key)
	if w == nil {
		return
	}
	w.inflight = false
	switch {
	case acquired:
		ws.remove(key, w)
	case w.gaveUp:
		ws.remove(key, w)
		ws.startLeave(w, owner)
	case refused:
		w.refused, w.held = true, r
	}
}

// refusal returns the answer owner's last attempt got, with the time left
// of the claim it saw, if asking again could not change it: the lock's
// channel has been confirmed without a break since before that attempt
// was sent (cur, curOK: its mark now), no notice other than a handoff to
// another owner arrived on it since (an acquisition, a release or a
// forced release would have published one; see hubMark), no handoff to
// this owner was heard, and the claim or reservation seen cannot have
// ended yet (its PTTL, counted from the attempt's send time). The engine retries
// right after its watch opens, to cover notices the watch may have
// missed; on a channel this Store was already following, none was.
//
// A handoff to another holder's waiter cannot free the lock either, but
// a Store that watches only as a waiter does not hear it (see hub.notify):
// the answer then names the holder and time left the attempt's answer
// named, and that holder may have handed the lock on since (as it may
// have by the time a reply from Redis arrives). The time left is that of
// the claim the attempt saw: with the same TTL the new claim, written
// later, ends no earlier; with a shorter one it may, and the waiter then
// retries later than it could (a waiter's watch is not woken by a
// handoff to another holder either).
func (ws *waiters) refusal(channel, owner string, cur hubMark, curOK bool, now time.Time) (acquireResult, bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.get(waiterKey{channel, owner})
	if w == nil || w.inflight || !w.refused || w.handed != 0 || !w.markOK || !curOK || w.mark != cur {
		return acquireResult{}, false
	}
	r := w.held
	if w.seen.token > r.token {
		// Handed to another waiter by a release that ran after the attempt
		// (its answer names an older claim): the new claim's TTL, counted
		// from the attempt's send time, ends no later than the claim does.
		r = w.seen
	}
	r.pttl -= now.Sub(w.sent)
	return r, r.pttl > 0
}

// notice records a handoff to owner (holder) of the lock whose notice
// channel is channel. The lock's other waiters keep the new claim (seen):
// a handoff does not move the hub's mark (see hub.notify), so their next
// attempt can still be answered here, and the answer should name the
// lock's holder now, as far as this Store heard (see refusal).
func (ws *waiters) notice(channel, owner, holder string, token uint64, ttl time.Duration) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for o, w := range ws.m[channel] {
		switch {
		case o == owner:
			if token > w.handed {
				w.handed, w.handedTTL = token, ttl
			}
		case token > w.seen.token:
			w.seen = acquireResult{holder: holder, token: token, pttl: ttl}
		}
	}
}

// collect returns the token of a lock handed to owner, and how long ago
// its validity may be counted from, if it can be collected without a
// request.
//
// The clock model (DESIGN invariant 3): the waiter's latest attempt was
// sent at w.sent and refused by a claim with a token below the handed
// one, so Redis ran it before the release that handed the lock, which
// wrote the claim with the waiter's TTL from its own start. Redis thus
// keeps the claim until at least w.sent + TTL, and the grant says so with
// Age = now - w.sent. A handoff whose attempt is still in flight, or was
// not answered, is left to the next request (acquireScript collects it
// with the TTL from then); so is one older than TTL/3 (a waiter that
// slept long: its holder would have to renew at once), and one with
// another TTL than this attempt's.
func (ws *waiters) collect(channel, owner string, ttl time.Duration, now time.Time) (token uint64, age time.Duration, ok bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	key := waiterKey{channel, owner}
	w := ws.get(key)
	if w == nil || w.handed == 0 || w.inflight || !w.refused || w.held.token >= w.handed || w.handedTTL != ttl {
		return 0, 0, false
	}
	age = now.Sub(w.sent)
	if age < 0 || age > ttl/3 {
		return 0, 0, false
	}
	ws.remove(key, w)
	return w.handed, age, true
}

// giveUp runs when a waiter's context ends before it acquired: it drops
// the waiter and gives up its place (and a lock handed to it) in Redis,
// after the attempt in flight if any.
func (ws *waiters) giveUp(key waiterKey, w *waiting) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.get(key) != w {
		return // acquired, collected, or replaced
	}
	if w.inflight {
		w.gaveUp = true
		return
	}
	ws.remove(key, w)
	ws.startLeave(w, key.owner)
}

// startLeave runs ws.leave for w in the background. ws.mu is held.
func (ws *waiters) startLeave(w *waiting, owner string) {
	if ws.closed {
		return
	}
	ws.wg.Add(1)
	go func() {
		defer ws.wg.Done()
		ctx, cancel := context.WithTimeout(ws.ctx, leaveTimeout)
		defer cancel()
		ws.leave(ctx, w.k, w.holder, owner)
	}()
}

// leaveTimeout bounds a give-up's request; if it fails, the place
// expires once the waiter's next attempt is overdue (at least 4/3 of a
// TTL after its last; see "Direct handoff"), and a lock handed to it one
// TTL after the handoff.
const leaveTimeout = 5 * time.Second

// remove forgets w. ws.mu is held.
func (ws *waiters) remove(key waiterKey, w *waiting) {
	byOwner := ws.m[key.channel]
	delete(byOwner, key.owner)
	if len(byOwner) == 0 {
		delete(ws.m, key.channel)
	}
	if w.stop != nil {
		w.stop()
	}
}

// sweep forgets, at most once a minute, waiters whose latest attempt is
// older than twice their TTL (a Lock that stopped on an error without its
// context ending): their place has most likely expired in Redis, so no
// release can hand them the lock. (One waiting behind a holder with a
// longer TTL may still have its place; its next request collects a lock
// handed to it.) ws.mu is held.
func (ws *waiters) sweep(now time.Time) {
	if now.Sub(ws.lastSweep) < time.Minute {
		return
	}
	ws.lastSweep = now
	for channel, byOwner := range ws.m {
		for owner, w := range byOwner {
			if !w.inflight && now.Sub(w.sent) > 2*w.ttl {
				ws.remove(waiterKey{channel, owner}, w)
			}
		}
	}
}

// closeLeaveTimeout bounds how long close waits for the give-ups it
// runs before it cancels them.
const closeLeaveTimeout = 2 * time.Second

// close gives up the place of every waiter left (none of them can attempt
// again: the Store is closing), waits up to closeLeaveTimeout for those
// give-ups and the ones already running, then stops them.
//
// A process that shuts down ends its waiting Lock's context and closes
// the Store right after (defer store.Close(), baton run's standby on
// SIGTERM): the give-up that the context's end started may not have run
// yet. Without it the waiter's place stays for a TTL or more, and a release
// hands the lock to the process that is gone, which holds it up for its
// TTL.
func (ws *waiters) close() {
	ws.mu.Lock()
	for channel, byOwner := range ws.m {
		for owner, w := range byOwner {
			ws.remove(waiterKey{channel, owner}, w)
			ws.startLeave(w, owner)
		}
	}
	ws.closed = true
	ws.mu.Unlock()
	done := make(chan struct{})
	go func() {
		ws.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(closeLeaveTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	ws.cancel()
	<-done
}

// holderOf returns the holder that an owner (ownerArg) names.
func holderOf(owner string) (string, bool) {
	n, rest, ok := strings.Cut(owner, " ")
	l, err := strconv.Atoi(n)
	if !ok || err != nil || l < 1 || l >= len(rest) {
		return "", false
	}
	return rest[l:], true
}
