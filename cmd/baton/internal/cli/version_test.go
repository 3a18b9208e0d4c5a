package cli_test

import (
	"runtime"
	"strings"
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

// TestDoctorNamesVersion: doctor's first row is the binary's version on one
// line (a test binary's: "(devel)" without a revision), so that a pasted
// report says which baton wrote it.
func TestDoctorNamesVersion(t *testing.T) {
	code, out, stderr := runCLI(t, "doctor", "--dir", t.TempDir())
	want := "(devel), " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	if code != 0 {
		t.Fatalf("doctor on the file backend: exit %d, stderr %s, output:\n%s", code, stderr, out)
	}
	wantRows(t, out, map[string]doctorRow{"baton": {"PASS", want}})
	if lines := strings.Split(out, "\n"); len(lines) < 2 || !strings.HasPrefix(lines[1], "baton ") {
		t.Errorf("doctor's first row is not the version row:\n%s", out)
	}
}
