package kube

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/baton-go/baton"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// watchRetries is how many times in a row a broken watch is re-established
// before Watch gives up and closes its channel (the engine then polls).
const watchRetries = 5

// Watch watches the single lock object key (a watch with the field
// selector metadata.name=key, which needs only the "watch" verb) and sends
// on the returned channel soon after it changes. Notifications are
// coalesced: the channel has a buffer of one and a send is dropped while
// one is pending.
//
// Watch returns at once and establishes the watch in the background (one
// read of the object, then a watch from its resourceVersion), so that a
// waiter's first acquire attempt is not delayed by it. Once the watch is
// established it sends one notification, since the object may have
// changed before: a release that happens between the waiter's attempt and
// the watch's start is never missed. When the server ends the watch (its
// timeout, or 410 Gone after a compaction) it is re-established the same
// way. After watchRetries failures in a row (for example a missing
// "watch" permission) the channel is closed and baton's engine polls. The
// channel is closed, and the goroutine behind it ends, when ctx ends.
func (s *store) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	const op = "watch"
	if err := baton.ValidateName(key); err != nil {
		return nil, fmt.Errorf("kube: %s in namespace %s: %w", op, s.ns, err)
	}
	if err := s.ctxErr(ctx, op, key); err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	go s.runWatch(ctx, key, ch)
	return ch, nil
}

// startWatch starts a watch of key after version rv. With rv "", it reads
// the object first and watches from its version (or, if it does not exist,
// from the current state, which then reports its creation).
func (s *store) startWatch(ctx context.Context, key, rv string) (watch.Interface, string, error) {
	if rv == "" {
		o, err := s.k.get(ctx, key)
		switch {
		case err == nil:
			rv = o.rv
		case apierrors.IsNotFound(err):
		default:
			return nil, "", err
		}
	}
	w, err := s.k.watch(ctx, key, rv)
	if err != nil {
		return nil, "", err
	}
	return w, rv, nil
}

func (s *store) runWatch(ctx context.Context, key string, ch chan<- struct{}) {
	defer close(ch)
	notify := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	rv := ""
	failures := 0 // failed or immediately broken watches in a row
	for {
		if failures > watchRetries {
			return // the engine falls back to polling
		}
		if failures > 0 && !sleep(ctx, time.Duration(failures)*200*time.Millisecond) {
			return
		}
		w, nrv, err := s.startWatch(ctx, key, rv)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			failures++
			continue
		}
		rv = nrv
		notify() // the object may have changed before the watch started
		started := time.Now()
		var live bool
		rv, live = consume(ctx, w, rv, notify)
		w.Stop()
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

// consume reads w's events until it ends, notifying on every change, and
// returns the last resourceVersion seen ("" after 410 Gone) and whether ctx
// is still live.
func consume(ctx context.Context, w watch.Interface, rv string, notify func()) (string, bool) {
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
				notify()
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
