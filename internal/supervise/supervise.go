//go:build unix

// Package supervise starts and stops the child processes of the baton CLI.
//
// A Child is started so that it cannot outlive its supervisor: on Linux the
// kernel sends it SIGKILL when the supervisor dies (PR_SET_PDEATHSIG), even
// when the supervisor is killed with SIGKILL. The parent-death signal is
// tied to the OS thread that forked the child, not to the process
// (golang/go#27505), so Start forks from a goroutine locked to its thread and
// keeps that goroutine (and so the thread) in wait4 until the child has
// exited: the Go runtime never retires the thread while the child lives.
//
// # Process groups and the watchdog
//
// StartGroup starts the child in a process group of its own, shared only
// with its descendants and a watchdog process, and Signal, Stop and Kill
// signal that whole group, so grandchildren (the commands a shell script
// runs) stop too. The watchdog (Linux) is this binary re-executed in a
// hidden mode (selected by its environment, in this package's init): it holds the deadline the
// supervisor last gave it (SetDeadline) on CLOCK_MONOTONIC, and SIGKILLs the
// whole group when the deadline passes, or when the supervisor dies (its
// pipe ends). It needs nothing from the supervisor to do so: a supervisor
// stopped (SIGSTOP), hung or starved cannot keep the child running past the
// deadline. End kills what is left of the group (and the watchdog) when the
// term is over.
//
// A signal sent to the supervisor's own process group (Ctrl-C in a
// terminal) no longer reaches the child directly; the supervisor forwards
// what it should.
package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Child is a started process.
type Child struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{}

	mu       sync.Mutex
	state    *os.ProcessState
	waitErr  error
	killedAt time.Time // when Stop or Kill sent SIGKILL

	pgid    int       // the child's process group (StartGroup), or 0
	wd      *watchdog // nil without StartGroup or on platforms without one
	wdFired bool      // the watchdog had exited before our SIGKILL
}

// Start starts cmd as a supervised child; see the package comment. cmd must
// not have been started. Its SysProcAttr is created if nil; Start sets the
// parent-death signal (where the platform has one) and leaves the rest.
func Start(cmd *exec.Cmd) (*Child, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	setParentDeathSignal(cmd.SysProcAttr)
	c := &Child{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Locked for the goroutine's whole life: the thread that forked the
		// child must not exit while the child runs, or the kernel would
		// deliver the parent-death signal. When this goroutine returns
		// still locked, the runtime ends the thread, which is harmless then:
		// the child has already exited.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			close(c.done)
			runtime.UnlockOSThread()
			return
		}
		c.pid = cmd.Process.Pid
		started <- nil
		err := cmd.Wait()
		c.mu.Lock()
		c.state, c.waitErr = cmd.ProcessState, err
		c.mu.Unlock()
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

// Pid returns the child's process id.
func (c *Child) Pid() int { return c.pid }

// Done is closed once the child has exited and been reaped (and, for
// non-file stdio, its output copied).
func (c *Child) Done() <-chan struct{} { return c.done }

// Exited reports whether the child has exited.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Wait waits for the child to exit and returns its exit code (see ExitCode)
// and the error of exec.Cmd.Wait if it is not an exit status (for example an
// I/O copy error).
func (c *Child) Wait() (int, error) {
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	var exit *exec.ExitError
	err := c.waitErr
	if errors.As(err, &exit) {
		err = nil
	}
	return ExitCode(c.state), err
}

// State returns the child's process state after it exited, or nil.
func (c *Child) State() *os.ProcessState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Signal sends sig to the child. It returns os.ErrProcessDone if the child
// has already exited (the pid is never reused under us: os.Process tracks
// the child by pidfd or by its reaping).
//
// For a child started with StartGroup, sig goes to its whole process group.
//
// A signal other than SIGKILL, SIGCONT and the stop signals is followed by
// SIGCONT, as a shell's kill of a stopped job is: a process stopped by
// SIGTTIN or SIGTTOU (it read from or set up the terminal, whose
// foreground group is not the child's), SIGTSTP or SIGSTOP gets a signal
// only once continued, so a forwarded SIGINT or SIGTERM would otherwise
// leave it stopped, and its supervisor waiting for it, for ever.
func (c *Child) Signal(sig os.Signal) error {
	if c.Exited() {
		return os.ErrProcessDone
	}
	ss, ok := sig.(syscall.Signal)
	if !ok {
		return c.cmd.Process.Signal(sig)
	}
	err := c.kill(ss)
	switch ss {
	case syscall.SIGKILL, syscall.SIGCONT, syscall.SIGSTOP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
	default:
		if err == nil {
			_ = c.kill(syscall.SIGCONT)
		}
	}
	return err
}

// kill sends sig to the child's process group (StartGroup), else to the
// child.
func (c *Child) kill(sig syscall.Signal) error {
	if c.pgid > 0 {
		// The group's number cannot be reused while the watchdog, its
		// leader, is not reaped, and End reaps it only after this child.
		return syscall.Kill(-c.pgid, sig)
	}
	return c.cmd.Process.Signal(sig)
}

func (c *Child) sigkill() {
	if c.Exited() {
		return
	}
	// The watchdog is in the group this SIGKILL goes to: note now whether
	// it had fired before, for End.
	wdFired := c.wd != nil && c.wd.exited()
	c.mu.Lock()
	if c.killedAt.IsZero() {
		c.killedAt = time.Now()
	}
	c.wdFired = c.wdFired || wdFired
	c.mu.Unlock()
	_ = c.Signal(syscall.SIGKILL)
}

// KilledAt returns when Stop or Kill sent SIGKILL, or the zero time.
func (c *Child) KilledAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.killedAt
}

// Stop ends the child: SIGTERM at once and SIGKILL at killAt if it has not
// exited by then, or SIGKILL at once if killAt is not in the future. It
// returns when the child has exited, and whether SIGKILL was sent. killAt is
// compared with time.Now (monotonic).
func (c *Child) Stop(killAt time.Time) (killed bool) {
	if c.Exited() {
		return false
	}
	d := time.Until(killAt)
	if d <= 0 {
		c.sigkill()
		<-c.done
		return true
	}
	_ = c.Signal(syscall.SIGTERM)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
		return false
	case <-t.C:
		c.sigkill()
		<-c.done
		return true
	}
}

// Kill sends SIGKILL and waits for the child to exit.
func (c *Child) Kill() {
	c.sigkill()
	<-c.done
}

// ExitCode maps a process state to a shell-style exit code: the exit status
// if the process exited, 128+N if signal N ended it, -1 if st is nil or the
// state is unknown.
func ExitCode(st *os.ProcessState) int {
	if st == nil {
		return -1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// Describe returns a short description of how the child ended, for logs:
// "exit status 3" or "killed by signal SIGKILL".
func Describe(st *os.ProcessState) string {
	if st == nil {
		return "not started"
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("killed by signal %s", SignalName(ws.Signal()))
	}
	return fmt.Sprintf("exit status %d", st.ExitCode())
}
