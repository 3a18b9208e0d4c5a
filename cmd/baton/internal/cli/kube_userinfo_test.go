package cli_test

import (
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// A kubeconfig whose server URL carries a user and password shows them
// nowhere: not in status, doctor or the logs of lock (client-go's own
// request errors already hide them).
func TestKubeServerPasswordHidden(t *testing.T) {
	t.Parallel()
	kc, _ := kubeconfig(t)
	cfg, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = strings.Replace(c.Server, "https://", "https://user:kube-secret@", 1)
	}
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"status", "--backend", "lease", "--kubeconfig", kc},
		{"doctor", "--backend", "lease", "--kubeconfig", kc, "--name", "job"},
		{"lock", "--backend", "lease", "--kubeconfig", kc, "--name", "job", "--log-level", "debug", "--", "true"},
	} {
		code, out, stderr := runCLI(t, args...)
		if strings.Contains(out+stderr, "kube-secret") || !strings.Contains(out+stderr, "user:xxxxx@") {
			t.Errorf("%s: exit %d; the server's password shows, or the server does not:\n%s\n%s", args[0], code, out, stderr)
		}
	}
}
