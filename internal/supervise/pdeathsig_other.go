//go:build unix && !linux

package supervise

import "syscall"

// ParentDeathSignal reports whether children die with their supervisor on
// this platform. Without it, a child of a supervisor killed with SIGKILL
// keeps running until it exits on its own.
const ParentDeathSignal = false

func setParentDeathSignal(*syscall.SysProcAttr) {}
