package etcdstore_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/internal/testenv"
)

// TestProxyClusterDownAtOpen: an etcd grpc-proxy answers MemberList, Open's
// first request, itself (with its --advertise-client-url), whether or not
// the cluster behind it answers. So Open through a proxy in front of a
// dead member succeeded, and the first read waited: baton status hung
// (over 60s), baton lock exited 69 after --connect-timeout saying only
// "get: context deadline exceeded". Open now asks for the member's status
// through the proxy and fails with ErrUnavailable naming the proxy.
func TestProxyClusterDownAtOpen(t *testing.T) {
	srv := startEtcd(t)
	px := testenv.StartEtcdProxy(t, []*testenv.Etcd{srv})
	srv.Kill()
	err := openFails(t, "through a grpc-proxy whose member is down", etcdstore.Config{Endpoints: []string{px.Endpoint()}})
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "grpc-proxy") {
		t.Errorf("Open through a grpc-proxy in front of a dead member: %v; want ErrUnavailable naming the grpc-proxy", err)
	}
}

// TestProxyQuorumLostAtOpen: through a grpc-proxy in front of a cluster
// that lost its quorum, Open says so, as it does without the proxy
// (TestClusterQuorumLostAtOpen), instead of succeeding.
func TestProxyQuorumLostAtOpen(t *testing.T) {
	c, _ := startCluster(t)
	px := testenv.StartEtcdProxy(t, c.Members)
	c.Members[1].Kill()
	c.Members[2].Kill()
	c.Members[0].WaitNoLeader(t, 30*time.Second)
	err := openFails(t, "through a grpc-proxy with two of three members down", etcdstore.Config{Endpoints: []string{px.Endpoint()}})
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "grpc-proxy") || !strings.Contains(err.Error(), "lost its quorum") {
		t.Errorf("Open through a grpc-proxy with the cluster's quorum lost: %v; want ErrUnavailable naming the grpc-proxy and the lost quorum", err)
	}
}

// TestProxyOpen: Open through a grpc-proxy in front of a healthy cluster
// succeeds.
func TestProxyOpen(t *testing.T) {
	c, _ := startCluster(t)
	px := testenv.StartEtcdProxy(t, c.Members)
	connect(t, px.Endpoint())
}

// TestProxyWarnedAtOpenStore: a process whose endpoints reach etcd through
// a grpc-proxy logged only "lease keepalive stream failed; reopening ...
// no keepalive answer within the stall timeout" every few seconds, which
// points at the network. OpenStore (what baton lock and run call) now
// warns once that the endpoints are a grpc-proxy, which baton does not
// support; a Store opened on the member itself does not.
func TestProxyWarnedAtOpenStore(t *testing.T) {
	srv := startEtcd(t)
	px := testenv.StartEtcdProxy(t, []*testenv.Etcd{srv})
	for _, c := range []struct {
		endpoint string
		warned   bool
	}{{px.Endpoint(), true}, {srv.Endpoint(), false}} {
		logs := &logLines{}
		s, err := etcdstore.OpenStore(t.Context(), etcdstore.Config{Endpoints: []string{c.endpoint}},
			etcdstore.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if warned := logs.count("grpc-proxy, which baton does not support") == 1; warned != c.warned {
			t.Errorf("OpenStore(%s): warned of a grpc-proxy: %v, want %v; logs:\n%s", c.endpoint, warned, c.warned, logs.String())
		}
	}
}
