//go:build linux

package safety

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// redisACLEnv runs one redis-server on which every contender connects as
// an ACL user of its own (as each replica of a service would with its own
// secret), so that one contender's permissions can be taken away while
// the others keep theirs (link.forbid).
func redisACLEnv(t *testing.T) *backendEnv {
	srv := testenv.StartRedis(t, testenv.AppendOnly())
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	var (
		mu sync.Mutex
		n  int
	)
	acl := func(ctx context.Context, args ...any) error {
		return admin.Do(ctx, append([]any{"ACL", "SETUSER"}, args...)...).Err()
	}
	be := &backendEnv{name: "redis", ttl: ttl, claimLife: ttl}
	be.newLink = func(t *testing.T) link {
		mu.Lock()
		n++
		user := fmt.Sprintf("contender%d", n)
		mu.Unlock()
		const pass = "secret"
		// Every key and channel, every command: what docs/backends.md's
		// ACL grants, and more.
		if err := acl(t.Context(), user, "on", ">"+pass, "~*", "&*", "+@all"); err != nil {
			t.Fatalf("ACL SETUSER %s: %v", user, err)
		}
		l := proxied(t, []string{srv.Addr()}, "redis://"+user+":"+pass+"@")
		l.forbid = func(ctx context.Context, on bool) (string, error) {
			perm := "+@all"
			if on {
				perm = "-@all"
			}
			return fmt.Sprintf("ACL SETUSER %s %s", user, perm), acl(ctx, user, perm)
		}
		return l
	}
	return be
}

// forbidHolder takes every permission away from the holder's store user
// right after one of its accepted writes, while it holds (it is asked to
// keep its lease until the lease's context ends), as an operator editing
// the wrong ACL rule, or a rotated role that no longer grants the lock's
// commands, would: the store answers the holder at once, with a refusal
// (Redis NOPERM), not silence as in a partition. The other contenders keep
// their permissions, so they acquire as soon as the holder's claim has
// expired: the holder must have ended its tenure by then, whatever its
// renewals' refusals made it do (retry until its renew deadline, or give
// up at once), and its refused release must not free or keep anything.
// Once a successor has written, the permissions come back, and the former
// holder, which a refusal sends back to waiting (its replica restarted by
// its supervisor, envRetryForbidden), must acquire again. The checker
// sees no two holders, no repeated token and no stale write accepted.
func (h *harness) forbidHolder(minWrites int) {
	h.t.Helper()
	var (
		what string
		err  error
	)
	f := h.waitFired(h.armHold(false, true, minWrites, func(c string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		what, err = h.contender(c).link.forbid(ctx, true)
	}), faultForbidden)
	if err != nil {
		h.t.Fatalf("%s under %s's token %d: %v", what, f.c, f.tok, err)
	}
	what = fmt.Sprintf("%s under %s's token %d", what, f.c, f.tok)
	defer func() { h.disturb(f.c, f.at, h.reg.now()+h.be.ttl, "permissions revoked") }()
	end := h.tenureEnd(f.c, f.tok, h.be.ttl+30*time.Second)
	if limit := h.be.ttl + liveSlack; end.At-f.at > limit {
		h.t.Errorf("%s: the holder ended its tenure (%s) %v after it, want within %v (its claim's life, and slack)",
			what, end.Cause, (end.At - f.at).Round(time.Millisecond), limit)
	}
	next, ok := h.acquiredAfter(f.tok, h.be.bound()+30*time.Second)
	if !ok {
		h.t.Fatalf("%s: no acquisition after it", what)
	}
	h.t.Logf("%s: the holder's tenure ended (%s) %v after it; %s acquired token %d %v after it",
		what, end.Cause, (end.At - f.at).Round(time.Millisecond), next.C, next.Tok, (next.At - f.at).Round(time.Millisecond))
	h.takeoverAfter(what, f, next.At-f.at)
	h.writesAbove(next.Tok-1, 3, 30*time.Second)
	ctx, cancel := context.WithTimeout(h.t.Context(), 10*time.Second)
	defer cancel()
	if restored, err := h.contender(f.c).link.forbid(ctx, false); err != nil {
		h.t.Fatalf("%s: %v", restored, err)
	}
	back, ok := h.acquiredBy(f.c, next.Tok, h.be.bound()+60*time.Second)
	if !ok {
		h.t.Fatalf("%s: its permissions given back, %s did not acquire again", what, f.c)
	}
	h.t.Logf("%s: its permissions given back, it acquired token %d", what, back.Tok)
}

// acquiredBy waits for contender c to acquire a token larger than tok.
func (h *harness) acquiredBy(c string, tok uint64, timeout time.Duration) (event, bool) {
	h.t.Helper()
	return h.awaitAcquired(fmt.Sprintf("%s to acquire a token above %d", c, tok), timeout, func(e event) bool { return e.C == c && e.Tok > tok })
}
