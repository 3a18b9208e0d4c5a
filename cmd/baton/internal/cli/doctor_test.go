package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	authzv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/cmd/baton/internal/cli"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
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
	// A namespaced Role cannot grant reading the namespace: doctor says it
	// cannot tell, and does not claim the first acquire will work.
	wantRows(t, out, map[string]doctorRow{
		"namespace " + ns: {"WARN", fmt.Sprintf(`cannot tell whether namespace %s exists: this identity may not get namespaces `+
			`(namespaces %q is forbidden: User "shipped" cannot get resource "namespaces" in API group "" in the namespace %q)`, ns, ns, ns)},
		"name nightly": {"PASS", fmt.Sprintf("no lease %s/nightly: no other application uses the name (the first acquire creates it if namespace %s exists)", ns, ns)},
	})
	if fix := doctorFix(out, "namespace "+ns); fix != "  an operator can check with: kubectl get namespace "+ns {
		t.Errorf("the namespace row's fix is %q", fix)
	}

	// A user who may not read leases: the store row's error spans lines
	// (it quotes the Role rule); the table keeps its first line and
	// prints the rest under Fixes.
	noLeases := userKubeconfig(t, ns, "no-leases", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}})
	code, out, _ = runCLI(t, "doctor", "--backend", "lease", "--kubeconfig", noLeases, "--name", "nightly")
	t.Logf("doctor, no permission on leases:\n%s", out)
	rows := doctorTable(t, out) // fails if a line break split a row
	wantStore := fmt.Sprintf(`no permission: kube: get leases.coordination.k8s.io %s/nightly: permission denied by the store: the API server denied the verb "get" on leases.coordination.k8s.io in namespace %q `+
		`(leases.coordination.k8s.io "nightly" is forbidden: User "no-leases" cannot get resource "leases" in API group "coordination.k8s.io" in the namespace %q). `+
		`Bind this identity to a Role in namespace %q with the rule: (continued below)`, ns, ns, ns, ns)
	if code != 1 || rows["store"] != (doctorRow{"FAIL", wantStore}) {
		t.Errorf("exit %d, store row %+v; want 1 and FAIL %q", code, rows["store"], wantStore)
	}
	wantRows(t, out, map[string]doctorRow{
		"name nightly": {"SKIP", fmt.Sprintf("not checked: this identity may not get leases.coordination.k8s.io in namespace %s (see the rbac get row)", ns)},
	})
	if fix := doctorFix(out, "store"); !strings.HasPrefix(fix, "  - apiGroups: [\"coordination.k8s.io\"]\n") || !strings.HasSuffix(fix, "\n  give this identity the permissions the error names (the store refused the operation or the credentials)") {
		t.Errorf("the store row's rest and fix:\n%s", fix)
	}

	// Another application holds the name: the name check fails.
	if code, _, stderr := runCLI(t, "lock", "--backend", "lease", "--kubeconfig", admin, "--app", "billing", "--name", "nightly", "--", "true"); code != 0 {
		t.Fatalf("lock by billing: exit %d: %s", code, stderr)
	}
	code, out, _ = runCLI(t, "doctor", "--backend", "lease", "--kubeconfig", healthy, "--name", "nightly", "--app", "reports")
	if code != 1 || !strings.Contains(out, `belongs to application "billing", not "reports"`) {
		t.Errorf("doctor with a colliding name: exit %d, output:\n%s", code, out)
	}
	// The same for an application that was renamed: the fix names the
	// command that renames the object.
	rename := fmt.Sprintf("kubectl label leases.coordination.k8s.io nightly -n %s baton.dev/app=reports --overwrite", ns)
	if fix := doctorFix(out, "name nightly"); !strings.Contains(fix, "renamed") || !strings.Contains(fix, rename) {
		t.Errorf("the name row's fix:\n%s\nwant the rename's command %q", fix, rename)
	}
}

