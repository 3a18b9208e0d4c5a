package cli_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// doctor on a full file system fails the file system row: a lock cannot be
// written there, though an empty file can be created (filestore.New's
// probe), so the store row alone passed. Mounting needs CAP_SYS_ADMIN;
// without it the test skips and says why, also in CI: it is a privilege,
// not a store, and filestore's TestFSError covers the error's mapping.
func TestDoctorFullFileSystem(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=16k"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (%v): needs root with CAP_SYS_ADMIN", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	fill, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = fill.Write(make([]byte, 64<<10))
	fill.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the 16 KiB tmpfs: %v, want ENOSPC", err)
	}
	code, out, _ := runCLI(t, "doctor", "--dir", dir)
	if got := doctorTable(t, out)["file system"]; code != 1 || got.result != "FAIL" || !strings.Contains(got.detail, "no space left on device") {
		t.Errorf("doctor on a full file system: exit %d, file system row %+v, want FAIL\n%s", code, got, out)
	}
}
