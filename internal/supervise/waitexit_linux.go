package supervise

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// WaitExit waits up to timeout for the process pid, which need not be a
// child of this process, to exit. It reports whether it has exited (a
// zombie counts as exited). It uses a pidfd, so it reacts at once and a
// reused pid cannot fool it once the pidfd is open.
func WaitExit(pid int, timeout time.Duration) (bool, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return true, nil // already gone (and reaped)
	}
	if errors.Is(err, unix.ENOSYS) {
		return waitExitPolling(pid, timeout)
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(timeout)
	for {
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms < 0 {
			ms = 0
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return false, err
		case n > 0:
			return true, nil
		case ms == 0:
			return false, nil
		}
	}
}
