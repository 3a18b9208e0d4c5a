package cli_test

import (
	"strings"
	"testing"

	"github.com/baton-go/baton/internal/testenv"
)

// Real redis-server processes whose INFO and CONFIG an operator disabled
// (rename-command, as hardened servers do): the rows that read INFO warn
// that they cannot tell, naming the cause, and the permissions row still
// runs; they failed with the generic fix for an unknown error, and the
// eviction and permissions rows were skipped.
func TestDoctorRedisInfoDisabled(t *testing.T) {
	t.Parallel()
	disabled := testenv.RedisArgs("--rename-command", "INFO", "", "--rename-command", "CONFIG", "")
	a, b := testenv.StartRedis(t, disabled), testenv.StartRedis(t, disabled)
	const noInfo = "the server has no INFO command, disabled or renamed with rename-command"
	code, out, stderr := runCLI(t, "doctor", "--backend", "redis", "--redis-url", a.URL(), "--name", "job")
	t.Logf("doctor:\n%s", out)
	if code != 0 {
		t.Errorf("exit %d, want 0; stderr %s", code, stderr)
	}
	rows := doctorTable(t, out)
	for _, name := range []string{"role ", "persistence ", "eviction "} {
		row := rows[name+a.URL()]
		if row.result != "WARN" || !strings.Contains(row.detail, "no INFO command") {
			t.Errorf("%s row %+v, want WARN naming the missing INFO", name, row)
		}
	}
	if row := rows["persistence "+a.URL()]; !strings.Contains(row.detail, noInfo) {
		t.Errorf("persistence row %+v, want it to say %q", row, noInfo)
	}
	if row := rows["permissions "+a.URL()]; row.result != "PASS" {
		t.Errorf("permissions row %+v, want PASS", row)
	}
	_, out, _ = runCLI(t, "doctor", "--backend", "redlock", "--redis-url", a.URL(), "--redis-url", b.URL(), "--redis-url", testenv.StartRedis(t).URL())
	if row := doctorTable(t, out)["independent servers"]; row.result != "WARN" || !strings.Contains(row.detail, a.URL()+", "+b.URL()) {
		t.Errorf("redlock: independent servers row %+v, want WARN naming the servers without INFO\n%s", row, out)
	}
}
