package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/baton-go/baton/internal/testenv"
)

// One control plane for the package's Kubernetes tests, started by the
// first of them and stopped by TestMain.
var (
	planeMu  sync.Mutex
	plane    *envtest.Environment
	planeCfg *rest.Config
)

func controlPlane(t *testing.T) *rest.Config {
	t.Helper()
	assets := testenv.KubeAssets(t) // fails under CI=true, skips otherwise, if the binaries are missing
	planeMu.Lock()
	defer planeMu.Unlock()
	if plane == nil {
		ctrllog.SetLogger(logr.Discard())
		env := &envtest.Environment{
			BinaryAssetsDirectory: assets,
			CRDInstallOptions:     envtest.CRDInstallOptions{Paths: []string{filepath.Join("..", "..", "..", "..", "deploy", "crd")}, ErrorIfPathMissing: true},
		}
		env.ControlPlane.GetAPIServer().Configure().Set("advertise-address", testenv.KubeAdvertiseAddress)
		cfg, err := env.Start()
		if err != nil {
			t.Fatalf("starting kube-apiserver and etcd: %v", err)
		}
		plane, planeCfg = env, cfg
	}
	return planeCfg
}

func stopControlPlane() error {
	planeMu.Lock()
	defer planeMu.Unlock()
	if plane == nil {
		return nil
	}
	return plane.Stop()
}

// bareKubeconfig starts an API server of its own, without baton's CRD,
// for the rest of t, and returns a kubeconfig for its admin in namespace
// default.
func bareKubeconfig(t *testing.T) string {
	t.Helper()
	env := &envtest.Environment{BinaryAssetsDirectory: testenv.KubeAssets(t)}
	env.ControlPlane.GetAPIServer().Configure().Set("advertise-address", testenv.KubeAdvertiseAddress)
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting a second kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return writeKubeconfig(t, cfg, "default")
}

// writeKubeconfig writes a kubeconfig for cfg's user in namespace ns.
func writeKubeconfig(t *testing.T, cfg *rest.Config, ns string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, TLSServerName: cfg.ServerName}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: ns}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// kubeconfig writes a kubeconfig for the control plane's admin whose
// context's namespace is a new namespace, and returns its path and the
// namespace.
func kubeconfig(t *testing.T) (path, ns string) {
	t.Helper()
	cfg := controlPlane(t)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	created, err := client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cli-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return writeKubeconfig(t, cfg, created.Name), created.Name
}

