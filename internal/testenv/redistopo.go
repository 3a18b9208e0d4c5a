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
		s.Sentinels = append(s.Sentinels, StartRedis(t, func(c *redisConfig) { c.sentinel, c.tls = conf, primary.cfg.tls }))
	}
	awaitCond(t, 30*time.Second, "the sentinels to see the replica", func() bool {
		for _, sn := range s.Sentinels {
			r, err := sn.call("SENTINEL", "REPLICAS", RedisSentinelName)
			if list, ok := r.([]any); err != nil || !ok || len(list) == 0 {
				return false
			}
		}
		return true
	})
	awaitCond(t, 30*time.Second, "the replica to sync with the primary", func() bool { return inSync(replica) })
	return s
}

// inSync reports whether srv is a replica whose link to its primary is up.
func inSync(srv *RedisServer) bool {
	info, err := srv.call("INFO", "replication")
	r, _ := info.(string)
	return err == nil && strings.Contains(r, "master_link_status:up")
}

// SentinelAddrs returns the sentinels' host:port addresses.
func (s *RedisSentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// URL returns the redis+sentinel:// URL of the topology (redisstore's
// form; rediss+sentinel:// with WithRedisTLS).
func (s *RedisSentinel) URL() string {
	return s.Sentinels[0].scheme("sentinel") + strings.Join(s.SentinelAddrs(), ",") + "/" + RedisSentinelName
}

// PrimaryAddr returns the primary's address as the first sentinel that
// answers reports it.
func (s *RedisSentinel) PrimaryAddr() (string, error) {
	var last error
	for _, sn := range s.Sentinels {
		r, err := sn.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", RedisSentinelName)
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
			if r.Addr() == addr && role(r) == "master" {
				now = r
				return true
			}
		}
		return false
	})
	return now
}

// FailOver fails the topology over by hand through sentinel via (SENTINEL
// FAILOVER, as an operator moving the primary off a machine does; asked
// again while it refuses, NOGOODSLAVE or INPROG: the replica not yet in
// sync, or a failover still running), away from old, the primary, which
// stays up. It returns the promoted server, as AwaitFailover does.
func (s *RedisSentinel) FailOver(t testing.TB, via, old *RedisServer, timeout time.Duration) *RedisServer {
	t.Helper()
	awaitCond(t, timeout, "SENTINEL FAILOVER accepted by "+via.Addr(), func() bool {
		_, err := via.call("SENTINEL", "FAILOVER", RedisSentinelName)
		return err == nil
	})
	return s.AwaitFailover(t, old, timeout)
}

// AwaitSettled waits until every sentinel names primary as the primary (a
// sentinel that was down during a failover reads its former view from its
// configuration, then learns the new one from the others) and replica is
// in sync with it: one view of the topology again.
func (s *RedisSentinel) AwaitSettled(t testing.TB, primary, replica *RedisServer, timeout time.Duration) {
	t.Helper()
	awaitCond(t, timeout, "one view of the primary "+primary.Addr()+", with "+replica.Addr()+" in sync", func() bool {
		for _, sn := range s.Sentinels {
			r, err := sn.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", RedisSentinelName)
			if hp, ok := r.([]any); err != nil || !ok || len(hp) != 2 || fmt.Sprintf("%v:%v", hp[0], hp[1]) != primary.Addr() {
				return false
			}
		}
		return inSync(replica)
	})
}

