//go:build unix && !linux

package supervise

import "time"

// WaitExit waits up to timeout for the process pid, which need not be a
// child of this process, to exit, and reports whether it has exited. On
// this platform it polls, and a zombie counts as running.
func WaitExit(pid int, timeout time.Duration) (bool, error) {
	return waitExitPolling(pid, timeout)
}
