//go:build unix

package supervise

import (
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// SignalName returns "SIGTERM" for syscall.SIGTERM, and so on.
func SignalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return "signal " + strings.TrimPrefix(sig.String(), "signal ")
}
