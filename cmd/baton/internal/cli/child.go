package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/supervise"
)

// Environment variables that CMD gets.
const (
	EnvLock   = "BATON_LOCK"   // the lock name
	EnvHolder = "BATON_HOLDER" // the holder identity
	EnvToken  = "BATON_TOKEN"  // the fencing token of this term, in decimal
)

// forwardedSignals are passed on to CMD while it runs; before CMD starts
// (or between terms) they stop baton at once, with exit code 128+N. They
// are the terminal's (Ctrl-C, Ctrl-\, a hang-up), a stop's, and the
// user signals that services take as commands (SIGUSR1 and SIGUSR2: reopen
// the logs, reload; systemd's ExecReload sends them to the unit's main
// process, which is baton). Left to Go's default, SIGQUIT would end baton
// with a goroutine dump and exit 2, and SIGUSR1 or SIGUSR2 would kill it:
// either way its CMD killed and its lock held until the TTL.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// errStopping: a signal asked baton to stop before CMD could start.
var errStopping = errors.New("stopping on a signal")

// errTermOver: the lease's validity ended before CMD could start.
var errTermOver = errors.New("the lease's validity ended before CMD could start")

// supervisor runs CMD under a lease and routes the signals baton receives.
type supervisor struct {
	argv           []string
	stdin          io.Reader
	stdout, stderr io.Writer
	log            *slog.Logger
	lead           time.Duration // SIGKILL this long before the validity end
	stop           context.CancelFunc
	// lifecycle is the log level of "started CMD" and "CMD exited": Info
	// for run (a service's terms are worth a line), Debug for lock (as
	// quiet as flock(1)).
	lifecycle slog.Level

	mu       sync.Mutex
	child    *supervise.Child
	signal   os.Signal // first signal received; nil if none
	exitCode int       // CMD's exit code when it exited on its own
	exited   bool      // CMD exited on its own (not stopped by baton)
	startErr error     // why CMD could not start; errStopping excluded
}

// handleSignals routes signals until the returned function is called; that
// function returns after the routing goroutine has ended.
func (s *supervisor) handleSignals() (stop func()) {
	// As a subreaper, baton receives CMD's orphaned descendants (a shell's
	// background jobs) and reaps them on SIGCHLD, so none stays a zombie
	// (as PID 1 of a container, baton is their parent anyway).
	switch err := supervise.BecomeSubreaper(); {
	case errors.Is(err, supervise.ErrForeignProc):
		s.log.Warn("cannot tell CMD's orphans", "err", err)
	case err != nil && !errors.Is(err, errors.ErrUnsupported):
		s.log.Debug("not a subreaper: orphans of CMD go to init", "err", err)
	}
	sigc := make(chan os.Signal, 8)
	if sigs := caughtSignals(); len(sigs) > 0 {
		signal.Notify(sigc, sigs...)
	}
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	pipe := notifySIGPIPE()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case sig := <-sigc:
				s.onSignal(sig)
			case <-chld:
				supervise.ReapOrphans()
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(sigc)
		signal.Stop(chld)
		signal.Stop(pipe)
		close(done)
		wg.Wait()
	}
}

// notifySIGPIPE keeps a write to a closed stderr or stdout from killing
// baton: baton's log piped into a reader that exited (head, grep -m1, a
// log shipper restarted). Go ends a program whose write to fd 1 or 2 meets
// a broken pipe with SIGPIPE unless SIGPIPE is notified to a channel; baton
// would die holding the lock, and its CMD with it. Notified, the write
// fails (the log line is lost) and baton goes on supervising, releases the
// lock and exits with CMD's code. CMD still gets SIGPIPE's default action,
// since exec resets caught signals. The channel is never read: a signal
// sent to a full channel is dropped.
func notifySIGPIPE() chan os.Signal {
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	return pipe
}

// caughtSignals are the forwarded signals that baton was not started
// ignoring. One ignored at start (nohup ignores SIGHUP; a shell ignores
// SIGINT in background jobs) stays ignored by baton and, through exec, by
// CMD, as it would be without baton in between: catching it to forward it
// would also make CMD start with the default action.
func caughtSignals() []os.Signal {
	var sigs []os.Signal
	for _, sig := range forwardedSignals {
		if !signal.Ignored(sig) {
			sigs = append(sigs, sig)
		}
	}
	return sigs
}

// onSignal forwards sig to CMD if it runs, else stops baton. SIGINT and
// SIGTERM forwarded also ask baton to stop once CMD has exited (run does
// not campaign again after a loss); the others only reach CMD, which may
// survive them (a reload, a thread dump) and lead on.
func (s *supervisor) onSignal(sig os.Signal) {
	s.mu.Lock()
	c := s.child
	if s.signal == nil && (c == nil || sig == syscall.SIGINT || sig == syscall.SIGTERM) {
		s.signal = sig
	}
	s.mu.Unlock()
	if c != nil && c.Signal(sig) == nil {
		s.log.Info("forwarded signal to CMD", "signal", sig, "pid", c.Pid())
		return
	}
	s.mu.Lock()
	if s.signal == nil {
		s.signal = sig
	}
	s.mu.Unlock()
	s.log.Info("stopping on signal", "signal", sig)
	s.stop()
}

