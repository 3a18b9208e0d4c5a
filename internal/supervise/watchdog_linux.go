package supervise

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// HasWatchdog reports whether StartGroup starts a watchdog on this
// platform.
const HasWatchdog = true

// watchdogEnv selects the watchdog mode of a re-executed binary; its value
// is the version of the pipe protocol.
const watchdogEnv = "BATON_INTERNAL_WATCHDOG"

// monoNow reads CLOCK_MONOTONIC, the machine-wide clock that Go's
// monotonic time readings use on Linux.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_MONOTONIC): %v", err)) // cannot fail on Linux
	}
	return ts.Nano()
}

// MonoNanos converts t, a time.Time with a monotonic reading (from
// time.Now), to CLOCK_MONOTONIC nanoseconds. The clock is read before
// time.Now, so the result is never later than the exact conversion.
func MonoNanos(t time.Time) int64 {
	m := monoNow()
	return m + int64(t.Sub(time.Now()))
}

// MonoNow returns the current CLOCK_MONOTONIC reading in nanoseconds, for
// comparison with MonoNanos across processes of one machine.
func MonoNow() int64 { return monoNow() }

// startWatchdog starts the watchdog process: this binary re-executed (via
// /proc/self/exe) in watchdog mode, as the leader of a new process group,
// armed with deadline. The returned pipe's write end feeds it.
func startWatchdog(deadline time.Time) (*exec.Cmd, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("watchdog pipe: %w", err)
	}
	defer r.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"baton-watchdog"}
	cmd.Env = []string{watchdogEnv + "=1", "GORACE=atexit_sleep_ms=0"}
	ready, readyW, err := os.Pipe()
	if err != nil {
		w.Close()
		return nil, nil, fmt.Errorf("watchdog pipe: %w", err)
	}
	defer ready.Close()
	// readyW is closed at once after Start (below); this is for the other
	// paths.
	defer readyW.Close()
	cmd.ExtraFiles = []*os.File{r, readyW} // fd 3, fd 4
	// Its own process group, which CMD then joins: the watchdog is never
	// stopped by a signal to the supervisor's group, and knows the group
	// it must kill before CMD exists. No parent-death signal: it must
	// outlive a killed supervisor to kill the group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := writeDeadline(w, deadline); err != nil {
		w.Close()
		return nil, nil, err
	}
	err = cmd.Start()
	readyW.Close() // so that a watchdog that dies before it is ready ends the wait
	if errors.Is(err, fs.ErrNotExist) {
		w.Close()
		return nil, nil, fmt.Errorf("starting the watchdog, this binary run again as /proc/self/exe: %w: /proc is not mounted here (a chroot or sandbox without it); mount it (mount -t proc proc /proc)", err)
	}
	if err != nil {
		w.Close()
		return nil, nil, fmt.Errorf("starting the watchdog: %w", err)
	}
	if err := awaitReady(ready); err != nil {
		_ = cmd.Process.Kill()
		if werr := cmd.Wait(); errors.Is(err, errWatchdogExited) && werr != nil {
			err = fmt.Errorf("%w (%v)", err, werr)
		}
		w.Close()
		return nil, nil, err
	}
	return cmd, w, nil
}

// watchdogStartTimeout bounds the wait for a new watchdog's readiness.
const watchdogStartTimeout = 10 * time.Second

// errWatchdogExited is awaitReady's error when the watchdog ended before
// it was ready: it crashed, most often because it could not create a
// thread (the process limit) or was killed (memory).
var errWatchdogExited = errors.New("starting the watchdog: it exited before it was ready; it is a copy of this binary, one more process with a few threads: check the process limit (ulimit -u, a cgroup's pids.max) and the memory limit")

// awaitReady waits for the watchdog's byte on ready, which it writes once
// it ignores the signals that reach its group. Until then a signal
// forwarded to CMD's group (baton asked to stop just as CMD started)
// would kill it with CMD, and End would take it for fired. The end of
// ready (the watchdog exited) matches errWatchdogExited.
func awaitReady(ready *os.File) error {
	_ = ready.SetReadDeadline(time.Now().Add(watchdogStartTimeout))
	var b [1]byte
	_, err := ready.Read(b[:])
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF):
		return errWatchdogExited
	}
	return fmt.Errorf("starting the watchdog: it did not report ready within %v: %w", watchdogStartTimeout, err)
}

func writeDeadline(w *os.File, t time.Time) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(MonoNanos(t)))
	// A watchdog that does not read (stopped with its group) keeps its
	// last, earlier deadline: never block the supervisor on it.
	_ = w.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := w.Write(b[:])
	return err
}

// init turns this process into the watchdog if it was started as one,
// before main (or TestMain) runs: every binary that links this package
// (baton, and the test binaries that run its CLI in-process) can serve as
// its own watchdog, with no hook in main.
func init() {
	if os.Getenv(watchdogEnv) == "" {
		return
	}
	os.Exit(watchdogMain(os.NewFile(3, "watchdog-pipe"), os.NewFile(4, "watchdog-ready")))
}

// watchdogMain waits for the deadline read from pipe, pushing it later as
// new deadlines arrive, and SIGKILLs its own process group (CMD's) when it
// passes or when the pipe ends (the supervisor died). Signals that could
// reach it with its group (SIGTERM forwarded to CMD, Ctrl-C) are ignored;
// the supervisor ends it with SIGKILL to the group at the end of the term.
// It tells the supervisor on ready once it ignores them.
func watchdogMain(pipe, ready *os.File) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE, syscall.SIGUSR1, syscall.SIGUSR2)
	_, _ = ready.Write([]byte{1})
	ready.Close()
	fd := int(pipe.Fd())
	deadline := int64(-1) // none yet: wait for the first
	var buf [8 * 64]byte
	pending := 0 // bytes of an incomplete record at the start of buf
	for {
		var ts *unix.Timespec
		if deadline >= 0 {
			d := deadline - monoNow()
			if d <= 0 {
				return killOwnGroup()
			}
			t := unix.NsecToTimespec(d)
			ts = &t
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Ppoll(fds, ts, nil)
		if errors.Is(err, unix.EINTR) || n == 0 {
			continue
		}
		if err != nil {
			return killOwnGroup()
		}
		m, err := unix.Read(fd, buf[pending:])
		switch {
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue
		case err != nil:
			return killOwnGroup()
		case m == 0:
			return killOwnGroup() // the supervisor is gone
		}
		// Only the last complete record counts.
		n = pending + m
		if whole := n - n%8; whole > 0 {
			deadline = int64(binary.LittleEndian.Uint64(buf[whole-8 : whole]))
			copy(buf[:], buf[whole:n])
		}
		pending = n % 8
	}
}

// killOwnGroup SIGKILLs the calling process's group, which includes the
// caller; the exit code is only for the case the signal cannot be sent.
func killOwnGroup() int {
	_ = unix.Kill(0, unix.SIGKILL)
	return 1
}

// exited reports whether the watchdog process has exited, without reaping
// it (so its pid, the group's number, stays reserved).
func (w *watchdog) exited() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, w.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && info.Signo == int32(unix.SIGCHLD)
}
