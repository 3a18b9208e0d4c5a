package testenv

import (
	"os"
	"testing"
)

// InstallFile writes the concatenation of the files from to path, by
// writing a temporary file beside it and renaming it over path, as a
// Secret mounted as a volume is updated: a reader sees the old content or
// the new, never a mix, and the path names a new file (os.SameFile tells
// them apart).
func InstallFile(t testing.TB, path string, from ...string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", concatFiles(t, from...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}