// A Lease of client-go leader election holds the name: the name check
// fails, and its fix says how to move to baton without two leaders, not
// only to pick another name.
func TestDoctorKubeForeignLease(t *testing.T) {
	t.Parallel()
	kc, ns := kubeconfig(t)
	cs, err := kubernetes.NewForConfig(controlPlane(t))
	if err != nil {
		t.Fatal(err)
	}
	holder := "controller-0"
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "controller"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	if _, err := cs.CoordinationV1().Leases(ns).Create(t.Context(), lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCLI(t, "doctor", "--backend", "lease", "--kubeconfig", kc, "--name", "controller")
	t.Logf("doctor:\n%s", out)
	fix := doctorFix(out, "name controller")
	for _, want := range []string{fmt.Sprintf("kubectl delete leases.coordination.k8s.io controller -n %s", ns), "would both hold at once", "--adopt"} {
		if code != 1 || !strings.Contains(fix, want) {
			t.Errorf("exit %d, the name row's fix:\n%s\nwant exit 1 and a fix that says %q", code, fix, want)
		}
	}
	// With --adopt, run and lock take the Lease over: the row passes.
	_, out, _ = runCLI(t, "doctor", "--backend", "lease", "--kubeconfig", kc, "--name", "controller", "--adopt")
	if row := doctorTable(t, out)["name controller"]; row.result != "PASS" || !strings.Contains(row.detail, "--adopt takes it over") {
		t.Errorf("doctor --adopt: the name row is %+v; want PASS saying --adopt takes it over", row)
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
	wantRows(t, out, map[string]doctorRow{
		"store": {"PASS", fmt.Sprintf(`reached file store %s; lock "busy" is held by "pod-1" (token %d)`, shared, l.Token())},
	})

	dir := t.TempDir()
	code, out, stderr := runCLI(t, "doctor", "--dir", dir, "--name", "x", "--ttl", "30s")
	rows := doctorTable(t, out)
	if code != 0 || !strings.Contains(out, "TTL 30s, renew deadline 20s") || rows["store"].result != "PASS" {
		t.Errorf("doctor on the file backend: exit %d, stderr %s, output:\n%s", code, stderr, out)
	}
	// The lock directory's file system: a local one passes; one in memory
	// warns (tokens restart after a reboot). A network one warns too (not
	// tested: no NFS mount here; the names are filestore's TestFileSystem).
	if got := rows["file system"]; got.result != "PASS" || !strings.HasPrefix(got.detail, dir+" is on ") {
		t.Errorf("file system row %+v, want PASS", got)
	}
	if shm, err := os.MkdirTemp("/dev/shm", "baton-doctor-"); err == nil {
		defer os.RemoveAll(shm)
		code, out, _ := runCLI(t, "doctor", "--dir", shm)
		if got := doctorTable(t, out)["file system"]; code != 0 || got.result != "WARN" || !strings.Contains(got.detail, "is on tmpfs, in memory") {
			t.Errorf("doctor on /dev/shm: exit %d, file system row %+v, want WARN", code, got)
		}
	}
	code, out, _ = runCLI(t, "doctor", "--dir", t.TempDir(), "--identity", "fixed", "--ttl", "10s", "--renew-deadline", "10s")
	if code != 1 || !strings.Contains(out, "renew deadline 10s must be shorter than TTL 10s") || doctorTable(t, out)["identity"].result != "WARN" {
		t.Errorf("doctor with bad timing: exit %d, output:\n%s", code, out)
	}
}

// The lock directory's mode: one that every user may write fails (any of
// them may delete a held lock's files), a sticky one warns (any of them
// may create a lock's files first), a private one passes.
func TestDoctorFileDirectoryMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode   os.FileMode
		code   int
		result string
		detail string
	}{
		{0o777, 1, "FAIL", "(mode 0777) may be written by every user of this machine: any of them may delete"},
		{0o777 | os.ModeSticky, 0, "WARN", "(mode 01777, sticky) may be written by every user"},
		{0o770, 0, "PASS", "(mode 0770): only its owner and group may write it"},
		{0o700, 0, "PASS", "(mode 0700): only its owner may write it"},
	} {
		dir := t.TempDir()
		if err := os.Chmod(dir, tc.mode); err != nil {
			t.Fatal(err)
		}
		code, out, _ := runCLI(t, "doctor", "--dir", dir, "--name", "x")
		if got := doctorTable(t, out)["directory"]; code != tc.code || got.result != tc.result || !strings.Contains(got.detail, dir+" "+tc.detail) {
			t.Errorf("doctor on a directory of mode %v: exit %d, directory row %+v; want exit %d, %s with %q", tc.mode, code, got, tc.code, tc.result, tc.detail)
		}
	}
}

// doctorRow is one row of doctor's table.
type doctorRow struct{ result, detail string }

// doctorTable parses doctor's table by the columns of its header. It fails
// the test if a line of the table does not fit the columns (a detail with a
// line break would do that) or names an unknown result.
func doctorTable(t *testing.T, out string) map[string]doctorRow {
	t.Helper()
	lines := strings.Split(out, "\n")
	resultCol, detailCol := strings.Index(lines[0], "RESULT"), strings.Index(lines[0], "DETAIL")
	if !strings.HasPrefix(lines[0], "CHECK ") || resultCol < 0 || detailCol < resultCol {
		t.Fatalf("doctor output does not start with the table header:\n%s", out)
	}
	rows := map[string]doctorRow{}
	for _, l := range lines[1:] {
		if l == "" {
			break
		}
		if len(l) <= detailCol || l[resultCol-1] != ' ' || l[detailCol-1] != ' ' {
			t.Fatalf("broken table line %q in:\n%s", l, out)
		}
		name, result := strings.TrimSpace(l[:resultCol]), strings.TrimSpace(l[resultCol:detailCol])
		if name == "" || !slices.Contains([]string{"PASS", "WARN", "FAIL", "SKIP"}, result) {
			t.Fatalf("broken table line %q in:\n%s", l, out)
		}
		rows[name] = doctorRow{result, l[detailCol:]}
	}
	return rows
}

// wantRows checks rows of doctor's output, exactly.
func wantRows(t *testing.T, out string, want map[string]doctorRow) {
	t.Helper()
	rows := doctorTable(t, out)
	for name, w := range want {
		if got, ok := rows[name]; !ok {
			t.Errorf("no row %q in:\n%s", name, out)
		} else if got != w {
			t.Errorf("row %q:\n got %s %q\nwant %s %q", name, got.result, got.detail, w.result, w.detail)
		}
	}
}

// doctorFix returns the text under "Fixes:" for the check named name.
func doctorFix(out, name string) string {
	_, fixes, _ := strings.Cut(out, "\nFixes:\n")
	for _, block := range strings.Split(fixes, "\n\n") {
		if head, body, ok := strings.Cut(strings.TrimLeft(block, "\n"), "\n"); ok && strings.HasPrefix(head, name+" (") {
			return strings.TrimRight(body, "\n")
		}
	}
	return ""
}

// An API server without baton's CRD: --backend crd fails the CRD row with
// the command that installs it, the store row names the cause, and the
// name is not said to be free.
func TestDoctorCRDMissing(t *testing.T) {
	t.Parallel()
	kc := bareKubeconfig(t)
	code, out, stderr := runCLI(t, "doctor", "--backend", "crd", "--kubeconfig", kc, "--name", "m")
	t.Logf("doctor, no CRD:\n%s", out)
	if code != 1 {
		t.Errorf("exit %d, want 1; stderr %s", code, stderr)
	}
	wantRows(t, out, map[string]doctorRow{
		"namespace default":              {"PASS", "exists"},
		"crd distributedlocks.baton.dev": {"FAIL", "the DistributedLock CRD is not installed: the API server does not serve baton.dev/v1alpha1"},
		"name m":                         {"SKIP", "not checked: the DistributedLock CRD is not installed"},
	})
	if fix := doctorFix(out, "crd distributedlocks.baton.dev"); !strings.Contains(fix, "kubectl apply -k deploy/crd") {
		t.Errorf("the CRD row's fix %q does not say how to install it", fix)
	}
}

