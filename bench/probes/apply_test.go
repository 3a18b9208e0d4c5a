// Package probes holds patches that add timestamps to baton's code for one
// measurement (see README.md); its test keeps them applicable.
package probes

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPatchesApply fails when a probe's patch no longer applies to the
// code it marks, so that a probe is mended with the change that broke it
// rather than found broken when someone needs it.
func TestPatchesApply(t *testing.T) {
	patches, err := filepath.Glob("*.patch")
	if err != nil || len(patches) == 0 {
		t.Fatalf("no probe patches here (%v): run the test from bench/probes", err)
	}
	for _, p := range patches {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("git", "apply", "--check", abs)
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s no longer applies (%v):\n%s"+
				"make its change to the current code in a scratch copy and write the patch again (git diff, keeping its header lines)", p, err, out)
		}
	}
}
