package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/filestore"
)

// "baton remove" deletes the records of free locks, names and keeps held
// ones (exit 75), and a removed name locked again gets a larger token.
func TestRemove(t *testing.T) {
	dir := t.TempDir()
	token := func(name string) uint64 {
		t.Helper()
		code, stdout, stderr := runCLI(t, "lock", "--dir", dir, "--name", name, "--", "sh", "-c", "echo $BATON_TOKEN")
		if code != 0 {
			t.Fatalf("lock %s: exit %d: %s", name, code, stderr)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(stdout), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := token("files.a")
	token("files.b")
	store, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	mu, _ := baton.NewMutex(store, "files.held")
	lease, err := mu.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(context.Background())

	code, stdout, stderr := runCLI(t, "remove", "--dir", dir, "files.a", "files.held", "files.b", "files.none")
	if code != 75 || !strings.Contains(stderr, `not removed: lock "files.held" is held`) {
		t.Errorf("remove with a held lock: exit %d, stderr %q; want 75 naming files.held", code, stderr)
	}
	if want := "removed files.a\nremoved files.b\nfiles.none has no record\n"; stdout != want {
		t.Errorf("remove: stdout %q, want %q", stdout, want)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "files.*"))
	for _, f := range left {
		if !strings.HasPrefix(filepath.Base(f), "files.held.") {
			t.Errorf("%s is left after its lock was removed", f)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "files.held.json")); err != nil {
		t.Errorf("the held lock's record: %v", err)
	}
	if after := token("files.a"); after <= before {
		t.Errorf("files.a locked again after its removal: token %d, before %d", after, before)
	}
	if code, _, stderr := runCLI(t, "remove", "--dir", dir); code != 2 || !strings.Contains(stderr, "one or more lock NAMEs") {
		t.Errorf("remove without NAME: exit %d, stderr %q; want 2", code, stderr)
	}
}

// "baton remove" in a directory that does not exist (a mistyped --dir)
// says so and fails, without creating it.
func TestRemoveMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "typo")
	code, _, stderr := runCLI(t, "remove", "--dir", dir, "files.a")
	if code != 1 || !strings.Contains(stderr, dir+" does not exist") {
		t.Errorf("remove in a missing directory: exit %d, stderr %q; want 1 naming it", code, stderr)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("remove created %s", dir)
	}
}
