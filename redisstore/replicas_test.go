package redisstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
)

// WithReplicaAcks: on topologies with a replica, acquisitions and
// renewals wait for its acknowledgement and succeed; on a server with no
// replica the acquisition fails with ErrUnavailable, saying how many
// acknowledged, and leaves the lock free.
func TestReplicaAcks(t *testing.T) {
	acks := redisstore.WithReplicaAcks(1, 2*time.Second)
	t.Run("sentinel", func(t *testing.T) {
		acquireRenewRelease(t, testenv.StartRedisSentinel(t).URL(), acks)
	})
	t.Run("cluster", func(t *testing.T) {
		acquireRenewRelease(t, testenv.StartRedisClusterWithReplicas(t, 3).URL(), acks)
	})
	t.Run("no_replica", func(t *testing.T) {
		url := "redis://" + startRedis(t, 1)[0].Addr()
		s, err := redisstore.Open(url, redisstore.WithPrefix(uniquePrefix()), redisstore.WithReplicaAcks(1, 100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		_, err = s.TryAcquire(t.Context(), "job", request("a", 2*time.Second))
		if !errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("TryAcquire with no replica to acknowledge: %v; want ErrUnavailable", err)
		}
		t.Logf("error: %v", err)
		if rec, err := s.Get(t.Context(), "job"); err == nil && rec.Held() {
			t.Fatalf("after the refused acquisition the lock is held: %+v", rec)
		}
	})
}

func acquireRenewRelease(t *testing.T, url string, opts ...redisstore.Option) {
	t.Helper()
	s, err := redisstore.Open(url, append(opts, redisstore.WithPrefix(uniquePrefix()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	g, err := s.TryAcquire(ctx, "job", request("a", 2*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if g, err = s.Renew(ctx, g); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if err := s.Release(ctx, g); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// Bad WithReplicaAcks values, and Redlock, are refused as invalid options.
func TestReplicaAcksInvalid(t *testing.T) {
	url := "redis://127.0.0.1:1"
	for _, o := range []redisstore.Option{redisstore.WithReplicaAcks(-1, time.Second), redisstore.WithReplicaAcks(1, 0)} {
		_, err := redisstore.Open(url, o)
		if !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), "want a replica count of at least 0 and, with replicas, a positive timeout") {
			t.Errorf("Open with a bad WithReplicaAcks: %v; want ErrInvalidOptions saying what is wanted", err)
		}
	}
	_, err := redisstore.OpenRedlock([]string{url, url, url}, redisstore.WithReplicaAcks(1, time.Second))
	if !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), "Redlock's servers are independent primaries") {
		t.Errorf("OpenRedlock with WithReplicaAcks: %v; want ErrInvalidOptions saying why", err)
	}
}
