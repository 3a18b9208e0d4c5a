//go:build linux || darwin

package filestore

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"golang.org/x/sys/unix"
)

// TestStuckFlockHolder: a process that holds a lock file's flock and does
// not let go (stopped with SIGSTOP in its compare-and-swap, hung on the
// disk) does not hang TryAcquire for ever, even under a context without a
// deadline: after a bounded wait, or when ctx's deadline passes, it fails
// with backend.ErrUnavailable naming the file and how to find the process.
// baton lock --wait 0 hung there until it was killed.
func TestStuckFlockHolder(t *testing.T) {
	dir := t.TempDir()
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.TryAcquire(context.Background(), "job", backend.Request{Holder: "h", Nonce: "n", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "job"+lockSuffix)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	for _, timeout := range []time.Duration{100 * time.Millisecond, 0} {
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if timeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, timeout)
		}
		_, err := s.TryAcquire(ctx, "job", backend.Request{Holder: "w", Nonce: "m", TTL: time.Minute})
		cancel()
		if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "fuser "+path) {
			t.Errorf("ctx timeout %v: TryAcquire = %v, want ErrUnavailable naming fuser %s", timeout, err, path)
		}
	}
}
