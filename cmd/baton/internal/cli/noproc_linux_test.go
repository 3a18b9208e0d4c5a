//go:build linux

package cli_test

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/testenv"
)

func init() {
	// In its own mount namespace (CLONE_NEWNS; Go makes its mounts
	// private), only this process loses /proc.
	hideProc = func() error { return syscall.Mount("none", "/proc", "tmpfs", 0, "") }
}

// Without /proc (a chroot or sandbox that lacks it), CMD's watchdog, this
// binary run again as /proc/self/exe, cannot start, so neither does CMD:
// exit 126 with the fix, not 127, which says that CMD was not found. It
// needs CAP_SYS_ADMIN for the mount namespace.
func TestLockWithoutProc(t *testing.T) {
	t.Parallel()
	attr := &syscall.SysProcAttr{Setpgid: true, Unshareflags: syscall.CLONE_NEWNS}
	probe := exec.Command(exe(), cmdExit, "0")
	probe.Env = append(os.Environ(), roleEnv+"=cli", envHideProc+"=1")
	probe.SysProcAttr = attr
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("cannot hide /proc here (a mount namespace and a mount need CAP_SYS_ADMIN): %v %s", err, out)
	}
	// Redis: the file backend itself needs /proc (the boot ID).
	srv := testenv.StartRedis(t)
	p := startCLIWith(t, "lock", []string{envHideProc + "=1"}, attr,
		"lock", "--name", "noproc", "--backend", "redis", "--redis-url", srv.URL(), "--", "true")
	if code := p.wait(15 * time.Second); code != 126 {
		t.Fatalf("exit code %d, want 126 (CMD could not be started); stderr:\n%s", code, p.stderr)
	}
	if got := p.stderr.String(); !strings.Contains(got, "/proc is not mounted") {
		t.Errorf("stderr does not name /proc:\n%s", got)
	}
}
