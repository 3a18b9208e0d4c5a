package batontest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
)

// testExclusiveTryAcquire: 16 clients, two goroutines each (same holder
// identity, different nonces), race for one key with TryAcquire and
// Release, 8 rounds each or until the work budget runs out. No two holders
// are ever valid inside the critical section at once, a holder with a
// larger token starts only after every holder with a smaller token has
// left, and there are at least as many acquisitions as clients.
func (s *suite) testExclusiveTryAcquire(t *testing.T) {
	e := s.setup(t)
	const (
		key       = "exclusive"
		clients   = 16
		perClient = 2
		rounds    = 8
	)
	ttl := s.longTTL()
	ctx, cancel := context.WithTimeout(e.ctx, s.workBudget())
	defer cancel()
	var (
		held     tenures
		acquired atomic.Int64
		wg       sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		cancel() // stop the other contenders
	}
	began := time.Now()
	for i := range clients {
		b := e.client()
		holder := fmt.Sprintf("client-%02d", i)
		for range perClient {
			wg.Go(func() {
				for n := 0; n < rounds; {
					sent := time.Now()
					g, err := b.TryAcquire(ctx, key, request(holder, ttl))
					if err != nil {
						switch {
						case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded):
							return // the work budget ran out (or would, before the request went out)
						case errors.Is(err, backend.ErrHeld):
							runtime.Gosched()
							continue
						}
						fail("TryAcquire by %q: %v", holder, err)
						return
					}
					start := time.Now()
					runtime.Gosched() // give the others a chance to (wrongly) get in
					validUntil := sent.Add(ttl - margin(ttl))
					held.add(holder, g.Token, start, time.Now(), validUntil)
					err = b.Release(e.ctx, g)
					if err != nil && !lostInTime(err, validUntil) {
						fail("Release by its holder %q (token %d): %v", holder, g.Token, err)
						return
					}
					acquired.Add(1)
					n++
				}
			})
		}
	}
	wg.Wait()
	held.check(t)
	e.checkWork(acquired.Load(), clients*perClient*rounds, clients, held.holders(), time.Since(began))
}

// lostInTime reports whether err, returned by a release or renew of a
// claim valid until validUntil, says the claim was lost (ErrLost) and came
// back no earlier than validUntil: the claim could then have expired in
// the store, which is no failure of the store.
func lostInTime(err error, validUntil time.Time) bool {
	return errors.Is(err, backend.ErrLost) && !time.Now().Before(validUntil)
}

// checkWork checks the outcome of a contention subtest after its
// contenders stopped: the subtest's deadline must not have passed, at least
// least acquisitions must have been made, of the want it aimed for (it
// stops early when the work budget runs out), and by at least two holders.
func (e *env) checkWork(acquired int64, want, least, holders int, took time.Duration) {
	e.t.Helper()
	if err := e.ctx.Err(); err != nil {
		e.t.Fatalf("after %d of %d acquisitions: %v", acquired, want, context.Cause(e.ctx))
	}
	if e.t.Failed() {
		return
	}
	switch {
	case acquired < int64(least):
		e.t.Errorf("%d acquisitions in %v, want at least %d (the aim was %d within the work budget %v)",
			acquired, took.Round(time.Millisecond), least, want, e.s.workBudget())
	case holders < 2:
		e.t.Errorf("%d acquisitions, all by one holder; want the lock to pass between holders", acquired)
	case acquired < int64(want):
		e.t.Logf("the work budget %v ran out after %d of %d acquisitions by %d holders (at least %d required): a busy machine",
			e.s.workBudget(), acquired, want, holders, least)
	}
}

