package cli

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/kubestore"
)

const runLong = `Run CMD only while this process is the leader of lock NAME.

baton campaigns for the lock; while it leads it runs CMD with
  BATON_LOCK=NAME  BATON_HOLDER=<identity>  BATON_TOKEN=<fencing token>
in its environment. Standbys wait (on the file backend: for a change of the
lock file) and take over when the leader releases the lock, or once its claim
has expired (--ttl after its last renewal) if it crashed.

Losing the lock: when renewals fail for --renew-deadline, baton sends CMD
SIGTERM at once and SIGKILL shortly before the lease's validity ends
(validity end minus max(safety margin, 100ms)), so that CMD is dead before
anyone else can acquire the lock. If the validity end has already passed
when the loss is noticed (the process was paused, for example with SIGSTOP),
or the store says the lock is someone else's (force-released, or taken after
expiry), CMD gets SIGKILL at once. baton then
campaigns again and restarts CMD, with a new token, when it leads again.
A write CMD makes after a pause cannot be stopped by any lease: make the
resource reject tokens smaller than the largest it has seen.

When CMD exits on its own, baton releases the lock (a standby takes over at
once) and exits with CMD's exit code (128+N if signal N ended it). To lead
for as long as baton runs, CMD must not exit.

Signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are
forwarded to CMD while it runs; baton then waits for CMD to exit, releases
the lock and exits with CMD's code. A CMD that survives one of the last
four (a reload, a thread dump) leads on, and baton still campaigns again after a loss; after SIGINT
or SIGTERM it does not.
Before CMD has started (while campaigning) they stop baton at once with exit
code 128+N.

Processes (Linux): CMD runs in a process group of its own, and baton signals
the whole group, so the processes CMD starts stop with it. A watchdog
process in that group kills it with SIGKILL at the kill point even if baton
itself is stopped or starved, and at once if baton dies (the kernel also
kills CMD then, even if baton dies by SIGKILL). baton is a child subreaper:
orphaned descendants of CMD become its children, are reaped (no zombies) and
are killed when the term ends. A signal sent to baton's own process group
(Ctrl-C) reaches CMD only as forwarded by baton.

` + dirDoc + `

` + exitCodesHelp

func (a *app) runCommand() *cobra.Command {
	var (
		f        lockFlags
		httpAddr string
		label    string
	)
	cmd := &cobra.Command{
		Use:   "run --name NAME [flags] -- CMD [ARGS...]",
		Short: "Run CMD only while this process is the leader",
		Long:  runLong,
		Example: `  baton run --name scheduler -- ./scheduler --serve
  baton run --name reports --ttl 30s --renew-deadline 20s --retry-period 4s -- ./report-worker`,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := f.validate(a.log); err != nil {
				return err
			}
			argv, err := commandArgs(cmd, args)
			if err != nil {
				return err
			}
			if httpAddr != "" {
				_, port, err := net.SplitHostPort(httpAddr)
				if err != nil {
					return usageErrorf("--http %q: want HOST:PORT or :PORT: %w", httpAddr, err)
				}
				if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
					return usageErrorf("--http %q: the port %q is not a number from 0 to 65535", httpAddr, port)
				}
			}
			if label != "" {
				if _, _, err := kubestore.ParseLabel(label); err != nil {
					return usageErrorf("--leader-label: %w", err)
				}
			}
			return a.run(cmd.Context(), &f, httpAddr, label, argv)
		}),
	}
	cmd.Flags().SetInterspersed(false)
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&httpAddr, "http", "", "serve /healthz, /readyz (200 while baton runs, leading or campaigning, even while the store does not answer: use it for readiness; alert on /metrics for the store), /leader (200 only while leading) and /metrics (Prometheus) on this address, such as :8080")
	cmd.Flags().StringVar(&label, "leader-label", "", "Kubernetes: put this KEY=VALUE label on this replica's Pod ($POD_NAME, else the host name) while it leads, and take it from any other Pod, so that a Service can select the leader; the Pod also gets a pod-deletion-cost, so that a rolling update deletes the standbys first; needs get, list and patch on pods")
	return cmd
}

// commandArgs returns CMD and its arguments, which follow "--" (or the
// flags).
func commandArgs(cmd *cobra.Command, args []string) ([]string, error) {
	if len(args) == 0 || args[0] == "" {
		return nil, usageErrorf("missing CMD: give the command to run after \"--\", as in: %s --name NAME -- CMD [ARGS...]", cmd.CommandPath())
	}
	return args, nil
}

