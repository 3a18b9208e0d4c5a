//go:build linux || darwin

package filestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"golang.org/x/sys/unix"
)

// TestPlantedFiles: a symbolic link or a named pipe where a lock's files
// belong (planted by another user of a shared or group-writable lock
// directory) is refused as a misconfiguration that names it. The store
// neither writes through the link (a record over the file it names, or a
// new file where a dangling link points) nor hangs on the pipe.
func TestPlantedFiles(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	victim := filepath.Join(other, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	plant := func(name string, f func(path string) error) {
		t.Helper()
		if err := f(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	plant("link.lock", func(p string) error { return os.Symlink(victim, p) })
	plant("dangling.lock", func(p string) error { return os.Symlink(filepath.Join(other, "new"), p) })
	plant("pipe.lock", func(p string) error { return unix.Mkfifo(p, 0o600) })
	plant("record-pipe.json", func(p string) error { return unix.Mkfifo(p, 0o600) })
	s := newStore(t, dir, nil)

	for key, kind := range map[string]string{
		"link": "a symbolic link", "dangling": "a symbolic link",
		"pipe": "a named pipe", "record-pipe": "a named pipe",
	} {
		err := tryAcquireBounded(t, s, key)
		if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), kind) {
			t.Errorf("TryAcquire(%q) with %s planted: %v, want ErrMisconfigured naming it", key, kind, err)
		}
	}
	if b := readBytes(t, victim); string(b) != "precious\n" {
		t.Errorf("the file a planted link names was overwritten: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(other, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dangling link's target was created: %v", err)
	}
}

// tryAcquireBounded calls s.TryAcquire(key), failing t if it does not
// return within 10s (it hung in open(2) on a pipe, which no context
// interrupts: unblockPipes frees it).
func tryAcquireBounded(t *testing.T, s *Store, key string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := s.TryAcquire(context.Background(), key, req("h", "n", time.Minute))
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Errorf("TryAcquire(%q) did not return within 10s", key)
		unblockPipes(done, s.paths(key).lock, s.paths(key).record)
		return <-done
	}
}

// unblockPipes opens the pipes at paths for reading and for writing, over
// and over, until done is ready: an open(2) of either end waits for the
// other.
func unblockPipes(done <-chan error, paths ...string) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for len(done) == 0 {
		for _, p := range paths {
			for _, mode := range []int{unix.O_RDONLY, unix.O_WRONLY} {
				if fd, err := unix.Open(p, mode|unix.O_NONBLOCK, 0); err == nil {
					_ = unix.Close(fd)
				}
			}
		}
		<-tick.C
	}
}
