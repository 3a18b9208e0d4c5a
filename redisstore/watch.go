package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/redis/go-redis/v9"
)

// errClosed is the hub's answer after Close (a watch that raced with it).
var errClosed = fmt.Errorf("the Store was closed: %w", backend.ErrClosed)

// watcher is one Watch call's channel. Values are sent without blocking
// (the buffer of one folds several notices into one wake-up). One watcher
// may be registered with several hubs (Redlock), so wake and close are
// serialized by the watcher's own mutex.
type watcher struct {
	// holder, if not empty, is the waiting contender the watch is for
	// (Store.WatchWaiter): see hub.notify.
	holder string

	mu      sync.Mutex
	c       chan struct{}
	closed  bool
	later   *time.Timer // a pending wakeAfter; nil if none
	refused error       // the server's refusal of a subscription, which closed c
}

func newWatcher() *watcher { return &watcher{c: make(chan struct{}, 1)} }

// wakeAfter wakes w after d, unless a wake-up is already pending (which
// comes earlier: a spurious wake-up, never a late one, as the lock can
// only have been reserved again after the reservation it was armed for).
func (w *watcher) wakeAfter(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.later != nil {
		return
	}
	w.later = time.AfterFunc(d, func() {
		w.mu.Lock()
		w.later = nil
		w.mu.Unlock()
		w.wake()
	})
}

func (w *watcher) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// refuse closes w for the server's refusal err of one of its
// subscriptions (see hub.refuse).
func (w *watcher) refuse(err error) {
	w.mu.Lock()
	if !w.closed {
		w.refused = err
	}
	w.mu.Unlock()
	w.close()
}

// refusal returns the refusal that closed w, or nil.
func (w *watcher) refusal() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refused
}

func (w *watcher) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		close(w.c)
		if w.later != nil {
			w.later.Stop()
			w.later = nil
		}
	}
}

// hub multiplexes every watch of one server onto one pub/sub connection.
//
// A channel is subscribed when its first watcher arrives; add returns a
// channel that is closed when the server confirms the subscription, which
// Watch waits for (up to confirmTimeout), so that no notice published after
// Watch returned is missed. A watcher that returned before the
// confirmation is woken by it instead (a notice may have been missed). Every
// later confirmation of an already confirmed channel (go-redis reconnected
// and resubscribed) wakes all its watchers too. A channel stays subscribed
// for linger after its last watcher left. The hub's goroutine runs while
// any channel is subscribed, and pings the server when nothing arrived for
// healthInterval; a ping unanswered for another interval replaces the
// connection.
type hub struct {
	client redis.UniversalClient
	linger time.Duration
	health time.Duration
	// onHanded, if set, is told of every handoff notice, with the notice
	// channel of its lock (see waiters.notice). It is called with mu held
	// (so before the notice wakes anyone) and must not call back into the
	// hub.
	onHanded func(lock, owner, holder string, token uint64, ttl time.Duration)

	mu     sync.Mutex
	ps     *redis.PubSub // nil while the loop is not running
	cancel context.CancelFunc
	done   chan struct{} // closed when the last started loop has returned
	chans  map[string]*hubChan
	closed bool
	epoch  uint64 // counts the times notices may have been lost (see mark)
	seq    uint64 // counts confirmations and notices other than handoffs, on every channel
}

type hubChan struct {
	// lock is the notice channel of the lock this channel is about: the
	// channel itself, or the lock's for its handoff channels.
	lock        string
	watchers    map[*watcher]bool // value: returned before the confirmation
	confirmed   chan struct{}     // closed at the first confirmation
	isConfirmed bool
	idle        time.Time // when the last watcher left; zero while watched
	seq         uint64    // the hub's seq at this channel's last confirmation or notice other than a handoff
}

// hubMark is a point in the history of a lock's notice channel and one of
// its handoff channels, as the hub heard them: two equal marks mean that
// no notice other than a handoff arrived, and none can have been lost,
// between them. A handoff does not move the mark: it cannot free the lock,
// and its new holder is passed to onHanded (see waiters.notice).
type hubMark struct{ epoch, seq, handoffSeq uint64 }

// mark returns the mark of the notice channel lock and of the first of
// handoffs that is confirmed, and false if lock or none of handoffs is
// subscribed and confirmed (notices may be missed). Marks taken through
// different handoff channels differ: seq values come from one counter.
func (h *hub) mark(lock string, handoffs ...string) (hubMark, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chans[lock]
	if c == nil || !c.isConfirmed {
		return hubMark{}, false
	}
	for _, ch := range handoffs {
		if hc := h.chans[ch]; hc != nil && hc.isConfirmed {
			return hubMark{h.epoch, c.seq, hc.seq}, true
		}
	}
	return hubMark{}, false
}

