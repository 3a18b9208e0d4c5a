package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeFlags are kubectl's connection flags, for the Kubernetes backends.
type kubeFlags struct {
	kubeconfig string
	context    string
	namespace  string

	// loaded caches restConfig's result: the store and the Events client
	// share one configuration.
	loaded *rest.Config
	ns     string
	// adopt takes over Leases of client-go's leader election (--adopt,
	// registered by the commands that take a lock).
	adopt bool
}

func (f *kubeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Kubernetes backends: path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the in-cluster service account)")
	fs.StringVar(&f.context, "context", "", "Kubernetes backends: the kubeconfig context to use")
	fs.StringVarP(&f.namespace, "namespace", "n", "", "Kubernetes backends: namespace of the lock objects (default: the context's namespace, or the pod's in a cluster)")
}

func (f *kubeFlags) validate() error {
	if f.namespace != "" {
		if errs := validation.IsDNS1123Label(f.namespace); len(errs) > 0 {
			return usageErrorf("--namespace %q is not a valid namespace name: %s", f.namespace, strings.Join(errs, "; "))
		}
	}
	return nil
}

// open builds the client configuration the way kubectl does: --kubeconfig,
// else $KUBECONFIG, else ~/.kube/config, else the in-cluster service
// account; --context and --namespace override the kubeconfig's. app labels
// the lock objects (see --app).
func (f *kubeFlags) open(backend, app string) (store, string, error) {
	cfg, ns, err := f.restConfig()
	if err != nil {
		return nil, "", err
	}
	opts := []kubestore.Option{kubestore.WithApplication(app)}
	var st store
	switch backend {
	case "configmap":
		st, err = kubestore.NewConfigMapForConfig(cfg, ns, opts...)
	case "crd":
		st, err = kubestore.NewDistributedLockForConfig(cfg, ns, kubestore.WithApplication(app))
	default:
		if f.adopt {
			opts = append(opts, kubestore.WithAdoption())
		}
		st, err = kubestore.NewLeaseForConfig(cfg, ns, opts...)
	}
	if err != nil {
		return nil, "", err
	}
	what := map[string]string{"lease": "leases", "configmap": "configmaps", "crd": "distributedlocks"}[backend]
	return st, fmt.Sprintf("%s in namespace %s at %s", what, ns, redactHost(cfg.Host)), nil
}

// redactHost returns the API server's address with the password of its
// user information (https://user:password@host) hidden, for messages.
func redactHost(host string) string {
	if u, err := url.Parse(host); err == nil && u.User != nil {
		return u.Redacted()
	}
	return host
}

// checkServer refuses an API server address that cannot work: an IPv6
// address without brackets (client-go said only "host must be a URL or a
// host:port pair", exit 1) or a port out of range (dialled, and retried as
// a server that does not answer, exit 69).
func checkServer(host string) error {
	u, err := url.Parse(host)
	if err != nil || u.Host == "" {
		rest := host
		if _, after, ok := strings.Cut(host, "://"); ok {
			rest = after
		}
		if authority, _, _ := strings.Cut(rest, "/"); strings.Count(authority, ":") > 1 && !strings.HasPrefix(authority, "[") {
			return errors.New("has an IPv6 address without brackets: write it in brackets, as in https://[fd00::1]:6443 (kubectl config set-cluster NAME --server=https://[fd00::1]:6443)")
		}
		return nil // client-go's word on it
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("has the port %q, not a number from 1 to 65535", p)
		}
	}
	return nil
}

// restConfig returns the client configuration and the namespace, loaded
// once.
func (f *kubeFlags) restConfig() (*rest.Config, string, error) {
	if f.loaded != nil {
		return f.loaded, f.ns, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.context}
	overrides.Context.Namespace = f.namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		// client-go would only suggest KUBERNETES_MASTER: name what was looked for.
		tried := strings.Join(rules.GetLoadingPrecedence(), ", ")
		if tried == "" {
			tried = "no file"
		}
		if os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBERNETES_SERVICE_PORT") != "" {
			// In a pod whose service account token is not mounted
			// (automountServiceAccountToken: false), client-go falls back
			// to kubeconfig files and reports only that none was found.
			_, ierr := rest.InClusterConfig()
			return nil, "", fmt.Errorf("connecting to Kubernetes: %w: in a pod (KUBERNETES_SERVICE_HOST is set), but its service account cannot be used (%v), and no kubeconfig was found (looked for: %s); "+
				"mount the token (automountServiceAccountToken: true on the pod or its ServiceAccount), or give --kubeconfig", backend.ErrMisconfigured, ierr, tried)
		}
		return nil, "", fmt.Errorf("connecting to Kubernetes: %w: no kubeconfig found (looked for: %s) and not running in a cluster; "+
			"give --kubeconfig, or set KUBECONFIG to an existing file", backend.ErrMisconfigured, tried)
	}
	if err != nil {
		return nil, "", fmt.Errorf("connecting to Kubernetes: %w: %w", backend.ErrMisconfigured, err)
	}
	if err := checkServer(cfg.Host); err != nil {
		return nil, "", fmt.Errorf("connecting to Kubernetes: %w: the kubeconfig's server %q %w", backend.ErrMisconfigured, redactHost(cfg.Host), err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("connecting to Kubernetes: the namespace: %w", err)
	}
	f.loaded, f.ns = cfg, ns
	return cfg, ns, nil
}

// eventObserver records leadership changes as Kubernetes Events on the lock
// object, for the Kubernetes backends; nil for the others.
func (f *kubeFlags) eventObserver(backend string, st store, log *slog.Logger) (*kubestore.EventObserver, error) {
	kind := map[string]string{"lease": "Lease", "configmap": "ConfigMap", "crd": "DistributedLock"}[backend]
	if kind == "" {
		return nil, nil
	}
	cfg, ns, err := f.restConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var opts []kubestore.EventOption
	if ls, ok := st.(kubestore.LockStore); ok {
		opts = append(opts, kubestore.WithLockStore(ls)) // the object's uid from the store's view: no GET per term
	}
	return kubestore.NewEventObserver(cs, ns, kind, "baton", log, opts...)
}

// missingNamespace returns a note for messages about an empty or missing
// lock when the namespace does not exist: the API server lists no objects
// there rather than refusing the list, so "No locks" would hide a mistyped
// --namespace. It returns "" if the namespace exists, or if this user may
// not read it (the lock Role grants no access to namespaces).
func (f *kubeFlags) missingNamespace(ctx context.Context) string {
	cfg, ns, err := f.restConfig()
	if err != nil {
		return ""
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return fmt.Sprintf(" (namespace %s does not exist: check --namespace, or the context's namespace)", ns)
	}
	return ""
}