// A namespace that does not exist fails its row, and the name check does
// not call the name free; in a namespace that exists, with the CRD, every
// row passes.
func TestDoctorKubeNamespace(t *testing.T) {
	t.Parallel()
	kc, ns := kubeconfig(t)
	host := controlPlane(t).Host
	code, out, stderr := runCLI(t, "doctor", "--backend", "lease", "--kubeconfig", kc, "-n", "no-such-ns", "--name", "nightly")
	t.Logf("doctor -n no-such-ns:\n%s", out)
	if code != 1 {
		t.Errorf("exit %d, want 1; stderr %s", code, stderr)
	}
	wantRows(t, out, map[string]doctorRow{
		"store":                               {"PASS", "reached leases in namespace no-such-ns at " + host},
		"namespace no-such-ns":                {"FAIL", "namespace no-such-ns does not exist: every lock there fails"},
		"rbac get leases.coordination.k8s.io": {"PASS", "allowed in namespace no-such-ns"},
		"name nightly":                        {"SKIP", "not checked: namespace no-such-ns does not exist"},
	})
	if fix := doctorFix(out, "namespace no-such-ns"); !strings.HasPrefix(fix, "  create it (kubectl create namespace no-such-ns)") {
		t.Errorf("the namespace row's fix is %q", fix)
	}

	code, out, stderr = runCLI(t, "doctor", "--backend", "crd", "--kubeconfig", kc, "--name", "m")
	t.Logf("doctor --backend crd:\n%s", out)
	if code != 0 {
		t.Errorf("exit %d, want 0; stderr %s", code, stderr)
	}
	wantRows(t, out, map[string]doctorRow{
		"namespace " + ns:                {"PASS", "exists"},
		"crd distributedlocks.baton.dev": {"PASS", "installed: the API server serves distributedlocks in baton.dev/v1alpha1"},
		"name m":                         {"PASS", "no crd " + ns + "/m yet: the first acquire creates it"},
	})
}

// A namespace being deleted exists, but the API server creates nothing in
// it: doctor fails its row, and lock exits 78 saying so instead of 77 with
// a Role to bind.
func TestDoctorKubeNamespaceTerminating(t *testing.T) {
	t.Parallel()
	kc, ns := kubeconfig(t)
	cs, err := kubernetes.NewForConfig(controlPlane(t))
	if err != nil {
		t.Fatal(err)
	}
	// envtest runs no namespace controller: the namespace stays Terminating.
	if err := cs.CoreV1().Namespaces().Delete(t.Context(), ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(t, "doctor", "--backend", "lease", "--kubeconfig", kc, "--name", "nightly")
	t.Logf("doctor:\n%s", out)
	if code != 1 {
		t.Errorf("doctor exit %d, want 1; stderr %s", code, stderr)
	}
	if row := doctorTable(t, out)["namespace "+ns]; row.result != "FAIL" || !strings.Contains(row.detail, "is being deleted") {
		t.Errorf("namespace row %+v, want FAIL saying it is being deleted", row)
	}
	if row := doctorTable(t, out)["name nightly"]; row.result != "SKIP" {
		t.Errorf("name row %+v, want SKIP: no lock object can be created there", row)
	}
	code, _, stderr = runCLI(t, "lock", "--backend", "lease", "--kubeconfig", kc, "--name", "nightly", "--wait", "0", "--", "true")
	if code != 78 || !strings.Contains(stderr, "is being deleted") || strings.Contains(stderr, "Role") {
		t.Errorf("lock exit %d, stderr %q; want 78 saying the namespace is being deleted", code, stderr)
	}
}

// Stores that cannot be reached: the store row names the cause; the rows
// that need the store fail or are skipped.
func TestDoctorUnreachable(t *testing.T) {
	t.Parallel()
	redisAddr, etcdAddr := closedPort(t), closedPort(t)
	for _, tc := range []struct {
		backend string
		flags   []string
		want    map[string]doctorRow
	}{
		{"lease", []string{"--kubeconfig", unreachableKubeconfig(t)}, map[string]doctorRow{
			"kubernetes": {"SKIP", "not checked: the API server cannot be reached (see the store row)"},
		}},
		{"redis", []string{"--redis-url", "redis://" + redisAddr}, map[string]doctorRow{}},
		{"etcd", []string{"--endpoints", "http://" + etcdAddr}, map[string]doctorRow{}},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			t.Parallel()
			code, out, stderr := runCLI(t, append([]string{"doctor", "--backend", tc.backend, "--name", "job"}, tc.flags...)...)
			t.Logf("doctor:\n%s", out)
			if code != 1 {
				t.Errorf("exit %d, want 1; stderr %s", code, stderr)
			}
			rows := doctorTable(t, out)
			if got := rows["store"]; got.result != "FAIL" || !strings.HasPrefix(got.detail, "unreachable: ") {
				t.Errorf("store row %+v, want FAIL naming the cause", got)
			}
			wantRows(t, out, tc.want)
		})
	}
}

