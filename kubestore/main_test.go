package kubestore_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// One control plane (kube-apiserver + etcd) serves the whole package. It
// starts with the first test that needs it, so that testenv.KubeAssets can
// skip (or, in CI, fail) that test when the binaries are missing, and
// TestMain stops it after the last test.
var (
	planeOnce sync.Once
	plane     *envtest.Environment
	planeCfg  *rest.Config
	planeErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if plane != nil {
		if err := plane.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// controlPlane returns the admin config of the package's API server,
// starting it on first use.
func controlPlane(t *testing.T) *rest.Config {
	t.Helper()
	assets := testenv.KubeAssets(t)
	planeOnce.Do(func() {
		ctrllog.SetLogger(logr.Discard())
		env := &envtest.Environment{BinaryAssetsDirectory: assets}
		env.ControlPlane.GetAPIServer().Configure().Set("advertise-address", testenv.KubeAdvertiseAddress)
		start := time.Now()
		planeCfg, planeErr = env.Start()
		if planeErr == nil {
			plane = env
			fmt.Fprintf(os.Stderr, "kube: control plane started in %v\n", time.Since(start).Round(time.Millisecond))
		}
	})
	if planeErr != nil {
		t.Fatalf("starting kube-apiserver and etcd from %s: %v", assets, planeErr)
	}
	return rest.CopyConfig(planeCfg)
}

// adminClient returns a clientset with the admin's rights.
func adminClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := controlPlane(t)
	cfg.QPS, cfg.Burst = 500, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// newNamespace creates a fresh namespace for one test. Namespaces are not
// deleted: envtest runs no namespace controller, so they would only hang
// in Terminating; the control plane goes away with the package.
func newNamespace(t *testing.T) string {
	t.Helper()
	cs := adminClient(t)
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "baton-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}

// addUserMu serialises envtest's AddUser, whose certificate authority
// counts serial numbers without a lock (a data race between parallel
// tests, seen in a fresh-clone CI run).
var addUserMu sync.Mutex

// addUser adds an authenticated user without any rights.
func addUser(t *testing.T, name string) *rest.Config {
	t.Helper()
	controlPlane(t)
	addUserMu.Lock()
	u, err := plane.AddUser(envtest.User{Name: name}, nil)
	addUserMu.Unlock()
	if err != nil {
		t.Fatalf("adding user %q: %v", name, err)
	}
	return u.Config()
}

// watchUp wraps b so that the test can wait for a Watch of it to be
// established instead of sleeping: the kube stores notify every channel
// once their API watch is up (see Store.Watch), and up is closed at the
// first notification any of the wrapper's channels receives. The engine
// asserts only backend.Watcher on its backend, so the wrapper hides nothing
// it uses.
func watchUp(b backend.Backend) (backend.Backend, <-chan struct{}) {
	w := &watchSignal{Backend: b, w: b.(backend.Watcher), up: make(chan struct{})}
	return w, w.up
}

type watchSignal struct {
	backend.Backend
	w    backend.Watcher
	up   chan struct{}
	once sync.Once
}

func (s *watchSignal) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	in, err := s.w.Watch(ctx, key)
	if err != nil {
		return nil, err
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		for range in { // ends when the store closes in (ctx ended)
			s.once.Do(func() { close(s.up) })
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out, nil
}

// awaitWatch fails t unless up is closed within 10s.
func awaitWatch(t *testing.T, up <-chan struct{}) {
	t.Helper()
	select {
	case <-up:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter's watch was not established within 10s")
	}
}
