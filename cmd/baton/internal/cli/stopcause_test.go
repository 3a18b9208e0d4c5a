package cli_test

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// The end of baton run's last term says why it ended (the log line here;
// the StoppedLeading Event on Kubernetes says the same): the signal that
// asked baton to stop, or the command's own exit, not "context canceled".
func TestRunStopCauseNamed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	leader := startCLI(t, "leader", nil, "run", "--dir", dir, "--name", "cause", "--", "sleep", "600")
	leader.stderr.waitFor(t, "started leading", 30*time.Second)
	leader.signal(syscall.SIGTERM)
	leader.wait(30 * time.Second)
	checkStopCause(t, leader.stderr.String(), "terminated")

	code, _, stderr := runCLI(t, "run", "--dir", dir, "--name", "cause", "--", "sh", "-c", "exit 3")
	if code != 3 {
		t.Fatalf("run of a command that exits 3: exit %d, stderr %q", code, stderr)
	}
	checkStopCause(t, stderr, "the command exited with code 3")
}

// checkStopCause checks that log's "stopped leading" line names want.
func checkStopCause(t *testing.T, log, want string) {
	t.Helper()
	for line := range strings.Lines(log) {
		if strings.Contains(line, "stopped leading") {
			if !strings.Contains(line, want) || strings.Contains(line, "context canceled") {
				t.Errorf("stopped leading: %q; want the cause %q", line, want)
			}
			return
		}
	}
	t.Errorf("no stopped leading line in:\n%s", log)
}