// Real redis-server processes: the persistence row reads INFO persistence
// and CONFIG GET appendfsync, as far as the user's ACL allows, and prints
// URLs without their passwords.
func TestDoctorRedisPersistence(t *testing.T) {
	t.Parallel()
	const password = "s3cret-pw"
	off := testenv.StartRedis(t)
	on := testenv.StartRedis(t, testenv.AppendOnly(), testenv.RedisArgs(
		"--user", "lockonly", "on", ">"+password, "~*", "&*", "+@all", "-info", "-config",
		"--user", "noconfig", "on", ">"+password, "~*", "&*", "+@all", "-config"))
	everysec := testenv.StartRedis(t, testenv.RedisArgs("--appendonly", "yes", "--appendfsync", "everysec"))
	as := func(user string) string { return "redis://" + user + ":" + password + "@" + on.Addr() }
	shown := func(user string) string { return "redis://" + user + ":xxxxx@" + on.Addr() }
	row := func(url string) string { return "persistence " + url }
	for _, tc := range []struct {
		name string
		url  string
		code int
		want doctorRow
		fix  string // a part of the row's fix; none if empty
	}{
		{"aof off", off.URL(), 0,
			doctorRow{"WARN", "append-only file off (aof_enabled:0): a restart or crash frees every held lock while its holder still runs (tokens keep growing, from the server's clock)"},
			"run the server with appendonly yes and appendfsync always"},
		{"aof always", on.URL(), 0,
			doctorRow{"PASS", "append-only file on (aof_enabled:1), appendfsync always: every acknowledged write survives a restart"}, ""},
		{"aof everysec", everysec.URL(), 0,
			doctorRow{"WARN", "append-only file on, but appendfsync everysec: a crash can lose the last writes, so a claim can vanish while its holder still runs (tokens keep growing, from the server's clock)"},
			"appendfsync always"},
		{"CONFIG denied", as("noconfig"), 0,
			doctorRow{"PASS", "append-only file on (aof_enabled:1); this user may not run CONFIG GET, so appendfsync is not known: it must be always (check: redis-cli -u " + shown("noconfig") + " CONFIG GET appendfsync)"}, ""},
		{"INFO denied", as("lockonly"), 0,
			doctorRow{"WARN", "cannot tell whether a restart keeps the locks: this user may not run INFO (NOPERM this user has no permissions to run the 'info' command)"},
			"an operator runs: redis-cli -u " + shown("lockonly") + " INFO persistence"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runCLI(t, "doctor", "--backend", "redis", "--redis-url", tc.url, "--name", "job")
			t.Logf("doctor:\n%s", out)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %s", code, tc.code, stderr)
			}
			name := row(strings.ReplaceAll(tc.url, password, "xxxxx"))
			wantRows(t, out, map[string]doctorRow{name: tc.want})
			if fix := doctorFix(out, name); !strings.Contains(fix, tc.fix) || (tc.fix == "") != (fix == "") {
				t.Errorf("fix %q, want one with %q", fix, tc.fix)
			}
			if strings.Contains(out+stderr, password) {
				t.Errorf("the output shows the password")
			}
		})
	}

	// Redlock: one row per server; a server that does not answer fails.
	gone := "redis://" + closedPort(t)
	code, out, _ := runCLI(t, "doctor", "--backend", "redlock", "--redis-url", on.URL(), "--redis-url", off.URL(), "--redis-url", gone)
	t.Logf("doctor --backend redlock:\n%s", out)
	if code != 1 {
		t.Errorf("redlock with a server down: exit %d, want 1", code)
	}
	wantRows(t, out, map[string]doctorRow{
		row(on.URL()):  {"PASS", "append-only file on (aof_enabled:1), appendfsync always: every acknowledged write survives a restart"},
		row(off.URL()): {"WARN", "append-only file off (aof_enabled:0): a restart or crash frees every held lock while its holder still runs (tokens keep growing, from the server's clock)"},
		row(gone): {"FAIL", "unreachable: store unavailable: dial tcp " + strings.TrimPrefix(gone, "redis://") +
			": connect: connection refused (nothing listens at that address: is the server running, and are the host and port right?)"},
		"permissions " + on.URL(): {"PASS", `this user may run every command baton sends for lock "doctor-probe" (redisstore.ACLRules)`},
		"permissions " + gone:     {"SKIP", "not checked: the persistence row failed (its detail says why)"},
		"independent servers":     {"SKIP", "2 of 3 servers answered, each a different redis-server; not checked: " + gone + " (see their rows)"},
	})
}

// Real redis-server processes: the eviction row reads INFO memory and
// fails for a policy that may evict any key (a lock's fence too: two
// holders), warns for one that may evict keys that expire (a lock's key:
// an early loss), and passes when nothing is evicted.
func TestDoctorRedisEviction(t *testing.T) {
	t.Parallel()
	server := func(args ...string) string { return testenv.StartRedis(t, testenv.RedisArgs(args...)).URL() }
	noLimit := server("--maxmemory-policy", "allkeys-lru")
	noEviction := server("--maxmemory", "100mb", "--maxmemory-policy", "noeviction")
	volatile := server("--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru")
	allKeys := server("--maxmemory", "1536mb", "--maxmemory-policy", "allkeys-lru",
		"--user", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info")
	addr := func(url string) string { return strings.TrimPrefix(url, "redis://") }
	noInfo := "redis://noinfo:pw@" + addr(allKeys)
	for _, tc := range []struct {
		name, url string
		code      int
		want      doctorRow
		fix       string // a part of the row's fix; none if empty
	}{
		{"no maxmemory", noLimit, 0, doctorRow{"PASS", "no maxmemory: Redis evicts nothing"}, ""},
		{"noeviction", noEviction, 0, doctorRow{"PASS", "maxmemory-policy noeviction: Redis evicts nothing (at maxmemory, 100 MiB, new acquisitions fail until memory is freed; holders keep renewing)"}, ""},
		{"volatile-lru", volatile, 0, doctorRow{"WARN", addr(volatile) + " has maxmemory 100 MiB and maxmemory-policy volatile-lru: at that limit Redis may evict a held lock's key (it expires): " +
			"its holder then loses the lock and its command is stopped early (the fence, which does not expire, keeps everyone else out until the claim could have expired)"}, "maxmemory-policy noeviction"},
		{"allkeys-lru", allKeys, 1, doctorRow{"FAIL", addr(allKeys) + " has maxmemory 1.5 GiB and maxmemory-policy allkeys-lru: at that limit Redis evicts any key, " +
			"a held lock's key and fence among them, and another process then takes the lock while its holder still runs"}, "a cache that must evict needs a Redis of its own"},
		{"INFO denied", noInfo, 0, doctorRow{"WARN", "cannot tell whether Redis may evict the locks' keys: redisstore: INFO memory: permission denied by the store: " +
			"NOPERM this user has no permissions to run the 'info' command (baton's locks do not need INFO; only this check does)"}, "INFO memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runCLI(t, "doctor", "--backend", "redis", "--redis-url", tc.url, "--name", "job")
			t.Logf("doctor:\n%s", out)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %s", code, tc.code, stderr)
			}
			row := "eviction " + strings.Replace(tc.url, ":pw@", ":xxxxx@", 1)
			wantRows(t, out, map[string]doctorRow{row: tc.want})
			if fix := doctorFix(out, row); !strings.Contains(fix, tc.fix) || (tc.fix == "") != (fix == "") {
				t.Errorf("fix %q, want one with %q", fix, tc.fix)
			}
		})
	}
}