// testAcquire: a fresh key is granted; while it is held, nobody gets it
// again, not even its owner or another goroutine of the same holder; keys
// are independent.
func (s *suite) testAcquire(t *testing.T) {
	e := s.setup(t)
	const key = "acquire"
	a, b := e.client(), e.client()
	ttl := s.longTTL()
	req := request("holder-a", ttl)
	g := e.acquire(a, key, req)
	if g.TTL != ttl {
		t.Errorf("grant TTL = %v, want the requested %v", g.TTL, ttl)
	}

	_, err := a.TryAcquire(e.ctx, key, req)
	checkHeld(t, "TryAcquire again by the owner that holds the lock (same holder and nonce)", err, key, "holder-a", g.Token, ttl)
	_, err = a.TryAcquire(e.ctx, key, request("holder-a", ttl))
	checkHeld(t, "TryAcquire by the same holder with another nonce", err, key, "holder-a", g.Token, ttl)
	_, err = b.TryAcquire(e.ctx, key, request("holder-b", ttl))
	if held := checkHeld(t, "TryAcquire by another client", err, key, "holder-a", g.Token, ttl); held != nil && held.RetryAfter == 0 {
		t.Logf("note: HeldError.RetryAfter is 0; the engine then retries only every RetryPeriod")
	}

	other := e.acquire(b, key+".other", request("holder-b", ttl))

	g = e.renew(a, g)
	rec := e.get(b, key)
	if rec.Holder != "holder-a" || rec.Token != g.Token || !rec.Held() {
		t.Errorf("after the failed attempts Get = holder %q, token %d, held %v; want %q, %d, true",
			rec.Holder, rec.Token, rec.Held(), "holder-a", g.Token)
	}
	e.release(a, g)
	e.release(b, other)
}

// testTokensIncrease: tokens strictly increase across holders, renewals,
// releases, an expiry takeover and a newly connected client.
func (s *suite) testTokensIncrease(t *testing.T) {
	e := s.setup(t)
	const key = "tokens"
	a, b := e.client(), e.client()
	long := s.longTTL()
	var last uint64
	next := func(what string, g backend.Grant) {
		t.Helper()
		if g.Token <= last {
			t.Errorf("%s: token %d after token %d; tokens must strictly increase", what, g.Token, last)
		}
		last = g.Token
	}

	g := e.acquire(a, key, request("holder-a", long))
	next("first holder", g)
	e.release(a, g)

	g = e.acquire(b, key, request("holder-b", long))
	next("another holder after a release", g)
	g = e.renew(b, g)
	e.release(b, g)

	g = e.acquire(a, key, request("holder-a", long))
	next("the first holder again", g)
	e.release(a, g)
	g = e.acquire(a, key, request("holder-a", long))
	next("the same holder right after its release", g)
	e.release(a, g)

	sent := time.Now()
	g = e.acquire(a, key, request("holder-a", s.h.TTL))
	next("a holder with a short TTL", g)
	g, _ = e.awaitTakeover(b, key, request("holder-b", s.h.TTL), sent, nil)
	next("a takeover after expiry", g)
	e.release(b, g)

	c := e.client() // a restarted process
	g = e.acquire(c, key, request("holder-c", long))
	next("a newly connected client", g)
	if rec := e.get(c, key); rec.Token != g.Token {
		t.Errorf("Get on the new client: token %d, want %d", rec.Token, g.Token)
	}
	e.release(c, g)
}

// awaitTakeover retries TryAcquire on b for req until it succeeds, which
// must happen within a few TTLs of sent. Every failed attempt must match
// ErrHeld; onHeld, if not nil, checks each of them. It returns the grant
// and the time the successful TryAcquire returned.
func (e *env) awaitTakeover(b backend.Backend, key string, req backend.Request, sent time.Time, onHeld func(err error)) (backend.Grant, time.Time) {
	e.t.Helper()
	deadline := sent.Add(3*e.s.h.TTL + eventTimeout)
	for {
		g, err := b.TryAcquire(e.ctx, key, req)
		now := time.Now()
		if err == nil {
			checkGrant(e.t, "TryAcquire", g, key, req)
			return g, now
		}
		if !errors.Is(err, backend.ErrHeld) {
			e.t.Fatalf("TryAcquire(%q) for %q while waiting for expiry: %v", key, req.Holder, err)
		}
		if onHeld != nil {
			onHeld(err)
		}
		if now.After(deadline) {
			e.t.Fatalf("TryAcquire(%q) still fails %v after the first claim (TTL %v): %v", key, now.Sub(sent), req.TTL, err)
		}
		e.sleepUntil(now.Add(e.s.pollInterval()))
	}
}

