package redisstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/backend"
)

// A redirection that reaches the caller is a slot on the move for a
// Cluster's client (seen in the safety suite's slot-migration row, on a
// batched renewal), and a misconfiguration for a client of one server.
func TestWrapRedirections(t *testing.T) {
	cluster := &Store{client: redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})}
	single := &Store{client: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})}
	t.Cleanup(func() {
		_ = cluster.client.(*redis.ClusterClient).Close()
		_ = single.client.(*redis.Client).Close()
	})
	for _, msg := range []string{"ASK 2184 127.0.0.1:43601", "MOVED 2184 127.0.0.1:43601"} {
		err := cluster.wrap("job", "baton:{job}:lock", "renew", errors.New(msg))
		if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "hash slot") {
			t.Errorf("cluster client, %q: %v; want ErrUnavailable naming the hash slot", msg, err)
		}
		err = single.wrap("job", "baton:{job}:lock", "renew", errors.New(msg))
		if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "redis+cluster://") {
			t.Errorf("single-server client, %q: %v; want ErrMisconfigured naming redis+cluster://", msg, err)
		}
	}
}
