package testenv

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EtcdProxy is an `etcd grpc-proxy start` process on a free loopback port,
// in front of the given members' client endpoints: what teams with many
// clients put between them and the cluster. It coalesces watches and lease
// keepalives, caches serializable reads, and with EtcdProxyNamespace adds
// a key prefix. It is killed in t.Cleanup; Stop, Kill, Start, Pause and
// Resume work as for Etcd.
type EtcdProxy struct {
	server
	bin       string
	targets   []string
	namespace string
	dataDir   string

	// Port is the proxy's client port on 127.0.0.1 (gRPC, and HTTP for
	// /proxy/health and /metrics).
	Port int
}

// EtcdProxyOption configures StartEtcdProxy.
type EtcdProxyOption func(*EtcdProxy)

// EtcdProxyNamespace makes the proxy prefix every key with ns (its
// --namespace flag), so that two services sharing a cluster see only their
// own keys.
func EtcdProxyNamespace(ns string) EtcdProxyOption {
	return func(p *EtcdProxy) { p.namespace = ns }
}

// StartEtcdProxy starts a grpc-proxy in front of members (plain http
// members only) and returns once it answers /proxy/health, which it does
// only once it reaches the cluster. If etcd is missing or the proxy does
// not start, the test fails when CI=true and is skipped otherwise.
func StartEtcdProxy(t testing.TB, members []*Etcd, opts ...EtcdProxyOption) *EtcdProxy {
	t.Helper()
	bin, err := FindEtcd()
	if err != nil {
		unavailable(t, "%v", err)
	}
	p := &EtcdProxy{bin: bin, dataDir: filepath.Join(t.TempDir(), "proxy")}
	for _, m := range members {
		p.targets = append(p.targets, m.Addr())
	}
	for _, o := range opts {
		o(p)
	}
	p.server = server{t: t, kind: "etcd grpc-proxy", addr: p.Addr, launch: p.launch, stopSig: syscall.SIGTERM, stopTimeout: etcdStopTimeout}
	t.Cleanup(p.Kill)
	err = startOnFreePorts(1, func(ports []int) error {
		p.Port = ports[0]
		return p.start()
	})
	if err != nil {
		unavailable(t, "cannot start %s grpc-proxy: %v (build it with: %s)", bin, err, TestbinHint)
	}
	return p
}

// Addr returns "127.0.0.1:port".
func (p *EtcdProxy) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)) }

// Endpoint returns the proxy's client URL, http://127.0.0.1:port.
func (p *EtcdProxy) Endpoint() string { return "http://" + p.Addr() }

func (p *EtcdProxy) launch() (*proc, error) {
	args := []string{"grpc-proxy", "start",
		"--listen-addr=" + p.Addr(),
		"--advertise-client-url=" + p.Addr(),
		"--endpoints=" + strings.Join(p.targets, ","),
		"--data-dir=" + p.dataDir,
	}
	if p.namespace != "" {
		args = append(args, "--namespace="+p.namespace)
	}
	cmd := exec.Command(p.bin, args...)
	cmd.Env = etcdEnv()
	out, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	setPdeathsig(cmd)
	pr, _, err := startProc(cmd, out, "")
	if err != nil {
		return nil, err
	}
	if err := p.waitHealthy(pr); err != nil {
		pr.kill()
		return pr, err
	}
	return pr, nil
}

// waitHealthy polls /proxy/health until the proxy reports the cluster
// healthy through it.
func (p *EtcdProxy) waitHealthy(pr *proc) error {
	ctx, cancel := context.WithTimeout(context.Background(), etcdStartTimeout)
	defer cancel()
	return pollHealth(ctx, pr, "grpc-proxy", p.Endpoint()+"/proxy/health", func(resp *http.Response) string {
		if resp.StatusCode == http.StatusOK {
			return ""
		}
		return "/proxy/health: " + resp.Status
	})
}

// pollHealth GETs url every 50ms until healthy finds an answer healthy
// (returns ""; otherwise it returns what was wrong), until ctx (whose
// deadline is etcdStartTimeout from the start) ends. It fails at once if p
// exits, quoting the end of p's log; kind names the server in messages.
func pollHealth(ctx context.Context, p *proc, kind, url string, healthy func(*http.Response) string) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := "no answer"
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited before it was healthy: %s", kind, lastLines(p.log.String(), 8))
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy after %v (%s): %s", kind, etcdStartTimeout, last, lastLines(p.log.String(), 8))
		case <-tick.C:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			continue
		}
		last = healthy(resp)
		resp.Body.Close()
		if last == "" {
			return nil
		}
	}
}

// etcdEnv returns this process's environment without its ETCD_*
// variables, which etcd (and its grpc-proxy) would read as flags.
func etcdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			env = append(env, kv)
		}
	}
	return env
}
