package cli_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/supervise"
)

// holdLock takes lock name in dir as identity, in this process.
func holdLock(t *testing.T, dir, name, identity string) *baton.Lease {
	t.Helper()
	mu, err := baton.NewMutex(openStore(t, dir), name, baton.WithIdentity(identity))
	if err != nil {
		t.Fatal(err)
	}
	l, err := mu.TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Unlock(context.Background()) })
	return l
}

func lockArgs(dir, name string, extra ...string) []string {
	args := append([]string{"lock", "--name", name, "--dir", dir}, timing...)
	return append(args, extra...)
}

// Test 6: --wait runs out while another owner holds the lock: exit 75 and
// a message naming the holder; CMD does not run.
func TestLockHeldTimesOut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	holdLock(t, dir, "busy", "holder-x")

	start := time.Now()
	p := startCLI(t, "lock", nil, lockArgs(dir, "busy", "--wait", "200ms", "--", exe(), cmdEnv)...)
	if code := p.wait(15 * time.Second); code != 75 {
		t.Fatalf("exit code %d, want 75; stderr:\n%s", code, p.stderr)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("gave up after %v, before --wait 200ms", d)
	}
	if want := `baton: lock "busy" is still held by "holder-x" (token 1) after waiting 200ms`; !strings.Contains(p.stderr.String(), want) {
		t.Errorf("stderr:\n%s\nwant %q", p.stderr, want)
	}
	if out := p.stdout.String(); out != "" {
		t.Errorf("CMD ran: %q", out)
	}
	// At the default log level it said what it waited for.
	if want := `level=INFO msg="waiting for the lock" lock=busy holder=holder-x token=1`; !strings.Contains(p.stderr.String(), want) {
		t.Errorf("stderr:\n%s\nwant %q", p.stderr, want)
	}

	p = startCLI(t, "lock", nil, lockArgs(dir, "busy", "--wait", "0", "--", exe(), cmdEnv)...)
	if code := p.wait(15 * time.Second); code != 75 {
		t.Fatalf("--wait 0: exit code %d, want 75; stderr:\n%s", code, p.stderr)
	}
	if want := `baton: lock "busy" is held by "holder-x" (token 1); not waiting (--wait 0)`; !strings.Contains(p.stderr.String(), want) {
		t.Errorf("stderr:\n%s\nwant %q", p.stderr, want)
	}
	if strings.Contains(p.stderr.String(), "waiting for the lock") {
		t.Errorf("--wait 0 said it waits:\n%s", p.stderr)
	}
}

// Test 6, success: CMD runs with the lock's environment, baton exits with
// CMD's code and releases the lock.
func TestLockRunsCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startCLI(t, "lock", nil, lockArgs(dir, "job", "--identity", "me", "--", exe(), cmdEnv)...)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, p.stderr)
	}
	if got, want := p.stdout.String(), "BATON_LOCK=job\nBATON_HOLDER=me\nBATON_TOKEN=1\n"; got != want {
		t.Errorf("CMD printed %q, want %q", got, want)
	}
	requireFree(t, dir, "job")

	p = startCLI(t, "lock", nil, lockArgs(dir, "job", "--", exe(), cmdExit, "4")...)
	if code := p.wait(15 * time.Second); code != 4 {
		t.Fatalf("exit code %d, want CMD's 4; stderr:\n%s", code, p.stderr)
	}
	requireFree(t, dir, "job")
}

// baton lock waits (by default forever) and runs CMD as soon as the holder
// releases.
func TestLockWaitsForRelease(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := holdLock(t, dir, "queue", "holder-x")
	p := startCLI(t, "lock", nil, append([]string{"--log-level", "debug"}, lockArgs(dir, "queue", "--", exe(), cmdEnv)...)...)
	p.stderr.waitFor(t, "acquiring", 15*time.Second)
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, p.stderr)
	}
	if !strings.Contains(p.stdout.String(), "BATON_TOKEN=2\n") {
		t.Errorf("CMD printed %q", p.stdout)
	}
}