// stopErr is the error of a start-up step that failed with err: exit
// 128+N if a signal asked baton to stop meanwhile (and so ended the step),
// else err.
func (s *supervisor) stopErr(err error) error {
	if sig := s.signaled(); sig != nil {
		return exitCode(signalExitCode(sig))
	}
	return err
}

// signaled returns the first signal received, or nil.
func (s *supervisor) signaled() os.Signal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.signal
}

// stopCause says why baton run stops campaigning, for the end of its last
// term (the log, the StoppedLeading Event): the signal that asked it to,
// the command's exit or its failure to start; nil if none of them.
func (s *supervisor) stopCause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.signal != nil:
		return fmt.Errorf("baton run was asked to stop (%v)", s.signal)
	case s.exited:
		return fmt.Errorf("the command exited with code %d", s.exitCode)
	case s.startErr != nil:
		return fmt.Errorf("the command could not start: %w", s.startErr)
	}
	return nil
}

// start starts CMD for lease l, unless a signal has asked baton to stop.
func (s *supervisor) start(l *baton.Lease) (*supervise.Child, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.signal != nil {
		return nil, errStopping
	}
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Env = append(withoutSecrets(os.Environ()),
		EnvLock+"="+l.Name(),
		EnvHolder+"="+l.Holder(),
		EnvToken+"="+strconv.FormatUint(l.Token(), 10),
	)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.stdin, s.stdout, s.stderr
	// Output copied through pipes (when stdout is not a file) must not keep
	// Wait blocked after CMD exited, if a grandchild holds the pipe.
	cmd.WaitDelay = time.Second
	// CMD gets a process group of its own, guarded by a watchdog process
	// that kills the group at the kill point even if baton is stopped.
	c, err := supervise.StartGroup(cmd, l.ValidUntil().Add(-s.lead))
	if errors.Is(err, supervise.ErrDeadlinePassed) {
		s.log.Warn("the lease's validity ended before CMD could start (was baton paused?)", "lock", l.Name(), "token", l.Token())
		return nil, errTermOver
	}
	if err != nil {
		s.startErr = startError(s.argv[0], err)
		return nil, s.startErr
	}
	s.child = c
	s.log.Log(context.Background(), s.lifecycle, "started CMD", "lock", l.Name(), "token", l.Token(), "pid", c.Pid(), "cmd", s.argv[0])
	return c, nil
}

// startError maps a failure to start CMD to exit code 127 (not found) or
// 126 (found but not runnable, or its watchdog could not start), as shells
// and env(1) do. A limit that stopped the start (processes, open files) is
// named with its fix.
func startError(name string, err error) error {
	var wd *supervise.WatchdogError
	if !errors.As(err, &wd) && (errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist)) {
		if why := missingInterpreter(name); why != "" {
			return failf(ExitNotFound, "cannot run %q: %w; %s", name, err, why)
		}
		if errors.Is(err, exec.ErrNotFound) {
			return failf(ExitNotFound, "cannot run %q: %w; %s", name, err, pathHint())
		}
		return failf(ExitNotFound, "cannot run %q: %w", name, err)
	}
	if fix := limitFix(err); fix != "" {
		return failf(ExitCannotRun, "cannot run %q: %w; %s", name, err, fix)
	}
	return failf(ExitCannotRun, "cannot run %q: %w", name, err)
}

// limitFix says which limit err (a failed fork or pipe) ran into, and how
// to raise it; "" for other errors. Each term of run and lock needs two
// processes (CMD and its watchdog, a copy of baton with a few threads)
// and a few file descriptors.
func limitFix(err error) string {
	switch {
	case errors.Is(err, syscall.EAGAIN):
		return "the user's process limit (ulimit -u, LimitNPROC= in systemd) or the cgroup's pids.max is reached: baton needs two processes besides its own for each term (CMD and its watchdog): raise the limit, or run fewer processes"
	case errors.Is(err, syscall.EMFILE):
		return "baton has as many files open as its limit allows (ulimit -n, LimitNOFILE= in systemd): raise it"
	case errors.Is(err, syscall.ENFILE):
		return "the system has no file descriptor left (the fs.file-max sysctl): close files elsewhere, or raise it"
	}
	return ""
}

