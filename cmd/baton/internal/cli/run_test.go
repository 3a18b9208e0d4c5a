package cli_test

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/filestore"
	"github.com/baton-go/baton/internal/supervise"
)

// runArgs are the arguments of `baton run` for a test lock in dir.
func runArgs(dir, name, identity string, cmd ...string) []string {
	args := append([]string{"run", "--name", name, "--dir", dir, "--identity", identity}, timing...)
	return append(append(args, "--"), cmd...)
}

func worker(flags ...string) []string { return append([]string{exe(), cmdFenceWorker}, flags...) }

func openStore(t *testing.T, dir string) *filestore.Store {
	t.Helper()
	st, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// requireFree asserts that lock name in dir has no holder.
func requireFree(t *testing.T, dir, name string) backend.Record {
	t.Helper()
	r, err := openStore(t, dir).Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if r.Held() || r.Holder != "" {
		t.Fatalf("lock %q is still held: %+v", name, r)
	}
	return r
}

// Test 1: SIGKILL of the leader's whole process group (supervisor and
// CMD): a standby takes over with a larger token after the TTL.
func TestRunCrashTakeover(t *testing.T) {
	t.Parallel()
	dir, f := t.TempDir(), newFence(t)
	a := startCLI(t, "sup-a", f.env(), runArgs(dir, "crash", "sup-a", worker()...)...)
	first := f.waitWrite(t, "write by sup-a", 15*time.Second, false, func(w fenceWrite) bool { return w.Holder == "sup-a" && w.Accepted })
	b := startCLI(t, "sup-b", f.env(), runArgs(dir, "crash", "sup-b", worker()...)...)
	b.stderr.waitFor(t, "campaigning", 15*time.Second)

	a.signalGroup(syscall.SIGKILL)
	killed := time.Now()
	a.wait(10 * time.Second)
	second := f.waitWrite(t, "write by sup-b", 15*time.Second, false, func(w fenceWrite) bool { return w.Holder == "sup-b" && w.Accepted })
	t.Logf("sup-b took over %v after the SIGKILL, token %d -> %d", time.Since(killed).Round(time.Millisecond), first.Token, second.Token)
	if second.Token <= first.Token {
		t.Errorf("new leader's token %d is not larger than the old %d", second.Token, first.Token)
	}
	f.checkFencing(t)
}

// Test 2: the leader's process groups (baton's and CMD's) are stopped for
// longer than the TTL; a standby takes over. The old CMD is resumed first: its writes with the old
// token are rejected by the fenced register. Then its supervisor is resumed
// and kills it at once, since its validity ended long ago.
func TestRunPausedLeaderIsFenced(t *testing.T) {
	t.Parallel()
	dir, f := t.TempDir(), newFence(t)
	// The old CMD ignores SIGTERM: only SIGKILL ends it.
	a := startCLI(t, "sup-a", f.env(), runArgs(dir, "pause", "sup-a", worker("--ignore-term")...)...)
	old := f.waitWrite(t, "write by sup-a", 15*time.Second, false, func(w fenceWrite) bool { return w.Holder == "sup-a" && w.Accepted })
	b := startCLI(t, "sup-b", f.env(), runArgs(dir, "pause", "sup-b", worker()...)...)
	b.stderr.waitFor(t, "campaigning", 15*time.Second)

	// CMD has a process group of its own (with its watchdog): stop both.
	cmdGroup, err := syscall.Getpgid(old.Pid)
	if err != nil {
		t.Fatal(err)
	}
	a.signalGroup(syscall.SIGSTOP)
	if err := syscall.Kill(-cmdGroup, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	newer := f.waitWrite(t, "write by sup-b", 15*time.Second, false, func(w fenceWrite) bool { return w.Holder == "sup-b" && w.Accepted })
	t.Logf("sup-b took over %v after SIGSTOP, token %d -> %d", time.Since(stopped).Round(time.Millisecond), old.Token, newer.Token)
	if newer.Token <= old.Token {
		t.Fatalf("new token %d is not larger than the old %d", newer.Token, old.Token)
	}

	// Resume the old CMD alone: it goes on writing with its old token.
	if err := syscall.Kill(old.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stale := f.waitWrite(t, "rejected write with the old token", 10*time.Second, false, func(w fenceWrite) bool {
		return w.Token == old.Token && !w.Accepted && w.Seq > newer.Seq
	})
	t.Logf("stale write #%d with token %d rejected", stale.Seq, stale.Token)

	// Resume both groups: the old supervisor (or CMD's watchdog, whichever
	// runs first) notices that its validity ended long ago and kills CMD at
	// once.
	a.signalGroup(syscall.SIGCONT)
	_ = syscall.Kill(-cmdGroup, syscall.SIGCONT)
	resumed := time.Now()
	exited, err := supervise.WaitExit(old.Pid, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !exited {
		t.Fatalf("old CMD (pid %d) still runs 15s after its supervisor was resumed", old.Pid)
	}
	t.Logf("old CMD died %v after SIGCONT", time.Since(resumed).Round(time.Millisecond))
	a.stderr.waitFor(t, "stopped_by_baton=true", 10*time.Second)
	f.checkFencing(t)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.writes {
		if w.Token == old.Token && w.Accepted && w.Seq > newer.Seq {
			t.Errorf("write #%d with the old token %d accepted after token %d", w.Seq, w.Token, newer.Token)
		}
	}
}

// Test 3: SIGKILL of the supervisor alone: its CMD does not survive it.
func TestRunChildDiesWithSupervisor(t *testing.T) {
	t.Parallel()
	dir, f := t.TempDir(), newFence(t)
	a := startCLI(t, "sup-a", f.env(), runArgs(dir, "orphan", "sup-a", worker("--ignore-term")...)...)
	w := f.waitWrite(t, "write by sup-a", 15*time.Second, false, func(w fenceWrite) bool { return w.Holder == "sup-a" })
	a.signal(syscall.SIGKILL)
	exited, err := supervise.WaitExit(w.Pid, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !exited {
		_ = syscall.Kill(w.Pid, syscall.SIGKILL)
		t.Fatalf("CMD (pid %d) survived its supervisor's SIGKILL", w.Pid)
	}
	if code := a.wait(10 * time.Second); code != 137 {
		t.Errorf("supervisor exit code %d, want 137", code)
	}
}

// Test 4: CMD exits on its own with 3: baton run exits 3 and releases the
// lock, so another contender gets it at once.
func TestRunCommandExitCode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := startCLI(t, "run", nil, runArgs(dir, "exit", "sup-a", exe(), cmdExit, "3")...)
	if code := a.wait(15 * time.Second); code != 3 {
		t.Fatalf("exit code %d, want 3; stderr:\n%s", code, a.stderr)
	}
	r := requireFree(t, dir, "exit")
	if r.Token != 1 {
		t.Errorf("token %d, want 1 (one term)", r.Token)
	}
	// Another contender acquires at once (--wait 0: one attempt).
	b := startCLI(t, "lock", nil, "lock", "--name", "exit", "--dir", dir, "--wait", "0", "--", exe(), cmdEnv)
	if code := b.wait(15 * time.Second); code != 0 {
		t.Fatalf("lock after run: exit code %d; stderr:\n%s", code, b.stderr)
	}
	if out := b.stdout.String(); !strings.Contains(out, "BATON_TOKEN=2\n") || !strings.Contains(out, "BATON_LOCK=exit\n") {
		t.Errorf("CMD environment:\n%s", out)
	}
}

// Test 5: SIGTERM to baton run while it leads is forwarded to CMD; baton
// exits with CMD's code and releases the lock.
func TestRunForwardsSIGTERM(t *testing.T) {
	t.Parallel()
	dir, f := t.TempDir(), newFence(t)
	a := startCLI(t, "sup-a", f.env(), runArgs(dir, "term", "sup-a", worker("--term-exit", "7")...)...)
	w := f.waitWrite(t, "write by sup-a", 15*time.Second, false, func(w fenceWrite) bool { return w.Holder == "sup-a" })
	a.signal(syscall.SIGTERM)
	f.waitWrite(t, "SIGTERM reported by CMD", 10*time.Second, true, func(e fenceWrite) bool { return e.Kind == "sigterm" && e.Pid == w.Pid })
	if code := a.wait(10 * time.Second); code != 7 {
		t.Fatalf("exit code %d, want CMD's 7; stderr:\n%s", code, a.stderr)
	}
	requireFree(t, dir, "term")
}

// baton run started under nohup (SIGHUP ignored) leaves SIGHUP ignored, by
// itself and by CMD, as nohup CMD alone would: the hang-up of a closed
// terminal stops neither. Before, baton caught SIGHUP to forward it, so CMD
// started with the default action and both died.
func TestRunUnderNohup(t *testing.T) {
	t.Parallel()
	cmd := []string{"sh", "-c", "grep SigIgn /proc/self/status; echo ready; exec sleep 60"}
	a := startCommand(t, "nohup baton run", nil, &syscall.SysProcAttr{Setpgid: true},
		append([]string{"nohup", exe()}, runArgs(t.TempDir(), "nohup", "sup-a", cmd...)...))
	a.stdout.waitFor(t, "ready", 15*time.Second)
	var mask uint64
	for line := range strings.Lines(a.stdout.String()) {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	if mask&(1<<(syscall.SIGHUP-1)) == 0 {
		t.Errorf("CMD does not ignore SIGHUP (SigIgn %#x):\n%s", mask, a.stdout)
	}
	// Pending signals are delivered lowest first: a SIGHUP that was not
	// ignored would end CMD before the SIGTERM does (exit 129).
	a.signal(syscall.SIGHUP)
	a.signal(syscall.SIGTERM)
	if code := a.wait(10 * time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit code %d, want %d (CMD ended by the SIGTERM, the SIGHUP ignored); stderr:\n%s", code, 128+int(syscall.SIGTERM), a.stderr)
	}
}

// SIGTERM to baton run before it leads stops it at once with 128+15, and
// CMD never starts.
func TestRunSIGTERMWhileCampaigning(t *testing.T) {
	t.Parallel()
	dir, f := t.TempDir(), newFence(t)
	mu, err := baton.NewMutex(openStore(t, dir), "busy", baton.WithIdentity("holder-x"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := mu.TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	a := startCLI(t, "sup-a", f.env(), runArgs(dir, "busy", "sup-a", worker()...)...)
	a.stderr.waitFor(t, "campaigning", 15*time.Second)
	start := time.Now()
	a.signal(syscall.SIGTERM)
	if code := a.wait(10 * time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit code %d, want 143; stderr:\n%s", code, a.stderr)
	}
	t.Logf("exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.writes) != 0 {
		t.Errorf("CMD ran although baton never led: %s", f.summary())
	}
}

// A CMD that cannot be found: exit 127 and a message naming it.
func TestRunCommandNotFound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := startCLI(t, "run", nil, runArgs(dir, "missing", "sup-a", "/nonexistent/baton-cmd")...)
	if code := a.wait(15 * time.Second); code != 127 {
		t.Fatalf("exit code %d, want 127; stderr:\n%s", code, a.stderr)
	}
	if got := a.stderr.String(); !strings.Contains(got, `cannot run "/nonexistent/baton-cmd"`) {
		t.Errorf("stderr:\n%s", got)
	}
	requireFree(t, dir, "missing")
}

// After a loss, baton run stops CMD, campaigns again and restarts CMD with
// a new token when it leads again. A loss the store declares (here a forced
// release) means another holder may run already: CMD is killed at once.
func TestRunRestartsAfterLoss(t *testing.T) {
	t.Parallel()
	dir, f := t.TempDir(), newFence(t)
	a := startCLI(t, "sup-a", f.env(), runArgs(dir, "again", "sup-a", worker()...)...)
	first := f.waitWrite(t, "write by sup-a", 15*time.Second, false, func(w fenceWrite) bool { return w.Holder == "sup-a" })
	if err := openStore(t, dir).ForceRelease(context.Background(), "again"); err != nil {
		t.Fatal(err)
	}
	second := f.waitWrite(t, "write with a new token", 15*time.Second, false, func(w fenceWrite) bool { return w.Token > first.Token })
	if second.Holder != "sup-a" || second.Pid == first.Pid {
		t.Errorf("after the loss: %+v, before: %+v", second, first)
	}
	if exited, _ := supervise.WaitExit(first.Pid, 10*time.Second); !exited {
		t.Errorf("the first CMD (pid %d) still runs", first.Pid)
	}
	a.stderr.waitFor(t, "the store says the lock is no longer ours; killing CMD at once", 5*time.Second)
	f.checkFencing(t)
}
