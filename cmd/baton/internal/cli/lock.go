package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
)

const lockLong = `Run CMD once while holding lock NAME, like flock(1) across processes.

baton waits for the lock (--wait: "forever" by default, 0 to try once), runs
CMD with BATON_LOCK, BATON_HOLDER and BATON_TOKEN (the fencing token) in its
environment, renews the lock while CMD runs, releases it when CMD exits, and
exits with CMD's exit code (128+N if signal N ended it).

If the lock is still held when --wait runs out, baton exits with code 75
(EX_TEMPFAIL) and names the holder (not with --log-level error: as quiet
as flock -n, for cron). A signal (SIGINT, SIGTERM, SIGHUP,
SIGQUIT, SIGUSR1, SIGUSR2) while waiting stops baton at once with code 128+N; while CMD runs
it is forwarded to CMD.

If the lock is lost while CMD runs (renewals failed for --renew-deadline),
CMD gets SIGTERM at once and SIGKILL shortly before the lease's validity
ends (at once if that has passed, or if the store says the lock is someone
else's), and baton exits with code 1, or 78 if the loss shows that the
setup cannot work (the file backend's directory found shared with another
machine). A loss that only the release finds (CMD exited before the next
renewal; a forced release) keeps CMD's exit code with a warning, or exits
78 if it shows that.

` + dirDoc + `

` + exitCodesHelp

func (a *app) lockCommand() *cobra.Command {
	var (
		f    lockFlags
		wait = waitValue{forever: true}
	)
	cmd := &cobra.Command{
		Use:   "lock --name NAME [--wait D] [flags] -- CMD [ARGS...]",
		Short: "Run CMD once while holding the lock",
		Long:  lockLong,
		Example: `  baton lock --name nightly-report -- ./report.sh
  baton lock --name migrate --wait 0 -- ./migrate up    # exit 75 if another migration runs`,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := f.validate(a.log); err != nil {
				return err
			}
			argv, err := commandArgs(cmd, args)
			if err != nil {
				return err
			}
			return a.lock(cmd.Context(), &f, wait, argv)
		}),
	}
	cmd.Flags().SetInterspersed(false)
	f.register(cmd.Flags())
	cmd.Flags().Var(&wait, "wait", `how long to wait for the lock, counted from the store's first answer (reaching it at start-up is bounded by --connect-timeout): a duration, 0 to try once, or "forever"`)
	return cmd
}

var errWaitTimeout = errors.New("wait ran out")

func (a *app) lock(ctx context.Context, f *lockFlags, wait waitValue, argv []string) error {
	// Signals are routed from the start, so that one that comes while the
	// store is still being reached stops baton with 128+N, as a PID 1
	// (in a container) that left it to Go would not: exit 2.
	waitCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	s := &supervisor{argv: argv, stdin: a.stdin, stdout: a.stdout, stderr: a.stderr, log: a.log, lead: f.killLead(), stop: cancel, lifecycle: slog.LevelDebug}
	stopSignals := s.handleSignals()
	defer stopSignals()
	stopOnDone := context.AfterFunc(ctx, func() { s.onSignal(syscall.SIGINT) })
	defer stopOnDone()
	connect, why := connectTimeout(f, wait)
	st, where, err := a.openReachable(waitCtx, &f.storeFlags, f.name, connect, why)
	if err != nil {
		return s.stopErr(err)
	}
	defer closeStore(st)
	mu, stopReports, err := a.lockMutex(st, f, wait)
	if err != nil {
		return err
	}
	defer stopReports()

	a.log.Debug("acquiring", "lock", f.name, "identity", mu.Identity(), "wait", wait.String(), "store", where)
	var l *baton.Lease
	switch {
	case !wait.forever && wait.d == 0:
		l, err = mu.TryLock(waitCtx)
	case !wait.forever:
		tctx, tcancel := context.WithTimeoutCause(waitCtx, wait.d, errWaitTimeout)
		l, err = mu.Lock(tctx)
		if err != nil && context.Cause(tctx) == errWaitTimeout {
			err = fmt.Errorf("%w (%w)", err, errWaitTimeout)
		}
		tcancel()
	default:
		l, err = mu.Lock(waitCtx)
	}
	if err != nil {
		if sig := s.signaled(); sig != nil {
			return exitCode(signalExitCode(sig))
		}
		if errors.Is(err, errWaitTimeout) {
			var silent error
			if err, silent = a.askAtEndOfWait(st, f, wait.d, err); silent != nil {
				return silent
			}
		}
		var held *backend.HeldError
		switch {
		case errors.As(err, &held) && !wait.forever && wait.d == 0:
			return failf(ExitHeld, "lock %q is held by %s; not waiting (--wait 0)", f.name, describeHolder(held, mu.Identity()))
		case errors.As(err, &held) && !wait.forever:
			return failf(ExitHeld, "lock %q is still held by %s after waiting %v", f.name, describeHolder(held, mu.Identity()), wait.d)
		case errors.Is(err, errWaitTimeout):
			// Not held at the last attempt: the message keeps its cause.
			return failf(exitCodeOf(err), "lock %q: gave up after waiting %v: %w", f.name, wait.d, err)
		}
		return err
	}
	a.log.Debug("acquired", "lock", f.name, "token", l.Token())

	c, err := s.start(l)
	if err != nil {
		_ = a.unlock(l)
		if errors.Is(err, errStopping) {
			return exitCode(signalExitCode(s.signaled()))
		}
		return err
	}
	code, stopped := s.supervise(l.Context(), l, c)
	if stopped {
		cause := context.Cause(l.Context())
		_ = a.unlock(l)
		return failf(lostExitCode(cause), "lock %q was lost while CMD ran, and CMD was stopped: %v", f.name, cause)
	}
	return a.releaseAfterCMD(l, code)
}

