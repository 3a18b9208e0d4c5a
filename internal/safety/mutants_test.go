package safety

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestMutantsApply checks that every planted bug in mutants/ still applies
// to the code as it is. A patch written against code that has since
// changed would make `make mutants` fail, and only when someone runs it:
// the suite's teeth would go untested without anyone noticing.
func TestMutantsApply(t *testing.T) {
	patches, err := filepath.Glob("mutants/m*.patch")
	if err != nil || len(patches) == 0 {
		t.Fatalf("no mutants/m*.patch found (%v): run the test from internal/safety", err)
	}
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is needed to check the mutants' patches: %v", err)
	}
	for _, p := range patches {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(git, "apply", "--check", abs)
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s no longer applies to the code (%v):\n%s"+
				"make the same change to the current code and write the patch again (git diff, keeping its two header lines)",
				p, err, out)
		}
	}
}
