package testenv

import (
	"strings"
	"testing"
	"time"
)

// A Sentinel topology over TLS with client certificates required: the
// replica syncs and the sentinels see it over TLS, a plain connection is
// refused, and the sentinels promote the replica when the primary dies.
func TestRedisSentinelTLS(t *testing.T) {
	files, _ := WriteTLSFiles(t)
	files.AuthClients = true
	s := StartRedisSentinel(t, WithRedisTLS(files))
	if _, err := redisCall(s.Sentinels[0].Addr(), "PING"); err == nil {
		t.Errorf("a sentinel answered a plain connection: it should serve TLS only")
	}
	old := s.Primary()
	old.Kill()
	if now := s.AwaitFailover(t, old, 60*time.Second); now != s.Servers[1] {
		t.Fatalf("promoted %s, want the replica %s", now.Addr(), s.Servers[1].Addr())
	}
}

// A cluster over TLS, its bus included, serves every slot.
func TestRedisClusterTLS(t *testing.T) {
	files, _ := WriteTLSFiles(t)
	files.AuthClients = true
	c := StartRedisCluster(t, 3, WithRedisTLS(files))
	r, err := c.Nodes[0].call("CLUSTER", "INFO")
	if info, _ := r.(string); err != nil || !strings.Contains(info, "cluster_slots_assigned:16384") {
		t.Fatalf("CLUSTER INFO: %v %v", r, err)
	}
}
