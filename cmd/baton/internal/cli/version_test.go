package cli_test

import (
	"runtime"
	"testing"
)

// TestVersion: "baton version" and "baton --version" print the build
// information of the binary. A test binary has the module version "(devel)"
// and no VCS stamping, so revision and modified are "unknown".
func TestVersion(t *testing.T) {
	want := "baton (devel)\n" +
		"revision: unknown\n" +
		"modified: unknown\n" +
		"go: " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}, {"-v"}} {
		code, stdout, stderr := runCLI(t, args...)
		if code != 0 || stdout != want || stderr != "" {
			t.Errorf("baton %s: exit %d, stdout %q, stderr %q; want exit 0 and stdout %q", args[0], code, stdout, stderr, want)
		}
	}
}

func TestVersionRejectsArguments(t *testing.T) {
	code, stdout, stderr := runCLI(t, "version", "extra")
	if code != 2 || stdout != "" || stderr == "" {
		t.Errorf("baton version extra: exit %d, stdout %q, stderr %q; want exit 2 and a usage error", code, stdout, stderr)
	}
}