// baton lock, status and release on Lease objects of a real API server,
// with the namespace taken from the kubeconfig context.
func TestKubeLeaseBackend(t *testing.T) {
	t.Parallel()
	kc, ns := kubeconfig(t)
	kubeArgs := func(cmd string, rest ...string) []string {
		return append([]string{cmd, "--backend", "lease", "--kubeconfig", kc, "--app", "reports"}, rest...)
	}
	f := newFence(t)
	holder := startCLI(t, "holder", f.env(), append(kubeArgs("lock", "--name", "nightly", "--identity", "pod-a"),
		append(timing, "--", exe(), cmdFenceWorker)...)...)
	first := f.waitWrite(t, "write by the holder", 30*time.Second, false, func(fenceWrite) bool { return true })
	// A new Lease's first token is the resourceVersion the API server
	// gave it (package kubestore, "Fencing tokens"): some positive number.
	if first.Token == 0 || first.Holder != "pod-a" {
		t.Fatalf("first write %+v, want a token by pod-a", first)
	}

	// A second process gives up at once, naming the holder.
	other := startCLI(t, "other", nil, append(kubeArgs("lock", "--name", "nightly", "--identity", "pod-b", "--wait", "0"), "--", "true")...)
	if code := other.wait(30 * time.Second); code != 75 {
		t.Fatalf("second lock: exit %d, want 75; stderr:\n%s", code, other.stderr)
	}
	if got := other.stderr.String(); !strings.Contains(got, `"pod-a"`) {
		t.Errorf("second lock's message does not name the holder:\n%s", got)
	}

	// status shows the Lease as kubectl users expect, in JSON too.
	status := startCLI(t, "status", nil, kubeArgs("status", "nightly", "-o", "json")...)
	if code := status.wait(30 * time.Second); code != 0 {
		t.Fatalf("status: exit %d; stderr:\n%s", code, status.stderr)
	}
	var st struct {
		Name   string `json:"name"`
		Held   bool   `json:"held"`
		Holder string `json:"holder"`
		Token  uint64 `json:"token"`
	}
	if err := json.Unmarshal([]byte(status.stdout.String()), &st); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, status.stdout)
	}
	if st.Name != "nightly" || !st.Held || st.Holder != "pod-a" || st.Token != first.Token {
		t.Errorf("status = %+v, want nightly held by pod-a with token %d", st, first.Token)
	}

	// An administrator frees it: the holder kills its command and exits 1.
	rel := startCLI(t, "release", nil, append(kubeArgs("release", "nightly", "--force"), "-n", ns)...)
	if code := rel.wait(30 * time.Second); code != 0 {
		t.Fatalf("release: exit %d; stderr:\n%s", code, rel.stderr)
	}
	if code := holder.wait(30 * time.Second); code != 1 {
		t.Fatalf("holder after a forced release: exit %d, want 1; stderr:\n%s", code, holder.stderr)
	}
	f.checkFencing(t)

	// Another application using the same name gets a clear error.
	intruder := startCLI(t, "intruder", nil, "lock", "--backend", "lease", "--kubeconfig", kc, "--app", "billing",
		"--name", "nightly", "--wait", "0", "--", "true")
	if code := intruder.wait(30 * time.Second); code == 0 || code == 75 {
		t.Fatalf("another application's lock: exit %d, want a failure that is not 'held'; stderr:\n%s", code, intruder.stderr)
	}
	if got := intruder.stderr.String(); !strings.Contains(got, "billing") || !strings.Contains(got, "reports") {
		t.Errorf("another application's error does not name both applications:\n%s", got)
	}
}

// The DistributedLock backend through the CLI: lock, then status of the
// released lock with its token kept.
func TestKubeCRDBackend(t *testing.T) {
	t.Parallel()
	kc, _ := kubeconfig(t)
	// Tokens strictly grow from lock to lock. The first one is the
	// resourceVersion the API server gave the new object (package kubestore,
	// "Fencing tokens"), so only the order is asserted.
	var last uint64
	for i := 1; i <= 2; i++ {
		code, _, stderr := runCLI(t, "lock", "--backend", "crd", "--kubeconfig", kc, "--name", "migrate", "--", "true")
		if code != 0 {
			t.Fatalf("lock %d: exit %d: %s", i, code, stderr)
		}
		code, out, stderr := runCLI(t, "status", "--backend", "crd", "--kubeconfig", kc, "migrate", "-o", "json")
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
		if st.Held || st.Token <= last {
			t.Errorf("status after lock %d = %+v, want free with a token above %d", i, st, last)
		}
		last = st.Token
	}
	// doctor's name check reads the DistributedLock too: the lock above
	// was taken without --app, so another application collides with it.
	code, out, _ := runCLI(t, "doctor", "--backend", "crd", "--kubeconfig", kc, "--name", "migrate", "--app", "billing")
	if code != 1 || !strings.Contains(out, `belongs to application "", not "billing"`) {
		t.Errorf("doctor --backend crd with a colliding name: exit %d, output:\n%s", code, out)
	}
	code, out, _ = runCLI(t, "doctor", "--backend", "crd", "--kubeconfig", kc, "--name", "migrate")
	if !regexp.MustCompile(`name migrate\s+PASS\s+crd \S+/migrate belongs to application ""`).MatchString(out) {
		t.Errorf("doctor --backend crd, same application: exit %d, output:\n%s", code, out)
	}
}
