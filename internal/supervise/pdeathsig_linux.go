package supervise

import "syscall"

// ParentDeathSignal reports whether children die with their supervisor on
// this platform.
const ParentDeathSignal = true

func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