func (a *app) run(ctx context.Context, f *lockFlags, httpAddr, label string, argv []string) error {
	labeler, err := f.newLeaderLabel(label, a.log)
	if err != nil {
		return err
	}
	// Run's context does not end with ctx: ctx ending is handled like
	// SIGINT (forwarded to CMD while it runs), so in-process callers see the
	// same behaviour as a user pressing Ctrl-C.
	// It ends with the supervisor's stopCause, which the end of the last
	// term reports (not a bare "context canceled"). Signals are routed from
	// the start, so that one that comes while the store is still being
	// reached stops baton with 128+N, as a PID 1 (in a container) that left
	// it to Go would not: exit 2.
	runCtx, cancelRun := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelRun(nil)
	s := &supervisor{argv: argv, stdin: a.stdin, stdout: a.stdout, stderr: a.stderr, log: a.log, lead: f.killLead(), lifecycle: slog.LevelInfo}
	cancel := func() { cancelRun(s.stopCause()) }
	s.stop = cancel
	stopSignals := s.handleSignals()
	defer stopSignals()
	stopOnDone := context.AfterFunc(ctx, func() { s.onSignal(syscall.SIGINT) })
	defer stopOnDone()
	st, where, err := a.openReachable(runCtx, &f.storeFlags, f.name, f.connectTimeout, "")
	if err != nil {
		return s.stopErr(err)
	}
	defer closeStore(st)
	opts := append(f.options(a.log),
		// Run waits for work (and so for CMD, which is killed before the
		// validity end) at least that long after a term ends: never
		// abandon a term whose CMD may still run.
		baton.WithGrace(f.ttl+5*time.Second),
	)
	waiting := newWaitReporter(a.log, f.name)
	defer waiting.Close()
	observers := []baton.Observer{waiting}
	if obs, err := f.kube.eventObserver(f.backend, st, a.log); err != nil {
		a.log.Warn("not recording Kubernetes Events", "err", err)
	} else if obs != nil {
		defer obs.Close()
		observers = append(observers, obs)
	}
	var status *statusServer
	if httpAddr != "" {
		if status, err = listenStatus(httpAddr, f.name, a.log); err != nil {
			return err
		}
		opts = append(opts, baton.OnStartedLeading(status.started))
		observers = append(observers, status.metrics)
	}
	opts = append(opts, baton.WithObserver(baton.Observers(observers...)))
	el, err := baton.NewElector(st, f.name, opts...)
	if err != nil {
		if status != nil {
			_ = status.ln.Close()
		}
		return &exitError{code: ExitUsage, err: err}
	}
	if status != nil {
		status.serve(el)
		defer status.shutdown()
	}
	a.log.Info("campaigning", "lock", f.name, "identity", el.Identity(), "store", where)
	err = el.Run(runCtx, s.term(labeler, cancel))
	return s.exitErr(err)
}

// term is the Elector's work for one term: it starts CMD, labels the pod
// as leader while CMD runs, and supervises it until it exits or the term
// ends. stop ends the run (Run's context): on a signal, when CMD cannot
// start, and when CMD exited on its own.
func (s *supervisor) term(labeler *leaderLabel, stop func()) func(ctx context.Context, l *baton.Lease) error {
	return func(ctx context.Context, l *baton.Lease) error {
		if ctx.Err() != nil {
			return nil // the term ended before CMD could start
		}
		c, err := s.start(l)
		if errors.Is(err, errTermOver) {
			return nil // Run campaigns again
		}
		if err != nil {
			stop() // a signal arrived, or CMD cannot start: stop campaigning
			return err
		}
		labeler.lead(ctx)
		defer labeler.unlead() // before Run releases the lock
		if _, stopped := s.supervise(ctx, l, c); stopped {
			if s.signaled() != nil {
				stop() // stopped on a loss while a signal asked to stop
			}
			return nil // Run campaigns again
		}
		// CMD exited on its own: the run is over. Stopping makes Run
		// release the lock and return even if the term ended meanwhile.
		stop()
		return nil
	}
}

// exitErr is baton run's result once the Elector's Run returned err: CMD's
// exit code, its failure to start, the signal that stopped baton, or err.
func (s *supervisor) exitErr(err error) error {
	if code, ok := s.result(); ok {
		return exitCode(code)
	}
	if serr := s.startFailure(); serr != nil {
		return serr
	}
	if sig := s.signaled(); sig != nil {
		return exitCode(signalExitCode(sig))
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
