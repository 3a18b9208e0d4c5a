package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
)

// TestWatchRefused: a server that refuses SUBSCRIBE (disabled with
// rename-command, or an ACL user without +subscribe) fails Watch with the
// cause, and a waiting Lock warns of it and polls every retry period: it
// takes a released lock long before the claim it saw could have ended.
// Watch returned as if it were open and no release ever woke it, so the
// Lock waited, silently, for the claim's TTL.
func TestWatchRefused(t *testing.T) {
	rules := slices.DeleteFunc(strings.Fields(redisstore.ACLRules), func(r string) bool { return r == "+subscribe" })
	renamed := testenv.StartRedis(t, testenv.RedisArgs("--rename-command", "SUBSCRIBE", ""))
	acl := testenv.StartRedis(t, testenv.RedisArgs(append([]string{"--user", "nosub", "on", ">pw"}, rules...)...))
	for _, tc := range []struct {
		name, url string
		want      error
	}{
		{"rename-command", "redis://" + renamed.Addr(), backend.ErrMisconfigured},
		{"ACL", fmt.Sprintf("redis://nosub:pw@%s", acl.Addr()), backend.ErrForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t, 30*time.Second)
			s := openURL(t, tc.url, redisstore.DefaultPrefix)
			wctx, cancel := context.WithCancel(ctx)
			if _, err := s.Watch(wctx, "job"); !errors.Is(err, tc.want) {
				t.Errorf("Watch: %v; want %v", err, tc.want)
			}
			cancel()
			holder, err := s.TryAcquire(ctx, "job", request("holder", time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			logs := &syncBuffer{}
			held := make(chan struct{}, 1)
			m, err := baton.NewMutex(s, "job", baton.WithTTL(time.Minute), baton.WithRetryPeriod(time.Second), baton.WithIdentity("waiter"),
				baton.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
				baton.WithObserver(baton.ObserverFunc(func(e baton.Event) {
					if e.Kind == baton.EventHeld {
						select {
						case held <- struct{}{}:
						default:
						}
					}
				})))
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				l, err := m.Lock(ctx)
				if l != nil {
					l.Unlock(ctx)
				}
				got <- err
			}()
			<-held
			if err := s.Release(ctx, holder); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Errorf("Lock after the release of a claim of a minute: %v; want the lock within the test's 30 s", err)
			}
			if !strings.Contains(logs.String(), "the store refused to watch the lock; polling every retry period") {
				t.Errorf("the waiter's log does not say that it polls:\n%s", logs)
			}
		})
	}
}

// TestRedlockWatchRefused: a Redlock one of whose servers refuses
// SUBSCRIBE fails Watch with the cause, so that the engine polls; the
// refusal closed the watch that Watch returned without an error, and a
// waiter, finding it closed at once, tried again and watched again in a
// loop.
func TestRedlockWatchRefused(t *testing.T) {
	servers := startRedis(t, 2)
	servers = append(servers, testenv.StartRedis(t, testenv.RedisArgs("--rename-command", "SUBSCRIBE", "")))
	r := newRedlock(t, servers, uniquePrefix())
	ctx := testCtx(t, 20*time.Second)
	if c, err := r.Watch(ctx, "job"); !errors.Is(err, backend.ErrMisconfigured) {
		t.Errorf("Watch with a server without SUBSCRIBE: %v, %v; want ErrMisconfigured", c, err)
	}
}
