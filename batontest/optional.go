package batontest

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
)

// The optional interfaces, checked as fstest.TestFS checks a file
// system's: each subtest is skipped if the backend does not implement its
// interface, and holds it to its documented contract otherwise.

// testForceRelease: ForceRelease frees a held key whoever holds it and
// keeps the fencing counter (a contender acquires at once, with a larger
// token); it returns nil for a free key and an error matching ErrNotFound
// for a key that has no record.
func (s *suite) testForceRelease(t *testing.T) {
	e := s.setup(t)
	a := e.client()
	fr, ok := a.(backend.ForceReleaser)
	if !ok {
		t.Skip("the backend does not implement backend.ForceReleaser")
	}
	ttl := s.longTTL()
	held := e.acquire(a, "force.held", request("holder-a", ttl))
	if err := fr.ForceRelease(e.ctx, "force.held"); err != nil {
		t.Fatalf("ForceRelease of a held key: %v", err)
	}
	b := e.client() // a contender that did not see the claim
	g, err := b.TryAcquire(e.ctx, "force.held", request("holder-b", ttl))
	if err != nil {
		t.Fatalf("TryAcquire after ForceRelease: %v; want the key free at once", err)
	}
	if g.Token <= held.Token {
		t.Errorf("token %d after ForceRelease of token %d: the counter went back", g.Token, held.Token)
	}
	e.release(b, g)

	freed := e.acquire(a, "force.free", request("holder-a", ttl))
	e.release(a, freed)
	if err := fr.ForceRelease(e.ctx, "force.free"); err != nil {
		t.Errorf("ForceRelease of a free key: %v, want nil", err)
	}
	if err := fr.ForceRelease(e.ctx, "force.never"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("ForceRelease of a key with no record: %v, want ErrNotFound", err)
	}
}

// testWaiterWatcher: a waiter's watch wakes it when the holder releases
// (no other waiter is queued, so nothing reserves the key for another),
// and its channel is closed when its context ends.
func (s *suite) testWaiterWatcher(t *testing.T) {
	e := s.setup(t)
	a, b := e.client(), e.client()
	ww, ok := b.(backend.WaiterWatcher)
	if !ok {
		t.Skip("the backend does not implement backend.WaiterWatcher")
	}
	ttl := s.longTTL()
	held := e.acquire(a, "waiter.watch", request("holder-a", ttl))
	if _, err := b.TryAcquire(e.ctx, "waiter.watch", backend.Request{Holder: "holder-b", Nonce: baton.NewNonce(), TTL: ttl, Waiting: true}); !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("TryAcquire of a held key: %v, want ErrHeld", err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch, err := ww.WatchWaiter(ctx, "waiter.watch", "holder-b")
	if err != nil {
		t.Fatalf("WatchWaiter: %v", err)
	}
	drainNow(ch) // wake-ups before the release are allowed, and not the point
	e.release(a, held)
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatal("the waiter's watch closed instead of waking it on the release")
		}
	case <-time.After(s.reactBound()):
		t.Fatalf("the waiter's watch did not wake it within %v of the release", s.reactBound())
	}
	cancel()
	deadline := time.After(eventTimeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("the waiter's watch channel is still open %v after its context ended", eventTimeout)
		}
	}
}