// awaitNotHeld polls Get on b until the record of key is not held (or
// gone), which must happen within a few TTLs of sent, and returns the time
// the Get that said so returned.
func (e *env) awaitNotHeld(b backend.Backend, key string, sent time.Time) time.Time {
	e.t.Helper()
	deadline := sent.Add(3*e.s.h.TTL + eventTimeout)
	for {
		rec, err := b.Get(e.ctx, key)
		now := time.Now()
		switch {
		case errors.Is(err, backend.ErrNotFound):
			return now
		case err != nil:
			e.t.Fatalf("Get(%q): %v", key, err)
		case !rec.Held():
			return now
		case now.After(deadline):
			e.t.Fatalf("Get(%q) still reports %q holding it (remaining %v) %v after the claim was made",
				key, rec.Holder, rec.Remaining, now.Sub(sent))
		}
		e.sleepUntil(now.Add(e.s.pollInterval()))
	}
}

// testNotOwner: renew and release by anyone but the owner (another holder,
// the same holder with another nonce, a stale grant) fail with ErrLost and
// leave the holder's claim intact.
func (s *suite) testNotOwner(t *testing.T) {
	e := s.setup(t)
	const key = "not-owner"
	a, b := e.client(), e.client()
	ttl := s.longTTL()
	g := e.acquire(a, key, request("holder-a", ttl))

	otherHolder := g
	otherHolder.Holder, otherHolder.Nonce = "holder-b", baton.NewNonce()
	otherNonce := g
	otherNonce.Nonce = baton.NewNonce()
	sameNonce := g
	sameNonce.Holder = "holder-b"
	for _, imp := range []struct {
		name string
		g    backend.Grant
	}{
		{"another holder", otherHolder},
		{"the same holder with another nonce", otherNonce},
		{"another holder with the holder's nonce", sameNonce},
	} {
		for _, c := range []struct {
			name string
			b    backend.Backend
		}{{"another client", b}, {"the holder's client", a}} {
			_, err := c.b.Renew(e.ctx, imp.g)
			checkLost(t, fmt.Sprintf("Renew by %s on %s", imp.name, c.name), err)
			err = c.b.Release(e.ctx, imp.g)
			checkLost(t, fmt.Sprintf("Release by %s on %s", imp.name, c.name), err)
		}
	}

	rec := e.get(b, key)
	if rec.Holder != "holder-a" || rec.Nonce != g.Nonce || rec.Token != g.Token || !rec.Held() {
		t.Errorf("after the failed renewals and releases Get = holder %q, nonce %q, token %d, held %v; want %q, %q, %d, true",
			rec.Holder, rec.Nonce, rec.Token, rec.Held(), "holder-a", g.Nonce, g.Token)
	}
	_, err := b.TryAcquire(e.ctx, key, request("holder-b", ttl))
	checkHeld(t, "TryAcquire by another client after the failed releases", err, key, "holder-a", g.Token, ttl)
	g = e.renew(a, g)
	e.release(a, g)

	// A released grant is nobody's.
	_, err = a.Renew(e.ctx, g)
	checkLost(t, "Renew after Release", err)
	checkLost(t, "a second Release", a.Release(e.ctx, g))

	// A stale grant of the same holder does not touch its new claim.
	g2 := e.acquire(a, key, request("holder-a", ttl))
	_, err = a.Renew(e.ctx, g)
	checkLost(t, "Renew with the holder's earlier grant", err)
	checkLost(t, "Release with the holder's earlier grant", a.Release(e.ctx, g))
	if rec := e.get(b, key); rec.Nonce != g2.Nonce || rec.Token != g2.Token || !rec.Held() {
		t.Errorf("the earlier grant disturbed the new claim: Get = nonce %q, token %d, held %v; want %q, %d, true",
			rec.Nonce, rec.Token, rec.Held(), g2.Nonce, g2.Token)
	}
	e.release(a, g2)

	// A grant for a key that was never acquired.
	never := backend.Grant{Key: "never-acquired", Holder: "holder-a", Nonce: baton.NewNonce(), Token: 1, TTL: ttl}
	_, err = a.Renew(e.ctx, never)
	checkLost(t, "Renew of a key that was never acquired", err)
	checkLost(t, "Release of a key that was never acquired", a.Release(e.ctx, never))
}

