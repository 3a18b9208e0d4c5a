package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/filestore"
	"github.com/baton-go/baton/internal/supervise"
	"github.com/spf13/cobra"
)

const demoLong = `Show leader election on this machine, without any cluster.

The demo starts three replicas of "baton run" as real processes on the file
backend in a temporary directory, with short timings (--ttl 2s
--renew-deadline 1500ms --retry-period 500ms). Each replica's CMD prints its
BATON_TOKEN every second while it leads. Then it:

  1. shows the leader,
  2. kills the leader's supervisor with SIGKILL (no release: its CMD dies
     with it, and a standby takes over with a larger token once the dead
     leader's claim has expired, after the TTL),
  3. sends the new leader SIGTERM (it stops its CMD and releases the lock:
     a standby takes over at once),
  4. stops the remaining replicas, removes the directory and prints a
     timeline.

It takes about 10 seconds.`

// Demo timings: short, so that the whole demo takes about 10 seconds.
const (
	demoLock          = "demo"
	demoTTL           = 2 * time.Second
	demoRenewDeadline = 1500 * time.Millisecond
	demoRetryPeriod   = 500 * time.Millisecond
	demoReplicas      = 3
	demoWorkerCommand = "demo-worker"
)

func (a *app) demoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Watch three local replicas elect a leader, survive a crash and hand over",
		Long:  demoLong,
		Args:  cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), forwardedSignals...)
			defer stop()
			return a.demo(ctx)
		}),
	}
}

// demoWorkerCommand is the CMD of the demo's replicas: it prints its token
// every second until SIGTERM or SIGINT.
func (a *app) demoWorkerCommand() *cobra.Command {
	return &cobra.Command{
		Use:    demoWorkerCommand,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			sigc := make(chan os.Signal, 1)
			signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT)
			defer signal.Stop(sigc)
			token := os.Getenv(EnvToken)
			say := func(msg string) { fmt.Fprintf(a.stdout, "token %s: %s\n", token, msg) }
			say(fmt.Sprintf("working (CMD pid %d)", os.Getpid()))
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					say("working")
				case sig := <-sigc:
					name := sig.String()
					if ss, ok := sig.(syscall.Signal); ok {
						name = supervise.SignalName(ss)
					}
					say("got " + name + ", finishing up")
					return nil
				case <-cmd.Context().Done():
					return nil
				}
			}
		}),
	}
}

type demo struct {
	out   io.Writer
	start time.Time
	exe   string
	dir   string
	store *filestore.Store

	mu       sync.Mutex // serializes output
	timeline []string

	replicas []*demoReplica
}

type demoReplica struct {
	id    string
	child *supervise.Child

	mu     sync.Mutex
	cmdPid int // the pid its CMD printed last
}

var cmdPidRE = regexp.MustCompile(`\(CMD pid (\d+)\)`)

func (r *demoReplica) noteOutput(line string) {
	if m := cmdPidRE.FindStringSubmatch(line); m != nil {
		pid, _ := strconv.Atoi(m[1])
		r.mu.Lock()
		r.cmdPid = pid
		r.mu.Unlock()
	}
}

func (r *demoReplica) lastCmdPid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmdPid
}

