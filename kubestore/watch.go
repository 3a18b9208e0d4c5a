package kubestore

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/baton-go/baton/backend"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// watchRetries is how many times in a row a broken watch is re-established
// before Watch gives up and closes its channels (the engine then polls).
const watchRetries = 5

// watchDeniedFor is how long a watch that the API server refused for lack
// of permission is not asked for again: Watch fails at once meanwhile, and
// the engine polls. A Role granted later is used from then on.
const watchDeniedFor = time.Minute

// deniedWatch is a watch the API server refused (403): err, until until.
type deniedWatch struct {
	until time.Time
	err   error
}

// decoder is implemented by kinds whose watch events carry one lock record
// (Lease, ConfigMap). For them the store keeps a live view of each watched
// object, wakes watchers only when the holder changes, and answers a
// refused acquisition from the view without a request.
type decoder interface {
	// decode reads the lock record from a watch event's object; ok is
	// false if obj is not of the kind.
	decode(obj runtime.Object) (o object, ok bool, err error)
}

// sharedWatch is the one API watch a store runs for a lock name, however
// many Watch calls wait on it (an Elector and a status view in one
// process, say).
type sharedWatch struct {
	cancel context.CancelFunc
	subs   map[chan struct{}]struct{}

	// up is true while the API watch is established.
	up bool
	// The view: the object as the watch last delivered it. valid is true
	// while the watch is established and the last event decoded; exists
	// is false if the object does not exist.
	valid  bool
	exists bool
	obj    object
}

// Watch watches the single lock object key (a watch with the field
// selector metadata.name=key, which needs only the "watch" verb) and sends
// on the returned channel soon after its holder changes: an acquisition,
// a release, a takeover, a deletion. A renewal by the same holder does not
// wake the waiter; the store records it (the claim's expiry is counted
// from when this process saw the renewal), so a waiter that retries when
// the claim could first expire is refused from that record without a
// request. An idle standby therefore makes no requests while the leader
// renews. (The DistributedLock store wakes on every change.)
// Notifications are coalesced: the channel has a buffer of one and a send
// is dropped while one is pending.
//
// All Watch calls for one name share one API watch. Watch returns at once;
// the watch is established in the background (one read of the object,
// then a watch from its resourceVersion), so that a waiter's first acquire
// attempt is not delayed by it. Once the watch is established it sends one
// notification to every channel, since the object may have changed before:
// a release between a waiter's attempt and the watch's start is never
// missed. A Watch that joins an established watch is notified at once for
// the same reason. When the server ends the watch (its timeout, or 410
// Gone after a compaction) it is re-established the same way. After
// watchRetries failures in a row the channels are closed and baton's
// engine polls. A watch refused for lack of permission (no "watch" verb in
// the Role) is not retried: its channels are closed at once, and for
// watchDeniedFor Watch of that lock returns the permission error (matching
// backend.ErrForbidden) without a request, so that the engine polls every
// RetryPeriod instead of opening watch after watch. A channel is closed
// when its ctx ends; the API watch ends with the last one.
func (s *store) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	const op = "watch"
	if err := backend.ValidateName(key); err != nil {
		return nil, fmt.Errorf("kube: %s in namespace %s: %w", op, s.ns, err)
	}
	if err := s.ctxErr(ctx, op, key); err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if d, ok := s.denied[key]; ok {
		if s.now().Before(d.until) {
			s.mu.Unlock()
			return nil, d.err
		}
		delete(s.denied, key)
	}
	sw := s.watches[key]
	if sw == nil {
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		sw = &sharedWatch{cancel: cancel, subs: map[chan struct{}]struct{}{}}
		s.watches[key] = sw
		go s.runWatch(wctx, key, sw)
	}
	sw.subs[ch] = struct{}{}
	if sw.up {
		ch <- struct{}{}
	}
	s.mu.Unlock()
	context.AfterFunc(ctx, func() { s.unsubscribe(key, sw, ch) })
	return ch, nil
}

// unsubscribe closes ch and, with the last subscriber gone, ends the API
// watch.
func (s *store) unsubscribe(key string, sw *sharedWatch, ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := sw.subs[ch]; ok {
		delete(sw.subs, ch)
		close(ch)
	}
	if len(sw.subs) == 0 {
		if s.watches[key] == sw {
			delete(s.watches, key)
		}
		sw.cancel()
	}
}

