package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/internal/testenv"
)

// A real redis-server whose append-only file was switched on at runtime
// (CONFIG SET appendonly yes) writes nothing a restart would read until
// the rewrite that this starts has ended (one killed during it came back
// empty), so the persistence row warns while a rewrite runs; it passed,
// saying that every acknowledged write survives a restart. The server
// saves each key 1s late (rdb-key-save-delay), so that the rewrite of a
// few keys outlasts the doctor run.
func TestDoctorRedisAOFSwitchedOn(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	for _, cmd := range [][]any{
		{"set", "a", "1"}, {"set", "b", "2"}, {"set", "c", "3"}, {"set", "d", "4"}, {"set", "e", "5"},
		{"config", "set", "rdb-key-save-delay", "1000000"},
		{"config", "set", "appendfsync", "always"},
		{"config", "set", "appendonly", "yes"},
	} {
		if err := c.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	t.Cleanup(func() { _ = c.Do(context.Background(), "config", "set", "rdb-key-save-delay", "0").Err() })

	code, out, stderr := runCLI(t, "doctor", "--backend", "redis", "--redis-url", srv.URL(), "--name", "job")
	t.Logf("doctor:\n%s", out)
	if code != 0 {
		t.Errorf("exit %d, want 0; stderr %s", code, stderr)
	}
	name := "persistence " + srv.URL()
	wantRows(t, out, map[string]doctorRow{name: {"WARN", "append-only file on (aof_enabled:1), but being rewritten: if appendonly was just switched on (CONFIG SET appendonly yes), the file holds no lock until the rewrite ends, and a restart or crash before then frees every held lock while its holder still runs"}})
	if fix := doctorFix(out, name); !strings.Contains(fix, "aof_rewrite_in_progress:0") {
		t.Errorf("fix %q, want one that says to wait for aof_rewrite_in_progress:0", fix)
	}
}