// Real redis-server processes: a Redlock's URLs must reach different
// servers; two names of one server (127.0.0.1 and localhost) fail.
func TestDoctorRedlockIndependence(t *testing.T) {
	t.Parallel()
	a, b, c := testenv.StartRedis(t), testenv.StartRedis(t), testenv.StartRedis(t)
	_, port, _ := net.SplitHostPort(a.Addr())
	alias := "redis://localhost:" + port
	code, out, _ := runCLI(t, "doctor", "--backend", "redlock", "--redis-url", a.URL(), "--redis-url", b.URL(), "--redis-url", alias)
	t.Logf("doctor, one server named twice:\n%s", out)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	row := doctorTable(t, out)["independent servers"]
	if row.result != "FAIL" || !strings.Contains(row.detail, a.URL()+" and "+alias+" reach the same redis-server") {
		t.Errorf("independent servers row %+v, want FAIL naming %s and %s", row, a.URL(), alias)
	}
	code, out, _ = runCLI(t, "doctor", "--backend", "redlock", "--redis-url", a.URL(), "--redis-url", b.URL(), "--redis-url", c.URL())
	if row := doctorTable(t, out)["independent servers"]; row.result != "PASS" {
		t.Errorf("three servers: independent servers row %+v, want PASS (exit %d)\n%s", row, code, out)
	}
	// Three names of one server: every attempt meets its own claim, and
	// lock says so instead of naming its own identity as another holder.
	code, _, stderr := runCLI(t, "lock", "--backend", "redlock", "--redis-url", a.URL(), "--redis-url", alias, "--redis-url", "redis://LOCALHOST:"+port,
		"--name", "job", "--wait", "0", "--", "true")
	if code != cli.ExitHeld || !strings.Contains(stderr, "this process's own identity") {
		t.Errorf("lock over three names of one server: exit %d, want %d naming its own identity:\n%s", code, cli.ExitHeld, stderr)
	}
}

// Real redis-server processes: the permissions row passes for a user with
// redisstore.ACLRules, and fails, with exit 1 and the command that adds the
// rules, for a user without one of them (+rpop, which rules copied from an
// earlier release lack: Lock then fails only once 1024 waiters are queued)
// or without scripting; the store row passes for the first two. With
// refused credentials the persistence row fails and this one is skipped.
func TestDoctorRedisPermissions(t *testing.T) {
	t.Parallel()
	rules := strings.Fields(redisstore.ACLRules)
	srv := testenv.StartRedis(t,
		testenv.RedisArgs(append([]string{"--user", "locker", "on", ">pw"}, rules...)...),
		testenv.RedisArgs(append([]string{"--user", "older", "on", ">pw"}, slices.DeleteFunc(slices.Clone(rules), func(r string) bool { return r == "+rpop" })...)...),
		testenv.RedisArgs("--user", "noscripts", "on", ">pw", "~*", "&*", "+@all", "-@scripting"))
	host, port, _ := net.SplitHostPort(srv.Addr())
	setuser := func(user string) string {
		return "redis-cli -h " + host + " -p " + port + " --user ADMIN --askpass ACL SETUSER " + user + " '~baton:*' '&baton:*' +hello +auth +select +ping +asking '+cluster|slots' +evalsha"
	}
	for _, tc := range []struct {
		user, password string
		code           int
		want           doctorRow
		fix            string // a part of the row's fix; none if empty
	}{
		{"locker", "pw", 0, doctorRow{"PASS", `this user may run every command baton sends for lock "job" (redisstore.ACLRules)`}, ""},
		{"older", "pw", 1, doctorRow{"FAIL", `no permission: redisstore: lock "job": permission denied by the store: this user may not run RPOP baton:{job}:queue; ` +
			`give it the rules of redisstore.ACLRules (with the key and channel patterns ~baton:* &baton:* for the prefix "baton:")`}, setuser("older")},
		{"noscripts", "pw", 1, doctorRow{"FAIL", `no permission: redisstore: check permissions for lock "job" (key baton:{job}:lock): permission denied by the store: ` +
			`NOPERM this user has no permissions to run the 'evalsha' command; give the user the rules of redisstore.ACLRules`}, setuser("noscripts")},
		{"locker", "wrong", 1, doctorRow{"SKIP", "not checked: the persistence row failed (its detail says why)"}, ""},
	} {
		t.Run(tc.user+":"+tc.password, func(t *testing.T) {
			url := "redis://" + tc.user + ":" + tc.password + "@" + srv.Addr()
			code, out, stderr := runCLI(t, "doctor", "--backend", "redis", "--redis-url", url, "--name", "job")
			t.Logf("doctor:\n%s", out)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %s", code, tc.code, stderr)
			}
			row := "permissions " + strings.Replace(url, tc.password, "xxxxx", 1)
			wantRows(t, out, map[string]doctorRow{row: tc.want})
			if fix := doctorFix(out, row); !strings.Contains(fix, tc.fix) || (tc.fix == "") != (fix == "") {
				t.Errorf("fix %q, want one with %q", fix, tc.fix)
			}
			if tc.user != "noscripts" && tc.password == "pw" {
				if got := doctorTable(t, out)["store"]; got.result != "PASS" {
					t.Errorf("store row %+v, want PASS: the user may read the lock", got)
				}
			}
		})
	}
}

