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
	clientv3 "go.etcd.io/etcd/client/v3"
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

// etcdACLEnv runs one etcd member with authentication on, on which every
// contender connects as a user of its own, each granted the role
// "locker" (read and write on baton's prefix, what docs/backends.md's
// etcd role grants), so that one contender's role can be revoked while
// the others keep theirs (link.forbid), as `etcdctl user revoke-role`
// does.
func etcdACLEnv(t *testing.T) *backendEnv {
	srv := testenv.StartEtcd(t, testenv.EtcdNoFsync())
	root := etcdAuth(t, srv.Endpoints())
	var (
		mu sync.Mutex
		n  int
	)
	be := &backendEnv{name: "etcd", ttl: ttl, claimLife: etcdClaimLife(ttl)}
	be.newLink = func(t *testing.T) link {
		mu.Lock()
		n++
		user := fmt.Sprintf("contender%d", n)
		mu.Unlock()
		const pass = "secret"
		if _, err := root.UserAdd(t.Context(), user, pass); err != nil {
			t.Fatalf("etcd user add %s: %v", user, err)
		}
		if _, err := root.UserGrantRole(t.Context(), user, "locker"); err != nil {
			t.Fatalf("etcd user grant-role %s locker: %v", user, err)
		}
		l := proxied(t, []string{srv.Addr()}, "http://"+user+":"+pass+"@")
		l.forbid = func(ctx context.Context, on bool) (string, error) {
			if on {
				_, err := root.UserRevokeRole(ctx, user, "locker")
				return "etcdctl user revoke-role " + user + " locker", err
			}
			_, err := root.UserGrantRole(ctx, user, "locker")
			return "etcdctl user grant-role " + user + " locker", err
		}
		return l
	}
	return be
}

// etcdAuth turns authentication on in the etcd at endpoints, with a root
// user and a role "locker" that may read and write every key under
// /baton/, and returns a client of the root user, closed with the test.
func etcdAuth(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	ctx := t.Context()
	anon, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = anon.Close() }()
	const prefix = "/baton/"
	for _, step := range []func() error{
		func() error { _, err := anon.RoleAdd(ctx, "root"); return err },
		func() error { _, err := anon.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := anon.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := anon.RoleAdd(ctx, "locker"); return err },
		func() error {
			_, err := anon.RoleGrantPermission(ctx, "locker", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := anon.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("turning etcd authentication on: %v", err)
		}
	}
	root, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Username: "root", Password: "root-pw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Close() })
	return root
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
	// A Kubernetes store that was refused a watch of the lock does not ask
	// for one again for a minute (kubestore's watchDeniedFor): its waiter
	// polls meanwhile, and a poller can lose every handover to the
	// watching contenders for that long. 90 s covers that minute, counted
	// from the refusal, and the races after it.
	back, ok := h.acquiredBy(f.c, next.Tok, h.be.bound()+90*time.Second)
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
