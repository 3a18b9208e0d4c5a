package testenv

import (
	"os/exec"
	"syscall"
)

// setPdeathsig makes the kernel kill the child if the test binary dies, so
// that no store process outlives a crashed test run.
func setPdeathsig(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
