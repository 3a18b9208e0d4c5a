//go:build linux

package safety

import (
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
		topo := testenv.StartRedisClusterWithReplicas(t, 3)
		be := &backendEnv{name: "redis", ttl: ttl, claimLife: ttl,
			newLink: func(*testing.T) link { return local(topo.URL()) },
			restart: func(t *testing.T, _ time.Duration) {
				// The primary serving the lock's keys (all in its name's
				// hash slot): runScenario names the lock after the fault.
				topo.Failover(t, topo.SlotOwner(t, "safety-store-restart"), 60*time.Second)
			}}
		runScenario(t, be, scenario{fault: faultRestart, variant: "Cluster failover"})
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
