package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// baton run whose log is piped into a reader that exits (grep -m1, head)
// goes on: its next log line meets a broken pipe, which must not kill it.
// It waits for CMD, releases the lock and exits with CMD's code. Before,
// the "CMD exited" line ended baton with SIGPIPE (exit 141), and the lock
// stayed held by a dead process until its TTL.
func TestRunOutlivesItsLogReader(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logR, logW := pipe(t)
	inR, inW := pipe(t)
	cmd := exec.Command(exe(), runArgs(dir, "piped", "sup-a", "sh", "-c", "read x; exit 3")...)
	cmd.Env = append(os.Environ(), roleEnv+"=cli", "GORACE=atexit_sleep_ms=0")
	cmd.Stdin, cmd.Stderr = inR, logW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	inR.Close()
	logW.Close()
	// Like grep -m1: read up to the line looked for, then exit.
	sc := bufio.NewScanner(logR)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "started CMD") {
			break
		}
	}
	logR.Close()
	if _, err := inW.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	inW.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("baton run did not exit after CMD")
	}
	if code := exitCodeOf(cmd.ProcessState); code != 3 {
		t.Fatalf("exit code %d, want CMD's 3 (141: baton died of SIGPIPE)", code)
	}
	requireFree(t, dir, "piped")
}

// pipe returns an os.Pipe closed at the end of the test.
func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// A CMD stopped by the kernel (SIGTTIN: it read from the terminal, whose
// foreground group is baton's, not CMD's) or by an operator still gets the
// signals baton forwards: baton continues it after each, as a shell's kill
// does. Before, the forwarded SIGTERM (or Ctrl-C's SIGINT) stayed pending
// on the stopped CMD, and baton waited for it, holding the lock, for ever.
func TestRunSignalReachesStoppedCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := startCLI(t, "run", nil, runArgs(dir, "stopped", "sup-a", "sh", "-c", "echo pid $$; exec sleep 60")...)
	a.stdout.waitFor(t, "\n", 15*time.Second)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(a.stdout.String(), "pid ")))
	if err != nil {
		t.Fatalf("CMD's pid: %v; stdout %q", err, a.stdout)
	}
	// What SIGTTIN does to a process that reads from the terminal.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	awaitStopped(t, pid)
	a.signal(syscall.SIGTERM)
	if code := a.wait(10 * time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit code %d, want %d (CMD ended by the forwarded SIGTERM)", code, 128+int(syscall.SIGTERM))
	}
	requireFree(t, dir, "stopped")
}

// awaitStopped waits until process pid is in the stopped state. It polls:
// no event tells a process other than the parent of a stop.
func awaitStopped(t *testing.T, pid int) {
	t.Helper()
	for range 500 {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) > 0 && f[0] == "T" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d did not stop within 5s", pid)
}

// A SIGHUP forwarded to a CMD that survives it (a reload) does not make
// baton run stop: after a later loss it campaigns again and restarts CMD,
// as the docs promise. Before, any forwarded signal counted as a request
// to stop, so the loss ended baton run with 129, and the service with it.
func TestRunLeadsOnAfterReloadSignal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := []string{"sh", "-c", `trap "echo reload" HUP; echo "start $BATON_TOKEN"; while :; do sleep 0.1; done`}
	a := startCLI(t, "run", nil, runArgs(dir, "reload", "sup-a", cmd...)...)
	a.stdout.waitFor(t, "start 1\n", 15*time.Second)
	a.signal(syscall.SIGHUP)
	a.stdout.waitFor(t, "reload\n", 10*time.Second)
	if err := openStore(t, dir).ForceRelease(context.Background(), "reload"); err != nil {
		t.Fatal(err)
	}
	a.stdout.waitFor(t, "start 2\n", 15*time.Second)
	a.signal(syscall.SIGTERM)
	a.wait(10 * time.Second)
}

// SIGUSR1 and SIGUSR2 sent to baton (systemd's ExecReload=kill -USR1
// $MAINPID, a logrotate postrotate script) reach CMD, which leads on, as
// SIGHUP does. Before, Go's default action killed baton: CMD died with it
// (its parent-death signal) and the lock stayed held until its TTL.
func TestRunForwardsUserSignals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := []string{"sh", "-c", `trap "echo usr1" USR1; trap "echo usr2" USR2; echo "start $BATON_TOKEN"; while :; do sleep 0.1; done`}
	a := startCLI(t, "run", nil, runArgs(dir, "usr", "sup-a", cmd...)...)
	a.stdout.waitFor(t, "start 1\n", 15*time.Second)
	a.signal(syscall.SIGUSR1)
	a.stdout.waitFor(t, "usr1\n", 10*time.Second)
	a.signal(syscall.SIGUSR2)
	a.stdout.waitFor(t, "usr2\n", 10*time.Second)
	a.signal(syscall.SIGTERM)
	if code := a.wait(10 * time.Second); code != 143 {
		t.Fatalf("exit code %d, want 143 (CMD's, ended by the forwarded SIGTERM); stderr:\n%s", code, a.stderr)
	}
	requireFree(t, dir, "usr")
}
