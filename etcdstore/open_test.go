package etcdstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// useLock checks that a Store on c can take, keep past its TTL, and free a
// lock, and that a second Store can then take it.
func useLock(t *testing.T, open func() *clientv3.Client, opts ...etcdstore.Option) {
	t.Helper()
	a := newStore(t, open(), opts...)
	b := newStore(t, open(), opts...)
	const ttl = time.Second
	sent := time.Now()
	l := lock(t, newMutex(t, a, "job", "a", ttl))
	if _, err := b.TryAcquire(t.Context(), "job", backend.Request{Holder: "b", Nonce: "n", TTL: ttl}); !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("TryAcquire while held: %v", err)
	}
	// Past the TTL: renewals (keepalives and verification) work too.
	select {
	case <-l.Done():
		t.Fatalf("the lease ended: %v", l.Err())
	case <-time.After(time.Until(sent.Add(ttl + ttl/2))):
	}
	w, err := b.Watch(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, "a watch signal after the release", w)
	g, err := b.TryAcquire(t.Context(), "job", backend.Request{Holder: "b", Nonce: "n", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	if recs, err := b.List(t.Context()); err != nil || len(recs) != 1 {
		t.Fatalf("List: %v, %v", recs, err)
	}
}

func openOK(t *testing.T, cfg etcdstore.Config) func() *clientv3.Client {
	return func() *clientv3.Client {
		t.Helper()
		c, err := etcdstore.Open(context.Background(), cfg)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
}

func openFails(t *testing.T, what string, cfg etcdstore.Config) error {
	t.Helper()
	cfg.DialTimeout = 2 * time.Second
	c, err := etcdstore.Open(context.Background(), cfg)
	if err == nil {
		c.Close()
		t.Fatalf("Open %s succeeded", what)
	}
	t.Logf("Open %s: %v", what, err)
	return err
}

func TestTLS(t *testing.T) {
	files, _ := testenv.WriteTLSFiles(t)
	srv := startEtcd(t, testenv.WithEtcdTLS(testenv.EtcdTLS{CertFile: files.CertFile, KeyFile: files.KeyFile, CAFile: files.CAFile}))
	cfg := etcdstore.Config{Endpoints: srv.Endpoints(), CAFile: files.CAFile}
	useLock(t, openOK(t, cfg), etcdstore.WithPrefix(freshPrefix(t)))
	openFails(t, "without the CA (system roots)", etcdstore.Config{Endpoints: srv.Endpoints()})
	if err := openFails(t, "over plain TCP", etcdstore.Config{Endpoints: []string{srv.Addr()}}); !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "use an https:// endpoint") {
		t.Errorf("plain TCP to a TLS server: %v, want ErrMisconfigured naming https://", err)
	}
	// An https:// endpoint on a server without TLS is a misconfiguration
	// that names the scheme, not a server that does not answer.
	plain := startEtcd(t)
	err := openFails(t, "with TLS to a server without it", etcdstore.Config{Endpoints: []string{"https://" + plain.Addr()}, CAFile: files.CAFile})
	if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "use an http:// endpoint") {
		t.Errorf("TLS to a server without it: %v, want ErrMisconfigured naming http://", err)
	}
}

// An etcd reached over a unix socket, which Config takes as a unix://
// endpoint, is opened and locks. Open's first dial, which names why an
// endpoint cannot be reached, dialled every endpoint over TCP, so such an
// etcd was never reached ("too many colons in address", exit 69 in the CLI).
func TestUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "etcd.sock:0")
	startEtcd(t, testenv.EtcdArgs("--listen-client-urls=unix://"+sock))
	useLock(t, openOK(t, etcdstore.Config{Endpoints: []string{"unix://" + sock}}), etcdstore.WithPrefix(freshPrefix(t)))
	err := openFails(t, "to a socket that does not exist", etcdstore.Config{Endpoints: []string{"unix://" + sock + ".gone"}})
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "dial unix") {
		t.Errorf("a unix:// endpoint without a socket: %v, want ErrUnavailable naming the socket", err)
	}
}

// Endpoints of two etcd clusters (staging's among production's, a member
// of a cluster since rebuilt) are refused at Open as a misconfiguration
// naming both: the client spread requests over the clusters, so locks
// failed now and then with "requested lease not found" (exit 1), and were
// taken now in one cluster, now in the other. Members of one cluster, and
// one member listed twice, still open.
func TestTwoClusters(t *testing.T) {
	a, b := startEtcd(t), startEtcd(t)
	err := openFails(t, "over two clusters", etcdstore.Config{Endpoints: []string{a.Endpoint(), b.Endpoint()}})
	if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "belong to two etcd clusters") {
		t.Errorf("endpoints of two clusters: %v; want ErrMisconfigured naming them", err)
	}
	openOK(t, etcdstore.Config{Endpoints: []string{a.Endpoint(), a.Endpoint()}})()
}

