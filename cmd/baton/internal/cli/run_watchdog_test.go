package cli_test

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/supervise"
)

// TestRunSupervisorStoppedAlone: only the supervisor of the leader is
// stopped (SIGSTOP of its pid); its CMD, a shell running the writer as a
// grandchild, is not. CMD's watchdog kills the whole group by the validity
// end, so the old writer makes no write, accepted or not, after the new
// leader's first.
func TestRunSupervisorStoppedAlone(t *testing.T) {
	if !supervise.HasWatchdog {
		t.Skip("no watchdog on this platform")
	}
	t.Parallel()
	dir, f := t.TempDir(), newFence(t)
	shell := []string{"sh", "-c", `"$0" "$1" & wait`, exe(), cmdFenceWorker}
	a := startCLI(t, "sup-a", f.env(), runArgs(dir, "stopped", "sup-a", shell...)...)
	old := f.waitWrite(t, "write by sup-a", 15*time.Second, false, func(w fenceWrite) bool { return w.Holder == "sup-a" && w.Accepted })
	b := startCLI(t, "sup-b", f.env(), runArgs(dir, "stopped", "sup-b", worker()...)...)
	b.stderr.waitFor(t, "campaigning", 15*time.Second)

	a.signal(syscall.SIGSTOP)
	newer := f.waitWrite(t, "write by sup-b", 30*time.Second, false, func(w fenceWrite) bool { return w.Holder == "sup-b" && w.Accepted })
	if exited, err := supervise.WaitExit(old.Pid, 10*time.Second); err != nil || !exited {
		t.Fatalf("the old writer (pid %d) still runs after the new leader's first write: %v", old.Pid, err)
	}
	f.mu.Lock()
	for _, w := range f.writes {
		if w.Pid == old.Pid && w.Seq > newer.Seq {
			t.Errorf("the old writer's write #%d (token %d, accepted=%v) came after the new leader's first write #%d", w.Seq, w.Token, w.Accepted, newer.Seq)
		}
	}
	f.mu.Unlock()
	f.checkFencing(t)

	a.signal(syscall.SIGCONT)
	a.stderr.waitFor(t, "CMD's watchdog killed its process group", 15*time.Second)
}

// childrenOf lists the children of pid as "PID:STATE:COMM".
func childrenOf(pid int) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, e.Name()+":"+f[0]+":"+s[open+1:end])
		}
	}
	return out
}

// TestRunReapsOrphans: CMD's shell orphans a background sleep; baton, a
// subreaper, becomes its parent and reaps it when it exits: no zombie is
// left under baton.
func TestRunReapsOrphans(t *testing.T) {
	if !supervise.HasWatchdog {
		t.Skip("no subreaper on this platform")
	}
	t.Parallel()
	dir := t.TempDir()
	a := startCLI(t, "sup-a", nil, runArgs(dir, "orphans", "sup-a", "sh", "-c", `(sleep 2 &); echo started; exec sleep 1000`)...)
	a.stdout.waitFor(t, "started", 15*time.Second)
	seen, deadline := false, time.Now().Add(30*time.Second)
	for {
		kids := childrenOf(a.pid())
		sleeping, zombie := false, false
		for _, k := range kids {
			f := strings.SplitN(k, ":", 3)
			if f[1] == "Z" {
				zombie = true
			}
			if f[2] == "sleep" {
				sleeping = true
			}
		}
		// CMD itself is the "sleep 1000"; the orphan is a second sleep.
		n := strings.Count(strings.Join(kids, " "), ":sleep")
		if n >= 2 {
			seen = true
		}
		if seen && n == 1 && !zombie && sleeping {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("seen the orphan under baton: %v; children of baton now: %v", seen, kids)
		}
		time.Sleep(20 * time.Millisecond) // no event tells a zombie was reaped
	}
	a.signal(syscall.SIGTERM)
	if code := a.wait(15 * time.Second); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit code %d, want 143", code)
	}
}
