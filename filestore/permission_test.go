//go:build linux || darwin

package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
)

// permHelperEnv names the directories a child of TestPermissionDenied
// checks: "<not writable>:<shared>".
const permHelperEnv = "BATON_FILE_PERM_HELPER"

// TestPermissionDenied: a process that may not write the lock directory,
// or read the files of a lock another user made, gets errors matching
// backend.ErrForbidden with the fix (the engine then stops at once, and
// the CLI exits 77), from New, TryAcquire and Get. Run as root, it checks
// that in a child process running as nobody; otherwise only New's case,
// in this process.
func TestPermissionDenied(t *testing.T) {
	if os.Geteuid() != 0 {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o700)
		if _, err := New(dir); !errors.Is(err, backend.ErrForbidden) {
			t.Errorf("New(a directory without write permission): %v, want ErrForbidden", err)
		}
		return
	}
	// Everything the child needs must be reachable by nobody.
	root, err := os.MkdirTemp("", "baton-perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	readOnly, shared := filepath.Join(root, "ro"), filepath.Join(root, "shared")
	for dir, mode := range map[string]fs.FileMode{root: 0o755, readOnly: 0o755, shared: 0o777} {
		if err := os.MkdirAll(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	s, err := New(shared) // root's lock: files of mode 0o600
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.TryAcquire(t.Context(), "job", req("root", "n", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(root, "filestore.test")
	if err := copyFile(exe, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), permHelperEnv+"="+readOnly+":"+shared)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	t.Logf("child as nobody:\n%s", out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	for _, op := range []string{"New", "TryAcquire", "Get"} {
		if !strings.Contains(string(out), op+": forbidden ") {
			t.Errorf("%s as nobody: no error matching ErrForbidden", op)
		}
	}
	if n := strings.Count(string(out), "may not read or write the lock directory"); n != 3 {
		t.Errorf("%d errors name the fix, want 3", n)
	}
}

// copyFile copies this test binary to path with mode.
func copyFile(path string, mode fs.FileMode) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// permHelperMain is the child of TestPermissionDenied: it prints, for
// New on a directory it may not write and TryAcquire and Get of a lock
// whose files it may not open, "<op>: forbidden <error>" or
// "<op>: other <error>".
func permHelperMain(dirs string) int {
	readOnly, shared, _ := strings.Cut(dirs, ":")
	report := func(op string, err error) {
		kind := "other"
		if errors.Is(err, backend.ErrForbidden) {
			kind = "forbidden"
		}
		fmt.Printf("%s: %s %v\n", op, kind, err)
	}
	_, err := New(readOnly)
	report("New", err)
	s, err := New(shared)
	if err != nil {
		fmt.Printf("New(shared): %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = s.TryAcquire(ctx, "job", backend.Request{Holder: "nobody", Nonce: "n", TTL: time.Minute})
	report("TryAcquire", err)
	_, err = s.Get(ctx, "job")
	report("Get", err)
	return 0
}
