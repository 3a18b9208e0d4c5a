package supervise_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/supervise"
)

// lead is the budget the CLI keeps between the watchdog's deadline and
// the lease's validity end (its kill lead, at least 100ms): the time the
// kernel has to wake the watchdog and deliver SIGKILL.
const lead = 100 * time.Millisecond

// writerRole writes CLOCK_MONOTONIC readings, one a line, to $OUT until
// killed; with $GRAND it first starts a grandchild doing the same to
// $OUT.g, in its process group, and says "ready" on stdout once both have
// written.
func writerRole() {
	out := os.Getenv("OUT")
	if os.Getenv("GRAND") != "" {
		g := exec.Command(os.Args[0])
		g.Env = append(os.Environ(), "GRAND=", "OUT="+out+".g")
		if err := g.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ready := os.Getenv("GRAND") == ""
	for {
		// The reading is taken before the write: a write lands no earlier
		// than the time it records.
		fmt.Fprintf(f, "%d\n", supervise.MonoNow())
		if !ready {
			if st, err := os.Stat(out + ".g"); err == nil && st.Size() > 0 {
				fmt.Println("ready")
				ready = true
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// groupSupervisorRole starts a writer (with a grandchild) under StartGroup,
// waits until both write, moves the deadline to $DEADLINE from then,
// prints "pid pgid deadline-ns" and waits forever, leaving the deadline to
// the watchdog.
func groupSupervisorRole() {
	cmd := helper("writer", "GRAND=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	c, err := supervise.StartGroup(cmd, time.Now().Add(time.Hour))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		fmt.Println("error: the writer said", line, err)
		os.Exit(1)
	}
	d, _ := time.ParseDuration(os.Getenv("DEADLINE"))
	deadline := time.Now().Add(d)
	if err := c.SetDeadline(deadline); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(c.Pid(), c.Pgid(), supervise.MonoNanos(deadline))
	select {}
}

type groupInfo struct {
	supervisor      *exec.Cmd
	pid, pgid       int
	deadline        int64 // CLOCK_MONOTONIC ns
	out             string
	childGrandchild [2]int
}

func startGroupSupervisor(t *testing.T, deadline time.Duration) *groupInfo {
	t.Helper()
	out := filepath.Join(t.TempDir(), "writes")
	cmd := helper("groupsup", "DEADLINE="+deadline.String(), "OUT="+out)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading from the supervisor: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 {
		t.Fatalf("supervisor said %q", line)
	}
	g := &groupInfo{supervisor: cmd, out: out}
	g.pid, _ = strconv.Atoi(f[0])
	g.pgid, _ = strconv.Atoi(f[1])
	g.deadline, _ = strconv.ParseInt(f[2], 10, 64)
	if g.pgid == 0 || g.pgid == g.pid {
		t.Fatalf("child %d is in group %d, want the watchdog's group", g.pid, g.pgid)
	}
	return g
}

// liveMembers lists the processes of group pgid that are running
// (zombies, dead but not reaped, do not count).
func liveMembers(pgid int) []string {
	var live []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			live = append(live, e.Name()+":"+f[0])
		}
	}
	return live
}

// waitGroupGone waits until no process of group pgid is running.
func waitGroupGone(t *testing.T, pgid int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for len(liveMembers(pgid)) > 0 {
		if time.Now().After(deadline) {
			live := liveMembers(pgid)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			t.Fatalf("process group %d still has running members after %v: %v", pgid, timeout, live)
		}
		time.Sleep(5 * time.Millisecond) // no event tells a group has emptied
	}
}

// lastWrite returns the last complete reading in file, and how many.
func lastWrite(t *testing.T, file string) (last int64, n int) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the writer wrote nothing: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, err := strconv.ParseInt(l, 10, 64); err == nil {
			last, n = max(last, v), n+1
		}
	}
	return last, n
}

// TestWatchdogKillsGroupOfStoppedSupervisor: with its supervisor stopped
// (SIGSTOP of the supervisor alone), the child and its grandchild still
// die by the deadline: no write after deadline + lead.
func TestWatchdogKillsGroupOfStoppedSupervisor(t *testing.T) {
	t.Parallel()
	g := startGroupSupervisor(t, time.Second)
	if err := g.supervisor.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitGroupGone(t, g.pgid, 30*time.Second)
	validUntil := g.deadline + int64(lead)
	for _, file := range []string{g.out, g.out + ".g"} {
		last, n := lastWrite(t, file)
		if n == 0 {
			t.Fatalf("%s: no writes", file)
		}
		if last > validUntil {
			t.Errorf("%s: last write %v after the deadline, beyond the kill lead of %v", filepath.Base(file),
				time.Duration(last-g.deadline), lead)
		}
	}
}

// TestWatchdogKillsGroupOfKilledSupervisor: SIGKILL of the supervisor
// kills the child (parent-death signal) and the grandchild (the watchdog
// sees its pipe end), long before the deadline.
func TestWatchdogKillsGroupOfKilledSupervisor(t *testing.T) {
	t.Parallel()
	g := startGroupSupervisor(t, time.Hour)
	if err := g.supervisor.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitGroupGone(t, g.pgid, 30*time.Second)
}

// TestSetDeadlineExtends: a later deadline keeps the child alive past the
// first one; Stop then ends the whole group, grandchild included.
func TestSetDeadlineExtends(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "writes")
	first := time.Now().Add(300 * time.Millisecond)
	c, err := supervise.StartGroup(helper("writer", "GRAND=1", "OUT="+out), first)
	if err != nil {
		t.Fatal(err)
	}
	defer c.End()
	if err := c.SetDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if exited, _ := supervise.WaitExit(c.Pid(), time.Until(first)+time.Second); exited {
		t.Fatal("the child died at the first deadline after SetDeadline moved it")
	}
	if c.WatchdogExited() {
		t.Fatal("the watchdog exited")
	}
	c.Stop(time.Now()) // SIGKILL to the group at once
	if fired := c.End(); fired {
		t.Error("End reported the watchdog fired; the supervisor killed the group")
	}
	waitGroupGone(t, c.Pgid(), 30*time.Second)
}

// TestStartGroupPastDeadline: a deadline already passed starts nothing.
func TestStartGroupPastDeadline(t *testing.T) {
	t.Parallel()
	_, err := supervise.StartGroup(helper("exit:0"), time.Now().Add(-time.Millisecond))
	if !errors.Is(err, supervise.ErrDeadlinePassed) {
		t.Fatalf("StartGroup = %v, want ErrDeadlinePassed", err)
	}
}

// A signal forwarded to the group at once after StartGroup (a supervisor
// asked to stop just as its command started) stops the command, not the
// watchdog: the watchdog ignores such signals from before the command
// joins its group. It used to die of a SIGTERM that arrived before it had
// set up, and End then reported it fired, so the CLI logged that baton
// had been late and counted the command as stopped by baton.
func TestSignalRightAfterStartSparesWatchdog(t *testing.T) {
	for i := range 20 {
		c, err := supervise.StartGroup(exec.Command("sleep", "60"), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		<-c.Done()
		if c.End() {
			t.Fatalf("round %d: End reports the watchdog fired; only CMD was signalled, an hour before the deadline", i)
		}
	}
}
