package cli_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/cmd/baton/internal/cli"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// A Sentinel topology and a Cluster over TLS with a private CA that
// require client certificates, as the Bitnami charts run them: --cacert,
// --cert and --key reach the servers, the sentinels and the cluster nodes
// for lock, status and doctor; a CA that did not sign the servers'
// certificates, or no client certificate, exits 78 naming the cause, as
// for rediss://. Before, the TLS flags beside a rediss+sentinel:// or
// rediss+cluster:// URL were a usage error (exit 2) and such a topology
// could not be used from the CLI at all.
func TestRedisTopologiesMutualTLS(t *testing.T) {
	t.Parallel()
	files, _ := testenv.WriteTLSFiles(t)
	files.AuthClients = true
	other, _ := testenv.WriteTLSFiles(t)
	sentinel := testenv.StartRedisSentinel(t, testenv.WithRedisTLS(files))
	cluster := testenv.StartRedisCluster(t, 3, testenv.WithRedisTLS(files))
	for _, url := range []string{sentinel.URL(), cluster.URL()} {
		base := []string{"--backend", "redis", "--redis-url", url}
		withTLS := append(slices.Clone(base), "--cacert", files.CAFile, "--cert", files.CertFile, "--key", files.KeyFile)
		code, _, stderr := runCLI(t, append(append([]string{"lock"}, withTLS...), "--name", "topo", "--wait", "0", "--", "true")...)
		if code != 0 {
			t.Fatalf("lock via %s: exit %d:\n%s", url, code, stderr)
		}
		code, out, stderr := runCLI(t, append(append([]string{"status"}, withTLS...), "topo", "-o", "json")...)
		if code != 0 || !strings.Contains(out, `"name": "topo"`) {
			t.Errorf("status via %s: exit %d:\n%s%s", url, code, out, stderr)
		}
		code, out, stderr = runCLI(t, append(append([]string{"doctor"}, withTLS...), "--name", "topo")...)
		rows := doctorTable(t, out)
		for _, name := range []string{"store", "persistence " + url, "eviction " + url, "permissions " + url} {
			if row := rows[name]; row.result != "PASS" && row.result != "WARN" {
				t.Errorf("doctor via %s: row %q %+v, want it answered (exit %d)\n%s%s", url, name, row, code, out, stderr)
			}
		}
		for _, tc := range []struct {
			name  string
			flags []string
			want  string
		}{
			{"a CA that did not sign the servers' certificates", []string{"--cacert", other.CAFile, "--cert", files.CertFile, "--key", files.KeyFile}, other.CAFile},
			{"no client certificate", []string{"--cacert", files.CAFile}, "requires a client certificate"},
		} {
			// --wait 30s: a setup that cannot work exits at once, and
			// go-redis retries a refused handshake to each sentinel a few
			// times (about 2s in all), more than --wait 0's one second.
			args := append(append(append([]string{"lock"}, base...), tc.flags...), "--name", "topo", "--wait", "30s", "--", "true")
			if code, _, stderr := runCLI(t, args...); code != cli.ExitConfig || !strings.Contains(stderr, tc.want) {
				t.Errorf("lock via %s with %s: exit %d, want %d saying %q:\n%s", url, tc.name, code, cli.ExitConfig, tc.want, stderr)
			}
		}
	}
	plain := strings.Replace(sentinel.URL(), "rediss+", "redis+", 1)
	code, _, stderr := runCLI(t, "lock", "--backend", "redis", "--redis-url", plain, "--cacert", files.CAFile, "--name", "job", "--", "true")
	if code != cli.ExitUsage || !strings.Contains(stderr, "does not use it") {
		t.Errorf("--cacert with a redis+sentinel:// URL: exit %d, want %d:\n%s", code, cli.ExitUsage, stderr)
	}
}

// A holder on a Sentinel topology over mutual TLS whose primary dies: the
// sentinels promote the replica, and the holder, which asks them over TLS
// for the new primary, renews there without losing its lock.
func TestRedisSentinelTLSFailover(t *testing.T) {
	t.Parallel()
	files, _ := testenv.WriteTLSFiles(t)
	files.AuthClients = true
	topo := testenv.StartRedisSentinel(t, testenv.WithRedisTLS(files))
	holder := startCLI(t, "holder", nil, "lock", "--backend", "redis", "--redis-url", topo.URL(),
		"--cacert", files.CAFile, "--cert", files.CertFile, "--key", files.KeyFile, "--name", "job",
		"--ttl", "20s", "--renew-deadline", "15s", "--retry-period", "1s", "--log-level", "debug", "--", "sleep", "600")
	holder.stderr.waitFor(t, "acquired", 15*time.Second)
	old := topo.Primary()
	replica := topo.Servers[1]
	if replica == old {
		replica = topo.Servers[0]
	}
	admin := redis.NewClient(&redis.Options{Addr: replica.Addr(), TLSConfig: files.ClientTLS(t)})
	defer admin.Close()
	lastID, err := admin.ClientID(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	old.Kill()
	topo.AwaitFailover(t, old, 60*time.Second)
	awaitRenewal(t, admin, holder, lastID, "the failover")
	stopHolder(t, holder)
}

// doctor on a Redlock whose --cacert cannot be read: the store row names
// the file, and one row says the servers' rows were not checked, rather
// than every server's rows repeating the store row's failure.
func TestDoctorRedlockTLSFilesMissing(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "ca.crt")
	code, out, _ := runCLI(t, "doctor", "--backend", "redlock", "--redis-url", "rediss://127.0.0.1:1", "--redis-url", "rediss://127.0.0.1:2",
		"--redis-url", "rediss://127.0.0.1:3", "--cacert", missing, "--name", "job")
	rows := doctorTable(t, out)
	if code != 1 || !strings.Contains(rows["store"].detail, missing) || rows["redis TLS"].result != "SKIP" || len(rows) != 5 {
		t.Errorf("doctor exited %d, want 1, a store row naming %s, one redis TLS row skipped and no server rows:\n%s", code, missing, out)
	}
}
