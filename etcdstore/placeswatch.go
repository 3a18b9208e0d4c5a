package etcdstore

import (
	"context"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A fair holder that took a free lock knows no waiter behind it, so its
// Release would read the queue (readSuccessor) before it hands over, and
// that read is on the waiter's path. If the claim was taken by an attempt
// that would have waited (a Lock or a campaign: its caller expects to
// contend) or on a lock the Store has seen contended lately
// (fairQueue.contended), and it is held longer than its acquire's round
// trip (the hold after which that read is sent), the Store watches the
// lock's queue instead, from the revision after the claim's:
// the acquire found the queue empty, so every place a waiter puts while
// the claim is held reaches the watch, in the order the places were
// created, and the release hands the lock to the oldest without a read.
// The watch's view may lag: a place it shows that has left since fails
// the handoff's condition (the release then frees the lock plainly), and
// a place it does not show yet is younger than the ones it shows. With
// no place shown, or once the watch has failed, Release reads as before.
//
// A watch costs etcd a watcher, and this process two goroutines (this
// Store's and the etcd client's) and a few KiB, while the claim is held,
// and no request per renewal. A claim taken by TryLock on a lock the Store
// has not seen contended never opens one (the first contention it meets
// is served by the read), nor does a claim released within its acquire's
// round trip (a tight loop). A Store keeps at most maxPlacesWatches open
// at once, so that holding thousands of locks does not cost thousands of
// watchers: claims beyond that read at release.

// maxPlacesWatches bounds the watches of queues a Store keeps open.
const maxPlacesWatches = 256

// placesWatch is a claim's watch of its lock's queue. Its fields are
// guarded by Store.mu, as the claim's are.
type placesWatch struct {
	start  *time.Timer        // opens the watch (see Store.watchPlaces)
	cancel context.CancelFunc // ends it; nil until it is opened
	// failed: the watch ended (an error, a compaction, a lost leader) or
	// showed a change it cannot place, so places may be incomplete.
	failed bool
	places []*mvccpb.KeyValue // the queue's keys, oldest first, as last shown
}

// contended reports whether the Store has seen the lock name contended
// lately (see fairQueue.contended).
func (s *Store) contended(name string) bool {
	s.fq.mu.Lock()
	defer s.fq.mu.Unlock()
	_, ok := s.fq.contended[name]
	return ok
}

// armPlacesWatch arranges, for a fair claim c acquired free (without a
// place, knowing no waiter) by a waiting attempt or on a lock the Store
// has seen contended, that the Store watch its lock's queue once c has
// been held for its acquire's round trip. s.mu must be held.
func (s *Store) armPlacesWatch(c *claim) {
	w := &placesWatch{}
	c.places = w
	w.start = time.AfterFunc(c.rtt, func() { s.watchPlaces(c, w) })
}

// stopPlacesWatch ends c's watch of the queue, if any. s.mu must be held.
func (s *Store) stopPlacesWatch(c *claim) {
	w := c.places
	if w == nil {
		return
	}
	c.places = nil
	w.start.Stop()
	if w.cancel != nil {
		w.cancel()
	}
}

// watchPlaces opens w, c's watch of its lock's queue, if c is still
// held and w still c's.
func (s *Store) watchPlaces(c *claim, w *placesWatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || c.places != w || c.lost != nil || s.claims[c.name] != c || s.placesWatches >= maxPlacesWatches {
		return
	}
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	w.cancel = cancel
	s.placesWatches++
	s.wg.Add(1)
	go s.followPlaces(ctx, c, w)
}

// followPlaces applies the events of c's watch of the queue to w until the
// watch ends or fails.
//
// The watch runs under a context of its own, ended through dropWatch once
// ctx ends (w.cancel) or the watch fails.
func (s *Store) followPlaces(ctx context.Context, c *claim, w *placesWatch) {
	defer s.wg.Done()
	_, _, qp := s.Keys(c.name)
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(context.WithoutCancel(ctx)))
	wch := s.startWatch(wctx, wcancel, qp, clientv3.WithPrefix(), clientv3.WithRev(c.token+1), clientv3.WithCreatedNotify())
	confirmed := false
	for ok := true; ok; {
		select {
		case <-ctx.Done():
			ok = false
		case wr, open := <-wch:
			if open && wr.Created {
				confirmed = true
				continue
			}
			s.mu.Lock()
			ok = open && c.places == w && c.lost == nil && wr.Err() == nil && !wr.Canceled && w.apply(qp, wr.Events)
			if !ok {
				w.failed = true
			}
			s.mu.Unlock()
		}
	}
	s.dropWatch(wch, wcancel, confirmed)
	w.cancel() // idempotent
	s.mu.Lock()
	w.failed = true
	s.placesWatches--
	s.mu.Unlock()
}

// apply updates w's places with events, and reports whether they fit what
// w knows: a change of a key in the queue that w has not seen created
// means that w missed events.
func (w *placesWatch) apply(qp string, events []*clientv3.Event) bool {
	for _, ev := range events {
		key := string(ev.Kv.Key)
		if !strings.HasPrefix(key, qp) {
			return false
		}
		i := slices.IndexFunc(w.places, func(kv *mvccpb.KeyValue) bool { return string(kv.Key) == key })
		switch {
		case ev.Type == clientv3.EventTypeDelete && i >= 0:
			w.places = slices.Delete(w.places, i, i+1)
		case ev.Type == clientv3.EventTypeDelete:
			return false
		case i >= 0:
			w.places[i] = ev.Kv
		case ev.IsCreate():
			w.places = append(w.places, ev.Kv)
		default:
			return false
		}
	}
	return true
}

// watchedFirst returns the oldest place that c's watch of the queue shows,
// and whether it shows one it can vouch for. s.mu must be held.
func (c *claim) watchedFirst() (*mvccpb.KeyValue, bool) {
	w := c.places
	if w == nil || w.failed || len(w.places) == 0 {
		return nil, false
	}
	return w.places[0], true
}
