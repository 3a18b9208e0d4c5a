package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// An update swaps every key at once: the path reads the new content, as
// a new file, and a key left out is gone.
func TestSecretVolumeUpdate(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for f, s := range map[string]string{a: "A", b: "B"} {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	v := NewSecretVolume(t, map[string][]string{"ca.crt": {a}, "old": {b}})
	before, err := os.Stat(v.Path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	v.Update(t, map[string][]string{"ca.crt": {a, b}})
	got, err := os.ReadFile(v.Path("ca.crt"))
	if err != nil || string(got) != "AB" {
		t.Fatalf("ca.crt after the update: %q, %v; want \"AB\"", got, err)
	}
	after, err := os.Stat(v.Path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(before, after) {
		t.Errorf("ca.crt is the same file after the update")
	}
	if _, err := os.Stat(v.Path("old")); !os.IsNotExist(err) {
		t.Errorf("a key left out of the update: %v, want it gone", err)
	}
}
