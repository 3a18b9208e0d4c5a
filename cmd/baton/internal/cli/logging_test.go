package cli_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
)

// Text log lines carry the date, milliseconds and the zone.
func TestLogTimeHasDateAndZone(t *testing.T) {
	t.Parallel()
	p := startCLI(t, "lock", nil, "lock", "--name", "job", "--dir", t.TempDir(), "--log-level", "debug", "--", "true")
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.stderr)
	}
	line := strings.SplitN(p.stderr.String(), "\n", 2)[0]
	if !regexp.MustCompile(`^time=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d) level=DEBUG msg=acquiring lock=job `).MatchString(line) {
		t.Errorf("first log line %q: want time=<date>T<time>.<ms><zone> level=DEBUG msg=acquiring lock=job ...", line)
	}
}

// --log-format json writes one JSON object per line, with an RFC 3339
// time.
func TestLogFormatJSON(t *testing.T) {
	t.Parallel()
	p := startCLI(t, "lock", nil, "lock", "--name", "job", "--dir", t.TempDir(), "--log-level", "debug", "--log-format", "json", "--", "true")
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.stderr)
	}
	lines := strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
	for _, l := range lines {
		var rec struct {
			Time  time.Time `json:"time"`
			Level string    `json:"level"`
			Msg   string    `json:"msg"`
			Lock  string    `json:"lock"`
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Time.IsZero() || rec.Level == "" {
			t.Errorf("log line %q: %v; want a JSON object with time and level", l, err)
		}
	}
	if !strings.Contains(lines[0], `"level":"DEBUG","msg":"acquiring","lock":"job"`) {
		t.Errorf("first line %q", lines[0])
	}
	// baton's own last word, the error it exits with, is an object too.
	dir := t.TempDir()
	if _, err := openStore(t, dir).TryAcquire(context.Background(), "busy", backend.Request{Holder: "other", Nonce: "n", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	p = startCLI(t, "lock", nil, "lock", "--name", "busy", "--dir", dir, "--wait", "0", "--log-format", "json", "--", "true")
	if code := p.wait(30 * time.Second); code != 75 {
		t.Fatalf("lock of a held lock: exit %d, want 75:\n%s", code, p.stderr)
	}
	lines = strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
	var last struct {
		Level    string `json:"level"`
		Msg      string `json:"msg"`
		ExitCode int    `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Level != "ERROR" || last.ExitCode != 75 || !strings.HasPrefix(last.Msg, `baton: lock "busy" is held by "other"`) {
		t.Errorf("last line %q (%v): want the error as a JSON object with its exit code", lines[len(lines)-1], err)
	}
	if code, _, stderr := runCLI(t, "lock", "--name", "job", "--log-format", "xml", "--", "true"); code != 2 || !strings.Contains(stderr, `invalid --log-format "xml" (want text or json)`) {
		t.Errorf("--log-format xml: exit %d:\n%s", code, stderr)
	}
}

// go-redis's own lines go through baton's handler (at the debug level,
// marked source=go-redis), never raw onto stderr.
func TestRedisClientLogsRouted(t *testing.T) {
	t.Parallel()
	addr := closedPort(t)
	p := startCLI(t, "lock", nil, "lock", "--name", "job", "--backend", "redis", "--redis-url", "redis://"+addr,
		"--connect-timeout", "1s", "--log-level", "debug", "--", "true")
	if code := p.wait(30 * time.Second); code != 69 {
		t.Fatalf("exit %d, want 69:\n%s", code, p.stderr)
	}
	out := p.stderr.String()
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, "redis: ") {
			t.Errorf("an unrouted go-redis line: %q", l)
		}
	}
	if !strings.Contains(out, "level=DEBUG msg=\"connection pool: failed to dial after 1 attempts: dial tcp "+addr) || !strings.Contains(out, "source=go-redis") {
		t.Errorf("no routed go-redis line in:\n%s", out)
	}
}

// baton's own log lines and CMD's output share stderr: a writer that is
// not a file (an embedding program's buffer) is written by os/exec's
// copying goroutine while baton logs, and must not race (-race flagged a
// bytes.Buffer, in TestKubeServerPasswordHidden).
func TestLogAndChildOutputShareAWriter(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCLI(t, "lock", "--dir", t.TempDir(), "--name", "shared", "--log-level", "debug", "--",
		"sh", "-c", "i=0; while [ $i -lt 200 ]; do echo child-line >&2; i=$((i+1)); done")
	if code != 0 || strings.Count(stderr, "child-line") != 200 || !strings.Contains(stderr, "started CMD") {
		t.Fatalf("exit %d, want 0 with 200 lines of CMD and baton's log:\n%s", code, stderr)
	}
}