func (a *app) demo(ctx context.Context) (err error) {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("demo: cannot find the baton executable: %w", err)
	}
	dir, err := os.MkdirTemp("", "baton-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(dir)
	st, err := filestore.New(dir)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d := &demo{out: a.stdout, start: time.Now(), exe: exe, dir: dir, store: st}
	defer d.stopAll()

	d.say("baton demo: %d replicas of `baton run --name %s` compete on the file backend in %s", demoReplicas, demoLock, dir)
	d.say("timings: --ttl %v --renew-deadline %v --retry-period %v; each leader's CMD prints its BATON_TOKEN every second",
		demoTTL, demoRenewDeadline, demoRetryPeriod)
	for i := 1; i <= demoReplicas; i++ {
		if err := d.startReplica(fmt.Sprintf("replica-%d", i)); err != nil {
			return err
		}
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	changes, err := st.Watch(watchCtx, demoLock)
	if err != nil {
		changes = nil // poll
	}

	// 1. The first leader.
	first, err := d.waitLeader(ctx, changes, 0, 15*time.Second)
	if err != nil {
		return err
	}
	d.event("%s leads (token %d)", first.Holder, first.Token)
	if err := pause(ctx, 2200*time.Millisecond); err != nil {
		return err
	}

	// 2. Crash: SIGKILL the leader's supervisor. On a loaded machine the
	// first leader may have stepped down meanwhile: crash the leader of now.
	first, err = d.currentLeader(ctx, changes, first)
	if err != nil {
		return err
	}
	r1 := d.replica(first.Holder)
	if r1 == nil {
		return fmt.Errorf("demo: the leader %q is not one of the replicas", first.Holder)
	}
	crash := time.Now()
	d.event("SIGKILL %s's supervisor (pid %d): no release; the kernel kills its CMD too", r1.id, r1.child.Pid())
	r1.child.Kill()
	if pid := r1.lastCmdPid(); pid > 0 {
		if gone, _ := supervise.WaitExit(pid, 2*time.Second); gone {
			d.say("%s's CMD (pid %d) is gone too", r1.id, pid)
		} else {
			d.say("warning: %s's CMD (pid %d) survived its supervisor", r1.id, pid)
		}
	}
	second, err := d.waitLeader(ctx, changes, first.Token, 15*time.Second)
	if err != nil {
		return err
	}
	d.event("%s leads (token %d): took over %v after the crash, once the dead leader's claim expired (TTL %v)",
		second.Holder, second.Token, humanDuration(time.Since(crash)), demoTTL)
	if err := pause(ctx, 2200*time.Millisecond); err != nil {
		return err
	}

	// 3. Handover: SIGTERM the new leader (of now); it releases the lock.
	second, err = d.currentLeader(ctx, changes, second)
	if err != nil {
		return err
	}
	r2 := d.replica(second.Holder)
	if r2 == nil {
		return fmt.Errorf("demo: the leader %q is not one of the replicas", second.Holder)
	}
	term := time.Now()
	d.event("SIGTERM %s (pid %d): it forwards SIGTERM to its CMD, waits for it and releases the lock", r2.id, r2.child.Pid())
	_ = r2.child.Signal(syscall.SIGTERM)
	third, err := d.waitLeader(ctx, changes, second.Token, 10*time.Second)
	if err != nil {
		return err
	}
	d.event("%s leads (token %d): took over %v after the SIGTERM, without waiting for the TTL",
		third.Holder, third.Token, humanDuration(time.Since(term)))
	select {
	case <-r2.child.Done():
		code, _ := r2.child.Wait()
		d.say("%s exited with code %d (its CMD's exit code)", r2.id, code)
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	d.showStatus(ctx)
	if err := pause(ctx, 1200*time.Millisecond); err != nil {
		return err
	}

	d.say("stopping the remaining replicas")
	stopWatch()
	d.stopAll()

	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintln(d.out, "\nTimeline:")
	for _, line := range d.timeline {
		fmt.Fprintln(d.out, "  "+line)
	}
	fmt.Fprintf(d.out, "\nFencing tokens only grew (%d, %d, %d): a resource that rejects tokens smaller than the largest it has seen\n"+
		"rejects any late write of an earlier leader. Try it yourself: baton run --name NAME -- CMD\n",
		first.Token, second.Token, third.Token)
	return nil
}

// showStatus prints what `baton status` shows now.
func (d *demo) showStatus(ctx context.Context) {
	recs, err := (&statusView{st: d.store}).read(ctx)
	if err != nil {
		return
	}
	var b bytes.Buffer
	v := &statusView{out: &b, st: d.store, where: d.dir}
	if v.print(recs, time.Now()) != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "%-8s $ baton status --dir %s\n", d.stamp(), d.dir)
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		fmt.Fprintf(d.out, "%-8s   %s\n", "", line)
	}
}

func (d *demo) stamp() string {
	return fmt.Sprintf("+%.2fs", time.Since(d.start).Seconds())
}