// releaseAfterCMD releases l once CMD exited with code on its own, and
// returns baton's exit: CMD's code, or 78 if the release found the lock
// taken in a way that shows the setup cannot work (a loss that only the
// release found is warned about).
func (a *app) releaseAfterCMD(l *baton.Lease, code int) error {
	if err := a.unlock(l); errors.Is(err, backend.ErrMisconfigured) {
		return failf(ExitConfig, "lock %q was taken while CMD ran (CMD exited %d before a renewal could tell, its release found out): %v", l.Name(), code, err)
	} else if errors.Is(err, backend.ErrLost) {
		a.log.Warn("the lock was taken or force-released while CMD ran: its release found it no longer this holder's, so CMD's work may have overlapped another holder's", "lock", l.Name(), "token", l.Token(), "err", err)
	}
	return exitCode(code)
}

// askAtEndOfWait asks the store once more who holds the lock when --wait
// ran out (err: Lock's error), bounded by --connect-timeout and 5 s. The
// last attempt may have been answered long before: a waiter sleeps on its
// watch until the claim it saw can end, and a store that went silent since
// (a stopped server, a partition) breaks no watch until its health check
// notices. So "still held" (75) stands only if the store answers now. If
// it answers, askAtEndOfWait returns err with the holder it names now, if
// one, in front; if it does not, silent is the error lock exits with: the
// store's (69 for no answer).
func (a *app) askAtEndOfWait(st store, f *lockFlags, waited time.Duration, err error) (_, silent error) {
	bound := min(f.connectTimeout, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	r, gerr := st.Get(ctx, f.name)
	switch {
	case gerr == nil && r.Held():
		return fmt.Errorf("%w: %w", &backend.HeldError{Key: f.name, Holder: r.Holder, Token: r.Token}, err), nil
	case gerr == nil, errors.Is(gerr, backend.ErrNotFound):
		return err, nil
	}
	last := err.Error()
	if held := (*backend.HeldError)(nil); errors.As(err, &held) {
		last = "held by " + describeHolder(held, "")
	}
	if ctx.Err() != nil {
		return err, failf(ExitUnavailable, "lock %q: gave up after waiting %v; the store then did not answer within %v when asked who holds the lock (its last answer: %s)",
			f.name, waited, bound, last)
	}
	return err, failf(exitCodeOf(gerr), "lock %q: gave up after waiting %v; asking the store who holds the lock then failed: %w (its last answer: %s)",
		f.name, waited, gerr, last)
}

// lostExitCode is lock's exit code after losing the lock for cause: 1, or
// 78 if the loss shows the setup cannot work (a file store's directory
// shared with another machine).
func lostExitCode(cause error) int {
	if errors.Is(cause, backend.ErrMisconfigured) {
		return ExitConfig
	}
	return ExitFailure
}

// lockMutex returns the Mutex of lock: one that says what it waits for,
// unless --wait 0 tries once; stop ends those reports.
func (a *app) lockMutex(st store, f *lockFlags, wait waitValue) (mu *baton.Mutex, stop func(), err error) {
	opts, stop := f.options(a.log), func() {}
	if wait.forever || wait.d > 0 {
		waiting := newWaitReporter(a.log, f.name)
		opts, stop = append(opts, baton.WithObserver(waiting)), waiting.Close
	}
	mu, err = baton.NewMutex(st, f.name, opts...)
	if err != nil {
		stop()
		return nil, nil, &exitError{code: ExitUsage, err: err}
	}
	return mu, stop, nil
}

// connectTimeout is how long lock keeps trying an unreachable store at
// start-up, and why, if not --connect-timeout: never longer than --wait
// (--wait 0 tries once).
func connectTimeout(f *lockFlags, wait waitValue) (time.Duration, string) {
	if !wait.forever && wait.d < f.connectTimeout {
		return wait.d, ": --wait is shorter"
	}
	return f.connectTimeout, ""
}

// describeHolder names the holder of a HeldError: `"web-1" (token 3)`.
func describeHolder(h *backend.HeldError, self string) string {
	switch h.Holder {
	case "":
		return fmt.Sprintf("another owner (token %d)", h.Token)
	case self:
		// Not this process's own claim: it would have been collected.
		return fmt.Sprintf("%q (token %d), this process's own identity: another process runs with the same --identity, or, on redlock, two --redis-url reach one server (baton doctor checks both)", h.Holder, h.Token)
	}
	return fmt.Sprintf("%q (token %d)", h.Holder, h.Token)
}

// unlock releases l, bounded in time; a failure only means the lock expires
// after its TTL instead of at once. It returns the release's error: one
// matching backend.ErrLost says that the store had given the lock to
// another claim (or freed it) by then.
func (a *app) unlock(l *baton.Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := l.Unlock(ctx)
	switch {
	case errors.Is(err, backend.ErrLost):
		a.log.Debug("not released: the lock was lost", "lock", l.Name(), "err", err)
	case err != nil:
		a.log.Warn("release failed; the lock expires after its TTL", "lock", l.Name(), "err", err)
	}
	return err
}
