package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/testenv"
)

// TestEtcdOnlyThroughProxy: an etcd that this machine reaches only
// through the HTTP proxy that HTTPS_PROXY names (its name resolves at the
// proxy alone, as on a network whose egress goes through the proxy) is
// usable: gRPC goes through the proxy. baton lock exited 69 ("does not
// resolve") because Open first dialled each endpoint directly.
func TestEtcdOnlyThroughProxy(t *testing.T) {
	t.Parallel()
	proxy := testenv.StartConnectProxy(t, "baton", "s3cret")
	etcd := testenv.StartEtcd(t)
	proxy.Route("etcd.proxied.invalid:2379", etcd.Addr())
	env := []string{"HTTPS_PROXY=" + proxy.URLWithCredentials(), "https_proxy=", "NO_PROXY=", "no_proxy="}
	p := startCLI(t, "lock", env, "lock", "--backend", "etcd", "--endpoints", "http://etcd.proxied.invalid:2379",
		"--name", "proxied", "--wait", "0", "--connect-timeout", "5s", "--", "true")
	if code := p.wait(60 * time.Second); code != 0 {
		t.Errorf("lock on an etcd reached through the proxy: exit %d, want 0:\n%s", code, p.stderr)
	}
	if proxy.Tunnels() == 0 {
		t.Errorf("the lock did not go through the proxy")
	}
	d := startCLI(t, "doctor", env, "doctor", "--backend", "etcd", "--endpoints", "http://etcd.proxied.invalid:2379", "--name", "proxied")
	d.wait(60 * time.Second)
	for line := range strings.Lines(d.stdout.String()) {
		if strings.HasPrefix(line, "store ") || strings.HasPrefix(line, "etcd ") {
			if !strings.Contains(line, "PASS") {
				t.Errorf("doctor on an etcd reached through the proxy: %s", line)
			}
		}
	}
}