// confirmTimeout bounds how long Watch waits for a subscription to be
// confirmed before it returns anyway (and the confirmation wakes it).
const confirmTimeout = time.Second

func newHub(client redis.UniversalClient, linger, health time.Duration) *hub {
	return &hub{client: client, linger: linger, health: health, chans: map[string]*hubChan{}}
}

// add registers w for channel, whose notices are about the lock with the
// notice channel lock, subscribing if needed, and returns a channel that
// is closed when the subscription is confirmed.
func (h *hub) add(ctx context.Context, channel, lock string, w *watcher) (<-chan struct{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errClosed
	}
	if h.ps == nil {
		loopCtx, cancel := context.WithCancel(context.Background())
		h.ps = h.client.Subscribe(loopCtx)
		h.cancel = cancel
		done := make(chan struct{})
		h.done = done
		go h.loop(loopCtx, h.ps, done)
	}
	c := h.chans[channel]
	if c == nil {
		if err := h.ps.Subscribe(ctx, channel); err != nil {
			// go-redis remembers the channel for resubscription; forget it.
			_ = h.ps.Unsubscribe(ctx, channel)
			return nil, err
		}
		c = &hubChan{lock: lock, watchers: map[*watcher]bool{}, confirmed: make(chan struct{})}
		h.chans[channel] = c
	}
	c.watchers[w] = false
	c.idle = time.Time{}
	return c.confirmed, nil
}

// returnedEarly marks w as returned to its caller before channel's
// subscription was confirmed, so that the confirmation wakes it.
func (h *hub) returnedEarly(channel string, w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.chans[channel]; c != nil && !c.isConfirmed {
		if _, ok := c.watchers[w]; ok {
			c.watchers[w] = true
		}
	}
}

// awaitConfirmed waits for confirmed until ctx ends. It reports whether the
// subscription was confirmed.
func awaitConfirmed(ctx context.Context, confirmed <-chan struct{}) bool {
	select {
	case <-confirmed:
		return true
	case <-ctx.Done():
		return false
	}
}

// isClosed reports whether c is closed, without waiting.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// watching reports whether channel has a watcher now.
func (h *hub) watching(channel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chans[channel]
	return c != nil && len(c.watchers) > 0
}

// remove unregisters w; the channel lingers.
func (h *hub) remove(channel string, w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chans[channel]
	if c == nil {
		return
	}
	delete(c.watchers, w)
	if len(c.watchers) == 0 {
		c.idle = time.Now()
	}
}

// close stops the loop and closes every watcher's channel.
func (h *hub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	ps, cancel, done := h.ps, h.cancel, h.done
	h.ps = nil
	for _, c := range h.chans {
		for w := range c.watchers {
			w.close()
		}
		if !c.isConfirmed {
			close(c.confirmed)
		}
	}
	clear(h.chans)
	h.mu.Unlock()
	if ps != nil {
		cancel()
		_ = ps.Close()
	}
	if done != nil {
		<-done
	}
}

// notify handles a notice published on channel. A plain watch (Watch) is
// woken by every notice. A waiter's watch (WatchWaiter) is not woken by an
// acquisition, which cannot let its holder acquire, nor by a handoff to
// another holder (the same), nor at once by a release reserved for another
// waiter: only when that reservation ends (if the other waiter took the
// lock, its release notices this one again). A handoff to its holder
// wakes it, to collect the lock. This keeps a release from waking every
// waiter to be refused (with 8 contenders, about 8 refused scripts per
// handover). A notice this code does not know wakes every watch.
//
// A handoff to a waiter of this version is published on the lock's
// handoff channels, not its notice channel (see releaseScript): a plain
// watch follows the notice channel and the channel of every handoff, a
// waiter's watch the notice channel and its holder's handoff channel, so
// that a handover reaches one waiting Store, not all of them.
//
// The order of notices on the connection is the order the scripts ran, so
// a waiter that registered (RPUSH) just after a release picked another
// waiter still hears the release that picks it; and a watch opened after
// a notice was published is covered by the engine's retry after Watch
// returned.
func (h *hub) notify(channel, payload string) {
	n := parseNotice(payload)
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chans[channel]
	if c == nil {
		return
	}
	if n.kind == noticeHanded && h.onHanded != nil {
		h.onHanded(c.lock, n.owner, n.holder, n.token, n.ttl)
	}
	if n.kind != noticeHanded {
		h.seq++
		c.seq = h.seq
	}
	for w := range c.watchers {
		switch {
		case w.holder == "":
			w.wake()
		case n.kind == noticeAcquired:
		case n.kind == noticeHanded && n.holder != w.holder:
		case n.reservedFor != "" && n.reservedFor != w.holder:
			// The reservation ends window after the script ran, which was
			// before this notice arrived; a millisecond more covers the
			// server's expiry rounding.
			w.wakeAfter(n.window + time.Millisecond)
		default:
			w.wake()
		}
	}
}

