package redisstore_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// A Sentinel topology and a Cluster over TLS with a private CA that
// require client certificates, opened with their URLs and WithTLSFiles:
// a bundle that does not hold the servers' CA fails, naming the file, as
// a setup that cannot work; once the right CA is installed in the bundle
// the same Store locks, without being opened again, through the sentinels
// and the data nodes alike; and the Sentinel Store's failover watch
// subscribes to every sentinel. Before, WithClientOptions, the only way
// to give a CA or a client certificate, was refused for these URLs, and a
// client built by hand lost the watch and read its CA once.
func TestTLSFilesTopologies(t *testing.T) {
	files, sentinel, cluster := startTLSTopologies(t)
	other, _ := testenv.WriteTLSFiles(t)
	adminTLS := func(o *redis.Options) { o.TLSConfig = files.ClientTLS(t) }
	ctx := testCtx(t, 2*time.Minute)
	for _, url := range []string{sentinel.URL(), cluster.URL()} {
		bundle := filepath.Join(t.TempDir(), "ca.crt")
		testenv.InstallFile(t, bundle, other.CAFile)
		s, err := redisstore.Open(url, redisstore.WithPrefix(uniquePrefix()), redisstore.WithTLSFiles(bundle, files.CertFile, files.KeyFile))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.Get(ctx, "job"); !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), bundle) {
			t.Errorf("%s with a CA that did not sign the servers' certificates: %v, want ErrMisconfigured naming %s", url, err, bundle)
		}
		testenv.InstallFile(t, bundle, other.CAFile, files.CAFile)
		g, err := s.TryAcquire(ctx, "job", request("a", 10*time.Second))
		if err != nil {
			t.Fatalf("%s once the bundle holds the servers' CA: %v", url, err)
		}
		if err := s.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	for _, sn := range sentinel.Sentinels {
		awaitWatchSubscribed(t, newClient(t, sn.Addr(), adminTLS))
	}
	if _, err := redisstore.Open(strings.Replace(sentinel.URL(), "rediss+", "redis+", 1), redisstore.WithTLSFiles(files.CAFile, "", "")); !errors.Is(err, backend.ErrInvalidOptions) {
		t.Errorf("WithTLSFiles with a redis+sentinel:// URL: %v, want ErrInvalidOptions", err)
	}
}

// startTLSTopologies starts a Sentinel topology and a Cluster of three
// primaries that serve TLS only and require client certificates, all
// with the returned files.
func startTLSTopologies(t *testing.T) (testenv.RedisTLS, *testenv.RedisSentinel, *testenv.RedisCluster) {
	t.Helper()
	files, _ := testenv.WriteTLSFiles(t)
	files.AuthClients = true
	return files, testenv.StartRedisSentinel(t, testenv.WithRedisTLS(files)), testenv.StartRedisCluster(t, 3, testenv.WithRedisTLS(files))
}

// awaitWatchSubscribed waits until a client of the sentinel admin is
// connected to listens to one channel, as a sentinelWatch's does
// (go-redis's own subscription listens to two); the watch retries a
// subscription that failed in the background, so it is awaited.
func awaitWatchSubscribed(t *testing.T, admin *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		list, err := admin.Do(t.Context(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
		if err == nil && strings.Contains(list, " sub=1 ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover watch subscribed to the sentinel at %s within 90s (CLIENT LIST: %q, %v)", admin.Options().Addr, list, err)
		}
		time.Sleep(100 * time.Millisecond) // subscriptions are observable only by asking
	}
}