// supervise waits until CMD exits or the lease ends. If the lease ends (or
// its validity is about to end) first, it stops CMD's process group:
// SIGTERM at once, and SIGKILL at the validity end minus the kill lead, or
// at once if that has passed (the process was paused past it). Meanwhile it
// keeps CMD's watchdog told of the kill point as renewals move it, so that
// the group dies by then even if this process is stopped. It returns when
// CMD has exited and the rest of its group and its orphans are dead, with
// CMD's exit code and whether baton (or the watchdog) stopped it.
func (s *supervisor) supervise(ctx context.Context, l *baton.Lease, c *supervise.Child) (code int, stopped bool) {
	killAt := func() time.Time { return l.ValidUntil().Add(-s.lead) }
	// A timer independent of the lease's context: if the validity end
	// approaches without the context having ended (it always ends earlier,
	// at the renew deadline), stop CMD anyway.
	deadline := time.NewTimer(time.Until(killAt()))
	defer deadline.Stop()
	// Renewals move the kill point; the watchdog learns of it at this
	// pace, well within the time a renewal gains.
	push := time.NewTicker(min(max(time.Until(killAt())/8, 10*time.Millisecond), 500*time.Millisecond))
	defer push.Stop()
wait:
	for {
		select {
		case <-c.Done():
			break wait
		case <-ctx.Done():
			// If CMD exited just before, it exited on its own.
			cause, at := context.Cause(ctx), killAt()
			if revoked(cause) {
				// The store says the claim is someone else's: they may be
				// running already, so the validity end no longer counts.
				at = time.Now()
			}
			stopped = s.stopChild(c, at, cause, "lock", l.Name(), "token", l.Token())
			break wait
		case <-push.C:
			if err := c.SetDeadline(killAt()); err != nil {
				s.log.Warn("CMD's watchdog", "err", err)
			}
			if c.WatchdogExited() {
				// Fired, or killed: either way the group is unguarded.
				stopped = s.stopChild(c, time.Now(), errors.New("CMD's watchdog has exited"), "lock", l.Name(), "token", l.Token())
				break wait
			}
		case <-deadline.C:
			if d := time.Until(killAt()); d > 0 { // renewed meanwhile
				deadline.Reset(d)
				continue
			}
			stopped = s.stopChild(c, killAt(), errors.New("validity about to end"), "lock", l.Name(), "token", l.Token())
			break wait
		}
	}
	code, err := c.Wait()
	if err != nil {
		s.log.Warn("CMD output", "err", err)
	}
	if c.End() {
		s.log.Warn("CMD's watchdog killed its process group at the validity end: baton itself was late (stopped or starved?)", "lock", l.Name(), "token", l.Token(), "pid", c.Pid())
		stopped = true
	}
	if n := supervise.KillOrphans(5 * time.Second); n > 0 {
		s.log.Warn("killed processes CMD left behind outside its process group", "lock", l.Name(), "count", n)
	}
	s.mu.Lock()
	s.child = nil
	if !stopped {
		s.exited, s.exitCode = true, code
	}
	s.mu.Unlock()
	s.log.Log(context.Background(), s.lifecycle, "CMD exited", "lock", l.Name(), "token", l.Token(), "pid", c.Pid(), "status", supervise.Describe(c.State()), "stopped_by_baton", stopped)
	return code, stopped
}

// revoked reports a loss the store declared (force-released, or taken over
// after expiry), as opposed to a step-down at the renew deadline.
func revoked(cause error) bool {
	return errors.Is(cause, backend.ErrLost) && !errors.Is(cause, baton.ErrStepDown)
}

// stopChild stops CMD after a loss: SIGTERM now and SIGKILL at killAt, or
// SIGKILL at once if killAt has passed. attrs describe the lease for logs.
// It returns false if CMD had already exited.
func (s *supervisor) stopChild(c *supervise.Child, killAt time.Time, cause error, attrs ...any) bool {
	if c.Exited() {
		return false
	}
	attrs = append(attrs, "pid", c.Pid(), "cause", cause)
	if revoked(cause) {
		s.log.Warn("the store says the lock is no longer ours; killing CMD at once", attrs...)
	} else if d := time.Until(killAt); d <= 0 {
		s.log.Warn("lock lost at or after its validity end; killing CMD at once", attrs...)
	} else {
		s.log.Warn("lock lost; stopping CMD (SIGTERM now, SIGKILL before the validity ends)", append(attrs, "kill_in", d.Round(time.Millisecond))...)
	}
	if c.Stop(killAt) {
		s.log.Warn("killed CMD with SIGKILL", attrs[:len(attrs)-2]...)
	}
	return true
}

// result returns CMD's exit code if it exited on its own.
func (s *supervisor) result() (code int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitCode, s.exited
}

// startFailure returns why CMD could not start, or nil.
func (s *supervisor) startFailure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startErr
}

// signalExitCode is the conventional exit code of a process ended by sig.
func signalExitCode(sig os.Signal) int {
	if ss, ok := sig.(syscall.Signal); ok {
		return 128 + int(ss)
	}
	return ExitFailure
}