// drainNow takes what ch holds now, without waiting.
func drainNow(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// testRemove: Remove refuses a held key (ErrHeld, the claim intact),
// deletes a released key's record, returns nil for a key without one, and
// never resets the fencing counter: a contender that never saw the key
// creates it again at once with a larger token, and the removed claim's
// grant no longer renews.
func (s *suite) testRemove(t *testing.T) {
	e := s.setup(t)
	a, b := e.client(), e.client()
	rm, ok := b.(backend.Remover)
	if !ok {
		t.Skip("the backend does not implement backend.Remover")
	}
	ttl := s.longTTL()
	held := e.acquire(a, "remove.me", request("holder-a", ttl))
	checkHeld(t, "Remove of a held key", rm.Remove(e.ctx, "remove.me"), "remove.me", "holder-a", held.Token, ttl)
	held = e.renew(a, held) // the claim is intact
	e.release(a, held)

	if err := rm.Remove(e.ctx, "remove.me"); err != nil {
		t.Fatalf("Remove of a released key: %v", err)
	}
	if _, err := b.Get(e.ctx, "remove.me"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("Get after Remove: %v, want ErrNotFound", err)
	}
	if err := rm.Remove(e.ctx, "remove.me"); err != nil {
		t.Errorf("Remove of a removed key: %v, want nil", err)
	}
	if err := rm.Remove(e.ctx, "remove.never"); err != nil {
		t.Errorf("Remove of a key with no record: %v, want nil", err)
	}

	c := e.client() // never saw the key
	g, err := c.TryAcquire(e.ctx, "remove.me", request("holder-c", ttl))
	if err != nil {
		t.Fatalf("TryAcquire of a removed key: %v; want it free at once for a contender that never saw it", err)
	}
	if g.Token <= held.Token {
		t.Errorf("token %d after Remove of a key whose last token was %d: the counter went back", g.Token, held.Token)
	}
	if _, err := a.Renew(e.ctx, held); !errors.Is(err, backend.ErrLost) {
		t.Errorf("Renew of the removed key's released grant: %v, want ErrLost", err)
	}
	checkHeld(t, "Remove of the key held again", rm.Remove(e.ctx, "remove.me"), "remove.me", "holder-c", g.Token, ttl)
	e.release(c, g)
}

// testLossNotifier: AfterLoss of a grant the client does not hold (it was
// released) calls f promptly with a reason; for a live claim, stop
// cancels the call before any loss and reports that it did.
func (s *suite) testLossNotifier(t *testing.T) {
	e := s.setup(t)
	a := e.client()
	ln, ok := a.(backend.LossNotifier)
	if !ok {
		t.Skip("the backend does not implement backend.LossNotifier")
	}
	ttl := s.longTTL()
	live := e.acquire(a, "loss.live", request("holder-a", ttl))
	if stop := ln.AfterLoss(live, func(why error) { t.Errorf("AfterLoss called for a live claim: %v", why) }); !stop() {
		t.Error("stop of a live claim's AfterLoss reported false, want true (nothing was lost)")
	}
	e.release(a, live)

	whys := make(chan error, 1)
	ln.AfterLoss(live, func(why error) { whys <- why })
	select {
	case why := <-whys:
		if why == nil {
			t.Error("AfterLoss of a released grant called f with a nil reason")
		}
	case <-time.After(10 * time.Second):
		t.Error("AfterLoss of a released grant did not call f within 10s")
	}
}

// testClosed: a client that is an io.Closer (a connection the backend
// owns) refuses every operation after Close, promptly, with an error
// matching backend.ErrClosed, which the engine does not retry: a Lock on
// it returns at once instead of waiting until its context ends. A Lease
// held through it ends. A second Close returns nil, and other clients of
// the store are unaffected.
func (s *suite) testClosed(t *testing.T) {
	e := s.setup(t)
	b := e.client()
	c, ok := b.(io.Closer)
	if !ok {
		t.Skip("the backend does not implement io.Closer")
	}
	ttl := s.longTTL()
	g := e.acquire(b, "closed.held", request("holder-a", ttl))
	l, err := e.newMutex(b, "closed.lease", "holder-a", s.fastRetry()).TryLock(e.ctx)
	if err != nil {
		t.Fatalf("TryLock before Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	calls := []call{
		{"TryAcquire", func() error { _, err := b.TryAcquire(e.ctx, "closed.free", request("holder-a", ttl)); return err }},
		{"Get", func() error { _, err := b.Get(e.ctx, g.Key); return err }},
		{"Renew", func() error { _, err := b.Renew(e.ctx, g); return err }},
		{"Release", func() error { return b.Release(e.ctx, g) }},
		{"Mutex.Lock", func() error {
			// A retry would come after slowRetry, far beyond prompt.
			_, err := e.newWaitingMutex(b, "closed.free", "holder-a").Lock(e.ctx)
			return err
		}},
	}
	if w, ok := b.(backend.Watcher); ok {
		calls = append(calls, call{"Watch", func() error { _, err := w.Watch(e.ctx, g.Key); return err }})
	}
	checkPrompt(t, "after Close", backend.ErrClosed, calls)
	select {
	case <-l.Done():
		if !errors.Is(l.Err(), baton.ErrLost) {
			t.Errorf("the Lease held through the closed client ended with %v; want ErrLost", l.Err())
		}
	case <-time.After(eventTimeout + s.mutexTTL()):
		t.Errorf("the Lease held through the closed client still holds %v after Close", eventTimeout+s.mutexTTL())
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v; want nil", err)
	}
	other := e.client()
	e.release(other, e.acquire(other, "closed.free", request("holder-b", ttl)))
}
