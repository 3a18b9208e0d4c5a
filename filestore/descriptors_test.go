//go:build linux || darwin

package filestore

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
)

// TestOutOfDescriptors: a process that has reached its limit of open files
// (EMFILE) gets, from TryAcquire and Get, an error matching
// backend.ErrUnavailable (the engine retries, as descriptors may be freed;
// lock --wait 0 exits 69) that names the limit and how to raise it.
func TestOutOfDescriptors(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lowerNofile(t)
	ctx := context.Background()
	_, acqErr := s.TryAcquire(ctx, "job", backend.Request{Holder: "h", Nonce: "n", TTL: time.Minute})
	_, getErr := s.Get(ctx, "job")
	for op, err := range map[string]error{"TryAcquire": acqErr, "Get": getErr} {
		if !errors.Is(err, syscall.EMFILE) {
			t.Fatalf("%s: %v, want EMFILE (the limit was not reached?)", op, err)
		}
		if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "ulimit -n") {
			t.Errorf("%s: %v, want ErrUnavailable naming ulimit -n", op, err)
		}
	}
}

// lowerNofile sets this process's soft RLIMIT_NOFILE to its lowest free
// descriptor, so that the next open fails with EMFILE, until the test ends.
func lowerNofile(t *testing.T) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	lowest := f.Fd()
	f.Close()
	low := old
	low.Cur = uint64(lowest)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
			t.Error(err)
		}
	})
}
