package cli_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/baton-go/baton/internal/testenv"
)

// Real redis-server processes: a redis:// URL to a replica, or to one node
// of a Redis Cluster, reads a lock (the store row passes) but cannot take
// one (READONLY; MOVED for every name whose slot another node serves), so
// doctor fails it, as baton lock exits 78 on it. A primary that refuses
// writes for want of replicas (min-replicas-to-write) fails too: reads
// answer, and the role row passed while every acquisition was refused. A
// writable replica (replica-read-only no) is said to grant locks, not to
// refuse them (READONLY), as the row said of every replica.
func TestDoctorRedisRole(t *testing.T) {
	t.Parallel()
	primary := testenv.StartRedis(t)
	replica := testenv.StartRedis(t, testenv.RedisArgs("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)))
	cluster := testenv.StartRedisCluster(t, 3)
	alone := testenv.StartRedis(t, testenv.RedisArgs("--min-replicas-to-write", "1"))
	writable := testenv.StartRedis(t, testenv.RedisArgs("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port), "--replica-read-only", "no"))
	for _, tc := range []struct {
		name, url string
		code      int
		want      doctorRow
		fix       string
	}{
		{"primary", primary.URL(), 0, doctorRow{"PASS", "the server is a primary (role:master), not a Cluster node"}, ""},
		{"replica", replica.URL(), 1, doctorRow{"FAIL", "the server is a read-only replica of " + primary.Addr() + " (INFO replication: role:slave): every acquisition is refused (READONLY)"},
			"redis+sentinel://"},
		{"cluster node", cluster.Nodes[0].URL(), 1, doctorRow{"FAIL", "the server is a Redis Cluster node (INFO cluster: cluster_enabled:1): a client of one server can lock only the names whose hash slot this node serves, and none of them after a failover or resharding moves the slot (MOVED)"},
			"redis+cluster://"},
		{"writable replica", writable.URL(), 1, doctorRow{"FAIL", "the server is a writable replica of " + primary.Addr() + " (INFO replication: role:slave; replica-read-only no): it grants locks that its primary and the processes locking there never see, and its next full resynchronisation erases them while their holders still run"},
			"give the primary's address"},
		{"too few replicas", alone.URL(), 1, doctorRow{"FAIL", "the server refuses every write (NOREPLICAS): min-replicas-to-write is 1, and 0 replicas are in sync (INFO replication: min_slaves_good_slaves:0); every acquisition and renewal fails until enough are"},
			"lower min-replicas-to-write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// "job" hashes to a slot of the first node: the store row
			// passes even on the cluster node.
			code, out, stderr := runCLI(t, "doctor", "--backend", "redis", "--redis-url", tc.url)
			t.Logf("doctor:\n%s", out)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %s", code, tc.code, stderr)
			}
			wantRows(t, out, map[string]doctorRow{"role " + tc.url: tc.want})
			if fix := doctorFix(out, "role "+tc.url); !strings.Contains(fix, tc.fix) || (tc.fix == "") != (fix == "") {
				t.Errorf("fix %q, want one with %q", fix, tc.fix)
			}
		})
	}
	// A Cluster URL gets no role row: its client finds the primaries.
	_, out, _ := runCLI(t, "doctor", "--backend", "redis", "--redis-url", cluster.URL())
	if _, ok := doctorTable(t, out)["role "+cluster.URL()]; ok {
		t.Errorf("a role row for a Cluster URL:\n%s", out)
	}
}
