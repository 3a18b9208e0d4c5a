//go:build linux

package safety

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/testenv"
)

// TestSafetyRedisAmnesia runs the store-restart fault on Redis set-ups
// that can lose acknowledged writes, as production ones often do: no
// persistence at all (a restart forgets every claim and the fencing
// counter), appendfsync everysec with kill -9 (the last second of writes
// may be lost), a Sentinel failover and a Cluster failover (the primary
// killed with -9; the replica promoted may have missed the last writes). A lost claim lets
// a contender in while the holder still works until its next renew,
// which fencing must cover: the checker requires 0 stale writes accepted,
// no token issued twice or going backwards, and the new holder's writes
// accepted (a token that went backwards would lock it out).
func TestSafetyRedisAmnesia(t *testing.T) {
	t.Run("no_persistence", func(t *testing.T) {
		srv := testenv.StartRedis(t)
		runScenario(t, redisRestartEnv(t, srv, srv.Addr()), scenario{fault: faultRestart, variant: "no persistence"})
	})
	t.Run("everysec", func(t *testing.T) {
		srv := testenv.StartRedis(t, testenv.RedisArgs("--appendonly", "yes", "--appendfsync", "everysec"))
		runScenario(t, redisRestartEnv(t, srv, srv.Addr()), scenario{fault: faultRestart, variant: "AOF everysec, kill -9"})
	})
	t.Run("sentinel", func(t *testing.T) {
		topo := testenv.StartRedisSentinel(t)
		be := &backendEnv{name: "redis", ttl: ttl, claimLife: ttl,
			newLink: func(*testing.T) link { return local(topo.URL()) },
			restart: func(t *testing.T, _ time.Duration) {
				old := topo.Primary()
				old.Kill()
				topo.AwaitFailover(t, old, 60*time.Second)
				old.Start() // the sentinels make it a replica of the new primary
			}}
		runScenario(t, be, scenario{fault: faultRestart, variant: "Sentinel failover"})
	})
	t.Run("cluster", func(t *testing.T) {
		// One Cluster for both rows: Failover leaves the lock's primary
		// and its replica as it found them, in sync, for the row that
		// loses the primary for good.
		topo := testenv.StartRedisClusterWithReplicas(t, 3)
		be := &backendEnv{name: "redis", ttl: ttl, claimLife: ttl,
			newLink: func(*testing.T) link { return local(topo.URL()) },
			restart: func(t *testing.T, _ time.Duration) {
				// The primary serving the lock's keys (all in its name's
				// hash slot): runScenario names the lock after the fault.
				topo.Failover(t, topo.SlotOwner(t, "safety-store-restart"), 60*time.Second)
			}}
		runScenario(t, be, scenario{fault: faultRestart, variant: "Cluster failover"})
		t.Run("primary_lost", func(t *testing.T) {
			// The killed primary stays down (its machine is gone):
			// requests to its address are refused, not redirected
			// (MOVED), and the Store must reload the cluster's slot map
			// to reach the promoted replica. One round: the slot then has
			// no replica left.
			be := &backendEnv{name: "redis", ttl: ttl, claimLife: ttl,
				newLink: func(*testing.T) link { return local(topo.URL()) },
				restart: func(t *testing.T, _ time.Duration) {
					i := topo.SlotOwner(t, "safety-store-restart")
					topo.Nodes[i].Kill()
					topo.AwaitPromotion(t, i, 60*time.Second)
				}}
			runScenario(t, be, scenario{fault: faultRestart, variant: "Cluster failover, the primary lost for good", rounds: 1})
		})
	})
}

// redisRestartEnv is the backend of one server srv, reached at addr
// through a fault proxy, whose restart is a kill -9 and a start after the
// harness's down time.
func redisRestartEnv(t *testing.T, srv *testenv.RedisServer, addr string) *backendEnv {
	t.Helper()
	return &backendEnv{name: "redis", ttl: ttl, claimLife: ttl,
		newLink:    func(t *testing.T) link { return proxied(t, []string{addr}, "") },
		deleteLock: redisDel(addr),
		restart: func(t *testing.T, down time.Duration) {
			srv.Kill()
			time.Sleep(down)
			srv.Start()
		}}
}

// faultSlotMigrated is the Cluster's resharding: the lock's hash slot
// moves to another primary while the lock is held.
const faultSlotMigrated = "3 primaries: hash slot of the lock migrated while held"

// TestSafetyRedisSlotMigration moves the lock's hash slot to the next
// primary right after one of the holder's accepted writes, each round, as
// resharding a Cluster does (redis-cli --cluster reshard, or adding a
// node): keys move with MIGRATE, one at a time and TTL/8 apart, while
// contenders' scripts are sent on by ASK, then MOVED. A lock's keys share
// one hash slot, so each script sees all of them on one node or is refused
// (TRYAGAIN, while they are split) and retried; the row is strict: one
// holder at a time, 0 stale writes accepted, no token twice.
func TestSafetyRedisSlotMigration(t *testing.T) {
	topo := testenv.StartRedisCluster(t, 3)
	be := &backendEnv{name: "redis", ttl: ttl, claimLife: ttl,
		newLink: func(*testing.T) link { return local(topo.URL()) },
		restart: func(t *testing.T, _ time.Duration) { t.Fatal("not used") }}
	runClusterScenario(t, be, scenario{fault: faultSlotMigrated}, func(h *harness) { migrateSlot(h, topo) })
}