// A real etcd whose database reached its quota: its NOSPACE alarm refuses
// every write, so its row fails (another endpoint would not help: the
// alarm is the cluster's), and the permissions row, whose check writes,
// is skipped with the reason instead of blaming the user's role.
func TestDoctorEtcdNoSpace(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, testenv.EtcdNoFsync(), testenv.EtcdArgs("--quota-backend-bytes", "1048576"))
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	value := strings.Repeat("x", 60<<10)
	for i := 0; ; i++ {
		_, err := c.Put(t.Context(), fmt.Sprintf("/filler/%d", i), value)
		if err != nil && strings.Contains(err.Error(), "database space exceeded") {
			break
		}
		// etcd measures its database at each backend commit (every 100ms),
		// so the puts that pass the quota depend on the machine's speed:
		// 100 to 118 of these (6 MiB or more) on an idle one. The bound
		// only keeps a member that never raises the alarm from looping.
		if err != nil || i == 1000 {
			t.Fatalf("filling the database: put %d: %v", i, err)
		}
	}
	code, out, _ := runCLI(t, "doctor", "--backend", "etcd", "--endpoints", e.Endpoint(), "--name", "job")
	t.Logf("doctor:\n%s", out)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	rows := doctorTable(t, out)
	if r := rows["etcd "+e.Endpoint()]; r.result != "FAIL" || !strings.Contains(r.detail, "alarm:NOSPACE") {
		t.Errorf("etcd row %+v, want FAIL naming alarm:NOSPACE", r)
	}
	if r := rows["permissions"]; r.result != "SKIP" || !strings.Contains(r.detail, "etcdctl alarm disarm") {
		t.Errorf("permissions row %+v, want SKIP naming the alarm", r)
	}
}

// Two members of three down: the one left answers its Status but has no
// raft leader, so etcd answers no lock request. Its doctor row said
// "follower" and passed the cause on as a warning, with the fix for a
// NOSPACE alarm, and the rows of the members that are down warned that
// "the lock works meanwhile through the endpoints that answer"; they all
// fail now, the member left saying it has no leader and what brings the
// quorum back.
func TestDoctorEtcdQuorumLost(t *testing.T) {
	t.Parallel()
	cl := testenv.StartEtcdCluster(t, testenv.EtcdNoFsync())
	left := cl.Members[0]
	cl.Members[1].Kill()
	cl.Members[2].Kill()
	left.WaitNoLeader(t, 30*time.Second)
	code, out, _ := runCLI(t, "doctor", "--backend", "etcd", "--endpoints", strings.Join(cl.Endpoints(), ","), "--connect-timeout", "2s", "--name", "job")
	t.Logf("doctor:\n%s", out)
	row := "etcd " + left.Endpoint()
	if r := doctorTable(t, out)[row]; code != 1 || r.result != "FAIL" || !strings.Contains(r.detail, "no raft leader") {
		t.Errorf("exit %d, row of the member left %+v; want exit 1 and FAIL naming no raft leader", code, r)
	}
	if fix := doctorFix(out, row); !strings.Contains(fix, "quorum") || strings.Contains(fix, "NOSPACE") {
		t.Errorf("the fix of the member left is %q; want one about the quorum", fix)
	}
	// No member serves the lock: the members that are down do not warn
	// that it works through the others.
	for _, m := range cl.Members[1:] {
		if r := doctorTable(t, out)["etcd "+m.Endpoint()]; r.result != "FAIL" {
			t.Errorf("row of a member that is down: %+v, want FAIL", r)
		}
	}
}

// A learner (etcdctl member add --learner, not yet promoted) answers
// Status, but no lock request. Its doctor row passed ("learner (not
// voting)") while the store row failed with etcd's bare "rpc not
// supported for learner", and lock exited 1. Listed alone, its row now
// fails and lock exits 78, both naming the promotion; listed among voting
// members, its row warns (etcd's client sends its requests to the others).
func TestDoctorEtcdLearner(t *testing.T) {
	t.Parallel()
	cl := testenv.StartEtcdCluster(t, testenv.EtcdNoFsync())
	learner := cl.AddLearner()
	row := "etcd " + learner.Endpoint()
	code, out, _ := runCLI(t, "doctor", "--backend", "etcd", "--endpoints", learner.Endpoint(), "--name", "job")
	t.Logf("doctor, the learner alone:\n%s", out)
	if r := doctorTable(t, out)[row]; code != 1 || r.result != "FAIL" || !strings.Contains(r.detail, "learner") {
		t.Errorf("exit %d, learner row %+v; want exit 1 and FAIL", code, r)
	}
	if fix := doctorFix(out, row); !strings.Contains(fix, "etcdctl member promote") {
		t.Errorf("the learner's fix is %q; want one naming etcdctl member promote", fix)
	}
	code, out, _ = runCLI(t, "doctor", "--backend", "etcd", "--endpoints", strings.Join(append(cl.Endpoints(), learner.Endpoint()), ","), "--name", "job")
	t.Logf("doctor, the learner among voting members:\n%s", out)
	if r := doctorTable(t, out)[row]; code != 0 || r.result != "WARN" {
		t.Errorf("exit %d, learner row %+v; want exit 0 and WARN", code, r)
	}
	code, _, stderr := runCLI(t, "lock", "--backend", "etcd", "--endpoints", learner.Endpoint(), "--name", "job", "--", "true")
	if code != cli.ExitConfig || !strings.Contains(stderr, "etcdctl member promote") {
		t.Errorf("lock on the learner alone: exit %d, want %d naming etcdctl member promote:\n%s", code, cli.ExitConfig, stderr)
	}
}