// notifyLocked wakes every subscriber of sw. s.mu must be held.
func notifyLocked(sw *sharedWatch) {
	for ch := range sw.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// view returns the watched object key as the live watch last delivered
// it; ok is false if no watch of key is established.
func (s *store) view(key string) (o object, exists, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sw := s.watches[key]
	if sw == nil || !sw.valid {
		return object{}, false, false
	}
	return sw.obj, sw.exists, true
}

// established records the state the watch starts from and wakes everyone.
func (s *store) established(sw *sharedWatch, o object, exists, decoded bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sw.up = true
	sw.valid, sw.exists, sw.obj = decoded, exists, o
	notifyLocked(sw)
}

// invalidate marks the view unusable until the watch is established again.
func (s *store) invalidate(sw *sharedWatch) {
	s.mu.Lock()
	sw.up, sw.valid = false, false
	s.mu.Unlock()
}

// absenceObserver is implemented by kinds that keep their own observation
// of claims (DistributedLock): the watch tells them when it sees the
// object missing.
type absenceObserver interface {
	// absent records that name does not exist, as seen now; last is its
	// final state (a Deleted event's object) or nil.
	absent(name string, last runtime.Object)
}

// sawMissing records that the watch saw key missing (last: the object's
// final state, from a Deleted event, or nil), so that a contender of this
// process does not create it before the claim last seen could have
// expired (see store.missing).
func (s *store) sawMissing(key string, last runtime.Object) {
	if a, ok := s.k.(absenceObserver); ok {
		a.absent(key, last)
		return
	}
	var final *object
	if d, ok := s.k.(decoder); ok && last != nil {
		if o, ok, err := d.decode(last); ok && err == nil {
			final = &o
		}
	}
	s.missing(key, final)
}

// event applies one watch event to the view and wakes the subscribers if
// the holder changed (or the event cannot be judged).
func (s *store) event(key string, sw *sharedWatch, ev watch.Event) {
	if ev.Type == watch.Deleted {
		s.sawMissing(key, ev.Object)
	}
	d, canDecode := s.k.(decoder)
	var (
		o       object
		decoded bool
	)
	if canDecode {
		var err error
		o, decoded, err = d.decode(ev.Object)
		decoded = decoded && err == nil
	}
	if decoded && ev.Type != watch.Deleted {
		s.remaining(o) // counts the claim from now if this version is new
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !decoded {
		sw.valid = false
		notifyLocked(sw)
		return
	}
	prev, prevExists, wasValid := sw.obj, sw.exists, sw.valid
	exists := ev.Type != watch.Deleted
	sw.valid, sw.exists, sw.obj = true, exists, o
	if !exists {
		sw.obj = object{}
	}
	if !wasValid || exists != prevExists || !exists || prev.holder != o.holder || prev.nonce != o.nonce {
		notifyLocked(sw)
	}
}

// closeAll closes every subscriber's channel and forgets sw.
func (s *store) closeAll(key string, sw *sharedWatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range sw.subs {
		delete(sw.subs, ch)
		close(ch)
	}
	sw.up, sw.valid = false, false
	if s.watches[key] == sw {
		delete(s.watches, key)
	}
	sw.cancel()
}

// startWatch starts a watch of key after version rv. With rv "", it reads
// the object first and watches from its version (or, if it does not exist,
// from the current state, which then reports its creation); then o and
// exists describe what it read, and read is true.
func (s *store) startWatch(ctx context.Context, key, rv string) (w watch.Interface, nrv string, o object, exists, read bool, err error) {
	if rv == "" {
		read = true
		o, err = s.k.get(ctx, key)
		switch {
		case err == nil:
			rv, exists = o.rv, true
		case apierrors.IsNotFound(err):
			o, err = object{}, nil
			s.sawMissing(key, nil)
		default:
			return nil, "", object{}, false, false, err
		}
	}
	w, err = s.k.watch(ctx, key, rv)
	if err != nil {
		return nil, "", object{}, false, false, err
	}
	return w, rv, o, exists, read, nil
}

func (s *store) runWatch(ctx context.Context, key string, sw *sharedWatch) {
	defer s.closeAll(key, sw)
	_, canDecode := s.k.(decoder)
	rv := ""
	failures := 0 // failed or immediately broken watches in a row
	for {
		if failures > watchRetries {
			return // the engine falls back to polling
		}
		if failures > 0 && !sleep(ctx, time.Duration(failures)*200*time.Millisecond) {
			return
		}
		w, nrv, o, exists, read, err := s.startWatch(ctx, key, rv)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if apierrors.IsForbidden(err) {
				// No Role appears by retrying: poll instead (see Watch).
				now := s.now()
				d := deniedWatch{until: now.Add(watchDeniedFor), err: s.fail(ctx, "watch", "watch", key, err)}
				s.mu.Lock()
				s.denied[key] = d
				s.sweepDeniedLocked(now)
				s.mu.Unlock()
				return
			}
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			failures++
			continue
		}
		rv = nrv
		if read && exists && canDecode {
			s.remaining(o)
		}
		// A watch resumed from a known version replays what it missed;
		// the view is usable again once those events are in, so only a
		// fresh read makes it valid here. Either way, wake everyone: the
		// object may have changed before the watch started.
		s.established(sw, o, exists, read && canDecode)
		started := time.Now()
		var live bool
		rv, live = s.consume(ctx, key, sw, w, rv)
		w.Stop()
		s.invalidate(sw)
		if !live {
			return
		}
		if time.Since(started) < time.Second {
			failures++ // a watch that breaks at once counts as a failure
		} else {
			failures = 0
		}
	}
}

// consume reads w's events until it ends, applying each to the view, and
// returns the last resourceVersion seen ("" after 410 Gone) and whether ctx
// is still live.
func (s *store) consume(ctx context.Context, key string, sw *sharedWatch, w watch.Interface, rv string) (string, bool) {
	for {
		select {
		case <-ctx.Done():
			return rv, false
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, ctx.Err() == nil
			}
			switch ev.Type {
			case watch.Error:
				if st, ok := ev.Object.(*metav1.Status); ok && st.Code == http.StatusGone {
					rv = "" // compacted: start again from the current state
				}
				return rv, ctx.Err() == nil
			case watch.Bookmark:
				if m, err := meta.Accessor(ev.Object); err == nil {
					rv = m.GetResourceVersion()
				}
			default:
				if m, err := meta.Accessor(ev.Object); err == nil {
					rv = m.GetResourceVersion()
				}
				s.event(key, sw, ev)
			}
		}
	}
}

// sleep waits for d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
