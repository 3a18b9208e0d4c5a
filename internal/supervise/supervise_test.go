package supervise_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-go/baton/internal/supervise"
)

// The test binary doubles as the child processes of these tests, selected
// by the environment variable roleEnv.
const roleEnv = "SUPERVISE_TEST_ROLE"

func TestMain(m *testing.M) {
	switch role := os.Getenv(roleEnv); {
	case role == "":
		goleak.VerifyTestMain(m)
	case strings.HasPrefix(role, "exit:"):
		code, _ := strconv.Atoi(strings.TrimPrefix(role, "exit:"))
		os.Exit(code)
	case role == "echo":
		// Echo lines until stdin ends; SIGTERM is ignored when asked.
		if os.Getenv("IGNORE_TERM") != "" {
			signal.Ignore(syscall.SIGTERM)
		}
		fmt.Println("ready")
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Println(sc.Text())
		}
		os.Exit(0)
	case role == "writer":
		writerRole()
	case role == "groupsup":
		groupSupervisorRole()
	case role == "supervisor":
		// Start an echo grandchild, print its pid, and wait forever.
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), roleEnv+"=echo", "GORACE=atexit_sleep_ms=0")
		in, _ := cmd.StdinPipe() // kept open: the grandchild waits on it
		_ = in
		c, err := supervise.Start(cmd)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(c.Pid())
		select {}
	default:
		fmt.Fprintln(os.Stderr, "unknown role", role)
		os.Exit(2)
	}
}

func helper(role string, extraEnv ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	// atexit_sleep_ms=0: a race-enabled binary otherwise sleeps 1s on exit.
	cmd.Env = append(append(os.Environ(), roleEnv+"="+role, "GORACE=atexit_sleep_ms=0"), extraEnv...)
	return cmd
}

// echoChild starts an echo child and waits for it to be ready.
type echoChild struct {
	*supervise.Child
	in  io.WriteCloser
	out *bufio.Reader
}

func startEcho(t *testing.T, extraEnv ...string) *echoChild {
	t.Helper()
	cmd := helper("echo", extraEnv...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c, err := supervise.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	e := &echoChild{Child: c, in: in, out: bufio.NewReader(outR)}
	t.Cleanup(func() { e.Kill(); in.Close() })
	if line := e.readLine(t); line != "ready" {
		t.Fatalf("child said %q, want ready", line)
	}
	return e
}

func (e *echoChild) readLine(t *testing.T) string {
	t.Helper()
	type result struct {
		s   string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := e.out.ReadString('\n')
		ch <- result{strings.TrimSpace(s), err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("reading from the child: %v", r.err)
		}
		return r.s
	case <-time.After(10 * time.Second):
		e.Kill() // ends the read
		<-ch
		t.Fatal("the child did not answer within 10s")
		return ""
	}
}

func (e *echoChild) ping(t *testing.T, msg string) {
	t.Helper()
	if _, err := fmt.Fprintln(e.in, msg); err != nil {
		t.Fatalf("writing to the child: %v", err)
	}
	if got := e.readLine(t); got != msg {
		t.Fatalf("child echoed %q, want %q", got, msg)
	}
}

func waitDone(t *testing.T, c *supervise.Child, timeout time.Duration) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(timeout):
		t.Fatalf("child %d did not exit within %v", c.Pid(), timeout)
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	c, err := supervise.Start(helper("exit:3"))
	if err != nil {
		t.Fatal(err)
	}
	if code, err := c.Wait(); code != 3 || err != nil {
		t.Fatalf("Wait = %d, %v; want 3, nil", code, err)
	}
	if got := supervise.Describe(c.State()); got != "exit status 3" {
		t.Errorf("Describe = %q", got)
	}

	e := startEcho(t)
	e.Kill()
	if code, _ := e.Wait(); code != 128+9 {
		t.Fatalf("exit code after SIGKILL = %d, want 137", code)
	}
	if got := supervise.Describe(e.State()); got != "killed by signal SIGKILL" {
		t.Errorf("Describe = %q", got)
	}
	if err := e.Signal(syscall.SIGTERM); err != os.ErrProcessDone {
		t.Errorf("Signal after exit = %v, want os.ErrProcessDone", err)
	}
}

