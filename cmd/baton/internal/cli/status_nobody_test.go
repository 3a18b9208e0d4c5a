package cli_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/filestore"
)

// asNobody runs the CLI with args as the user nobody (65534) with HOME
// /nonexistent, as a system service would, and returns its exit code and
// output. The test binary is copied where nobody may execute it. It needs
// root to switch users.
func asNobody(t *testing.T, args ...string) (int, string) {
	t.Helper()
	return asNobodyIn(t, os.TempDir(), args...)
}

// asNobodyIn is asNobody with tmp as the temporary directory ($TMPDIR).
func asNobodyIn(t *testing.T, tmp string, args ...string) (int, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("switching to the user nobody needs root (CI runs as root)")
	}
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "baton")
	copyFile(t, exe(), bin)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{roleEnv + "=cli", "HOME=/nonexistent", "PATH=/usr/bin:/bin", "TMPDIR=" + tmp, "GORACE=atexit_sleep_ms=0"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatal(err)
		}
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// baton status needs no write access: an operator without it (here the
// user nobody, on a directory root writes) sees the locks; and with a home
// that does not exist the default directory falls back to the temporary
// directory, as the help says.
func TestStatusAsNobody(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := filestore.New(dir, filestore.WithPermissions(0o644))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.TryAcquire(context.Background(), "nightly", backend.Request{Holder: "root-job", Nonce: "n", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	code, out := asNobody(t, "status", "--dir", dir, "nightly")
	if code != 0 || !strings.Contains(out, "root-job") {
		t.Errorf("status as nobody on a directory it cannot write: exit %d:\n%s", code, out)
	}
	// A temporary directory of its own, which nobody may write (the test
	// binary's init writes there): another run's nobody may have left a
	// baton-65534 in the machine's.
	tmp := t.TempDir()
	for d := tmp; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(tmp, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	code, out = asNobodyIn(t, tmp, "status")
	want := "No locks in " + filepath.Join(tmp, "baton-65534") + " (it does not exist)."
	if code != 0 || !strings.Contains(out, want) {
		t.Errorf("status as nobody with HOME=/nonexistent: exit %d:\n%s\nwant %q", code, out, want)
	}
}

// baton lock as a user that may not write the lock directory, or open the
// files of a lock root made (mode 0600), exits at once with the permission
// code and names the fix, instead of exit 1 and a bare "permission denied".
func TestLockAsNobodyForbidden(t *testing.T) {
	t.Parallel()
	readOnly, shared := t.TempDir(), t.TempDir()
	st, err := filestore.New(shared)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.TryAcquire(context.Background(), "nightly", backend.Request{Holder: "root-job", Nonce: "n", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{readOnly, shared} {
		for ; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, dir string }{{"a directory it may not write", readOnly}, {"a lock root made", shared}} {
		code, out := asNobody(t, "lock", "--dir", tc.dir, "--name", "nightly", "--wait", "0", "--", "true")
		if code != 77 || !strings.Contains(out, "may not read or write the lock directory "+tc.dir) {
			t.Errorf("lock as nobody on %s: exit %d, want 77 naming the fix:\n%s", tc.name, code, out)
		}
	}
	// Listing every lock reads every record: the same code and fix as
	// status NAME (it was exit 1 and a bare "permission denied").
	code, out := asNobody(t, "status", "--dir", shared)
	if code != 77 || !strings.Contains(out, "may not read or write the lock directory "+shared) {
		t.Errorf("status as nobody on a lock root made: exit %d, want 77 naming the fix:\n%s", code, out)
	}
}

// A user without a home (nobody) keeps its locks in $TMPDIR/baton-<uid> by
// default; a directory of that name that another user made first (here
// root, mode 0777), or a link there, is refused (exit 78, naming --dir),
// since its owner could rewrite the locks. One that nobody makes itself
// is used, and is private (0700).
func TestDefaultDirMadeByAnother(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	for d := tmp; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o777|os.ModeSticky); err != nil {
			t.Fatal(err)
		}
	}
	trap, theirs := filepath.Join(tmp, "baton-65534"), filepath.Join(tmp, "theirs")
	for _, plant := range []func() error{
		func() error { return os.Mkdir(trap, 0o777) },
		func() error { return os.Symlink(theirs, trap) },
	} {
		if err := os.MkdirAll(theirs, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(theirs, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(trap, 0o777)
		code, out := asNobodyIn(t, tmp, "lock", "--name", "nightly", "--wait", "0", "--", "true")
		if code != 78 || !strings.Contains(out, "--dir") {
			t.Errorf("lock as nobody with %s made by root: exit %d, want 78 naming --dir:\n%s", trap, code, out)
		}
		if err := os.RemoveAll(trap); err != nil {
			t.Fatal(err)
		}
	}
	code, out := asNobodyIn(t, tmp, "lock", "--name", "nightly", "--wait", "0", "--", "true")
	fi, err := os.Stat(trap)
	if code != 0 || err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("lock as nobody with no %s: exit %d, then %v, %v:\n%s", trap, code, fi, err, out)
	}
}