// testRenewExtends: a renew extends the claim by the TTL from the renew,
// as the store measures it, not from the acquire. A run that a busy
// machine made inconclusive (the store's answers came too late to tell)
// is repeated, up to three times, on a fresh key.
func (s *suite) testRenewExtends(t *testing.T) {
	e := s.setup(t)
	a, b := e.client(), e.client()
	const attempts = 3
	for try := 1; ; try++ {
		why := e.renewExtends(a, b, fmt.Sprintf("renew-extends-%d", try))
		if why == "" {
			return
		}
		if try == attempts {
			t.Fatalf("inconclusive in each of %d attempts; the last: %s", attempts, why)
		}
		t.Logf("attempt %d inconclusive (a busy machine?): %s", try, why)
	}
}

// renewExtends makes one run of testRenewExtends on key. It returns why
// the run was inconclusive, or "" when it was conclusive (it fails the
// test if the store got it wrong).
func (e *env) renewExtends(a, b backend.Backend, key string) (inconclusive string) {
	t, ttl := e.t, e.s.h.TTL
	t.Helper()
	sent := time.Now() // the store starts the claim's TTL after this
	g := e.acquire(a, key, request("holder-a", ttl))
	acquired := time.Now() // the store applied the acquire before this

	e.sleepUntil(acquired.Add(ttl / 2))
	renewSent := time.Now() // the store applies the renew after this
	ng, err := a.Renew(e.ctx, g)
	if err != nil {
		if lostInTime(err, sent.Add(ttl-margin(ttl))) {
			return fmt.Sprintf("the renew sent %v after the acquire returned at %v, past the claim's TTL %v minus margin: %v",
				renewSent.Sub(acquired), time.Since(sent), ttl, err)
		}
		t.Fatalf("Renew(%q) by its holder %q (token %d) within its TTL: %v", g.Key, g.Holder, g.Token, err)
	}
	checkGrant(t, "Renew", ng, g.Key, backend.Request{Holder: g.Holder, Nonce: g.Nonce})
	if ng.Token != g.Token {
		t.Fatalf("Renew(%q) changed the token from %d to %d; a renew keeps the token", g.Key, g.Token, ng.Token)
	}
	g = ng

	// Past the first claim's end, before the renewed claim's.
	e.sleepUntil(acquired.Add(ttl + ttl/10))
	_, err = b.TryAcquire(e.ctx, key, request("holder-b", ttl))
	if returned := time.Now(); !returned.Before(renewSent.Add(ttl - margin(ttl))) {
		return fmt.Sprintf("TryAcquire returned %v after the renew was sent, past the renewed claim's TTL %v minus margin; the store answered too slowly",
			returned.Sub(renewSent), ttl)
	}
	checkHeld(t, "TryAcquire after the acquire's TTL, within the renew's", err, key, "holder-a", g.Token, ttl)

	// The renewed claim ends in turn.
	g2, _ := e.awaitTakeover(b, key, request("holder-b", ttl), renewSent, nil)
	if g2.Token <= g.Token {
		t.Errorf("takeover after the renewed claim expired: token %d, want more than %d", g2.Token, g.Token)
	}
	e.release(b, g2)
	return ""
}

// testRenewAfterExpiry: once a claim has expired, its owner can no longer
// renew (or release) it, even if nobody took it: a renew must not
// resurrect an expired claim.
func (s *suite) testRenewAfterExpiry(t *testing.T) {
	e := s.setup(t)
	const key = "renew-after-expiry"
	a, b := e.client(), e.client()
	ttl := s.h.TTL
	sent := time.Now()
	g := e.acquire(a, key, request("holder-a", ttl))

	freed := e.awaitNotHeld(b, key, sent)
	if early := sent.Add(ttl - margin(ttl)); freed.Before(early) {
		t.Errorf("Get reported the claim expired %v after it was requested, before its TTL %v minus margin %v",
			freed.Sub(sent), ttl, margin(ttl))
	}
	_, err := a.Renew(e.ctx, g)
	checkLost(t, "Renew after the claim expired (nobody took it)", err)
	if rec, err := b.Get(e.ctx, key); err == nil && rec.Held() {
		t.Errorf("after the failed renew Get reports the claim held by %q for %v: the renew resurrected it", rec.Holder, rec.Remaining)
	}
	checkLost(t, "Release after the claim expired", a.Release(e.ctx, g))

	g2 := e.acquire(b, key, request("holder-b", ttl))
	if g2.Token <= g.Token {
		t.Errorf("acquire after expiry: token %d, want more than %d", g2.Token, g.Token)
	}
	_, err = a.Renew(e.ctx, g)
	checkLost(t, "Renew of an expired claim after another holder took the lock", err)
	e.release(b, g2)
}

