package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A CMD that exists but whose #! line names an interpreter that does not
// (a script saved with Windows line endings names "/bin/sh\r") exits 127,
// as in a shell, with a message that says so. Before, it said only "no
// such file or directory" of a file that was there.
func TestCommandWithMissingInterpreter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, tc := range map[string]struct{ script, want string }{
		"missing.sh": {"#!/nonexistent/bash\necho hi\n", `the interpreter its #! line names, "/nonexistent/bash", does not`},
		"crlf.sh":    {"#!/bin/sh\r\necho hi\r\n", `its #! line ends with a carriage return`},
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(tc.script), 0o755); err != nil {
			t.Fatal(err)
		}
		script, want := tc.script, tc.want
		code, _, stderr := runCLI(t, "lock", "--name", "interp", "--dir", filepath.Join(dir, "locks"), "--", path)
		if code != 127 || !strings.Contains(stderr, want) {
			t.Errorf("script %q: exit %d, want 127 with %q; stderr:\n%s", script, code, want, stderr)
		}
	}
}

// A command name not found in $PATH is reported with the $PATH searched:
// cron's is /usr/bin:/bin, where a command that a login shell finds may not
// be. Before, the message said only "executable file not found in $PATH".
func TestCommandNotFoundNamesPath(t *testing.T) {
	t.Parallel()
	p := startCLI(t, "lock", []string{"PATH=/usr/bin:/bin"}, "lock", "--name", "path", "--dir", t.TempDir(), "--", "baton-no-such-command")
	if code := p.wait(15 * time.Second); code != 127 {
		t.Fatalf("exit %d, want 127; stderr:\n%s", code, p.stderr)
	}
	if got := p.stderr.String(); !strings.Contains(got, `$PATH is "/usr/bin:/bin"`) {
		t.Errorf("stderr does not show the $PATH searched:\n%s", got)
	}
}
