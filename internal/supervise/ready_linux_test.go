package supervise

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A watchdog that exits before it is ready (it crashed: no thread could
// be created under the process limit) is reported as having exited, with
// where to look, not as having been silent for the whole start timeout:
// baton run under ulimit -u 12 said "it did not report ready within 10s:
// EOF" a quarter of a second after it started.
func TestAwaitReadyWatchdogExited(t *testing.T) {
	ready, readyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer ready.Close()
	child := exec.Command("sh", "-c", "exit 2")
	child.ExtraFiles = []*os.File{readyW}
	err = child.Start()
	readyW.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	err = awaitReady(ready)
	if err == nil || strings.Contains(err.Error(), "within") || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "ulimit -u") {
		t.Fatalf("awaitReady = %v, want an error saying the watchdog exited, naming the process limit", err)
	}
}