// testTakeoverAfterTTL: a second client gets ErrHeld, naming the holder and
// its token, until at least TTL minus the safety margin after the first
// acquire was sent, and then the lock with a larger token.
func (s *suite) testTakeoverAfterTTL(t *testing.T) {
	e := s.setup(t)
	const key = "takeover"
	a, b := e.client(), e.client()
	ttl := s.h.TTL
	sent := time.Now()
	g := e.acquire(a, key, request("holder-a", ttl))

	held := 0
	g2, took := e.awaitTakeover(b, key, request("holder-b", ttl), sent, func(err error) {
		held++
		if checkHeld(t, "TryAcquire before the TTL ran out", err, key, "holder-a", g.Token, ttl) == nil {
			t.FailNow()
		}
	})
	if held == 0 {
		t.Errorf("the second client never found the lock held")
	}
	if earliest := sent.Add(ttl - margin(ttl)); took.Before(earliest) {
		t.Errorf("the second client took over %v after the first acquire was sent; want at least TTL %v minus margin %v",
			took.Sub(sent), ttl, margin(ttl))
	}
	if g2.Token <= g.Token {
		t.Errorf("takeover: token %d, want more than %d", g2.Token, g.Token)
	}
	e.release(b, g2)
}

// testGet: Get reports the holder, token, TTL, remaining time and
// transitions; a released key keeps its token.
func (s *suite) testGet(t *testing.T) {
	e := s.setup(t)
	const key = "get"
	a, b := e.client(), e.client()
	_, err := b.Get(e.ctx, key)
	if !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("Get of a key never acquired: %v, want an error matching ErrNotFound", err)
	}

	ttl := s.longTTL()
	sent := time.Now()
	g := e.acquire(a, key, request("holder-a", ttl))
	rec := e.get(b, key)
	if rec.Holder != "holder-a" || rec.Nonce != g.Nonce || rec.Token != g.Token || rec.TTL != ttl {
		t.Errorf("Get = holder %q, nonce %q, token %d, TTL %v; want %q, %q, %d, %v",
			rec.Holder, rec.Nonce, rec.Token, rec.TTL, "holder-a", g.Nonce, g.Token, ttl)
	}
	if !rec.Held() {
		t.Errorf("Get: Held() = false right after the acquire (remaining %v)", rec.Remaining)
	}
	if least := ttl - time.Since(sent) - margin(ttl); rec.Remaining > ttl || rec.Remaining < least {
		t.Errorf("Get: Remaining = %v right after an acquire with TTL %v; want between %v and %v", rec.Remaining, ttl, least, ttl)
	}
	first := rec.Transitions

	g = e.renew(a, g)
	rec = e.get(b, key)
	if rec.Holder != "holder-a" || rec.Token != g.Token || rec.Transitions != first || !rec.Held() {
		t.Errorf("after a renew Get = holder %q, token %d, transitions %d, held %v; want %q, %d, %d, true",
			rec.Holder, rec.Token, rec.Transitions, rec.Held(), "holder-a", g.Token, first)
	}

	e.release(a, g)
	rec = e.get(b, key)
	if rec.Held() || rec.Holder != "" || rec.Remaining != 0 {
		t.Errorf("after Release Get = holder %q, remaining %v, held %v; want no holder", rec.Holder, rec.Remaining, rec.Held())
	}
	if rec.Token != g.Token {
		t.Errorf("after Release Get: token %d, want the released token %d (release keeps the counter)", rec.Token, g.Token)
	}

	gb := e.acquire(b, key, request("holder-b", ttl))
	rec = e.get(a, key)
	if rec.Holder != "holder-b" || rec.Token != gb.Token || !rec.Held() {
		t.Errorf("after another holder acquired, Get = holder %q, token %d, held %v; want %q, %d, true",
			rec.Holder, rec.Token, rec.Held(), "holder-b", gb.Token)
	}
	if rec.Transitions <= first {
		t.Errorf("after the lock passed from %q to %q, Transitions = %d, want more than %d", "holder-a", "holder-b", rec.Transitions, first)
	}
	second := rec.Transitions
	e.release(b, gb)
	ga := e.acquire(a, key, request("holder-a", ttl))
	if rec := e.get(b, key); rec.Transitions <= second {
		t.Errorf("after the lock passed back to %q, Transitions = %d, want more than %d", "holder-a", rec.Transitions, second)
	}
	e.release(a, ga)
}

