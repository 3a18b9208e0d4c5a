//go:build linux

package safety

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// kubeRBACEnv is the Kubernetes backend name (lease, configmap or crd) in
// a namespace of its own where every contender is a user of its own
// ("contenderN", which it impersonates through the API proxy: envUser),
// bound by a RoleBinding of its own to the Role that deploy/ ships for
// the backend (rbacRolePath), as each replica of a service with its own
// ServiceAccount would be. link.forbid deletes that user's RoleBinding,
// as an operator editing the wrong binding would, and creates it again.
// envtest's kube-apiserver authorizes with RBAC: each user is refused
// before its binding exists (rbacProbe.await checks it), so the row
// cannot pass on a server that allows everything.
func kubeRBACEnv(t *testing.T, name string) *backendEnv {
	var be *backendEnv
	if name == "crd" {
		be = crdEnv(t)
	} else {
		be = leaseEnv(t, name)
	}
	cfg := controlPlane(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	role := shippedRole(t, rbacRolePath(name))
	role.Namespace = be.ns
	if _, err := cs.RbacV1().Roles(be.ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Role %s in namespace %s: %v", role.Name, be.ns, err)
	}
	var (
		mu sync.Mutex
		n  int
	)
	proxiedLink := be.newLink
	be.newLink = func(t *testing.T) link {
		mu.Lock()
		n++
		user := fmt.Sprintf("contender%d", n)
		mu.Unlock()
		b := userBinding{cs: cs, ns: be.ns, role: role.Name, user: user, probe: newRBACProbe(t, name, be.ns, user)}
		b.probe.whoami(t)
		if err := b.probe.await(t.Context(), false); err != nil { // RBAC authorizes: nothing is allowed yet
			t.Fatal(err)
		}
		if _, err := b.set(t.Context(), false); err != nil {
			t.Fatal(err)
		}
		l := proxiedLink(t)
		l.user, l.forbid = user, b.set
		return l
	}
	return be
}

// rbacRolePath is the file of deploy/ whose Role the Kubernetes backend
// name's replicas are bound to (docs/kubernetes.md).
func rbacRolePath(name string) string {
	switch name {
	case "lease":
		return "../../deploy/rbac/rbac.yaml"
	case "configmap":
		return "../../deploy/rbac-configmap/role.yaml"
	default:
		return "../../deploy/rbac-crd/role.yaml"
	}
}

// shippedRole reads the Role of a file of deploy/ (documents separated by
// "---").
func shippedRole(t *testing.T, path string) *rbacv1.Role {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for doc := range strings.SplitSeq(string(data), "\n---\n") {
		var r rbacv1.Role
		if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if r.Kind == "Role" {
			return &r
		}
	}
	t.Fatalf("%s has no Role", path)
	return nil
}

// userBinding is one contender user's RoleBinding to the shipped Role.
type userBinding struct {
	cs             kubernetes.Interface
	ns, role, user string
	probe          *rbacProbe
}

// set deletes the binding (forbid) or creates it, says what it did as the
// kubectl command that does it, and waits until the API server authorizes
// the user accordingly.
func (b userBinding) set(ctx context.Context, forbid bool) (string, error) {
	name := b.role + "-" + b.user
	var (
		what string
		err  error
	)
	if forbid {
		what = fmt.Sprintf("kubectl delete rolebinding %s -n %s", name, b.ns)
		err = b.cs.RbacV1().RoleBindings(b.ns).Delete(ctx, name, metav1.DeleteOptions{})
	} else {
		what = fmt.Sprintf("kubectl create rolebinding %s -n %s --role %s --user %s", name, b.ns, b.role, b.user)
		_, err = b.cs.RbacV1().RoleBindings(b.ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: b.role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: b.user}},
		}, metav1.CreateOptions{})
	}
	if err == nil {
		err = b.probe.await(ctx, !forbid)
	}
	return what, err
}

// rbacProbe asks the API server, through the API proxy as a contender's
// user (the path the contender's own requests take), who it is and
// whether it may read the lock objects.
type rbacProbe struct {
	cs   kubernetes.Interface
	dyn  dynamic.Interface
	name string // the backend
	ns   string
	user string
}

// newRBACProbe returns a probe as user; its connections close with t.
func newRBACProbe(t *testing.T, name, ns, user string) *rbacProbe {
	t.Helper()
	cfg := &rest.Config{Host: apiProxy.url(), Timeout: 10 * time.Second,
		Impersonate: rest.ImpersonationConfig{UserName: user}}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hc.CloseIdleConnections)
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	return &rbacProbe{cs: cs, dyn: dyn, name: name, ns: ns, user: user}
}

// whoami checks that the API server sees the probe's requests as its
// user (kubectl auth whoami): the proxy passes the impersonation on.
func (p *rbacProbe) whoami(t *testing.T) {
	t.Helper()
	r, err := p.cs.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubectl auth whoami as %s through the API proxy: %v", p.user, err)
	}
	if got := r.Status.UserInfo.Username; got != p.user {
		t.Fatalf("through the API proxy, impersonating %s, the API server sees %q", p.user, got)
	}
}

// await waits until the API server allows the user to get a lock object
// (allowed: the answer is the object or NotFound) or refuses it (403
// Forbidden): RBAC's authorizer learns of a RoleBinding's change from
// a watch, moments after the write.
func (p *rbacProbe) await(ctx context.Context, allowed bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := p.dyn.Resource(kubeResource(p.name)).Namespace(p.ns).Get(ctx, "rbac-probe", metav1.GetOptions{})
		forbidden := apierrors.IsForbidden(err)
		if err != nil && !forbidden && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			return fmt.Errorf("get %s rbac-probe in namespace %s as %s: %w", kubeResource(p.name).Resource, p.ns, p.user, err)
		}
		if forbidden != allowed && ctx.Err() == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("get %s in namespace %s as %s: still forbidden=%v after 10s, want forbidden=%v (last: %v)",
				kubeResource(p.name).Resource, p.ns, p.user, forbidden, !allowed, err)
		case <-tick.C:
		}
	}
}
