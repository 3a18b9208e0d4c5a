package cli_test

import (
	"strings"
	"testing"
)

// baton status in a namespace that does not exist says so: the API server
// lists no objects there rather than refusing, and a bare "No locks" hid a
// mistyped --namespace. In an existing namespace nothing is added.
func TestStatusMissingNamespace(t *testing.T) {
	t.Parallel()
	kc, ns := kubeconfig(t)
	for _, tc := range []struct {
		args []string
		miss bool
	}{
		{[]string{"status", "--backend", "lease", "--kubeconfig", kc, "-n", "no-such-ns"}, true},
		{[]string{"status", "--backend", "lease", "--kubeconfig", kc, "-n", "no-such-ns", "nightly"}, true},
		{[]string{"status", "--backend", "lease", "--kubeconfig", kc, "-n", ns}, false},
	} {
		_, out, stderr := runCLI(t, tc.args...)
		said := strings.Contains(out+stderr, "namespace no-such-ns does not exist")
		if said != tc.miss || strings.Contains(out+stderr, "does not exist") != tc.miss {
			t.Errorf("baton %s: stdout %q, stderr %q; want a missing namespace named: %v", strings.Join(tc.args[:len(tc.args)-1], " "), out, stderr, tc.miss)
		}
	}
}