// Real etcd servers: each endpoint's row shows the server's version; an
// endpoint that does not answer warns while another answers, and fails
// when none does.
func TestDoctorEtcd(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	version := etcdVersion(t)
	gone := "http://" + closedPort(t)
	refused := func(ep string) string {
		return "unreachable: store unavailable: dial tcp " + strings.TrimPrefix(ep, "http://") +
			": connect: connection refused (nothing listens at that address: is the server running, and are the host and port right?)"
	}
	code, out, stderr := runCLI(t, "doctor", "--backend", "etcd", "--endpoints", e.Endpoint()+","+gone, "--name", "job")
	t.Logf("doctor, one endpoint down:\n%s", out)
	if code != 0 {
		t.Errorf("exit %d, want 0; stderr %s", code, stderr)
	}
	wantRows(t, out, map[string]doctorRow{
		"store":                {"PASS", "reached etcd at " + e.Endpoint() + "," + gone},
		"etcd " + e.Endpoint(): {"PASS", "etcd " + version + ", leader"},
		"etcd " + gone:         {"WARN", refused(gone)},
		"permissions":          {"PASS", `this user may read the prefix "/baton/locks/" and write the keys of lock "job"`},
	})
	if fix := doctorFix(out, "etcd "+gone); !strings.HasSuffix(fix, "then exit 69; the lock works meanwhile through the endpoints that answer") {
		t.Errorf("the down endpoint's fix is %q", fix)
	}

	code, out, _ = runCLI(t, "doctor", "--backend", "etcd", "--endpoints", gone, "--name", "job")
	t.Logf("doctor, no endpoint answers:\n%s", out)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	rows := doctorTable(t, out)
	if got := rows["etcd "+gone]; got != (doctorRow{"FAIL", refused(gone)}) {
		t.Errorf("row %q: %+v", "etcd "+gone, got)
	}
	if got := rows["permissions"]; got.result != "SKIP" {
		t.Errorf("permissions row %+v, want SKIP: no endpoint answered", got)
	}
}

// An etcd reached over a unix socket (a unix:// endpoint) passes the
// store and endpoint rows; the endpoint's row dialled it over TCP and
// failed it ("too many colons in address"), and so did the store before.
func TestDoctorEtcdUnixSocket(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "etcd.sock:0")
	testenv.StartEtcd(t, testenv.EtcdArgs("--listen-client-urls=unix://"+sock))
	ep := "unix://" + sock
	code, out, stderr := runCLI(t, "doctor", "--backend", "etcd", "--endpoints", ep, "--name", "job")
	t.Logf("doctor over a unix socket:\n%s", out)
	if code != 0 {
		t.Errorf("exit %d, want 0; stderr %s", code, stderr)
	}
	wantRows(t, out, map[string]doctorRow{
		"store":      {"PASS", "reached etcd at " + ep},
		"etcd " + ep: {"PASS", "etcd " + etcdVersion(t) + ", leader"},
	})
}

// A real etcd with authentication on: the permissions row passes for a
// user whose role may read and write the prefix, and fails, with exit 1
// and the grant that fixes it, for one that may only read it (whose store
// row passes: it may read the lock).
func TestDoctorEtcdPermissions(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	ctx := t.Context()
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	prefix := "/baton/locks/"
	must(root.RoleAdd(ctx, "root"))
	must(root.UserAdd(ctx, "root", "root-pw"))
	must(root.UserGrantRole(ctx, "root", "root"))
	for role, perm := range map[string]clientv3.PermissionType{"locker": clientv3.PermissionType(clientv3.PermReadWrite), "reader": clientv3.PermissionType(clientv3.PermRead)} {
		must(root.RoleAdd(ctx, role))
		must(root.RoleGrantPermission(ctx, role, prefix, clientv3.GetPrefixRangeEnd(prefix), perm))
		must(root.UserAdd(ctx, role, role+"-pw"))
		must(root.UserGrantRole(ctx, role, role))
	}
	must(root.AuthEnable(ctx))
	for _, tc := range []struct {
		user string
		code int
		want doctorRow
	}{
		{"locker", 0, doctorRow{"PASS", `this user may read the prefix "/baton/locks/" and write the keys of lock "job"`}},
		{"reader", 1, doctorRow{"FAIL", `no permission: etcdstore: lock "job": check permissions: permission denied by the store: etcdserver: permission denied ` +
			`(the user needs read and write permission on the key range of the prefix "/baton/locks/": etcdctl role grant-permission --prefix ROLE readwrite /baton/locks/)`}},
	} {
		code, out, stderr := runCLI(t, "doctor", "--backend", "etcd", "--endpoints", e.Endpoint(), "--user", tc.user, "--password", tc.user+"-pw", "--name", "job")
		t.Logf("doctor as %s:\n%s", tc.user, out)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d; stderr %s", tc.user, code, tc.code, stderr)
		}
		wantRows(t, out, map[string]doctorRow{"permissions": tc.want})
		if got := doctorTable(t, out)["store"]; got.result != "PASS" {
			t.Errorf("%s: store row %+v, want PASS: the user may read the lock", tc.user, got)
		}
		if fix := doctorFix(out, "permissions"); (tc.code == 1) != strings.Contains(fix, "role grant-permission --prefix ROLE readwrite /baton/locks/") {
			t.Errorf("%s: permissions fix %q", tc.user, fix)
		}
	}
}