// migrateSlot moves the lock's slot to the next primary right after one of
// the holder's accepted writes (the move runs here, not in the trap, which
// would hold the write's reply back), then waits for the lock to go on: writes
// accepted after the move, and a change of hands.
func migrateSlot(h *harness, topo *testenv.RedisCluster) {
	h.t.Helper()
	key := "baton:{" + h.sc.lock + "}:lock"
	f := h.waitFired(h.arm(false, 3+h.rng.IntN(5), func(string) {}), "a write before the slot migration")
	to := (topo.SlotServer(h.t, key) + 1) % len(topo.Nodes)
	start := h.reg.now()
	from := topo.MigrateSlot(h.t, key, to, h.be.ttl/8)
	moved := h.reg.now()
	h.t.Logf("%s held token %d; the slot moved from primary %d to %d in %v, %v after the write", f.c, f.tok, from, to, moved-start, start-f.at)
	h.writeAfter("migration", moved)
	if _, ok := h.acquiredAfter(f.tok, 60*time.Second); !ok {
		h.t.Fatalf("no acquisition after token %d", f.tok)
	}
	h.writesAbove(f.tok, 3, 30*time.Second)
}

// faultSentinelSwitch is a failover by hand (SENTINEL FAILOVER, as an
// operator moving the primary off a machine does) while the sentinel the
// holder's client listens to is dead.
const faultSentinelSwitch = "Sentinel failover by hand while the sentinel of the holder is dead"

// TestSafetyRedisSentinelSwitch runs faultSentinelSwitch each round. Each
// contender lists the sentinels from another one, so that their clients
// ask and listen to different sentinels first, as replicas configured one
// by one do. The old primary stays up, and writable until the sentinels
// demote it (at their next look at it, seconds later): a holder that
// heard no +switch-master renews its claim there while the others, which
// heard it, find the claim on the new primary expiring, and two would
// hold the lock at once. The row is strict: one holder at a time, 0
// stale writes accepted, no token twice. (Replication is asynchronous, so
// a promoted replica may lack the holder's last renewal; on loopback it
// lags by far less than the renew interval.)
func TestSafetyRedisSentinelSwitch(t *testing.T) {
	topo := testenv.StartRedisSentinel(t)
	n := 0
	// A TTL of 6s: a claim lasts well past the window between the
	// replica's promotion and the sentinels' +switch-master (about a
	// second, their look at the promoted replica), in which the old
	// primary takes renewals it no longer replicates; at 2s a holder that
	// heard the switch as soon as it was announced still lost its claim
	// on the new primary to a waiter in one CI run of several.
	be := &backendEnv{name: "redis", ttl: 3 * ttl, claimLife: 3 * ttl,
		newLink: func(*testing.T) link {
			addrs := topo.SentinelAddrs()
			n++
			k := n % len(addrs)
			return local("redis+sentinel://" + strings.Join(append(addrs[k:], addrs[:k]...), ",") + "/" + testenv.RedisSentinelName)
		},
		restart: func(t *testing.T, _ time.Duration) { t.Fatal("not used") }}
	runClusterScenario(t, be, scenario{fault: faultSentinelSwitch}, func(h *harness) { sentinelSwitch(h, topo) })
}

// sentinelSwitch kills the sentinel the holder's client listens to (the
// first of its URL) right after one of its accepted writes, while it
// holds, fails the
// topology over by hand through another sentinel, and waits for the lock
// to go on past the failover: writes accepted after it, and a change of
// hands. The dead sentinel then starts again.
func sentinelSwitch(h *harness, topo *testenv.RedisSentinel) {
	h.t.Helper()
	// The holder is asked to hold on: a tenure that ended on its own
	// during the failover would release before the others could find
	// its claim expiring.
	f := h.waitFired(h.armHold(false, true, 3+h.rng.IntN(5), func(string) {}), "a write before the failover")
	first := strings.SplitN(strings.TrimPrefix(h.contender(f.c).link.target, "redis+sentinel://"), ",", 2)[0]
	var dead, other *testenv.RedisServer
	for _, sn := range topo.Sentinels {
		if sn.Addr() == first {
			dead = sn
		} else {
			other = sn
		}
	}
	old := topo.Primary()
	start := h.reg.now()
	dead.Kill()
	now := topo.FailOver(h.t, other, old, 60*time.Second)
	promoted := h.reg.now()
	h.t.Logf("%s held token %d; its sentinel %s killed, the primary %s failed over in %v", f.c, f.tok, first, old.Addr(), promoted-start)
	h.writeAfter("failover", promoted)
	// The hold is for a holder that missed the switch (its sentinel dead)
	// and renews on the old primary while the others find its claim
	// expiring on the new one.
	h.unholdAfter(f.tok, promoted)
	if _, ok := h.acquiredAfter(f.tok, 60*time.Second); !ok {
		h.t.Fatalf("no acquisition after token %d", f.tok)
	}
	h.writesAbove(f.tok, 3, 30*time.Second)
	dead.Start()
	if h.res.faults == h.sc.rounds-1 {
		return // no next round to settle the topology for
	}
	// The next round starts from one view of the topology.
	topo.AwaitSettled(h.t, now, old, 60*time.Second)
}
