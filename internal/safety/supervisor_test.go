//go:build linux

package safety

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/baton-go/baton/internal/supervise"
)

// The `baton run` rows: the supervisor of the leader is stopped alone
// (SIGSTOP of its pid, not of its process group), so its command runs on
// with nobody to stop it but the command's watchdog. The command is this
// test binary in the role supervisedWriterRole: it writes to a fenced
// register, stamping each write with CLOCK_MONOTONIC (one clock for every
// process of the machine) taken before the write leaves.
//
// Checked: no stale write accepted; tokens strictly increase; and the old
// command made no write, accepted or not, stamped later than the new
// leader's first write. The new leader acquired only after the old
// leader's validity ended (on this machine's monotonic clock), so that is
// "the old command did not run past the validity end", measured.

const supervisedWriterRole = "supervised-writer"

func init() {
	if os.Getenv(roleEnv) == supervisedWriterRole {
		os.Exit(supervisedWriter())
	}
}

// supervisedWriter writes to $REG_URL with $BATON_TOKEN until killed.
func supervisedWriter() int {
	url := os.Getenv("REG_URL")
	q := fmt.Sprintf("tok=%s&pid=%d&holder=%s", os.Getenv("BATON_TOKEN"), os.Getpid(), os.Getenv("BATON_HOLDER"))
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		resp, err := client.Post(fmt.Sprintf("%s/w?%s&mono=%d", url, q, supervise.MonoNow()), "text/plain", nil)
		if err == nil {
			resp.Body.Close()
		}
		time.Sleep(2 * time.Millisecond) // pacing of the workload
	}
}

// svWrite is one write the register received.
type svWrite struct {
	seq      int
	tok      uint64
	pid      int
	holder   string
	mono     int64 // the writer's CLOCK_MONOTONIC stamp, before sending
	accepted bool
}

// svRegister is a fenced register that records every write.
type svRegister struct {
	srv     *http.Server
	url     string
	mu      sync.Mutex
	max     uint64
	writes  []svWrite
	changed chan struct{}
}

func newSVRegister(t *testing.T) *svRegister {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &svRegister{url: "http://" + ln.Addr().String(), changed: make(chan struct{})}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.srv.Serve(ln) }()
	t.Cleanup(func() { _ = r.srv.Close(); <-done })
	return r
}

func (r *svRegister) serve(w http.ResponseWriter, req *http.Request) {
	tok, err1 := strconv.ParseUint(req.FormValue("tok"), 10, 64)
	mono, err2 := strconv.ParseInt(req.FormValue("mono"), 10, 64)
	pid, err3 := strconv.Atoi(req.FormValue("pid"))
	if err1 != nil || err2 != nil || err3 != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	wr := svWrite{seq: len(r.writes), tok: tok, pid: pid, holder: req.FormValue("holder"), mono: mono, accepted: tok >= r.max}
	if wr.accepted {
		r.max = tok
	}
	r.writes = append(r.writes, wr)
	close(r.changed)
	r.changed = make(chan struct{})
	if !wr.accepted {
		http.Error(w, "stale token", http.StatusConflict)
	}
}

// waitWrite waits for an accepted write by holder.
func (r *svRegister) waitWrite(t *testing.T, holder string, minTok uint64, timeout time.Duration) svWrite {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		for _, w := range r.writes {
			if w.holder == holder && w.accepted && w.tok > minTok {
				r.mu.Unlock()
				return w
			}
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("no accepted write by %s with a token above %d within %v", holder, minTok, timeout)
		}
	}
}

// waitCount waits until the register has received n writes.
func (r *svRegister) waitCount(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		got, changed := len(r.writes), r.changed
		r.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("the register received %d writes within %v, want %d", got, timeout, n)
		}
	}
}

// check returns the violations in the history: stale writes accepted,
// tokens that did not increase, and writes by oldPid stamped after the
// new leader's first write.
func (r *svRegister) check(oldPid int, first svWrite) (violations []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var max uint64
	for _, w := range r.writes {
		if w.accepted && w.tok < max {
			violations = append(violations, fmt.Sprintf("stale write #%d with token %d accepted after %d", w.seq, w.tok, max))
		}
		if w.accepted {
			max = w.tok
		}
		if w.pid == oldPid && w.mono > first.mono {
			violations = append(violations, fmt.Sprintf("the old command's write #%d (token %d, accepted=%v) was stamped %v after the new leader's first write",
				w.seq, w.tok, w.accepted, time.Duration(w.mono-first.mono)))
		}
	}
	return violations
}

// buildBaton builds the baton CLI into a directory of t's.
func buildBaton(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "baton")
	// cmd/baton is a module of its own (docs/modules.md).
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", path, ".")
	cmd.Dir = "../../cmd/baton"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in cmd/baton: %v\n%s", err, out)
	}
	return path
}

// batonRun is one `baton run` process.
type batonRun struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan struct{}
}

func startBatonRun(t *testing.T, bin, id string, backendArgs []string, regURL string) *batonRun {
	t.Helper()
	args := append([]string{"run", "--name", "sv-stop", "--identity", id,
		"--ttl", "2s", "--renew-deadline", "1400ms", "--retry-period", "300ms"}, backendArgs...)
	args = append(args, "--", os.Args[0])
	p := &batonRun{cmd: exec.Command(bin, args...), stderr: &bytes.Buffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), roleEnv+"="+supervisedWriterRole, "REG_URL="+regURL, "GORACE=atexit_sleep_ms=0")
	p.cmd.Stderr = &lockedBuffer{b: p.stderr}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("%s stderr:\n%s", id, p.cmd.Stderr.(*lockedBuffer).String())
		}
	})
	return p
}

type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// kubeconfigFor writes a kubeconfig for cfg with namespace ns.
func kubeconfigFor(t *testing.T, cfg *rest.Config, ns string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: ns}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSupervisorStopped is the `baton run` supervisor-stopped-alone row, on
// the file and Lease backends.
func TestSupervisorStopped(t *testing.T) {
	bin := buildBaton(t)
	backends := map[string]func(t *testing.T) []string{
		"file": func(t *testing.T) []string { return []string{"--backend", "file", "--dir", t.TempDir()} },
		"lease": func(t *testing.T) []string {
			cfg := controlPlane(t)
			ns := newNamespace(t, cfg)
			return []string{"--backend", "lease", "--kubeconfig", kubeconfigFor(t, cfg, ns)}
		},
	}
	for _, name := range []string{"file", "lease"} {
		t.Run(name, func(t *testing.T) {
			backendArgs := backends[name](t)
			reg := newSVRegister(t)
			a := startBatonRun(t, bin, "sv-a", backendArgs, reg.url)
			old := reg.waitWrite(t, "sv-a", 0, 60*time.Second)
			startBatonRun(t, bin, "sv-b", backendArgs, reg.url)

			// Stop the supervisor alone: its command runs on.
			if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			first := reg.waitWrite(t, "sv-b", old.tok, 60*time.Second)
			if exited, err := supervise.WaitExit(old.pid, 10*time.Second); err != nil || !exited {
				t.Errorf("the old command (pid %d) still runs after the new leader's first write: %v", old.pid, err)
			}
			// Let any request still in flight land (the new leader writes
			// 50 more times meanwhile), then resume the supervisor.
			reg.waitCount(t, first.seq+50, 30*time.Second)
			_ = syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT)
			for _, v := range reg.check(old.pid, first) {
				t.Error(v)
			}
			reg.mu.Lock()
			n := len(reg.writes)
			reg.mu.Unlock()
			t.Logf("%s: token %d -> %d, %d writes", name, old.tok, first.tok, n)
		})
	}
}
