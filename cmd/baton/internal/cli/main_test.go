package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-go/baton/cmd/baton/internal/cli"
)

// The test binary doubles as the baton CLI (and as the commands baton runs)
// when roleEnv is set, so that the tests run real processes without a
// separate build.
const roleEnv = "BATON_CLI_TEST_ROLE"

// Test-only commands of the re-executed binary (first argument).
const (
	cmdFenceWorker = "test-fence-worker" // writes to the fence server with $BATON_TOKEN in a loop
	cmdExit        = "test-exit"         // test-exit N: exit with code N
	cmdEnv         = "test-env"          // print the BATON_* environment
	cmdStubborn    = "test-stubborn"     // ignore SIGTERM, say "ready", block
)

// enterOtherKernel, if set (on Linux), makes this process see the boot ID
// in the file named by envBootID, as a process on another machine would
// (see TestRunOnAnotherKernel).
var enterOtherKernel func(bootIDFile string) error

// envBootID names a file whose boot ID the re-executed CLI sees.
const envBootID = "BATON_CLI_TEST_BOOT_ID"

// hideProc, if set (on Linux), mounts an empty file system over /proc in
// this process's mount namespace, as a chroot without /proc has; the
// re-executed CLI calls it when envHideProc is set.
var hideProc func() error

const envHideProc = "BATON_CLI_TEST_HIDE_PROC"

