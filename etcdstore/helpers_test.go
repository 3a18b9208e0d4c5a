package etcdstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/internal/faultproxy"
	"github.com/baton-go/baton/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quietLog discards the Store's background logging in tests.
var quietLog = slog.New(slog.DiscardHandler)

// startEtcd starts a single-member etcd for t (fast writes: no fsync).
func startEtcd(t testing.TB, opts ...testenv.EtcdOption) *testenv.Etcd {
	t.Helper()
	return testenv.StartEtcd(t, append([]testenv.EtcdOption{testenv.EtcdNoFsync()}, opts...)...)
}

// startFaultProxy starts a TCP proxy to addr (see faultproxy), closed at
// the end of t.
func startFaultProxy(t testing.TB, addr string) *faultproxy.Proxy {
	t.Helper()
	proxy, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	return proxy
}

// connect opens a client to endpoints, closed at the end of t.
func connect(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatalf("Open(%v): %v", endpoints, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newStore returns a Store on c, closed at the end of t (before c, which
// was registered earlier).
func newStore(t testing.TB, c *clientv3.Client, opts ...etcdstore.Option) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.New(c, append([]etcdstore.Option{etcdstore.WithLogger(quietLog)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// inBothModes runs f as two subtests, with the option that selects fair
// mode (the default) and plain mode.
func inBothModes(t *testing.T, f func(t *testing.T, mode etcdstore.Option)) {
	t.Run("fair", func(t *testing.T) { f(t, etcdstore.WithFair(true)) })
	t.Run("plain", func(t *testing.T) { f(t, etcdstore.WithFair(false)) })
}

var prefixes atomic.Int64

// freshPrefix returns a key prefix no other test uses.
func freshPrefix(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	return fmt.Sprintf("/baton-test/%s-%d/", name, prefixes.Add(1))
}

// within fails t unless ch is ready within d.
func within[T any](t testing.TB, d time.Duration, what string, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("%s: nothing within %v", what, d)
		panic("unreachable")
	}
}

func clientv3WithPrefix() []clientv3.OpOption { return []clientv3.OpOption{clientv3.WithPrefix()} }

// waitDeleted waits for etcd to delete key, watching from rev.
func waitDeleted(t testing.TB, c *clientv3.Client, key string, rev int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for wr := range c.Watch(ctx, key, clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			t.Fatalf("watching %q: %v", key, err)
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return
			}
		}
	}
	t.Fatalf("%q was not deleted within 20s", key)
}
