package testenv

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisSentinelName is the name the sentinels of StartRedisSentinel
// monitor the primary under.
const RedisSentinelName = "baton-primary"

// RedisSentinel is a Sentinel-managed Redis, as production runs it: a
// primary, one replica and three sentinels with a quorum of two, all on
// loopback ports. Sentinels declare the primary down after a second and
// promote the replica. Everything is stopped in t.Cleanup.
type RedisSentinel struct {
	t testing.TB
	// Servers are the primary and the replica, in their initial roles.
	Servers []*RedisServer
	// Sentinels are the three sentinels.
	Sentinels []*RedisServer
}

// StartRedisSentinel starts the topology and returns once the replica is in
// sync and the sentinels know it (so that a failover can promote it).
func StartRedisSentinel(t testing.TB, opts ...RedisOption) *RedisSentinel {
	t.Helper()
	primary := StartRedis(t, opts...)
	replica := StartRedis(t, append(opts, RedisArgs("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)))...)
	s := &RedisSentinel{t: t, Servers: []*RedisServer{primary, replica}}
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
		"sentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 5000\n"+
		"sentinel parallel-syncs %[1]s 1\n", RedisSentinelName, primary.Port)
	for range 3 {
		s.Sentinels = append(s.Sentinels, StartRedis(t, func(c *redisConfig) { c.sentinel = conf }))
	}
	awaitCond(t, 30*time.Second, "the sentinels to see the replica", func() bool {
		for _, sn := range s.Sentinels {
			r, err := redisCall(sn.Addr(), "SENTINEL", "REPLICAS", RedisSentinelName)
			if list, ok := r.([]any); err != nil || !ok || len(list) == 0 {
				return false
			}
		}
		return true
	})
	awaitCond(t, 30*time.Second, "the replica to sync with the primary", func() bool {
		info, err := redisCall(replica.Addr(), "INFO", "replication")
		r, _ := info.(string)
		return err == nil && strings.Contains(r, "master_link_status:up")
	})
	return s
}

// SentinelAddrs returns the sentinels' host:port addresses.
func (s *RedisSentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// URL returns the redis+sentinel:// URL of the topology (redisstore's form).
func (s *RedisSentinel) URL() string {
	return "redis+sentinel://" + strings.Join(s.SentinelAddrs(), ",") + "/" + RedisSentinelName
}

// PrimaryAddr returns the primary's address as the first sentinel that
// answers reports it.
func (s *RedisSentinel) PrimaryAddr() (string, error) {
	var last error
	for _, sn := range s.Sentinels {
		r, err := redisCall(sn.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", RedisSentinelName)
		if err != nil {
			last = err
			continue
		}
		if hp, ok := r.([]any); ok && len(hp) == 2 {
			return fmt.Sprintf("%v:%v", hp[0], hp[1]), nil
		}
	}
	return "", fmt.Errorf("no sentinel reports the primary: %v", last)
}

// Primary returns the server the sentinels now report as the primary.
func (s *RedisSentinel) Primary() *RedisServer {
	s.t.Helper()
	addr, err := s.PrimaryAddr()
	if err != nil {
		s.t.Fatalf("testenv: %v", err)
	}
	for _, r := range s.Servers {
		if r.Addr() == addr {
			return r
		}
	}
	s.t.Fatalf("testenv: the sentinels report %s, which is none of the servers", addr)
	return nil
}

// AwaitFailover waits until the sentinels report a primary other than
// old and that server answers as a primary.
func (s *RedisSentinel) AwaitFailover(t testing.TB, old *RedisServer, timeout time.Duration) *RedisServer {
	t.Helper()
	var now *RedisServer
	awaitCond(t, timeout, "a failover away from "+old.Addr(), func() bool {
		addr, err := s.PrimaryAddr()
		if err != nil || addr == old.Addr() {
			return false
		}
		for _, r := range s.Servers {
			if r.Addr() == addr && role(r.Addr()) == "master" {
				now = r
				return true
			}
		}
		return false
	})
	return now
}

// role returns what ROLE says the server at addr is ("master", "slave").
func role(addr string) string {
	r, err := redisCall(addr, "ROLE")
	if list, ok := r.([]any); err == nil && ok && len(list) > 0 {
		s, _ := list[0].(string)
		return s
	}
	return ""
}

// awaitCond polls cond every 50ms until it holds, failing t after
// timeout. A topology's state (roles, slots, what sentinels believe) is
// observable only by asking, so polling is the event here.
func awaitCond(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("testenv: no %s within %v", what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RedisCluster is a Redis Cluster of primaries on loopback ports, its
// 16384 slots spread evenly, with or without replicas. Everything is
// stopped in t.Cleanup.
type RedisCluster struct {
	Nodes    []*RedisServer // the primaries, in slot order
	Replicas []*RedisServer // Replicas[i] replicates Nodes[i]; none by default
}

// StartRedisCluster starts n (at least 3) cluster-enabled servers, assigns
// the slots, joins them and returns once every node reports the cluster
// ok.
func StartRedisCluster(t testing.TB, n int, opts ...RedisOption) *RedisCluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("testenv: a Redis Cluster needs at least 3 primaries, got %d", n)
	}
	c := &RedisCluster{}
	for range n {
		c.Nodes = append(c.Nodes, StartRedis(t, append(opts, RedisArgs("--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"))...))
	}
	const slots = 16384
	for i, node := range c.Nodes {
		lo, hi := i*slots/n, (i+1)*slots/n-1
		if _, err := redisCall(node.Addr(), "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			t.Fatalf("testenv: CLUSTER ADDSLOTSRANGE on %s: %v", node.Addr(), err)
		}
		if i > 0 {
			if _, err := redisCall(node.Addr(), "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(c.Nodes[0].Port)); err != nil {
				t.Fatalf("testenv: CLUSTER MEET from %s: %v", node.Addr(), err)
			}
		}
	}
	awaitCond(t, 30*time.Second, "Redis Cluster to report cluster_state:ok on every node", func() bool {
		for _, node := range c.Nodes {
			r, err := redisCall(node.Addr(), "CLUSTER", "INFO")
			info, _ := r.(string)
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)) {
				return false
			}
		}
		return true
	})
	return c
}

// Addrs returns the nodes' host:port addresses.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// URL returns the redis+cluster:// URL of the cluster (redisstore's form).
func (c *RedisCluster) URL() string { return "redis+cluster://" + strings.Join(c.Addrs(), ",") }

// StartRedisClusterWithReplicas is StartRedisCluster with one replica per
// primary (Replicas[i] replicates Nodes[i]), so that killing a primary
// makes the cluster promote its replica, as production clusters run.
func StartRedisClusterWithReplicas(t testing.TB, n int, opts ...RedisOption) *RedisCluster {
	t.Helper()
	c := StartRedisCluster(t, n, opts...)
	for _, primary := range c.Nodes {
		id, err := redisCall(primary.Addr(), "CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("testenv: CLUSTER MYID on %s: %v", primary.Addr(), err)
		}
		r := StartRedis(t, append(opts, RedisArgs("--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"))...)
		if _, err := redisCall(r.Addr(), "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(c.Nodes[0].Port)); err != nil {
			t.Fatalf("testenv: CLUSTER MEET from %s: %v", r.Addr(), err)
		}
		awaitCond(t, 30*time.Second, "replica "+r.Addr()+" to learn its primary", func() bool {
			_, err := redisCall(r.Addr(), "CLUSTER", "REPLICATE", fmt.Sprint(id))
			return err == nil
		})
		c.Replicas = append(c.Replicas, r)
	}
	awaitCond(t, 60*time.Second, "every replica to sync with its primary", func() bool {
		for _, r := range c.Replicas {
			info, err := redisCall(r.Addr(), "INFO", "replication")
			s, _ := info.(string)
			if err != nil || !strings.Contains(s, "master_link_status:up") {
				return false
			}
		}
		return true
	})
	return c
}

// SlotOwner returns the index in Nodes of the primary that served key's
// slot when the cluster started.
func (c *RedisCluster) SlotOwner(t testing.TB, key string) int {
	t.Helper()
	r, err := redisCall(c.Nodes[0].Addr(), "CLUSTER", "KEYSLOT", key)
	slot, ok := r.(int64)
	if err != nil || !ok {
		t.Fatalf("testenv: CLUSTER KEYSLOT %q: %v (%v)", key, r, err)
	}
	return int(slot) * len(c.Nodes) / 16384
}

// AwaitPromotion waits until the replica of Nodes[i] answers as a primary.
func (c *RedisCluster) AwaitPromotion(t testing.TB, i int, timeout time.Duration) {
	t.Helper()
	r := c.Replicas[i]
	awaitCond(t, timeout, "replica "+r.Addr()+" to be promoted", func() bool { return role(r.Addr()) == "master" })
}

// Failover kills the primary Nodes[i] (SIGKILL), waits for the cluster to
// promote its replica, starts the killed server again (it rejoins as a
// replica of the new primary) and waits for it to sync; then the two swap
// places in Nodes and Replicas, so that Failover(t, i) can run again.
func (c *RedisCluster) Failover(t testing.TB, i int, timeout time.Duration) {
	t.Helper()
	old := c.Nodes[i]
	old.Kill()
	c.AwaitPromotion(t, i, timeout)
	old.Start()
	awaitCond(t, timeout, "the old primary "+old.Addr()+" to rejoin as a replica", func() bool {
		info, err := redisCall(old.Addr(), "INFO", "replication")
		s, _ := info.(string)
		return err == nil && strings.Contains(s, "role:slave") && strings.Contains(s, "master_link_status:up")
	})
	c.Nodes[i], c.Replicas[i] = c.Replicas[i], old
}
