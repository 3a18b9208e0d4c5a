package cli_test

import (
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/testenv"
)

// baton lock and status on a real etcd: tokens are the claim's create
// revisions, so they grow across runs; a held lock gives exit 75.
func TestEtcdBackend(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	args := func(cmd string, rest ...string) []string {
		return append([]string{cmd, "--backend", "etcd", "--endpoints", e.Endpoint()}, rest...)
	}
	tokens := make([]uint64, 0, 2)
	for range 2 {
		code, _, stderr := runCLI(t, args("lock", "--name", "migrate", "--", "true")...)
		if code != 0 {
			t.Fatalf("lock: exit %d: %s", code, stderr)
		}
		code, out, stderr := runCLI(t, args("status", "migrate", "-o", "json")...)
		if code != 0 {
			t.Fatalf("status: exit %d: %s", code, stderr)
		}
		var st struct {
			Held  bool   `json:"held"`
			Token uint64 `json:"token"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status -o json: %v\n%s", err, out)
		}
		if st.Held {
			t.Errorf("status after lock returned: held")
		}
		tokens = append(tokens, st.Token)
	}
	if tokens[0] == 0 || tokens[1] <= tokens[0] {
		t.Errorf("tokens %v, want positive and increasing", tokens)
	}
	f := newFence(t)
	holder := startCLI(t, "holder", f.env(), append(args("lock", "--name", "migrate", "--identity", "host-a"),
		append(timing, "--", exe(), cmdFenceWorker)...)...)
	f.waitWrite(t, "write by the holder", 15*time.Second, false, func(fenceWrite) bool { return true })
	code, _, stderr := runCLI(t, args("lock", "--name", "migrate", "--wait", "0", "--", "true")...)
	if code != 75 || !strings.Contains(stderr, `"host-a"`) {
		t.Errorf("second lock: exit %d, stderr %q; want 75 naming host-a", code, stderr)
	}
	holder.signal(syscall.SIGTERM) // forwarded; the worker exits and baton releases
	holder.wait(15 * time.Second)
	if code, _, stderr := runCLI(t, args("lock", "--name", "migrate", "--wait", "0", "--", "true")...); code != 0 {
		t.Errorf("lock after the holder released: exit %d: %s", code, stderr)
	}
	f.checkFencing(t)
}

// With HTTPS_PROXY set in the environment, etcd's client (gRPC) goes
// through that proxy to an endpoint named by a non-loopback address,
// while a direct connection works: the error names the proxy and NO_PROXY.
// It said only 'no answer within 1s: context deadline exceeded'.
func TestEtcdThroughDeadProxy(t *testing.T) {
	t.Parallel()
	ip := nonLoopbackIP(t)
	e := testenv.StartEtcd(t)
	endpoint := "http://" + forward(t, net.JoinHostPort(ip, "0"), e.Addr())
	p := startCLI(t, "lock", []string{"HTTPS_PROXY=http://" + closedPort(t), "NO_PROXY=", "no_proxy=", "https_proxy="},
		"lock", "--backend", "etcd", "--endpoints", endpoint, "--name", "job", "--wait", "0", "--", "true")
	if code := p.wait(30 * time.Second); code != 69 {
		t.Errorf("exit %d, want 69", code)
	}
	if out := p.stderr.String(); !strings.Contains(out, "the HTTP proxy http://") || !strings.Contains(out, "NO_PROXY") {
		t.Errorf("the error does not name the proxy and NO_PROXY:\n%s", out)
	}
}

// nonLoopbackIP returns an IPv4 address of this machine that is not a
// loopback address (HTTP proxies are never used for those), or skips.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("no interface addresses: %v", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no IPv4 address but loopback")
	return ""
}

// forward listens on addr and copies each connection to and from target
// until the end of t; it returns the address it listens on.
func forward(t *testing.T, addr, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { relay(c, target) })
		}
	})
	return l.Addr().String()
}

// relay copies between c and a new connection to target until either ends.
func relay(c net.Conn, target string) {
	defer c.Close()
	u, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{})
	go func() { _, _ = io.Copy(u, c); u.Close(); close(done) }()
	_, _ = io.Copy(c, u)
	c.Close()
	<-done
}