type noticeKind int

const (
	noticeOther    noticeKind = iota // a release, or a notice this code does not know
	noticeAcquired                   // "acquired <token>"
	noticeHanded                     // "handed <token> <ttl ms> <owner>"
)

// notice is a parsed notice.
type notice struct {
	kind        noticeKind
	reservedFor string        // a release reserved for this waiter
	window      time.Duration // for that long
	token       uint64        // handed: the new holder's token
	ttl         time.Duration // handed: its claim's TTL
	owner       string        // handed: its owner (ownerArg)
	holder      string        // handed: its holder
}

// parseNotice reads "acquired <token>", "released <token>",
// "released <token> <window ms> <waiter>" or "handed <token> <ttl ms>
// <owner>". Anything else reads as a release without reservation, which
// wakes every watch.
func parseNotice(p string) notice {
	kind, rest, _ := strings.Cut(p, " ")
	switch kind {
	case "acquired":
		return notice{kind: noticeAcquired}
	case "handed":
		return parseHanded(rest)
	case "released":
	default:
		return notice{}
	}
	_, rest, ok := strings.Cut(rest, " ") // the token
	if !ok {
		return notice{}
	}
	ms, holder, ok := strings.Cut(rest, " ")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || n <= 0 || holder == "" {
		return notice{}
	}
	return notice{reservedFor: holder, window: time.Duration(n) * time.Millisecond}
}

// parseHanded reads "<token> <ttl ms> <owner>"; a malformed one reads as
// an unknown notice.
func parseHanded(p string) notice {
	tok, rest, ok1 := strings.Cut(p, " ")
	ms, owner, ok2 := strings.Cut(rest, " ")
	token, err1 := strconv.ParseUint(tok, 10, 64)
	ttl, err2 := strconv.ParseInt(ms, 10, 64)
	holder, ok3 := holderOf(owner)
	if !ok1 || !ok2 || !ok3 || err1 != nil || err2 != nil || token == 0 || ttl <= 0 {
		return notice{}
	}
	return notice{kind: noticeHanded, token: token, ttl: time.Duration(ttl) * time.Millisecond, owner: owner, holder: holder}
}

// confirm handles a subscription confirmation: the first one completes the
// waiting Watch calls and wakes the watchers that returned before it; later
// ones (after a reconnect) wake every watcher.
func (h *hub) confirm(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chans[channel]
	if c == nil {
		return
	}
	h.seq++
	c.seq = h.seq
	first := !c.isConfirmed
	if first {
		c.isConfirmed = true
		close(c.confirmed)
	}
	for w, early := range c.watchers {
		if !first || early {
			w.wake()
		}
	}
}

// wakeAll records that notices may have been lost and, if wake, wakes
// every watcher.
func (h *hub) wakeAll(wake bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.epoch++
	if !wake {
		return
	}
	for _, c := range h.chans {
		for w := range c.watchers {
			w.wake()
		}
	}
}

// loop receives from ps until the hub is closed or no channel is left.
func (h *hub) loop(ctx context.Context, ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	var (
		pingSent  bool
		backoff   time.Duration
		lastSweep = time.Now()
	)
	for {
		msg, err := ps.ReceiveTimeout(ctx, h.health)
		if ctx.Err() != nil {
			return
		}
		if next := h.replacedBy(ps); next != nil {
			// reconnect replaced ps (whatever it received is the old
			// primary's): carry on with the new connection.
			ps, pingSent, backoff = next, false, 0
			continue
		}
		var ne net.Error
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout():
			if pingSent {
				// No answer for a whole interval: the connection is dead or
				// stuck (a partition does not always break it). Replace it.
				if ps = h.replace(ctx, ps); ps == nil {
					return
				}
				h.wakeAll(true)
				pingSent = false
			} else {
				pingSent = ps.Ping(ctx) == nil
			}
		case errors.Is(err, redis.ErrClosed):
			// The client was closed under the Store: the watches are broken.
			h.abandon(ps)
			return
		case isReply(err) && h.refuse(ctx, ps, err):
			continue
		case err != nil:
			// go-redis reconnects and resubscribes on the next receive;
			// notices may have been lost meanwhile. The first error of
			// an outage wakes the watchers (their waiters try, fail, and
			// then poll at their retry period); the failed reconnections
			// after it wake nobody, or every waiter would send an attempt
			// to the absent server at each one, and log its failure.
			// The resubscription's confirmation wakes them all again.
			h.wakeAll(backoff == 0)
			backoff = min(max(2*backoff, 50*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		default:
			backoff, pingSent = 0, false
			switch m := msg.(type) {
			case *redis.Message:
				h.notify(m.Channel, m.Payload)
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					h.confirm(m.Channel)
				}
			}
		}
		if time.Since(lastSweep) >= min(h.health, h.linger) {
			lastSweep = time.Now()
			if !h.sweep(ctx, ps) {
				return
			}
		}
	}
}

