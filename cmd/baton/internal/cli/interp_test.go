package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