// role returns what ROLE says srv is ("master", "slave").
func role(srv *RedisServer) string {
	r, err := srv.call("ROLE")
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
		if _, err := node.call("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			t.Fatalf("testenv: CLUSTER ADDSLOTSRANGE on %s: %v", node.Addr(), err)
		}
		if i > 0 {
			if _, err := node.call("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(c.Nodes[0].Port)); err != nil {
				t.Fatalf("testenv: CLUSTER MEET from %s: %v", node.Addr(), err)
			}
		}
	}
	awaitCond(t, 30*time.Second, "Redis Cluster to report cluster_state:ok on every node", func() bool {
		for _, node := range c.Nodes {
			r, err := node.call("CLUSTER", "INFO")
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

// URL returns the redis+cluster:// URL of the cluster (redisstore's form;
// rediss+cluster:// with WithRedisTLS).
func (c *RedisCluster) URL() string {
	return c.Nodes[0].scheme("cluster") + strings.Join(c.Addrs(), ",")
}

// StartRedisClusterWithReplicas is StartRedisCluster with one replica per
// primary (Replicas[i] replicates Nodes[i]), so that killing a primary
// makes the cluster promote its replica, as production clusters run.
func StartRedisClusterWithReplicas(t testing.TB, n int, opts ...RedisOption) *RedisCluster {
	t.Helper()
	c := StartRedisCluster(t, n, opts...)
	for _, primary := range c.Nodes {
		id, err := primary.call("CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("testenv: CLUSTER MYID on %s: %v", primary.Addr(), err)
		}
		r := StartRedis(t, append(opts, RedisArgs("--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"))...)
		if _, err := r.call("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(c.Nodes[0].Port)); err != nil {
			t.Fatalf("testenv: CLUSTER MEET from %s: %v", r.Addr(), err)
		}
		awaitCond(t, 30*time.Second, "replica "+r.Addr()+" to learn its primary", func() bool {
			_, err := r.call("CLUSTER", "REPLICATE", fmt.Sprint(id))
			return err == nil
		})
		c.Replicas = append(c.Replicas, r)
	}
	awaitCond(t, 60*time.Second, "every replica to sync with its primary", func() bool {
		for _, r := range c.Replicas {
			info, err := r.call("INFO", "replication")
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
	return int(c.keySlot(t, key)) * len(c.Nodes) / 16384
}

// keySlot returns key's hash slot, as Nodes[0] computes it.
func (c *RedisCluster) keySlot(t testing.TB, key string) int64 {
	t.Helper()
	r, err := c.Nodes[0].call("CLUSTER", "KEYSLOT", key)
	slot, ok := r.(int64)
	if err != nil || !ok {
		t.Fatalf("testenv: CLUSTER KEYSLOT %q: %v (%v)", key, r, err)
	}
	return slot
}

// AwaitPromotion waits until the replica of Nodes[i] answers as a primary.
func (c *RedisCluster) AwaitPromotion(t testing.TB, i int, timeout time.Duration) {
	t.Helper()
	r := c.Replicas[i]
	awaitCond(t, timeout, "replica "+r.Addr()+" to be promoted", func() bool { return role(r) == "master" })
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
		info, err := old.call("INFO", "replication")
		s, _ := info.(string)
		return err == nil && strings.Contains(s, "role:slave") && strings.Contains(s, "master_link_status:up")
	})
	c.Nodes[i], c.Replicas[i] = c.Replicas[i], old
}

// MigrateSlot moves the hash slot of key from the primary that serves it
// to Nodes[to], as resharding does (redis-cli --cluster reshard, or adding
// a node); see SlotMove. With pause 0 the keys move in batches of up to
// 100, each atomically on the source; with pause above 0, one at a time,
// with pause before the first and after each, so that the slot is
// half-moved for a while. It returns the index of the former owner (to
// itself if it already served the slot).
func (c *RedisCluster) MigrateSlot(t testing.TB, key string, to int, pause time.Duration) (from int) {
	t.Helper()
	m := c.StartSlotMove(t, key, to)
	if m.From == to {
		return to
	}
	batch := 100
	if pause > 0 {
		batch = 1
	}
	for {
		time.Sleep(pause)
		if m.MoveKeys(t, batch) == 0 {
			break
		}
	}
	m.Finish(t)
	return m.From
}

// A SlotMove is a hash slot on its way from Nodes[From] to Nodes[To], in
// the steps resharding takes: StartSlotMove marks the slot importing on
// the target and migrating on the source; MoveKeys moves keys with
// MIGRATE; Finish moves the rest and tells the target, the source and the
// other primaries the new owner. Meanwhile the source runs a command
// whose keys it has, answers ASK when it has none of them and TRYAGAIN
// when it has only some; the target, reached with ASKING, answers TRYAGAIN
// unless it has them all. A key that exists on neither node counts as
// missing on both. Clients follow ASK, and MOVED after Finish.
type SlotMove struct {
	c            *RedisCluster
	From, To     int
	slot         string
	srcID, dstID string
}

// StartSlotMove starts moving the hash slot of key to Nodes[to]. If
// Nodes[to] already serves it, the move has nothing to do (From == To).
func (c *RedisCluster) StartSlotMove(t testing.TB, key string, to int) *SlotMove {
	t.Helper()
	slot := c.keySlot(t, key)
	m := &SlotMove{c: c, From: c.slotServer(t, slot), To: to, slot: strconv.FormatInt(slot, 10)}
	if m.From == to {
		return m
	}
	m.srcID, _ = m.call(t, c.Nodes[m.From], "CLUSTER", "MYID").(string)
	m.dstID, _ = m.call(t, c.Nodes[to], "CLUSTER", "MYID").(string)
	m.call(t, c.Nodes[to], "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.srcID)
	m.call(t, c.Nodes[m.From], "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.dstID)
	return m
}

// MoveKeys moves up to n of the slot's keys still on the source, in one
// MIGRATE, and returns how many it moved.
func (m *SlotMove) MoveKeys(t testing.TB, n int) int {
	t.Helper()
	if m.From == m.To {
		return 0
	}
	src, dst := m.c.Nodes[m.From], m.c.Nodes[m.To]
	keys, _ := m.call(t, src, "CLUSTER", "GETKEYSINSLOT", m.slot, strconv.Itoa(n)).([]any)
	if len(keys) == 0 {
		return 0
	}
	args := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port), "", "0", "5000", "KEYS"}
	for _, k := range keys {
		args = append(args, fmt.Sprint(k))
	}
	m.call(t, src, args...)
	return len(keys)
}

// Finish moves the keys left and makes Nodes[To] the slot's owner on
// every primary.
func (m *SlotMove) Finish(t testing.TB) {
	t.Helper()
	if m.From == m.To {
		return
	}
	for m.MoveKeys(t, 100) > 0 {
	}
	m.call(t, m.c.Nodes[m.To], "CLUSTER", "SETSLOT", m.slot, "NODE", m.dstID)
	m.call(t, m.c.Nodes[m.From], "CLUSTER", "SETSLOT", m.slot, "NODE", m.dstID)
	for i, n := range m.c.Nodes {
		if i != m.From && i != m.To {
			m.call(t, n, "CLUSTER", "SETSLOT", m.slot, "NODE", m.dstID)
		}
	}
}

func (m *SlotMove) call(t testing.TB, n *RedisServer, args ...string) any {
	t.Helper()
	r, err := n.call(args...)
	if err != nil {
		t.Fatalf("testenv: %s on %s: %v", strings.Join(args, " "), n.Addr(), err)
	}
	return r
}

// SlotServer returns the index in Nodes of the primary that serves key's
// hash slot now, as Nodes[0] sees the cluster (CLUSTER SLOTS); SlotOwner
// is the owner when the cluster started.
func (c *RedisCluster) SlotServer(t testing.TB, key string) int {
	t.Helper()
	return c.slotServer(t, c.keySlot(t, key))
}

// slotServer returns the index in Nodes of the primary that serves slot,
// as Nodes[0] sees the cluster (CLUSTER SLOTS).
func (c *RedisCluster) slotServer(t testing.TB, slot int64) int {
	t.Helper()
	r, err := c.Nodes[0].call("CLUSTER", "SLOTS")
	ranges, _ := r.([]any)
	if err != nil {
		t.Fatalf("testenv: CLUSTER SLOTS on %s: %v", c.Nodes[0].Addr(), err)
	}
	for _, rg := range ranges {
		e, _ := rg.([]any)
		if len(e) < 3 {
			continue
		}
		lo, _ := e[0].(int64)
		hi, _ := e[1].(int64)
		owner, _ := e[2].([]any)
		if slot < lo || slot > hi || len(owner) < 2 {
			continue
		}
		port, _ := owner[1].(int64)
		for i, n := range c.Nodes {
			if int64(n.Port) == port {
				return i
			}
		}
	}
	t.Fatalf("testenv: no primary in Nodes serves slot %d (CLUSTER SLOTS: %v)", slot, r)
	return -1
}
