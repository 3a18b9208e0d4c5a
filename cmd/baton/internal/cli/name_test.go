package cli_test

import (
	"strings"
	"testing"

	"github.com/baton-go/baton"
)

// "baton name" prints the library's NameFor, so that a script and a Go
// program name one entity's lock alike, and the name works as --name.
func TestNamePrintsNameFor(t *testing.T) {
	dir := t.TempDir()
	for _, key := range []string{"Ann.Lee@Example.com", "/srv/in/Q3 report.csv", "-starts-with-dash", "東京"} {
		code, stdout, stderr := runCLI(t, "name", "--", key)
		want := baton.NameFor(key)
		if code != 0 || stdout != want+"\n" || stderr != "" {
			t.Fatalf("baton name %q: exit %d, stdout %q, stderr %q; want exit 0 and %q", key, code, stdout, stderr, want)
		}
		if code, _, stderr := runCLI(t, "lock", "--dir", dir, "--name", "files."+want, "--", "true"); code != 0 {
			t.Fatalf("lock --name files.%s: exit %d: %s", want, code, stderr)
		}
	}
	for _, args := range [][]string{{"name"}, {"name", "a", "b"}} {
		if code, _, stderr := runCLI(t, args...); code != 2 || !strings.Contains(stderr, "exactly one KEY") {
			t.Errorf("baton %q: exit %d, stderr %q; want exit 2 naming one KEY", args, code, stderr)
		}
	}
}

// A lock name refused for its characters, as names made from data are,
// points to "baton name".
func TestInvalidNameSaysBatonName(t *testing.T) {
	for _, args := range [][]string{
		{"lock", "--name", "ann@x.io", "--", "true"},
		{"run", "--name", "Order-8812", "--", "true"},
		{"status", "Order-8812"},
		{"release", "Order-8812", "--force"},
		{"doctor", "--name", "Order-8812"},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != 2 || !strings.Contains(stderr, `"baton name KEY" prints a valid name for any key`) {
			t.Errorf("baton %q: exit %d, stderr %q; want exit 2 naming \"baton name KEY\"", args, code, stderr)
		}
	}
}
