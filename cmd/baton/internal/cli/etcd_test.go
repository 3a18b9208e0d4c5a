package cli_test

import (
	"encoding/json"
	"strings"
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
// through that proxy, here one that does not run, to an endpoint whose
// host name only a proxy could resolve (behindProxy): the error names
// the proxy and NO_PROXY. It said only 'no answer within 1s: context
// deadline exceeded'.
func TestEtcdThroughDeadProxy(t *testing.T) {
	t.Parallel()
	p := startCLI(t, "lock", []string{"HTTPS_PROXY=http://" + closedPort(t), "NO_PROXY=", "no_proxy=", "https_proxy="},
		"lock", "--backend", "etcd", "--endpoints", "http://etcd.deadproxy.invalid:2379", "--name", "job", "--wait", "0", "--", "true")
	if code := p.wait(30 * time.Second); code != 69 {
		t.Errorf("exit %d, want 69", code)
	}
	if out := p.stderr.String(); !strings.Contains(out, "the HTTP proxy http://") || !strings.Contains(out, "NO_PROXY") {
		t.Errorf("the error does not name the proxy and NO_PROXY:\n%s", out)
	}
}
