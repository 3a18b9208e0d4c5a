package cli_test

import (
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/testenv"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// TestProxyAuthRequired: with HTTPS_PROXY naming a proxy that asks for
// authentication (407 Proxy Authentication Required to CONNECT), baton
// lock exits 78 (misconfigured) and baton doctor's store row reads
// "misconfigured", both naming the proxy's address, the 407 and the fix
// (credentials in the proxy's URL, or NO_PROXY). On the Kubernetes API
// lock exited 1 with only "Proxy Authentication Required", naming no
// proxy; on etcd it exited 69 (unreachable) after gRPC's retries, saying
// "fix the proxy". The same proxy with its credentials in HTTPS_PROXY
// lets both through (client-go and gRPC send Proxy-Authorization), and a
// proxy that does not run gives 69 naming it. The stores are named by
// host names that only the proxy resolves (behindProxy), so that clients
// use the proxy for them, as they never do for a loopback address, on any
// machine.
func TestProxyAuthRequired(t *testing.T) {
	t.Parallel()
	proxy := testenv.StartConnectProxy(t, "baton", "s3cret")

	kc := writeKubeconfig(t, proxiedControlPlane(t, proxy), "default")
	etcd := testenv.StartEtcd(t)
	stores := map[string][]string{
		"lease": {"--backend", "lease", "--kubeconfig", kc},
		"etcd":  {"--backend", "etcd", "--endpoints", "http://" + behindProxy(proxy, "etcd.proxyauth.invalid", etcd.Addr())},
	}
	env := func(proxyURL string) []string {
		return []string{"HTTPS_PROXY=" + proxyURL, "https_proxy=", "NO_PROXY=", "no_proxy="}
	}
	for name, flags := range stores {
		t.Run(name, func(t *testing.T) {
			lock := append(append([]string{"lock"}, flags...), "--name", "proxied-"+name, "--wait", "0", "--connect-timeout", "5s", "--", "true")
			p := startCLI(t, "lock", env(proxy.URL()), lock...)
			if code := p.wait(60 * time.Second); code != 78 {
				t.Errorf("lock through a proxy that asks for authentication: exit %d, want 78", code)
			}
			checkProxyAuthMessage(t, "lock", p.stderr.String(), proxy.URL())

			doctor := append(append([]string{"doctor"}, flags...), "--name", "proxied-"+name)
			d := startCLI(t, "doctor", env(proxy.URL()), doctor...)
			if code := d.wait(60 * time.Second); code != 1 {
				t.Errorf("doctor: exit %d, want 1", code)
			}
			out := d.stdout.String()
			var row string
			for line := range strings.Lines(out) {
				if strings.HasPrefix(line, "store ") {
					row = line
					break
				}
			}
			if !strings.Contains(row, "misconfigured") {
				t.Errorf("doctor's store row does not read misconfigured:\n%s", out)
			}
			checkProxyAuthMessage(t, "doctor", row, proxy.URL())
			if name == "lease" {
				checkKubeRowsSkipped(t, out)
			}

			tunnels := proxy.Tunnels()
			ok := startCLI(t, "lock", env(proxy.URLWithCredentials()), lock...)
			if code := ok.wait(60 * time.Second); code != 0 {
				t.Errorf("lock through the proxy with its credentials in HTTPS_PROXY: exit %d, want 0:\n%s", code, ok.stderr)
			}
			if proxy.Tunnels() == tunnels {
				t.Errorf("the lock with credentials did not go through the proxy")
			}

			dead := "http://" + closedPort(t)
			dp := startCLI(t, "lock", env(dead), lock...)
			if code := dp.wait(60 * time.Second); code != 69 {
				t.Errorf("lock through a proxy that does not run: exit %d, want 69", code)
			}
			if out := dp.stderr.String(); !strings.Contains(out, "proxy") || !strings.Contains(out, "NO_PROXY") {
				t.Errorf("lock through a proxy that does not run: the message does not name the proxy and NO_PROXY:\n%s", out)
			}
		})
	}
}

// checkProxyAuthMessage checks that msg names the proxy at proxyURL, its
// 407 and both fixes.
func checkProxyAuthMessage(t *testing.T, what, msg, proxyURL string) {
	t.Helper()
	for _, want := range []string{proxyURL, "407 Proxy Authentication Required", "NO_PROXY", "USER:PASSWORD@"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s: the message lacks %q:\n%s", what, want, msg)
		}
	}
}

