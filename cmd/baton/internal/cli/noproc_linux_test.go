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
// exit 126 with the fix, not 127, which says that CMD was not found. The
// file backend, which reads the boot ID there, cannot work at all: exit 78
// with the fix, not 1. It needs CAP_SYS_ADMIN for the mount namespace.
func TestLockWithoutProc(t *testing.T) {
	t.Parallel()
	attr := func() *syscall.SysProcAttr {
		return &syscall.SysProcAttr{Setpgid: true, Unshareflags: syscall.CLONE_NEWNS}
	}
	probe := exec.Command(exe(), cmdExit, "0")
	probe.Env = append(os.Environ(), roleEnv+"=cli", envHideProc+"=1")
	probe.SysProcAttr = attr()
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("cannot hide /proc here (a mount namespace and a mount need CAP_SYS_ADMIN): %v %s", err, out)
	}
	srv := testenv.StartRedis(t)
	for _, tc := range []struct {
		name  string
		store []string
		want  int
	}{
		{"redis", []string{"--backend", "redis", "--redis-url", srv.URL()}, 126},
		{"file", []string{"--dir", t.TempDir()}, 78},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"lock", "--name", "noproc"}, tc.store...), "--", "true")
			p := startCLIWith(t, "lock", []string{envHideProc + "=1"}, attr(), args...)
			if code := p.wait(15 * time.Second); code != tc.want {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", code, tc.want, p.stderr)
			}
			if got := p.stderr.String(); !strings.Contains(got, "/proc is not mounted") {
				t.Errorf("stderr does not name /proc:\n%s", got)
			}
		})
	}
}

// baton as PID 1 of a PID namespace entered without a /proc of its own
// (unshare --pid --fork, without --mount-proc) sees the parent namespace's
// processes in /proc, so it cannot tell CMD's orphans: it says so, and
// signals no pid it read there. Before, it took the children of the outer
// namespace's init for CMD's orphans, SIGKILLed their pid numbers in its
// own namespace (8 rounds, "killed processes CMD left behind count=216"
// on a machine with 27 such children), and its real orphans went unseen.
func TestRunInPIDNamespaceWithForeignProc(t *testing.T) {
	t.Parallel()
	attr := newPIDNamespace(t)
	p := startCLIWith(t, "lock", nil, attr(), "lock", "--name", "pidns", "--dir", t.TempDir(), "--", "true")
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", code, p.stderr)
	}
	got := p.stderr.String()
	if strings.Contains(got, "killed processes CMD left behind") {
		t.Errorf("baton signalled pids read from another namespace's /proc:\n%s", got)
	}
	if !strings.Contains(got, "/proc shows another PID namespace") {
		t.Errorf("stderr does not say that /proc is another namespace's:\n%s", got)
	}
}

// baton as PID 1 of a container (a PID namespace) stopped while it still
// tries to reach its store (docker stop, a pod deleted during an outage)
// exits 128+15, as it does once CMD may run. Before, the signal came before
// baton routed any: Go's default action, which PID 1 cannot take (the
// kernel drops a signal PID 1 sends itself), ended it with exit 2, a usage
// error by the exit-code table, and no word.
func TestPID1StoppedWhileReachingStore(t *testing.T) {
	t.Parallel()
	attr := newPIDNamespace(t)
	url := "redis://" + closedPort(t)
	for _, cmd := range []string{"lock", "run"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			p := startCLIWith(t, cmd, nil, attr(), cmd, "--name", "pid1", "--backend", "redis", "--redis-url", url, "--connect-timeout", "1m", "--", "true")
			p.stderr.waitFor(t, "cannot reach the store; retrying", 15*time.Second)
			p.signal(syscall.SIGTERM)
			if code := p.wait(10 * time.Second); code != 128+int(syscall.SIGTERM) {
				t.Fatalf("exit code %d, want %d", code, 128+int(syscall.SIGTERM))
			}
		})
	}
}

// newPIDNamespace returns the attributes that start a process as PID 1 of
// a new PID namespace, in a process group of its own, or skips t where
// that cannot be done (it needs CAP_SYS_ADMIN; CI runs as root).
func newPIDNamespace(t *testing.T) func() *syscall.SysProcAttr {
	t.Helper()
	attr := func() *syscall.SysProcAttr {
		return &syscall.SysProcAttr{Setpgid: true, Cloneflags: syscall.CLONE_NEWPID}
	}
	probe := exec.Command(exe(), cmdExit, "0")
	probe.Env = append(os.Environ(), roleEnv+"=cli")
	probe.SysProcAttr = attr()
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("cannot start a PID namespace here (it needs CAP_SYS_ADMIN): %v %s", err, out)
	}
	return attr
}