// etcdVersion is the version the test etcd binary reports.
func etcdVersion(t *testing.T) string {
	t.Helper()
	bin, err := testenv.FindEtcd()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "etcd Version: "); ok {
			return v
		}
	}
	t.Fatalf("%s --version says no version:\n%s", bin, out)
	return ""
}

// A redis:// URL to a server that serves TLS: the store row fails as a
// misconfiguration naming rediss://, and the server's rows are skipped
// rather than repeating a bare EOF.
func TestDoctorRedisPlainToTLS(t *testing.T) {
	t.Parallel()
	files, _ := testenv.WriteTLSFiles(t)
	url := strings.Replace(testenv.StartRedis(t, testenv.WithRedisTLS(files)).URL(), "rediss://", "redis://", 1)
	code, out, _ := runCLI(t, "doctor", "--backend", "redis", "--redis-url", url, "--name", "job")
	t.Logf("doctor:\n%s", out)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	rows := doctorTable(t, out)
	if got := rows["store"]; got.result != "FAIL" || !strings.HasPrefix(got.detail, "misconfigured: ") || !strings.Contains(got.detail, "use a rediss:// URL") {
		t.Errorf("store row %+v, want FAIL naming rediss://", got)
	}
	for _, r := range []string{"persistence " + url, "permissions " + url} {
		if got := rows[r]; got != (doctorRow{"SKIP", "not checked: the store row failed (its detail says why)"}) {
			t.Errorf("row %q: %+v, want SKIP", r, got)
		}
	}
	// baton lock exits at once with the code of a setup that cannot work.
	if code, _, stderr := runCLI(t, "lock", "--backend", "redis", "--redis-url", url, "--name", "job", "--", "true"); code != cli.ExitConfig {
		t.Errorf("lock: exit %d, want %d:\n%s", code, cli.ExitConfig, stderr)
	}
}

// A kubeconfig whose server is a web server, not a Kubernetes API server
// (python3 -m http.server: 404 pages, 501 for other methods): no command
// reads its 404 as a missing lock, lock and run stop at once with 78 (not
// a wait for --wait), and doctor fails its store row and skips the rows
// that ask the API server, instead of passing it or failing them with
// HTML.
func TestKubeconfigNotAnAPIServer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusNotFound)
		} else {
			w.WriteHeader(http.StatusNotImplemented)
		}
		fmt.Fprint(w, "<!DOCTYPE HTML>\n<html><body>Error response</body></html>")
	}))
	t.Cleanup(srv.Close)
	kc := writeKubeconfig(t, &rest.Config{Host: srv.URL}, "default")
	for _, args := range [][]string{
		{"status", "nightly"},
		{"status"},
		{"release", "nightly", "--force"},
		{"lock", "--name", "nightly", "--", "true"}, // --wait: forever
		{"run", "--name", "nightly", "--", "true"},
	} {
		for _, backend := range []string{"lease", "configmap", "crd"} {
			argv := append([]string{args[0], "--backend", backend, "--kubeconfig", kc}, args[1:]...)
			// Bounded, so that a regression fails here instead of waiting.
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			var out, errb bytes.Buffer
			code := cli.Main(ctx, argv, nil, &out, &errb)
			cancel()
			stderr := errb.String()
			if code != 78 || !strings.Contains(stderr, "not a Kubernetes API server") {
				t.Errorf("baton %s: exit %d, stderr %q; want 78 saying the server is not a Kubernetes API server", strings.Join(argv, " "), code, stderr)
			}
		}
	}
	code, out, stderr := runCLI(t, "doctor", "--backend", "lease", "--kubeconfig", kc, "--name", "nightly")
	t.Logf("doctor:\n%s", out)
	rows := doctorTable(t, out)
	if code != 1 || rows["store"].result != "FAIL" || !strings.Contains(rows["store"].detail, "not a Kubernetes API server") {
		t.Errorf("doctor exit %d, store row %+v (stderr %s); want 1 and a store row that fails saying the server is not a Kubernetes API server", code, rows["store"], stderr)
	}
	for label, row := range rows {
		if row.result == "FAIL" && label != "store" {
			t.Errorf("row %q: %+v; want only the store row to fail", label, row)
		}
	}
}

// An etcd grpc-proxy in front of a healthy member: the proxy answers lease
// keepalives on its own schedule, so baton's lease timing does not hold
// through it. Its row passed ("etcd 3.7.3, leader": Status is forwarded
// to the member behind it); it now fails, naming the proxy and the fix,
// while a member's row still passes.
func TestDoctorEtcdGRPCProxy(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, testenv.EtcdNoFsync())
	px := testenv.StartEtcdProxy(t, []*testenv.Etcd{e})
	row := "etcd " + px.Endpoint()
	code, out, _ := runCLI(t, "doctor", "--backend", "etcd", "--endpoints", px.Endpoint(), "--name", "job")
	t.Logf("doctor through a grpc-proxy:\n%s", out)
	if r := doctorTable(t, out)[row]; code != 1 || r.result != "FAIL" || !strings.Contains(r.detail, "grpc-proxy") {
		t.Errorf("exit %d, proxy row %+v; want exit 1 and FAIL naming the grpc-proxy", code, r)
	}
	if fix := doctorFix(out, row); !strings.Contains(fix, "--endpoints") {
		t.Errorf("the proxy's fix is %q; want one naming --endpoints", fix)
	}
	code, out, _ = runCLI(t, "doctor", "--backend", "etcd", "--endpoints", e.Endpoint(), "--name", "job")
	if r := doctorTable(t, out)["etcd "+e.Endpoint()]; code != 0 || r.result != "PASS" {
		t.Errorf("doctor on the member itself: exit %d, row %+v; want exit 0 and PASS:\n%s", code, r, out)
	}
}
