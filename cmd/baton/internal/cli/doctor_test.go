package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/baton-go/baton"
)

// userKubeconfig adds a user to the control plane, binds it to rules in
// ns, and writes its kubeconfig with ns as the context's namespace.
func userKubeconfig(t *testing.T, ns, user string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	cfg := controlPlane(t)
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	planeMu.Lock()
	u, err := plane.AddUser(envtest.User{Name: user}, nil)
	planeMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	// The authorizer learns of the binding asynchronously: wait until the
	// user is allowed the first verb of the first rule.
	uc, err := kubernetes.NewForConfig(u.Config())
	if err != nil {
		t.Fatal(err)
	}
	r := rules[0]
	review := &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
		Namespace: ns, Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: r.Resources[0]}}}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		res, err := uc.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err == nil && res.Status.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the RoleBinding for %s did not take effect within 10s (%v)", user, err)
		}
	}
	kc, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(kc, &doc); err != nil {
		t.Fatal(err)
	}
	for _, c := range doc["contexts"].([]any) {
		c.(map[string]any)["context"].(map[string]any)["namespace"] = ns
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func shippedRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	data, err := os.ReadFile("../../../../deploy/rbac/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var r rbacv1.Role
		if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
			t.Fatal(err)
		}
		if r.Kind == "Role" {
			return r.Rules
		}
	}
	t.Fatal("deploy/rbac/rbac.yaml has no Role")
	return nil
}

// baton doctor on a real API server: a user without "create" gets a FAIL
// row naming the verb and the Role rule that fixes it; a user with the
// shipped Role passes (list is only a warning); another application's lock
// of the same name fails the name check.
func TestDoctorKube(t *testing.T) {
	t.Parallel()
	admin, ns := kubeconfig(t)
	shipped := shippedRules(t)
	var noCreate []rbacv1.PolicyRule
	for _, r := range shipped {
		r := *r.DeepCopy()
		var verbs []string
		for _, v := range r.Verbs {
			if v != "create" {
				verbs = append(verbs, v)
			}
		}
		if len(verbs) > 0 { // a rule that only granted create goes
			r.Verbs = verbs
			noCreate = append(noCreate, r)
		}
	}
	restricted := userKubeconfig(t, ns, "no-create", noCreate)
	healthy := userKubeconfig(t, ns, "shipped", shipped)

	code, out, stderr := runCLI(t, "doctor", "--backend", "lease", "--kubeconfig", restricted, "--name", "nightly", "--app", "reports")
	t.Logf("doctor, missing create:\n%s", out)
	if code != 1 {
		t.Fatalf("doctor without create: exit %d, want 1; stderr %s", code, stderr)
	}
	for _, want := range []string{
		"rbac create leases.coordination.k8s.io  FAIL",
		"rbac update leases.coordination.k8s.io  PASS",
		"missing now: create",
		`verbs: ["get", "watch", "create", "update"]`,
		"namespace " + ns,
		"rbac create events                      WARN",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}

	code, out, stderr = runCLI(t, "doctor", "--backend", "lease", "--kubeconfig", healthy, "--name", "nightly", "--app", "reports")
	t.Logf("doctor, shipped Role:\n%s", out)
	if code != 0 || strings.Contains(out, "FAIL") {
		t.Fatalf("doctor with the shipped Role: exit %d, stderr %s, output:\n%s", code, stderr, out)
	}
	if !strings.Contains(out, "rbac list leases.coordination.k8s.io    WARN") {
		t.Errorf("list should be a warning, not a failure:\n%s", out)
	}

	// Another application holds the name: the name check fails.
	if code, _, stderr := runCLI(t, "lock", "--backend", "lease", "--kubeconfig", admin, "--app", "billing", "--name", "nightly", "--", "true"); code != 0 {
		t.Fatalf("lock by billing: exit %d: %s", code, stderr)
	}
	code, out, _ = runCLI(t, "doctor", "--backend", "lease", "--kubeconfig", healthy, "--name", "nightly", "--app", "reports")
	if code != 1 || !strings.Contains(out, `belongs to application "billing", not "reports"`) {
		t.Errorf("doctor with a colliding name: exit %d, output:\n%s", code, out)
	}
}

func TestDoctorFile(t *testing.T) {
	t.Parallel()
	// A lock held under the identity given to doctor: two replicas may
	// share an identity.
	shared := t.TempDir()
	m, err := baton.NewMutex(openStore(t, shared), "busy", baton.WithIdentity("pod-1"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCLI(t, "doctor", "--dir", shared, "--name", "busy", "--identity", "pod-1")
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code != 1 || !strings.Contains(out, `lock "busy" is held right now by identity "pod-1"`) {
		t.Errorf("doctor with an identity in use: exit %d, output:\n%s", code, out)
	}

	code, out, stderr := runCLI(t, "doctor", "--dir", t.TempDir(), "--name", "x", "--ttl", "30s")
	if code != 0 || !strings.Contains(out, "TTL 30s, renew deadline 20s") || !strings.Contains(out, "store     PASS") {
		t.Errorf("doctor on the file backend: exit %d, stderr %s, output:\n%s", code, stderr, out)
	}
	code, out, _ = runCLI(t, "doctor", "--dir", t.TempDir(), "--identity", "fixed", "--ttl", "10s", "--renew-deadline", "10s")
	if code != 1 || !strings.Contains(out, "renew deadline 10s must be shorter than TTL 10s") || !strings.Contains(out, "identity  WARN") {
		t.Errorf("doctor with bad timing: exit %d, output:\n%s", code, out)
	}
}
