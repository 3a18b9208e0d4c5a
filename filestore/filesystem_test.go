//go:build linux

package filestore

import (
	"os"
	"testing"
)

// TestFileSystem: a test's temporary directory is on a named local file
// system (or one whose magic number is shown), and /dev/shm, where it is
// the usual tmpfs, is volatile and not shared.
func TestFileSystem(t *testing.T) {
	s := newStore(t, t.TempDir(), nil)
	fs, err := s.FileSystem()
	t.Logf("temporary directory: %+v", fs)
	if err != nil || fs.Type == "" || fs.Shared {
		t.Errorf("FileSystem of a temporary directory = %+v, %v", fs, err)
	}
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm here")
	}
	dir, err := os.MkdirTemp("/dev/shm", "baton-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	shm := newStore(t, dir, nil)
	fs, err = shm.FileSystem()
	t.Logf("/dev/shm: %+v", fs)
	if err != nil || fs.Type != "tmpfs" || !fs.Volatile || fs.Shared {
		t.Errorf("FileSystem of /dev/shm = %+v, %v; want tmpfs, volatile", fs, err)
	}
}
