// Package cli implements the baton command line tool: run, lock, status and
// demo. Main is the whole program; cmd/baton only calls it, and tests call it
// in-process or re-execute their own binary as the CLI.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/spf13/cobra"
)

// Exit codes of the baton command. A command run under `baton run` or
// `baton lock` passes its own exit code through instead (128+N if signal N
// ended it).
const (
	// ExitOK: success.
	ExitOK = 0
	// ExitFailure: a runtime error, such as an error from the store, or the
	// lock was lost while `baton lock` ran its command.
	ExitFailure = 1
	// ExitUsage: invalid command line (unknown flag, bad value, impossible
	// timing, invalid lock name, missing command).
	ExitUsage = 2
	// ExitUnavailable (EX_UNAVAILABLE from sysexits.h): the store could not
	// be reached, for --connect-timeout at start-up or when --wait ran out.
	ExitUnavailable = 69
	// ExitHeld (EX_TEMPFAIL from sysexits.h): `baton lock` gave up because
	// another owner held the lock at its last attempt.
	ExitHeld = 75
	// ExitNoPermission (EX_NOPERM): the store refused the credentials or
	// the operation (RBAC, ACL, etcd roles, file modes).
	ExitNoPermission = 77
	// ExitConfig (EX_CONFIG): the store answers but the setup cannot work:
	// a missing namespace or CRD, a TLS setup that fails.
	ExitConfig = 78
	// ExitCannotRun: the command was found but could not be started.
	ExitCannotRun = 126
	// ExitNotFound: the command was not found.
	ExitNotFound = 127
)

const exitCodesHelp = `Exit codes:
  0     success
  N     under "run" and "lock": the exit code of CMD (128+N if signal N ended CMD)
  1     runtime error (for example the store failed, or "lock" lost the lock
        while CMD ran)
  2     usage error: unknown flag, invalid value, impossible timing, invalid
        lock name, missing CMD, a flag of another backend than --backend's
  69    the store could not be reached (for --connect-timeout at start-up,
        or when --wait ran out)
  75    "lock": another owner held the lock when --wait ran out; "remove": a
        lock was held (or queued for), and kept
  77    the store refused the credentials or the operation (RBAC, ACL, roles,
        file modes)
  78    the store's setup cannot work: missing namespace or CRD, TLS failure
  126   CMD could not be started
  127   CMD was not found
  128+N "run" and "lock" were stopped by signal N before CMD started`

// exitError carries an exit code through cobra. A nil err exits silently.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

func failf(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

// exitCode returns silently with code.
func exitCode(code int) error { return &exitError{code: code} }

// app holds what every command shares.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer

	logLevel  string
	logFormat string
	level     slog.Level // logLevel parsed
	log       *slog.Logger
}

// Main runs the baton command with args (without the program name) and
// returns its exit code. It never calls os.Exit. ctx ending stops a
// long-running command as an interrupt would. stdout and stderr that are
// not files are written from one goroutine at a time: baton's own output
// and CMD's (which os/exec copies in a goroutine of its own) share them.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	stdout, stderr = serialized(stdout), serialized(stderr)
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// Errors that do not come from a command's RunE come from cobra
		// itself: unknown command or flag, bad flag value, wrong arguments.
		ee = &exitError{code: ExitUsage, err: err}
	}
	if ee.code == ExitHeld && a.log != nil && a.level > slog.LevelWarn {
		// Another run holding the lock is no error: --log-level error
		// keeps a crontab's `lock --wait 0` as quiet as flock -n, so
		// that cron mails only real failures; 75 still says it.
		return ee.code
	}
	if ee.err != nil {
		msg := ee.err.Error()
		if !strings.HasPrefix(msg, "baton: ") {
			msg = "baton: " + msg
		}
		if a.logFormat == "json" && a.log != nil {
			// One object per line, as --log-format json promises, for
			// the log collector that reads stderr.
			a.log.Error(msg, "exit_code", ee.code)
			return ee.code
		}
		fmt.Fprintln(stderr, msg)
		if ee.code == ExitUsage && cmd != nil {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	}
	return ee.code
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "baton",
		Short: "Distributed locks and leader election with fencing tokens",
		Long: `baton runs a command under a distributed lock: only while this process is
the leader (run), or once while holding the lock (lock). The command gets the
lock's fencing token in $BATON_TOKEN: pass it to the resource it writes to, so
that a write made after the lock was lost is rejected.

Start with "baton demo": three replicas on the file backend, a crash, a
takeover with a larger token, and a handover on release.

` + exitCodesHelp,
		SilenceErrors: true,
		SilenceUsage:  true,
		// --version prints what "baton version" prints.
		Version: versionText(),
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.setupLogging()
		},
	}
	root.PersistentFlags().StringVar(&a.logLevel, "log-level", "info", "log level on stderr: debug, info, warn or error (error also leaves out lock's message that another owner holds the lock: exit 75 says it)")
	root.PersistentFlags().StringVar(&a.logFormat, "log-format", "text", "log format on stderr: text (key=value) or json (one object per line)")
	root.SetVersionTemplate("{{.Version}}")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: ExitUsage, err: err}
	})
	root.AddCommand(a.runCommand(), a.lockCommand(), a.statusCommand(), a.releaseCommand(), a.doctorCommand(), a.demoCommand(), a.demoWorkerCommand(), a.nameCommand(), a.removeCommand(), a.versionCommand())
	registerCompletions(root)
	return root
}

func (a *app) setupLogging() error {
	var level slog.Level
	switch strings.ToLower(a.logLevel) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return usageErrorf("invalid --log-level %q (want debug, info, warn or error)", a.logLevel)
	}
	h, err := newHandler(a.stderr, a.logFormat, level)
	if err != nil {
		return err
	}
	a.level, a.log = level, slog.New(h)
	libraryLogs.use(a.log)
	return nil
}

// runE adapts a command body so that every error it returns carries an exit
// code: errors without one are runtime errors (exit 1). Errors that reach
// Main without an exitError therefore come from cobra's own parsing.
func runE(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := f(cmd, args)
		if err == nil {
			return nil
		}
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		return &exitError{code: exitCodeOf(err), err: err}
	}
}

// serialized returns w, or, if w is not a file, w behind a mutex: a file
// is handed to CMD as it is, but any other writer is written by os/exec's
// copying goroutine while baton logs to it (a bytes.Buffer raced).
func serialized(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok || w == nil {
		return w
	}
	return &lockedWriter{w: w}
}

// lockedWriter serialises the writes to w. It has no ReadFrom, so that
// io.Copy goes through Write.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
