//go:build unix

package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// ErrDeadlinePassed is returned by StartGroup when the deadline passed
// before the child could start (the watchdog had already ended the group).
var ErrDeadlinePassed = errors.New("the deadline passed before the command could start")

// WatchdogError is StartGroup's error when the watchdog could not be
// started, so CMD was not: whatever its cause says, CMD is not at fault
// (a watchdog's exec that fails with ENOENT names no missing command).
type WatchdogError struct{ Err error }

func (e *WatchdogError) Error() string { return e.Err.Error() }
func (e *WatchdogError) Unwrap() error { return e.Err }

// ErrForeignProc: /proc shows another PID namespace than this process's (a
// PID namespace entered without mounting its own /proc: unshare --pid
// without --mount-proc, a sandbox that shows the host's), so the orphans
// of CMD cannot be told from other processes.
var ErrForeignProc = errors.New("/proc shows another PID namespace than this process's: the orphans of CMD are neither reaped nor killed at the end of a term; mount this namespace's own /proc (unshare --mount-proc, or mount -t proc proc /proc in it)")

// registry holds the pids of the processes StartGroup started and has not
// reaped yet: CMD and the watchdog. ReapOrphans and KillOrphans leave them
// alone. It is process-wide because the children of a process are: the
// subreaper receives every orphan of every term.
var registry = pidRegistry{pids: map[int]struct{}{}, groups: map[int]struct{}{}}

type pidRegistry struct {
	mu     sync.Mutex
	pids   map[int]struct{}
	groups map[int]struct{} // process groups created by StartGroup
}

func (r *pidRegistry) add(pid int)    { r.pids[pid] = struct{}{} }
func (r *pidRegistry) remove(pid int) { delete(r.pids, pid) }
func (r *pidRegistry) has(pid int) bool {
	_, ok := r.pids[pid]
	return ok
}

// watchdog is the supervisor's side of a watchdog process.
type watchdog struct {
	cmd *exec.Cmd

	mu   sync.Mutex
	pipe *os.File // nil once closed
	last time.Time
}

// StartGroup starts cmd like Start, in a new process group guarded by a
// watchdog armed with deadline (see the package comment): by deadline,
// unless SetDeadline moves it later, every process still in the group is
// killed with SIGKILL, whatever the supervisor is doing. Deadline is a
// time.Time with a monotonic reading (from time.Now).
//
// The caller must call End once the child has exited (Done is closed).
// If the deadline passes before the child is started, StartGroup returns an
// error matching ErrDeadlinePassed.
func StartGroup(cmd *exec.Cmd, deadline time.Time) (*Child, error) {
	// Registered pids are not reaped by ReapOrphans; holding the registry
	// from before the forks until the pids are in it keeps ReapOrphans
	// from taking these processes for orphans.
	registry.mu.Lock()
	locked := true
	defer func() {
		if locked {
			registry.mu.Unlock()
		}
	}()
	wd, err := startWatchdogLocked(deadline)
	if err != nil {
		return nil, err
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if wd != nil {
		cmd.SysProcAttr.Pgid = wd.cmd.Process.Pid
	}
	c, err := Start(cmd)
	if err != nil {
		registry.mu.Unlock()
		locked = false
		if wd != nil {
			expired := wd.exited()
			wd.end()
			if expired {
				return nil, fmt.Errorf("%w: %w", ErrDeadlinePassed, err)
			}
		}
		return nil, err
	}
	registry.add(c.pid)
	c.wd = wd
	c.pgid = c.pid
	if wd != nil {
		c.pgid = wd.cmd.Process.Pid
	}
	return c, nil
}

func startWatchdogLocked(deadline time.Time) (*watchdog, error) {
	if !HasWatchdog {
		return nil, nil
	}
	if !time.Now().Before(deadline) {
		return nil, ErrDeadlinePassed
	}
	cmd, pipe, err := startWatchdog(deadline)
	if err != nil {
		return nil, &WatchdogError{Err: err}
	}
	registry.add(cmd.Process.Pid)
	registry.groups[cmd.Process.Pid] = struct{}{}
	return &watchdog{cmd: cmd, pipe: pipe, last: deadline}, nil
}

// WatchdogExited reports whether the child's watchdog has exited: it fired,
// or something killed it. The caller should then treat the group as
// unguarded and kill it. False without a watchdog.
func (c *Child) WatchdogExited() bool { return c.wd != nil && c.wd.exited() }

// Pgid returns the child's process group, or 0 if it was started with
// Start (in the supervisor's group).
func (c *Child) Pgid() int { return c.pgid }

// SetDeadline moves the watchdog's deadline to t (normally later: after a
// renewal). It does nothing if t equals the last deadline, or without a
// watchdog. A watchdog that cannot be told (stopped) keeps its earlier
// deadline, which is the safe side.
func (c *Child) SetDeadline(t time.Time) error {
	if c.wd == nil {
		return nil
	}
	w := c.wd
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pipe == nil || t.Equal(w.last) {
		return nil
	}
	if err := writeDeadline(w.pipe, t); err != nil {
		return fmt.Errorf("telling the watchdog the new deadline: %w", err)
	}
	w.last = t
	return nil
}

// End ends the term of a child started with StartGroup, after it has
// exited: it SIGKILLs what is left of its process group (descendants that
// stayed in it, and the watchdog) and reaps the watchdog. It reports
// whether the watchdog had fired (the deadline passed, and it killed the
// group) before End was called. End is a no-op for a child started with
// Start, and after the first call.
func (c *Child) End() (watchdogFired bool) {
	<-c.done
	registry.mu.Lock()
	registry.remove(c.pid)
	registry.mu.Unlock()
	if c.wd == nil {
		return false
	}
	// A SIGKILL from Stop or Kill also ends the watchdog: it fired only if
	// it had exited before (or no such SIGKILL was sent).
	c.mu.Lock()
	fired := c.wdFired || (c.killedAt.IsZero() && c.wd.exited())
	c.mu.Unlock()
	c.wd.end()
	return fired
}

// end kills the watchdog's group, closes the pipe and reaps the watchdog.
func (w *watchdog) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pipe == nil {
		return
	}
	pid := w.cmd.Process.Pid
	// The group cannot be someone else's: its leader is not reaped yet.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	w.pipe.Close()
	w.pipe = nil
	_ = w.cmd.Wait()
	registry.mu.Lock()
	registry.remove(pid)
	registry.mu.Unlock()
}
