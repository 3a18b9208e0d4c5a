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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

const faultAPIServerKill = "2 API servers: the API server of the holder killed while held"

// TestSafetyTwoAPIServers runs the Lease backend on two kube-apiservers
// that share one etcd, as a highly available control plane does, with the
// contenders spread over both (each through its own fault proxy and a
// throttler in front of its server). Right after one of the holder's
// accepted writes, the API server that the holder talks to is killed
// (SIGKILL) and started again two TTLs later. The holder can no longer
// renew and must step down; a contender on the other server takes over
// once the claim it watched has expired; 0 stale writes accepted, no token
// granted twice, and the new holder's writes accepted.
func TestSafetyTwoAPIServers(t *testing.T) {
	cfg := controlPlane(t)
	second := startAPIServerBeside(t, cfg)
	th2, err := newThrottler(second.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(th2.close)
	ns := newNamespace(t, cfg)
	urls := []string{apiProxy.url(), th2.url()}
	var mu sync.Mutex
	server := map[string]int{} // a contender's link target -> the API server behind it
	be := &backendEnv{name: "lease", ttl: ttl, claimLife: ttl, ns: ns,
		newLink: func(t *testing.T) link {
			mu.Lock()
			defer mu.Unlock()
			i := len(server) % 2
			l := proxied(t, []string{strings.TrimPrefix(urls[i], "http://")}, "http://")
			server[l.target] = i
			return l
		},
		restart: func(t *testing.T, _ time.Duration) { t.Fatal("not used") },
	}
	kill := []func(){
		func() { killSharedAPIServer(t, second.pid()) },
		second.kill,
	}
	start := []func(){
		func() { startSharedAPIServer(t) },
		func() { second.start(t) },
	}
	runClusterScenario(t, be, scenario{fault: faultAPIServerKill}, func(h *harness) {
		var victim int
		f := h.waitFired(h.arm(false, 3+h.rng.IntN(5), func(c string) {
			mu.Lock()
			victim = server[h.contender(c).link.target]
			mu.Unlock()
			kill[victim]()
		}), "API server kill")
		defer func() { h.disturb("", f.at, h.reg.now()+h.be.bound(), "API server killed") }() // every contender on it
		ev, _ := h.acquiredAfter(f.tok, h.be.bound()+30*time.Second)
		h.t.Logf("%s held token %d; API server %d killed; %s acquired token %d %v later", f.c, f.tok, victim, ev.C, ev.Tok, ev.At-f.at)
		h.takeoverAfter(fmt.Sprintf("API server of %s killed under token %d", f.c, f.tok), f, ev.At-f.at)
		if rest := 2*h.be.ttl - (h.reg.now() - f.at); rest > 0 {
			time.Sleep(rest) // the server stays down; nothing to await
		}
		start[victim]()
		h.writesAbove(ev.Tok, 3, 30*time.Second)
	})
}

// killSharedAPIServer kills the shared control plane's kube-apiserver
// (see restartAPIServer), not the one whose pid is other, and reaps it.
func killSharedAPIServer(t *testing.T, other int) {
	pid, err := apiServerPID(other)
	if err != nil {
		t.Error(err)
		return
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Errorf("killing kube-apiserver (pid %d): %v", pid, err)
	}
	if err := plane.ControlPlane.APIServer.Stop(); err != nil {
		t.Errorf("reaping kube-apiserver: %v", err)
	}
}

// startSharedAPIServer starts the shared kube-apiserver again, on the
// same port with the same certificates.
func startSharedAPIServer(t *testing.T) {
	if err := plane.ControlPlane.APIServer.Start(); err != nil {
		t.Fatalf("restarting kube-apiserver: %v", err)
	}
}

// apiServer is a second kube-apiserver on the shared control plane's etcd.
type apiServer struct {
	bin  string
	args []string
	cfg  *rest.Config // the admin's, on this server

	mu  sync.Mutex
	cmd *exec.Cmd
}

// startAPIServerBeside starts a second kube-apiserver with the shared
// one's flags (its etcd, certificates, service-account keys and
// authorization), on a port of its own, and waits until it is ready.
func startAPIServerBeside(t *testing.T, cfg *rest.Config) *apiServer {
	t.Helper()
	pid, err := apiServerPID()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &apiServer{bin: argv[0], cfg: rest.CopyConfig(cfg)}
	s.cfg.Host = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for _, a := range argv[1:] {
		if strings.HasPrefix(a, "--secure-port=") {
			a = "--secure-port=" + strconv.Itoa(port)
		}
		s.args = append(s.args, a)
	}
	s.start(t)
	t.Cleanup(s.kill)
	return s
}

func (s *apiServer) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(s.bin, s.args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting a second kube-apiserver: %v", err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	client, err := rest.HTTPClientFor(s.cfg)
	if err != nil {
		s.kill()
		t.Fatal(err)
	}
	client.Timeout = time.Second
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(s.cfg.Host + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			s.kill()
			t.Fatalf("a second kube-apiserver on %s not ready within 60s (last: %v):\n%s", s.cfg.Host, err, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pid is the server's process ID, or 0 while it is stopped.
func (s *apiServer) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// kill stops the server with SIGKILL and reaps it; a stopped one is left.
func (s *apiServer) kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