// testList: a Lister lists every key with a record, held or released,
// with its holder and token.
func (s *suite) testList(t *testing.T) {
	e := s.setup(t)
	a := e.client()
	lister, ok := a.(backend.Lister)
	if !ok {
		t.Skip("the backend does not implement backend.Lister")
	}
	ttl := s.longTTL()
	held := e.acquire(a, "list.held", request("holder-a", ttl))
	freed := e.acquire(a, "list.released", request("holder-a", ttl))
	e.release(a, freed)

	recs, err := lister.List(e.ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	found := map[string]backend.Record{}
	for _, r := range recs {
		if _, dup := found[r.Key]; dup {
			t.Errorf("List returned %q twice", r.Key)
		}
		found[r.Key] = r
	}
	if r, ok := found["list.held"]; !ok {
		t.Errorf("List does not include the held key %q (got %d records)", "list.held", len(recs))
	} else if r.Holder != "holder-a" || r.Token != held.Token || !r.Held() {
		t.Errorf("List: %q has holder %q, token %d, held %v; want %q, %d, true", r.Key, r.Holder, r.Token, r.Held(), "holder-a", held.Token)
	}
	if r, ok := found["list.released"]; !ok {
		t.Errorf("List does not include the released key %q (got %d records)", "list.released", len(recs))
	} else if r.Held() || r.Token != freed.Token {
		t.Errorf("List: released %q has holder %q, token %d, held %v; want no holder and token %d", r.Key, r.Holder, r.Token, r.Held(), freed.Token)
	}
	if _, ok := found["list.never"]; ok {
		t.Errorf("List includes a key that was never acquired")
	}
	e.release(a, held)
}

// testWatch: a watch signals acquire and release of its key, and its
// channel is closed when its context ends.
func (s *suite) testWatch(t *testing.T) {
	e := s.setup(t)
	const key = "watch"
	a, b := e.client(), e.client()
	w, ok := a.(backend.Watcher)
	if !ok {
		t.Skip("the backend does not implement backend.Watcher")
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch, err := w.Watch(ctx, key) // before the key has a record
	if err != nil {
		t.Fatalf("Watch(%q): %v", key, err)
	}
	expect := func(what string) {
		t.Helper()
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatalf("the watch channel was closed before %s, while its context is live", what)
			}
		case <-time.After(eventTimeout):
			t.Fatalf("no watch signal within %v after %s", eventTimeout, what)
		}
	}
	drain := func() {
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					t.Fatalf("the watch channel was closed while its context is live")
				}
			default:
				return
			}
		}
	}

	g := e.acquire(b, key, request("holder-b", s.longTTL()))
	expect("another client acquired the key")
	drain()
	e.release(b, g)
	expect("another client released the key")

	cancel()
	timeout := time.After(eventTimeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatalf("the watch channel is still open %v after its context ended", eventTimeout)
		}
	}
}

// invalidNames are lock names that ValidateName rejects.
var invalidNames = []string{
	"", "UPPER", "Mixed", "a/b", "../x", "-x", "x-", ".x", "x.", "a..b", "a.-b",
	"a_b", "a b", "a\x00b", "ü", "a\nb", strings.Repeat("a", backend.MaxNameLength+1),
}

