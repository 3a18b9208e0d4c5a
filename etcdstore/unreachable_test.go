package etcdstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestUnreachableNamesCause: with etcd gone (its member stopped), an
// attempt that waits for a connection until its context ends, and a Lock
// whose context ends during that attempt, fail with an error that matches
// backend.ErrUnavailable and names the endpoint, not with a bare "context
// deadline exceeded".
func TestUnreachableNamesCause(t *testing.T) {
	srv := startEtcd(t)
	s := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(freshPrefix(t)))
	m, err := baton.NewMutex(s, "gone", baton.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(t.Context()) // the Store's lease and connection exist
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	for _, attempt := range []struct {
		what string
		try  func(ctx context.Context) error
	}{
		{"TryAcquire", func(ctx context.Context) error {
			_, err := s.TryAcquire(ctx, "other", backend.Request{Holder: "x", Nonce: baton.NewNonce(), TTL: 30 * time.Second})
			return err
		}},
		{"Lock", func(ctx context.Context) error { _, err := m.Lock(ctx); return err }},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := attempt.try(ctx)
		cancel()
		if !errors.Is(err, backend.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), srv.Addr()) {
			t.Errorf("%s with etcd stopped: %v; want ErrUnavailable and the deadline, naming %s", attempt.what, err, srv.Addr())
		}
	}
}

// TestTryAcquireWithoutDeadlineEnds: with etcd gone before the Store's
// first acquisition, a TryAcquire given a context without a deadline
// still ends, with an error that matches backend.ErrUnavailable and names
// the endpoint. (The etcd client waits for a connection until a request's
// context ends, so the lease grant waited for ever.) The test's own
// deadline only turns a hang into a failure.
func TestTryAcquireWithoutDeadlineEnds(t *testing.T) {
	srv := startEtcd(t)
	c := connect(t, srv.Endpoint())
	stores := map[string]*etcdstore.Store{
		"plain": newStore(t, c, etcdstore.WithPrefix(freshPrefix(t))),
		"fair":  newStore(t, c, etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(true)),
	}
	srv.Stop()
	for mode, s := range stores {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			done := make(chan error, 1)
			go func() {
				_, err := s.TryAcquire(context.Background(), "x", backend.Request{Holder: "x", Nonce: baton.NewNonce(), TTL: 30 * time.Second})
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), srv.Addr()) {
					t.Errorf("TryAcquire with etcd stopped: %v; want ErrUnavailable naming %s", err, srv.Addr())
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("TryAcquire(context.Background()) with etcd stopped has not returned in 2 minutes")
			}
		})
	}
}

// TestUnresolvedNameNamed: a client whose endpoint's host name does not
// resolve (a name removed from DNS or /etc/hosts while the Store runs)
// fails its requests saying so, naming the host; it said only that gRPC
// had no connection and to check that etcd runs.
func TestUnresolvedNameNamed(t *testing.T) {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://baton-no-such-host.invalid:2379"}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() }) // after the Store's Close
	s := newStore(t, client, etcdstore.WithPrefix(freshPrefix(t)))
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = s.TryAcquire(ctx, "job", backend.Request{Holder: "x", Nonce: baton.NewNonce(), TTL: 30 * time.Second})
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), `the host name "baton-no-such-host.invalid" does not resolve`) {
		t.Errorf("TryAcquire through a name that does not resolve: %v; want ErrUnavailable naming the name", err)
	}
}
