package baton_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/clocktest"
)

// script is a scripted single-process Backend for testing the engine's
// timing logic. It has no expiry of its own: tests decide what the store
// says, and the fake clock decides when the engine acts.
type script struct {
	mu       sync.Mutex
	holder   string
	nonce    string
	token    uint64
	acquires int
	releases int
	waiting  []bool   // Request.Waiting of every attempt
	nonces   []string // Request.Nonce of every attempt

	renewErr   error         // returned by Renew when set
	renewBlock chan struct{} // Renew waits for it (or ctx) when set
	retryAfter time.Duration // HeldError.RetryAfter
	age        time.Duration // Grant.Age of every grant (a handed lock)
	onRelease  func()
	lostGrant  error              // when set, the next grant is made but this is returned instead (an answer lost)
	renews     chan backend.Grant // every Renew call, buffered
	watchers   []chan struct{}
}

func newScript() *script { return &script{renews: make(chan backend.Grant, 64)} }

func (s *script) TryAcquire(ctx context.Context, key string, req backend.Request) (backend.Grant, error) {
	if err := ctx.Err(); err != nil {
		return backend.Grant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acquires++
	s.waiting = append(s.waiting, req.Waiting)
	s.nonces = append(s.nonces, req.Nonce)
	if s.holder != "" {
		return backend.Grant{}, &baton.HeldError{Key: key, Holder: s.holder, Token: s.token, RetryAfter: s.retryAfter}
	}
	s.token++
	s.holder, s.nonce = req.Holder, req.Nonce
	if err := s.lostGrant; err != nil {
		s.lostGrant = nil
		return backend.Grant{}, err
	}
	return backend.Grant{Key: key, Holder: req.Holder, Nonce: req.Nonce, Token: s.token, TTL: req.TTL, Age: s.age}, nil
}

func (s *script) Renew(ctx context.Context, g backend.Grant) (backend.Grant, error) {
	s.renews <- g
	s.mu.Lock()
	block, rerr := s.renewBlock, s.renewErr
	s.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return backend.Grant{}, ctx.Err()
		}
	}
	if rerr != nil {
		return backend.Grant{}, rerr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder != g.Holder || s.nonce != g.Nonce {
		return backend.Grant{}, fmt.Errorf("%w: not the owner", baton.ErrLost)
	}
	return g, nil
}

func (s *script) Release(ctx context.Context, g backend.Grant) error {
	s.mu.Lock()
	hook := s.onRelease
	if s.holder != g.Holder || s.nonce != g.Nonce {
		s.mu.Unlock()
		return fmt.Errorf("%w: not the owner", baton.ErrLost)
	}
	s.holder, s.nonce = "", ""
	s.releases++
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	s.notify()
	return nil
}

func (s *script) Get(ctx context.Context, key string) (backend.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return backend.Record{Key: key, Holder: s.holder, Nonce: s.nonce, Token: s.token}, nil
}

// set makes the store say that holder holds the key (a takeover by another
// process); the empty holder frees it. Watchers are notified.
func (s *script) set(holder string) {
	s.mu.Lock()
	if holder != "" {
		s.token++
	}
	s.holder, s.nonce = holder, "other-nonce"
	s.mu.Unlock()
	s.notify()
}

func (s *script) state() (holder string, token uint64, releases int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holder, s.token, s.releases
}

func (s *script) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.watchers {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// watching is a script that also implements backend.Watcher.
type watching struct{ *script }

func (w watching) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	w.watchers = append(w.watchers, ch)
	w.mu.Unlock()
	return ch, nil
}

var quiet = baton.WithLogger(slog.New(slog.DiscardHandler))

var t0 = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// events collects Observer events on a channel.
func events() (baton.Option, <-chan baton.Event) {
	ch := make(chan baton.Event, 256)
	return baton.WithObserver(baton.ObserverFunc(func(e baton.Event) { ch <- e })), ch
}

// next returns the next event of kind k, failing the test if none comes.
func next(t *testing.T, ch <-chan baton.Event, k baton.EventKind) baton.Event {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case e := <-ch:
			if e.Kind == k {
				return e
			}
		case <-deadline:
			t.Fatalf("no %v event within 5s", k)
		}
	}
}

// awaitTimer waits until some goroutine waits on the fake clock, so that a
// Step reaches it.
func awaitTimer(t *testing.T, clk *clocktest.FakeClock) {
	t.Helper()
	clocktest.AwaitTimer(t, clk)
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not done within 5s", what)
	}
}
