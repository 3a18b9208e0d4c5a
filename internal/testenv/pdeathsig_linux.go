package testenv

import (
	"errors"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// setPdeathsig makes the kernel kill the child if the test binary dies, so
// that no store process outlives a crashed test run.
func setPdeathsig(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// startProcess starts cmd from a goroutine locked to its OS thread, which
// stays alive until the process exits. The kernel sends the parent-death
// signal when the thread that forked the child exits, not the process
// (golang/go#27505): forked from an arbitrary thread, a server died as soon
// as the runtime retired that thread, for example after a test's in-process
// `baton run` ended its own locked thread.
func startProcess(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the child
		err := cmd.Start()
		errc <- err
		if err != nil {
			return
		}
		// Wait for the exit without reaping it: cmd.Wait reaps.
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}()
	return <-errc
}