// say prints a line with the time since the demo started.
func (d *demo) say(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "%-8s %s\n", d.stamp(), fmt.Sprintf(format, args...))
}

// event says a line and keeps it for the timeline.
func (d *demo) event(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	line := fmt.Sprintf("%-8s %s", d.stamp(), fmt.Sprintf(format, args...))
	d.timeline = append(d.timeline, line)
	fmt.Fprintln(d.out, line)
}

func (d *demo) replica(id string) *demoReplica {
	for _, r := range d.replicas {
		if r.id == id {
			return r
		}
	}
	return nil
}

func (d *demo) startReplica(id string) error {
	cmd := exec.Command(d.exe, "run",
		"--name", demoLock, "--backend", "file", "--dir", d.dir,
		"--ttl", demoTTL.String(), "--renew-deadline", demoRenewDeadline.String(), "--retry-period", demoRetryPeriod.String(),
		"--identity", id, "--log-level", "warn",
		"--", d.exe, demoWorkerCommand)
	r := &demoReplica{id: id}
	cmd.Stdout = &lineWriter{emit: func(line string) {
		r.noteOutput(line)
		d.say("  [%s] %s", id, line)
	}}
	cmd.Stderr = &lineWriter{emit: func(line string) { d.say("  [%s log] %s", id, line) }}
	// Its own process group: the demo signals each replica alone, and a
	// Ctrl-C in the terminal reaches the demo, which stops them all.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 2 * time.Second
	c, err := supervise.Start(cmd)
	if err != nil {
		return fmt.Errorf("demo: starting %s: %w", id, err)
	}
	r.child = c
	d.replicas = append(d.replicas, r)
	d.say("started %s (pid %d)", id, c.Pid())
	return nil
}

// currentLeader returns the leader now, telling of a change since last
// (a leader that stepped down on a loaded machine, and its successor).
func (d *demo) currentLeader(ctx context.Context, changes <-chan struct{}, last backend.Record) (backend.Record, error) {
	now, err := d.waitLeader(ctx, changes, 0, 15*time.Second)
	if err != nil {
		return backend.Record{}, err
	}
	if now.Token != last.Token {
		d.event("%s leads (token %d): %s (token %d) stepped down meanwhile (a busy machine?)", now.Holder, now.Token, last.Holder, last.Token)
	}
	return now, nil
}

// waitLeader waits until the lock is held with a token larger than after.
func (d *demo) waitLeader(ctx context.Context, changes <-chan struct{}, after uint64, timeout time.Duration) (backend.Record, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	for {
		r, err := d.store.Get(ctx, demoLock)
		if err == nil && r.Held() && r.Token > after {
			return r, nil
		}
		if err != nil && !errors.Is(err, backend.ErrNotFound) {
			return backend.Record{}, fmt.Errorf("demo: reading the lock: %w", err)
		}
		select {
		case <-ctx.Done():
			return backend.Record{}, ctx.Err()
		case <-deadline.C:
			return backend.Record{}, fmt.Errorf("demo: no new leader (token > %d) within %v", after, timeout)
		case _, ok := <-changes:
			if !ok {
				changes = nil
			}
		case <-poll.C:
		}
	}
}

// stopAll stops every replica still running: SIGTERM, then SIGKILL to its
// process group after 5s. It is safe to call more than once.
func (d *demo) stopAll() {
	for _, r := range d.replicas {
		_ = r.child.Signal(syscall.SIGTERM)
	}
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for _, r := range d.replicas {
		select {
		case <-r.child.Done():
		case <-deadline.C:
		}
		if !r.child.Exited() {
			_ = syscall.Kill(-r.child.Pid(), syscall.SIGKILL)
			<-r.child.Done()
		}
	}
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// lineWriter calls emit for every complete line written to it, and for a
// last unterminated line on Close.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	emit func(line string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		i := bytes.IndexByte(w.buf.Bytes(), '\n')
		if i < 0 {
			return len(p), nil
		}
		line := strings.TrimRight(string(w.buf.Next(i+1)), "\r\n")
		w.emit(line)
	}
}