// isReply reports whether err is an error reply of the server, not a
// failure of the connection.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// refuse handles err, an error reply on ps, as the server's refusal of the
// subscriptions not yet confirmed (an ACL without the channel or without
// SUBSCRIBE, a SUBSCRIBE disabled with rename-command), if there are any:
// it drops those channels and closes their watchers with err, so that a
// Watch waiting for its confirmation fails with it and a watch that
// returned before ends, and the engine polls (it would otherwise wait for
// notices that never come, until the claim it saw could end, a TTL). It
// reports whether it did.
func (h *hub) refuse(ctx context.Context, ps *redis.PubSub, err error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ps != ps {
		return false
	}
	var refused []string
	for ch, c := range h.chans {
		if c.isConfirmed {
			continue
		}
		refused = append(refused, ch)
		delete(h.chans, ch)
		close(c.confirmed)
		for w := range c.watchers {
			w.refuse(err)
		}
	}
	if len(refused) == 0 {
		return false
	}
	// go-redis would subscribe them again at its next reconnection.
	_ = ps.Unsubscribe(ctx, refused...)
	return true
}

// abandon drops every channel and closes every watcher (the engine then
// polls), after the client was closed under the hub. A later add starts
// over (and fails while the client stays closed).
func (h *hub) abandon(ps *redis.PubSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ps != ps {
		return
	}
	h.ps = nil
	h.epoch++
	h.cancel()
	_ = ps.Close()
	for _, c := range h.chans {
		for w := range c.watchers {
			w.close()
		}
		if !c.isConfirmed {
			close(c.confirmed)
		}
	}
	clear(h.chans)
}

// replace closes ps and subscribes a new connection to every channel. It
// returns nil if the hub was closed meanwhile.
func (h *hub) replace(ctx context.Context, ps *redis.PubSub) *redis.PubSub {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ps != ps {
		return nil
	}
	_ = ps.Close()
	h.epoch++
	channels := make([]string, 0, len(h.chans))
	for ch := range h.chans {
		channels = append(channels, ch)
	}
	// Subscribe remembers the channels even if the server cannot be reached
	// now; the next receive dials again.
	h.ps = h.client.Subscribe(ctx, channels...)
	return h.ps
}

// reconnect replaces the hub's connection, if it has one, with a new one
// subscribed to every channel, whose confirmations wake every watcher.
// After a failover the old connection stays on the former primary, which
// hears none of the new primary's notices until it is demoted (see
// sentinelWatch).
func (h *hub) reconnect(ctx context.Context) {
	h.mu.Lock()
	ps := h.ps
	h.mu.Unlock()
	if ps != nil {
		h.replace(ctx, ps)
	}
}

// replacedBy returns the connection that replaced ps (see reconnect), or
// nil if ps is still the hub's or the hub has none.
func (h *hub) replacedBy(ps *redis.PubSub) *redis.PubSub {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ps == ps {
		return nil
	}
	return h.ps
}

// sweep unsubscribes channels idle for longer than linger. When none is
// left it stops the loop (returns false); the next add starts a new one.
func (h *hub) sweep(ctx context.Context, ps *redis.PubSub) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ps != ps {
		return false
	}
	var idle []string
	for ch, c := range h.chans {
		if len(c.watchers) == 0 && time.Since(c.idle) >= h.linger {
			idle = append(idle, ch)
			delete(h.chans, ch)
		}
	}
	if len(h.chans) == 0 {
		h.ps = nil
		h.cancel()
		_ = ps.Close()
		return false
	}
	if len(idle) > 0 {
		_ = ps.Unsubscribe(ctx, idle...)
	}
	return true
}
