package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReapOrphanedServers kills a stand-in etcd of envtest's that init
// adopted, and spares one whose test binary (this one) still runs and an
// orphan without envtest's directory in its arguments.
func TestReapOrphanedServers(t *testing.T) {
	assets := t.TempDir()
	etcd := filepath.Join(assets, "etcd")
	copyExecutable(t, etcd)
	mark := filepath.Join(os.TempDir(), envtestDirMark+"reap-test")

	orphan := startOrphan(t, etcd, "--data-dir="+mark)
	stranger := startOrphan(t, etcd, "--data-dir="+t.TempDir())
	live := exec.Command(etcd, "--data-dir="+mark)
	live.Env = append(os.Environ(), envIdle+"=1")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })

	exited, err := unix.PidfdOpen(orphan, 0)
	if err != nil {
		t.Fatalf("pidfd_open: %v", err)
	}
	defer unix.Close(exited)

	if n := reapOrphanedServers(assets); n != 1 {
		t.Errorf("reapOrphanedServers killed %d processes, want 1 (the orphan %d)", n, orphan)
	}
	fds := []unix.PollFd{{Fd: int32(exited), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 30_000); n != 1 {
		t.Errorf("the orphan %d did not exit within 30s of its reaping (poll: %d, %v)", orphan, n, err)
	}
	for _, pid := range []int{stranger, live.Process.Pid} {
		if !running(pid) {
			t.Errorf("process %d was killed; only envtest's orphans may be", pid)
		}
	}
}

// copyExecutable copies this test binary to path.
func copyExecutable(t *testing.T, path string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err == nil {
		err = os.WriteFile(path, data, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// startOrphan starts exe with arg, idle, from a shell that exits at once,
// so that init adopts it, and returns its pid; the test kills it at the end.
func startOrphan(t *testing.T, exe, arg string) int {
	t.Helper()
	cmd := exec.Command("sh", "-c", `"$0" "$1" </dev/null >/dev/null 2>&1 & echo $!`, exe, arg)
	cmd.Env = append(os.Environ(), envIdle+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("the shell printed %q, not a pid", out)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if p := parentPID(pid); p != 1 {
		t.Fatalf("process %d was adopted by %d, not init: a subreaper runs this test, and envtest's orphans go to it", pid, p)
	}
	return pid
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && !strings.HasPrefix(strings.TrimSpace(string(stat[i+1:])), "Z")
}