// testInvalidNames: every method rejects names that ValidateName rejects,
// with an error matching ErrInvalidName, and never panics.
func (s *suite) testInvalidNames(t *testing.T) {
	e := s.setup(t)
	b := e.client()
	ttl := s.longTTL()
	for _, name := range invalidNames {
		if backend.ValidateName(name) == nil {
			t.Fatalf("batontest bug: ValidateName accepts %s", describe(name))
		}
		g := backend.Grant{Key: name, Holder: "holder-a", Nonce: baton.NewNonce(), Token: 1, TTL: ttl}
		ops := []struct {
			name string
			f    func() error
		}{
			{"TryAcquire", func() error { _, err := b.TryAcquire(e.ctx, name, request("holder-a", ttl)); return err }},
			{"Get", func() error { _, err := b.Get(e.ctx, name); return err }},
			{"Renew", func() error { _, err := b.Renew(e.ctx, g); return err }},
			{"Release", func() error { return b.Release(e.ctx, g) }},
		}
		if w, ok := b.(backend.Watcher); ok {
			ops = append(ops, struct {
				name string
				f    func() error
			}{"Watch", func() error {
				ctx, cancel := context.WithCancel(e.ctx)
				defer cancel()
				_, err := w.Watch(ctx, name)
				return err
			}})
		}
		for _, op := range ops {
			what := fmt.Sprintf("%s(%s)", op.name, describe(name))
			err := noPanic(t, what, op.f)
			if err != errPanicked && !errors.Is(err, backend.ErrInvalidName) {
				t.Errorf("%s: %v; want an error matching ErrInvalidName", what, err)
			}
		}
	}
	if l, ok := b.(backend.Lister); ok {
		recs, err := l.List(e.ctx)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		for _, r := range recs {
			t.Errorf("a record for %s exists after only invalid names were used", describe(r.Key))
		}
	}
}

// testValidNames: names that ValidateName accepts, up to the maximum
// length, work on every backend.
func (s *suite) testValidNames(t *testing.T) {
	e := s.setup(t)
	a, b := e.client(), e.client()
	ttl := s.longTTL()
	names := []string{
		"a", "7", "a-b", "a--b", "0.0", "a.b-c.d", "x1.y2-z3",
		strings.Repeat("z", backend.MaxNameLength),
		strings.Repeat("ab.", 84) + "c", // 253 bytes with dots
	}
	for _, name := range names {
		if err := backend.ValidateName(name); err != nil {
			t.Fatalf("batontest bug: %v", err)
		}
		g, err := a.TryAcquire(e.ctx, name, request("holder-a", ttl))
		if err != nil {
			t.Errorf("TryAcquire(%s): %v", describe(name), err)
			continue
		}
		if rec, err := b.Get(e.ctx, name); err != nil {
			t.Errorf("Get(%s): %v", describe(name), err)
		} else if rec.Key != name || rec.Holder != "holder-a" || rec.Token != g.Token {
			t.Errorf("Get(%s) = key %s, holder %q, token %d; want the grant's", describe(name), describe(rec.Key), rec.Holder, rec.Token)
		}
		if err := a.Release(e.ctx, g); err != nil {
			t.Errorf("Release(%s): %v", describe(name), err)
		}
	}
}

// testCanceledContext: with a context that has already ended, every method
// returns promptly with an error matching context.Canceled and changes
// nothing.
func (s *suite) testCanceledContext(t *testing.T) {
	e := s.setup(t)
	a, b := e.client(), e.client()
	ttl := s.longTTL()
	g := e.acquire(a, "canceled.held", request("holder-a", ttl))
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()

	checkPrompt(t, "with a canceled context", context.Canceled, []call{
		{"TryAcquire", func() error { _, err := b.TryAcquire(ctx, "canceled.free", request("holder-b", ttl)); return err }},
		{"Get", func() error { _, err := b.Get(ctx, g.Key); return err }},
		{"Renew", func() error { _, err := a.Renew(ctx, g); return err }},
		{"Release", func() error { return a.Release(ctx, g) }},
	})
	if w, ok := b.(backend.Watcher); ok {
		// Either an error, or a channel that is closed at once.
		start := time.Now()
		ch, err := w.Watch(ctx, g.Key)
		if err == nil {
			timeout := time.After(prompt)
		drain:
			for {
				select {
				case _, ok := <-ch:
					if !ok {
						break drain
					}
				case <-timeout:
					t.Errorf("Watch with a canceled context returned a channel that is still open after %v", prompt)
					break drain
				}
			}
		}
		if d := time.Since(start); d > 2*prompt {
			t.Errorf("Watch with a canceled context took %v", d)
		}
	}

	// Nothing changed: the failed TryAcquire took nothing, the failed
	// Release released nothing.
	g2 := e.acquire(b, "canceled.free", request("holder-b", ttl))
	g = e.renew(a, g)
	e.release(a, g)
	e.release(b, g2)
}