// checkKubeRowsSkipped checks that doctor, whose store row failed because
// no request can reach the API server as configured, does not ask it
// again in the Kubernetes rows (RBAC, admission, namespace), which would
// each repeat the failure unclassified: one row says they were not
// checked.
func checkKubeRowsSkipped(t *testing.T, out string) {
	t.Helper()
	wantRows(t, out, map[string]doctorRow{
		"kubernetes": {"SKIP", "not checked: no request can reach the API server as configured (see the store row)"},
	})
	for name := range doctorTable(t, out) {
		if strings.HasPrefix(name, "rbac ") || strings.HasPrefix(name, "admission ") || strings.HasPrefix(name, "namespace ") {
			t.Errorf("doctor asked the API server again in row %q:\n%s", name, out)
		}
	}
}

// proxiedControlPlane is the control plane's configuration, its API
// server named by a host name that only proxy resolves (behindProxy).
// The serving certificate does not list that name: the configuration
// verifies it for the address it lists (tls-server-name), so TLS is
// checked as usual.
func proxiedControlPlane(t *testing.T, proxy *testenv.ConnectProxy) *rest.Config {
	t.Helper()
	cfg := rest.CopyConfig(controlPlane(t))
	host, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host = "https://" + behindProxy(proxy, "kube.proxyauth.invalid", host.Host)
	cfg.ServerName = host.Hostname() // a name the serving certificate lists
	return cfg
}

// behindProxy returns an address, host and target's port, that proxy
// tunnels to target, and that nothing else can reach: host is a name
// under .invalid, which no resolver answers (RFC 2606). A client uses
// an HTTP proxy for it, as Go's http.ProxyFromEnvironment and gRPC never
// do for a loopback address, so that a test of the proxy runs on a
// machine whose only address is loopback, and a client that bypassed the
// proxy would fail to resolve the name rather than reach the store.
func behindProxy(proxy *testenv.ConnectProxy, host, target string) string {
	_, port, _ := net.SplitHostPort(target)
	addr := net.JoinHostPort(host, port)
	proxy.Route(addr, target)
	return addr
}

// TestProxyAuthRequiredKubeconfig: a kubeconfig cluster's proxy-url names
// a proxy that asks for authentication, and the environment names none
// (client-go uses proxy-url instead of HTTPS_PROXY). baton lock exits 78
// and its message names that proxy, without its password, proxy-url and
// the fixes there; it named no proxy. With the environment naming another
// proxy, the message named that one, which no request had gone through.
func TestProxyAuthRequiredKubeconfig(t *testing.T) {
	t.Parallel()
	proxy := testenv.StartConnectProxy(t, "baton", "s3cret")
	kc := writeKubeconfig(t, proxiedControlPlane(t, proxy), "default")
	loaded, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range loaded.Clusters {
		c.ProxyURL = proxy.URL()
	}
	if err := clientcmd.WriteToFile(*loaded, kc); err != nil {
		t.Fatal(err)
	}
	other := "http://" + closedPort(t)
	for name, env := range map[string][]string{
		"no environment proxy":         {"HTTPS_PROXY=", "https_proxy=", "NO_PROXY=", "no_proxy="},
		"another proxy in HTTPS_PROXY": {"HTTPS_PROXY=" + other, "https_proxy=", "NO_PROXY=", "no_proxy="},
	} {
		t.Run(name, func(t *testing.T) {
			p := startCLI(t, "lock", env, "lock", "--backend", "lease", "--kubeconfig", kc, "--name", "proxy-url",
				"--wait", "0", "--connect-timeout", "5s", "--", "true")
			if code := p.wait(60 * time.Second); code != 78 {
				t.Errorf("lock through a kubeconfig's proxy-url that asks for authentication: exit %d, want 78", code)
			}
			msg := p.stderr.String()
			for _, want := range []string{"the HTTP proxy " + proxy.URL() + " (the kubeconfig cluster's proxy-url", "407 Proxy Authentication Required", "USER:PASSWORD@", "remove proxy-url"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the message lacks %q:\n%s", want, msg)
				}
			}
			if strings.Contains(msg, "HTTPS_PROXY in the environment") || strings.Contains(msg, other) {
				t.Errorf("the message names the environment's proxy, which the request did not go through:\n%s", msg)
			}
		})
	}
}