func TestStartError(t *testing.T) {
	t.Parallel()
	_, err := supervise.Start(exec.Command("/nonexistent/baton-test-binary"))
	if err == nil {
		t.Fatal("Start of a missing binary succeeded")
	}
}

func TestStopTermFirst(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	start := time.Now()
	if killed := e.Stop(time.Now().Add(time.Minute)); killed {
		t.Fatal("Stop used SIGKILL on a child that exits on SIGTERM")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Stop took %v", d)
	}
	if code, _ := e.Wait(); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit code %d, want 143", code)
	}
}

func TestStopKillsAtDeadline(t *testing.T) {
	t.Parallel()
	e := startEcho(t, "IGNORE_TERM=1")
	killAt := time.Now().Add(300 * time.Millisecond)
	if killed := e.Stop(killAt); !killed {
		t.Fatal("Stop did not need SIGKILL for a child that ignores SIGTERM")
	}
	if now := time.Now(); now.Before(killAt) {
		t.Fatalf("SIGKILL came %v before the deadline", killAt.Sub(now))
	}
	if code, _ := e.Wait(); code != 137 {
		t.Fatalf("exit code %d, want 137", code)
	}
}

func TestStopPastDeadlineKillsAtOnce(t *testing.T) {
	t.Parallel()
	e := startEcho(t, "IGNORE_TERM=1")
	if killed := e.Stop(time.Now().Add(-time.Second)); !killed {
		t.Fatal("Stop with a past deadline did not SIGKILL")
	}
	if code, _ := e.Wait(); code != 137 {
		t.Fatalf("exit code %d, want 137", code)
	}
}

// TestThreadExitDoesNotKillChild is golang/go#27505: the parent-death
// signal fires when the thread that forked the child exits, not the
// process. Here the caller of Start runs on a locked thread that ends right
// after Start returns, and then many more threads end; the child must live
// on.
func TestThreadExitDoesNotKillChild(t *testing.T) {
	if !supervise.ParentDeathSignal {
		t.Skip("no parent-death signal on this platform")
	}
	cmd := helper("echo")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	type started struct {
		c   *supervise.Child
		err error
	}
	ch := make(chan started, 1)
	go func() {
		// Returning while locked ends this goroutine's thread.
		runtime.LockOSThread()
		c, err := supervise.Start(cmd)
		ch <- started{c, err}
	}()
	s := <-ch
	if s.err != nil {
		t.Fatal(s.err)
	}
	e := &echoChild{Child: s.c, in: in, out: bufio.NewReader(outR)}
	t.Cleanup(func() { e.Kill(); in.Close() })
	if line := e.readLine(t); line != "ready" {
		t.Fatalf("child said %q, want ready", line)
	}
	// End many more threads: goroutines locked to their threads, all
	// blocked at once (so each holds its own thread, including idle ones
	// from the runtime's pool), then released.
	var wg sync.WaitGroup
	release := make(chan struct{})
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			<-release
		}()
	}
	close(release)
	wg.Wait()
	e.ping(t, "still alive")
	if e.Exited() {
		t.Fatal("child exited")
	}
}

// TestChildDiesWithSupervisor: SIGKILL of the supervising process kills the
// child too.
func TestChildDiesWithSupervisor(t *testing.T) {
	if !supervise.ParentDeathSignal {
		t.Skip("no parent-death signal on this platform")
	}
	t.Parallel()
	cmd := helper("supervisor")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the grandchild's pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("supervisor said %q", line)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exited, err := supervise.WaitExit(pid, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !exited {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("grandchild %d survived its supervisor's SIGKILL", pid)
	}
}

func TestWaitExitTimeout(t *testing.T) {
	t.Parallel()
	e := startEcho(t)
	start := time.Now()
	exited, err := supervise.WaitExit(e.Pid(), 100*time.Millisecond)
	if err != nil || exited {
		t.Fatalf("WaitExit on a live child = %v, %v", exited, err)
	}
	if d := time.Since(start); d < 90*time.Millisecond {
		t.Fatalf("WaitExit returned after %v, before its timeout", d)
	}
	go e.Kill()
	if exited, err := supervise.WaitExit(e.Pid(), 10*time.Second); err != nil || !exited {
		t.Fatalf("WaitExit after SIGKILL = %v, %v", exited, err)
	}
}
