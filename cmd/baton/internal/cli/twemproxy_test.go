package cli_test

import (
	"strings"
	"testing"

	"github.com/baton-go/baton/cmd/baton/internal/cli"
	"github.com/baton-go/baton/internal/testenv"
)

// Real redis-server and nutcracker processes: twemproxy closes a client's
// connection at HELLO, which go-redis sends first, so baton cannot use it.
// doctor on a Redlock over three proxies fails every server's rows as
// misconfigured, naming twemproxy (they said "unreachable", with the fix
// "start the store or correct its address"), and lock through one proxy
// exits 78 naming it.
func TestTwemproxyRefused(t *testing.T) {
	t.Parallel()
	urls := make([]string, 3)
	for i := range urls {
		srv := testenv.StartRedis(t)
		urls[i] = testenv.StartTwemproxy(t, testenv.TwemproxyConfig{Servers: []string{srv.Addr()}}).URL()
	}
	code, out, _ := runCLI(t, "doctor", "--backend", "redlock", "--redis-url", urls[0], "--redis-url", urls[1], "--redis-url", urls[2])
	t.Logf("doctor, a Redlock over three twemproxies:\n%s", out)
	if code != 1 {
		t.Errorf("doctor: exit %d, want 1", code)
	}
	rows := doctorTable(t, out)
	for _, u := range urls {
		for _, name := range []string{"store", "role " + u, "persistence " + u} {
			if row := rows[name]; row.result != "FAIL" || !strings.HasPrefix(row.detail, "misconfigured: ") || !strings.Contains(row.detail, "twemproxy") {
				t.Errorf("row %q: %+v; want FAIL, misconfigured, naming twemproxy", name, row)
			}
		}
	}
	code, _, stderr := runCLI(t, "lock", "--backend", "redis", "--redis-url", urls[0], "--name", "job", "--", "true")
	if code != cli.ExitConfig || !strings.Contains(stderr, "twemproxy") {
		t.Errorf("lock through twemproxy: exit %d, want %d naming twemproxy:\n%s", code, cli.ExitConfig, stderr)
	}
}
