//go:build unix

package supervise

import (
	"errors"
	"syscall"
	"time"
)

// waitExitPolling checks every 10ms whether pid still exists. A zombie
// still exists for kill(2); callers use it only where no pidfd is
// available.
func waitExitPolling(pid int, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return true, nil
		}
		if !time.Now().Before(deadline) {
			return false, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}