// An endpoint where a Redis server listens (the port of another store) is
// a misconfiguration that says it is not an etcd client port, not an
// etcd that does not answer.
func TestNotEtcd(t *testing.T) {
	redis := testenv.StartRedis(t)
	err := openFails(t, "to a Redis server", etcdstore.Config{Endpoints: []string{"http://" + redis.Addr()}})
	if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "not an etcd client port") {
		t.Errorf("an endpoint to a Redis server: %v, want ErrMisconfigured saying it is not etcd", err)
	}
}

func TestMutualTLS(t *testing.T) {
	srv := startEtcd(t, testenv.WithEtcdClientCertAuth())
	files, _ := srv.TLSFiles()
	cfg := etcdstore.Config{Endpoints: srv.Endpoints(), CAFile: files.CAFile, CertFile: files.CertFile, KeyFile: files.KeyFile}
	useLock(t, openOK(t, cfg), etcdstore.WithPrefix(freshPrefix(t)))
	// OpenStore: the Store owns (and closes) its client.
	s, err := etcdstore.OpenStore(t.Context(), cfg, etcdstore.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(t.Context()); err != nil {
		t.Error(err)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
	openFails(t, "without a client certificate", etcdstore.Config{Endpoints: srv.Endpoints(), CAFile: files.CAFile})
}

// enableAuth turns etcd's authentication on through root, a client that
// has not authenticated: user "root" (password "root-pw") with the root
// role, user "locker" ("locker-pw") whose role may read and write prefix,
// and each of others (password NAME-pw) with no role.
func enableAuth(t *testing.T, root *clientv3.Client, prefix string, others ...string) {
	t.Helper()
	ctx := t.Context()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(root.RoleAdd(ctx, "root"))
	must(root.UserAdd(ctx, "root", "root-pw"))
	must(root.UserGrantRole(ctx, "root", "root"))
	must(root.RoleAdd(ctx, "locker"))
	must(root.RoleGrantPermission(ctx, "locker", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite)))
	must(root.UserAdd(ctx, "locker", "locker-pw"))
	must(root.UserGrantRole(ctx, "locker", "locker"))
	for _, u := range others {
		must(root.UserAdd(ctx, u, u+"-pw"))
	}
	must(root.AuthEnable(ctx))
}

// TestUserPassword: with etcd's authentication on, a user whose role may
// read and write the Store's prefix uses every feature; a wrong password
// fails Open with ErrForbidden; a user without permission on the prefix
// gets ErrForbidden, which stops Lock at once.
func TestUserPassword(t *testing.T) {
	srv := startEtcd(t)
	prefix := freshPrefix(t)
	ctx := t.Context()
	enableAuth(t, connect(t, srv.Endpoint()), prefix, "stranger")

	for _, fair := range []bool{false, true} {
		useLock(t, openOK(t, etcdstore.Config{Endpoints: srv.Endpoints(), Username: "locker", Password: "locker-pw"}),
			etcdstore.WithPrefix(prefix+map[bool]string{false: "plain/", true: "fair/"}[fair]), etcdstore.WithFair(fair))
	}

	err := openFails(t, "with a wrong password", etcdstore.Config{Endpoints: srv.Endpoints(), Username: "locker", Password: "wrong"})
	if !errors.Is(err, backend.ErrForbidden) {
		t.Errorf("wrong password: %v, want ErrForbidden", err)
	}

	// Credentials in the endpoint, as in a Redis URL: etcd's client does
	// not send them, so they are refused, naming --user, without showing
	// the password.
	err = openFails(t, "with the user in the endpoint", etcdstore.Config{Endpoints: []string{"http://locker:locker-pw@" + srv.Addr()}})
	if !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), "--user") || strings.Contains(err.Error(), "locker-pw") {
		t.Errorf("user in the endpoint: %v, want ErrInvalidOptions naming --user, without the password", err)
	}

	stranger := newStore(t, openOK(t, etcdstore.Config{Endpoints: srv.Endpoints(), Username: "stranger", Password: "stranger-pw"})(),
		etcdstore.WithPrefix(prefix))
	if _, err := stranger.TryAcquire(ctx, "job", backend.Request{Holder: "s", Nonce: "n", TTL: time.Second}); !errors.Is(err, backend.ErrForbidden) {
		t.Errorf("TryAcquire without permission: %v, want ErrForbidden", err)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := newMutex(t, stranger, "job", "s", time.Second).Lock(lctx); !errors.Is(err, backend.ErrForbidden) || lctx.Err() != nil {
		t.Errorf("Lock without permission: %v, want ErrForbidden at once", err)
	}
}
