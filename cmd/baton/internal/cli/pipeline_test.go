package cli_test

import (
	"bufio"
	"os"
	"os/exec"
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
