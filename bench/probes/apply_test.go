// Package probes holds patches that add timestamps to baton's code for one
// measurement (see README.md); its test keeps them applicable.
package probes

import (
	"bytes"
	"errors"
	"os"
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
		if err := checkHeader(abs); err != nil {
			t.Errorf("%s: %v: run.sh needs the header lines (README.md)", p, err)
		}
		cmd := exec.Command("git", "apply", "--check", abs)
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s no longer applies (%v):\n%s"+
				"make its change to the current code in a scratch copy and write the patch again (git diff, keeping its header lines)", p, err, out)
		}
	}
}

// checkHeader reports a patch whose first line does not name its probe or
// that has no "run:" line before its diff, which run.sh reads.
func checkHeader(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	head, _, _ := bytes.Cut(data, []byte("\ndiff "))
	switch {
	case !bytes.HasPrefix(head, []byte("probe ")):
		return errors.New(`its first line does not start with "probe NAME:"`)
	case !bytes.Contains(head, []byte("\nrun: ")):
		return errors.New(`it has no "run: TESTPATTERN" line before its diff`)
	}
	return nil
}
