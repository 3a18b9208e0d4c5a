package filestore

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/baton-go/baton/backend"
)

// TestFSError: a refused permission matches backend.ErrForbidden and
// fs.ErrPermission and names the directory; a read-only file system
// matches backend.ErrMisconfigured, a full one backend.ErrUnavailable;
// other errors are left alone.
func TestFSError(t *testing.T) {
	denied := &fs.PathError{Op: "open", Path: "/locks/job.json", Err: syscall.EACCES}
	err := fsError(denied, "/locks")
	if !errors.Is(err, backend.ErrForbidden) || !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "lock directory /locks") {
		t.Errorf("EACCES: %v", err)
	}
	if again := fsError(fmt.Errorf("file: %w", err), "/locks"); again.Error() != "file: "+err.Error() {
		t.Errorf("marked twice: %v", again)
	}
	rofs := &fs.PathError{Op: "open", Path: "/locks/.baton-probe-1", Err: syscall.EROFS}
	if err := fsError(rofs, "/locks"); !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "read-only file system") {
		t.Errorf("EROFS: %v", err)
	}
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT} {
		full := &fs.PathError{Op: "write", Path: "/locks/.job.json.tmp", Err: errno}
		if err := fsError(full, "/locks"); !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "lock directory /locks is full") {
			t.Errorf("%v: %v", errno, err)
		}
	}
	other := &fs.PathError{Op: "open", Path: "/locks/job.json", Err: syscall.EIO}
	if err := fsError(other, "/locks"); err != error(other) {
		t.Errorf("EIO: %v, want it unchanged", err)
	}
	if err := fsError(nil, "/locks"); err != nil {
		t.Errorf("nil: %v", err)
	}
}
