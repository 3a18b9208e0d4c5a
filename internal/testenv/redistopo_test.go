package testenv

import (
	"strings"
	"testing"
	"time"
)

// The sentinels promote the replica when the primary is killed.
func TestRedisSentinelFailover(t *testing.T) {
	s := StartRedisSentinel(t)
	old := s.Primary()
	if old != s.Servers[0] {
		t.Fatalf("the sentinels report %s as the primary, want %s", old.Addr(), s.Servers[0].Addr())
	}
	if _, err := redisCall(old.Addr(), "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	old.Kill()
	now := s.AwaitFailover(t, old, 60*time.Second)
	if now != s.Servers[1] {
		t.Fatalf("promoted %s, want the replica %s", now.Addr(), s.Servers[1].Addr())
	}
}

// A cluster of three primaries serves every slot.
func TestRedisCluster(t *testing.T) {
	c := StartRedisCluster(t, 3)
	r, err := redisCall(c.Nodes[0].Addr(), "CLUSTER", "INFO")
	if info, _ := r.(string); err != nil || !strings.Contains(info, "cluster_slots_assigned:16384") {
		t.Fatalf("CLUSTER INFO: %v %v", r, err)
	}
}