// A signal while waiting stops baton lock at once with 128+N.
func TestLockSignalWhileWaiting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	holdLock(t, dir, "busy", "holder-x")
	p := startCLI(t, "lock", nil, append([]string{"--log-level", "debug"}, lockArgs(dir, "busy", "--", exe(), cmdEnv)...)...)
	p.stderr.waitFor(t, "acquiring", 15*time.Second)
	p.signal(syscall.SIGINT)
	if code := p.wait(10 * time.Second); code != 130 {
		t.Fatalf("exit code %d, want 130; stderr:\n%s", code, p.stderr)
	}
	if out := p.stdout.String(); out != "" {
		t.Errorf("CMD ran: %q", out)
	}
}

// The lock is taken away (an administrator's forced release) while CMD
// runs: CMD, which ignores SIGTERM, is killed before the validity ends, and
// baton lock exits 1 saying so.
func TestLockLostKillsCommand(t *testing.T) {
	t.Parallel()
	dir, f := t.TempDir(), newFence(t)
	p := startCLI(t, "lock", f.env(), lockArgs(dir, "lost", "--", exe(), cmdFenceWorker, "--ignore-term")...)
	w := f.waitWrite(t, "write by CMD", 15*time.Second, false, func(fenceWrite) bool { return true })
	if err := openStore(t, dir).ForceRelease(context.Background(), "lost"); err != nil {
		t.Fatal(err)
	}
	forced := time.Now()
	if code := p.wait(15 * time.Second); code != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", code, p.stderr)
	}
	t.Logf("baton lock exited %v after the forced release", time.Since(forced).Round(time.Millisecond))
	if exited, _ := supervise.WaitExit(w.Pid, 0); !exited {
		t.Errorf("CMD (pid %d) still runs", w.Pid)
	}
	for _, want := range []string{"killed CMD with SIGKILL", `baton: lock "lost" was lost while CMD ran, and CMD was stopped`} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, p.stderr)
		}
	}
}

// Ctrl-\ (SIGQUIT) is forwarded to CMD like Ctrl-C: baton lock waits for
// CMD, releases the lock and exits with CMD's code. Before, Go's default
// ended baton with a goroutine dump and exit 2 (a usage error, by the exit
// code table), CMD was killed with it and the lock stayed held.
func TestLockForwardsSIGQUIT(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := []string{"sh", "-c", `trap "exit 9" QUIT; echo ready; while :; do sleep 0.1; done`}
	p := startCLI(t, "lock", nil, lockArgs(dir, "quit", append([]string{"--"}, cmd...)...)...)
	p.stdout.waitFor(t, "ready", 15*time.Second)
	p.signal(syscall.SIGQUIT)
	if code := p.wait(10 * time.Second); code != 9 {
		t.Fatalf("exit code %d, want CMD's 9; stderr:\n%s", code, p.stderr)
	}
	requireFree(t, dir, "quit")
}

// With --log-level error, lock --wait 0 that finds the lock held exits 75
// and prints nothing, as flock -n does, so that a crontab's run skipped
// for an overlap mails nothing; at the default level it names the holder.
func TestLockHeldQuietAtLogLevelError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	holdLock(t, dir, "busy", "holder-x")
	code, _, stderr := runCLI(t, append([]string{"--log-level", "error"}, lockArgs(dir, "busy", "--wait", "0", "--", "true")...)...)
	if code != 75 || stderr != "" {
		t.Errorf("--log-level error: exit %d, stderr %q; want 75 and nothing", code, stderr)
	}
	code, _, stderr = runCLI(t, lockArgs(dir, "busy", "--wait", "0", "--", "true")...)
	if code != 75 || !strings.Contains(stderr, `"holder-x"`) {
		t.Errorf("default level: exit %d, stderr %q; want 75 naming holder-x", code, stderr)
	}
}
