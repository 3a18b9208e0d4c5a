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

// doctor on an overlay file system (a container's root file system, where
// a lock directory without a volume lands) warns that other containers do
// not share it; it passed it as a local file system. Mounting needs
// CAP_SYS_ADMIN; without it the test skips and says why.
func TestDoctorOverlayFileSystem(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	lower, upper, work, merged := filepath.Join(base, "lower"), filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "merged")
	for _, d := range []string{lower, upper, work, merged} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mount("overlay", merged, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work); err != nil {
		t.Skipf("cannot mount an overlay file system (%v): needs root with CAP_SYS_ADMIN", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(merged, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", merged, err)
		}
	})
	code, out, _ := runCLI(t, "doctor", "--dir", filepath.Join(merged, "locks"))
	if got := doctorTable(t, out)["file system"]; code != 0 || got.result != "WARN" || !strings.Contains(got.detail, "no other container sees these locks") {
		t.Errorf("doctor on overlay: exit %d, file system row %+v, want WARN\n%s", code, got, out)
	}
	if fix := doctorFix(out, "file system"); !strings.Contains(fix, "volume") {
		t.Errorf("file system fix %q does not name a volume", fix)
	}
}