// startChildrenWithSIGHUP makes the CLI processes the tests start get
// SIGHUP's default action, as from a terminal, even where the tests run
// with SIGHUP ignored (under nohup, as a background CI job may): a child
// inherits an ignored signal, and baton leaves such a one ignored (see
// TestRunUnderNohup), so a test that forwards SIGHUP would fail
// there. A caught signal is reset to its default by exec, so this process
// catches SIGHUP, and drops it (it had ignored it). A test of baton under
// nohup runs nohup itself.
func startChildrenWithSIGHUP() {
	if signal.Ignored(syscall.SIGHUP) {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "cli" {
		if f := os.Getenv(envBootID); f != "" {
			if enterOtherKernel == nil {
				fmt.Fprintln(os.Stderr, "test: another boot ID is not supported on this system")
				os.Exit(125)
			}
			if err := enterOtherKernel(f); err != nil {
				fmt.Fprintln(os.Stderr, "test: entering another boot ID:", err)
				os.Exit(125)
			}
		}
		if os.Getenv(envHideProc) != "" && hideProc != nil {
			if err := hideProc(); err != nil {
				fmt.Fprintln(os.Stderr, "test: hiding /proc:", err)
				os.Exit(125)
			}
		}
		args := os.Args[1:]
		if len(args) > 0 {
			switch args[0] {
			case cmdFenceWorker:
				os.Exit(fenceWorker(args[1:]))
			case cmdExit:
				code, _ := strconv.Atoi(args[1])
				os.Exit(code)
			case cmdStubborn:
				signal.Ignore(syscall.SIGTERM)
				fmt.Println("ready")
				select {}
			case cmdEnv:
				for _, k := range []string{cli.EnvLock, cli.EnvHolder, cli.EnvToken} {
					fmt.Printf("%s=%s\n", k, os.Getenv(k))
				}
				os.Exit(0)
			}
		}
		os.Exit(cli.Main(context.Background(), args, os.Stdin, os.Stdout, os.Stderr))
	}
	startChildrenWithSIGHUP()
	code := m.Run()
	// The Kubernetes tests share one control plane; stop it before looking
	// for leaked goroutines.
	if err := stopControlPlane(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// exe is the test binary, run as the CLI.
func exe() string { return os.Args[0] }

// Short timings for the process tests: a takeover after a crash takes about
// testTTL. They leave room for a loaded machine running -race: a holder
// steps down only if renewals fail for 1.4s.
var timing = []string{"--ttl", "2s", "--renew-deadline", "1400ms", "--retry-period", "300ms"}

// syncBuffer is a bytes.Buffer for concurrent use that can wait for text.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{changed: make(chan struct{})} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.changed)
	b.changed = make(chan struct{})
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until the buffer contains s.
func (b *syncBuffer) waitFor(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		found, changed := strings.Contains(b.buf.String(), s), b.changed
		b.mu.Unlock()
		if found {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("did not see %q within %v; output so far:\n%s", s, timeout, b.String())
		}
	}
}

// proc is a baton CLI process started by a test, in its own process group.
type proc struct {
	t              *testing.T
	name           string
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
	code           int
}

func startCLI(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	return startCLIWith(t, name, env, &syscall.SysProcAttr{Setpgid: true}, args...)
}

// startCLIWith is startCLI with the process attributes attr, which must
// include Setpgid.
func startCLIWith(t *testing.T, name string, env []string, attr *syscall.SysProcAttr, args ...string) *proc {
	t.Helper()
	return startCommand(t, name, env, attr, append([]string{exe()}, args...))
}

// startCommand is startCLIWith for a command line argv that runs the CLI
// (exe(), or a wrapper such as nohup that executes it).
func startCommand(t *testing.T, name string, env []string, attr *syscall.SysProcAttr, argv []string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, stdout: newSyncBuffer(), stderr: newSyncBuffer(), done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	// atexit_sleep_ms=0: a race-enabled binary otherwise sleeps 1s on exit.
	p.cmd.Env = append(append(os.Environ(), roleEnv+"=cli", "GORACE=atexit_sleep_ms=0"), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.SysProcAttr = attr
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = exitCodeOf(p.cmd.ProcessState)
		close(p.done)
	}()
	t.Cleanup(func() {
		// Whatever the test did (stopped the group, killed the
		// supervisor only), nothing of this process group survives.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("%s stdout:\n%s\n%s stderr:\n%s", p.name, p.stdout, p.name, p.stderr)
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %v; stderr:\n%s", p.name, timeout, p.stderr)
		return -1
	}
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := syscall.Kill(p.pid(), sig); err != nil {
		p.t.Fatalf("kill %s %v: %v", p.name, sig, err)
	}
}

func (p *proc) signalGroup(sig syscall.Signal) {
	p.t.Helper()
	if err := syscall.Kill(-p.pid(), sig); err != nil {
		p.t.Fatalf("kill group of %s %v: %v", p.name, sig, err)
	}
}

func exitCodeOf(st *os.ProcessState) int {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// runCLI runs the CLI in-process and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = cli.Main(context.Background(), args, nil, &out, &errb)
	return code, out.String(), errb.String()
}

// fence is a fenced register: it accepts a write only if its token is at
// least the largest token it has accepted, as a protected resource should.
type fence struct {
	srv *httptest.Server

	mu      sync.Mutex
	max     uint64
	writes  []fenceWrite
	events  []fenceWrite
	changed chan struct{}
}

type fenceWrite struct {
	Token    uint64
	Holder   string
	Pid      int
	Accepted bool
	Seq      int // order of arrival
	Kind     string
}

func newFence(t *testing.T) *fence {
	f := &fence{changed: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fence) env() []string { return []string{"FENCE_URL=" + f.srv.URL} }

func (f *fence) serve(w http.ResponseWriter, r *http.Request) {
	token, err := strconv.ParseUint(r.FormValue("token"), 10, 64)
	if err != nil {
		http.Error(w, "bad token", http.StatusBadRequest)
		return
	}
	pid, _ := strconv.Atoi(r.FormValue("pid"))
	wr := fenceWrite{Token: token, Holder: r.FormValue("holder"), Pid: pid, Kind: r.FormValue("kind")}
	f.mu.Lock()
	if wr.Kind == "" {
		wr.Accepted = token >= f.max
		if wr.Accepted {
			f.max = token
		}
		wr.Seq = len(f.writes)
		f.writes = append(f.writes, wr)
	} else {
		wr.Seq = len(f.events)
		f.events = append(f.events, wr)
	}
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
	if !wr.Accepted && wr.Kind == "" {
		http.Error(w, "stale token", http.StatusConflict)
	}
}

// waitWrite waits for a write (or, with events, an event) matching pred.
func (f *fence) waitWrite(t *testing.T, what string, timeout time.Duration, events bool, pred func(fenceWrite) bool) fenceWrite {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		list, changed := f.writes, f.changed
		if events {
			list = f.events
		}
		for _, w := range list {
			if pred(w) {
				f.mu.Unlock()
				return w
			}
		}
		f.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("no %s within %v; writes: %s", what, timeout, f.summary())
		}
	}
}

// summary describes the writes seen, folded by token, holder and outcome.
func (f *fence) summary() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	var last fenceWrite
	n := 0
	flush := func() {
		if n > 0 {
			fmt.Fprintf(&b, "\n  %d× token %d by %s (pid %d) accepted=%v", n, last.Token, last.Holder, last.Pid, last.Accepted)
		}
	}
	for _, w := range f.writes {
		if n > 0 && w.Token == last.Token && w.Holder == last.Holder && w.Accepted == last.Accepted {
			n++
			continue
		}
		flush()
		last, n = w, 1
	}
	flush()
	for _, e := range f.events {
		fmt.Fprintf(&b, "\n  event %s: token %d by %s (pid %d)", e.Kind, e.Token, e.Holder, e.Pid)
	}
	return b.String()
}

// checkFencing asserts the register's invariant from its record: no write
// with a token smaller than the largest seen before it was accepted.
func (f *fence) checkFencing(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var max uint64
	for _, w := range f.writes {
		if w.Accepted && w.Token < max {
			t.Errorf("write #%d with token %d accepted after token %d", w.Seq, w.Token, max)
		}
		if w.Token > max && w.Accepted {
			max = w.Token
		}
	}
}

// fenceWorker is the CMD of the fencing tests: it writes to $FENCE_URL with
// its $BATON_TOKEN every few milliseconds, forever. Flags:
//
//	--ignore-term   ignore SIGTERM (only SIGKILL stops it)
//	--term-exit N   on SIGTERM, report it to the fence and exit with N
func fenceWorker(args []string) int {
	var ignoreTerm bool
	termExit := -1
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--ignore-term":
			ignoreTerm = true
		case "--term-exit":
			i++
			termExit, _ = strconv.Atoi(args[i])
		}
	}
	url := os.Getenv("FENCE_URL")
	q := fmt.Sprintf("token=%s&holder=%s&pid=%d", os.Getenv(cli.EnvToken), os.Getenv(cli.EnvHolder), os.Getpid())
	client := &http.Client{Timeout: 5 * time.Second}
	post := func(extra string) {
		resp, err := client.Post(url+"/?"+q+extra, "text/plain", nil)
		if err == nil {
			resp.Body.Close()
		}
	}
	sigc := make(chan os.Signal, 1)
	if ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	} else if termExit >= 0 {
		signal.Notify(sigc, syscall.SIGTERM)
	}
	for {
		select {
		case <-sigc:
			post("&kind=sigterm")
			return termExit
		default:
		}
		post("")
		time.Sleep(5 * time.Millisecond) // pacing of the workload, not synchronization
	}
}
