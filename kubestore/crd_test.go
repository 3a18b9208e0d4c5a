package kubestore_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/kubestore"
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

const crdPath = "../deploy/crd/baton.dev_distributedlocks.yaml"

var (
	crdOnce sync.Once
	crdErr  error
)

// crdPlane returns the admin config of the package's API server with the
// DistributedLock CRD from deploy/crd installed (once per package run).
func crdPlane(t *testing.T) *rest.Config {
	t.Helper()
	cfg := controlPlane(t)
	crdOnce.Do(func() {
		_, crdErr = envtest.InstallCRDs(rest.CopyConfig(cfg), envtest.CRDInstallOptions{
			Paths: []string{crdPath}, ErrorIfPathMissing: true,
		})
		if crdErr == nil {
			crdErr = warmUp(t, cfg)
		}
	})
	if crdErr != nil {
		t.Fatalf("installing %s: %v", crdPath, crdErr)
	}
	return cfg
}

// warmUp takes, releases and lists one lock, so that the API server's
// one-time setup of a freshly installed CRD's handlers (about a second on
// two cores) is not charged to the first test that measures time.
func warmUp(t *testing.T, cfg *rest.Config) error {
	ns := newNamespace(t)
	s, err := kubestore.NewDistributedLockForConfig(cfg, ns)
	if err != nil {
		return err
	}
	ctx := t.Context()
	for range 3 {
		g, err := s.TryAcquire(ctx, "warm-up", req("warm-up", time.Minute))
		if err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if g, err = s.Renew(ctx, g); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if err := s.Release(ctx, g); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	_, err = s.List(ctx)
	return err
}

func newDL(t *testing.T, cfg *rest.Config, ns string, opts ...kubestore.DistributedLockOption) *kubestore.DistributedLockStore {
	t.Helper()
	s, err := kubestore.NewDistributedLockForConfig(cfg, ns, append([]kubestore.DistributedLockOption{kubestore.WithRateLimit(500, 1000)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dlAdmin is a direct client of the admin for DistributedLocks.
func dlAdmin(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(crdPlane(t), client.Options{Scheme: kubestore.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDistributedLockConformance runs the conformance suite against the
// DistributedLock backend with capacity 1 (a mutex).
//
// The harness TTL is 2s, not the 1s minimum used for Leases: a write of a
// custom resource costs the API server about twice a Lease's (JSON, schema
// validation, managed fields), and with -race on two shared cores the
// Exclusive/Mutex subtest (32 contenders retrying every TTL/20) then
// sometimes kept a renew in flight past the 1.5s renew deadline of a 2s
// mutex TTL. The doubled time scale checks the same properties.
func TestDistributedLockConformance(t *testing.T) {
	cfg := crdPlane(t)
	batontest.Run(t, batontest.Harness{
		TTL: 2 * time.Second,
		Open: func(t *testing.T) func(t *testing.T) backend.Backend {
			ns := newNamespace(t)
			return func(t *testing.T) backend.Backend { return newDL(t, cfg, ns) }
		},
	})
}

// TestDistributedLockSchema: the API server rejects impossible values
// (leaseDurationSeconds 0 or above a day, capacity 0) and defaults
// capacity to 1.
func TestDistributedLockSchema(t *testing.T) {
	t.Parallel()
	c := dlAdmin(t)
	ns := newNamespace(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		spec  v1alpha1.DistributedLockSpec
		field string
	}{
		{"zero-ttl", v1alpha1.DistributedLockSpec{LeaseDurationSeconds: 0}, "spec.leaseDurationSeconds"},
		{"negative-ttl", v1alpha1.DistributedLockSpec{LeaseDurationSeconds: -5}, "spec.leaseDurationSeconds"},
		{"long-ttl", v1alpha1.DistributedLockSpec{LeaseDurationSeconds: 86401}, "spec.leaseDurationSeconds"},
		{"negative-capacity", v1alpha1.DistributedLockSpec{LeaseDurationSeconds: 10, Capacity: -1}, "spec.capacity"},
	} {
		l := &v1alpha1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: ns}, Spec: tc.spec}
		err := c.Create(ctx, l)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Create = %v; want 422 Invalid naming %s", tc.name, err, tc.field)
		}
	}
	// A holder entry with a zero duration is rejected too.
	bad := &v1alpha1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: "zero-holder-ttl", Namespace: ns},
		Spec:       v1alpha1.DistributedLockSpec{LeaseDurationSeconds: 10},
		Status: v1alpha1.DistributedLockStatus{Token: 1, Holders: []v1alpha1.Holder{
			{Identity: "x", Nonce: "n", Token: 1, LeaseDurationSeconds: 0},
		}},
	}
	if err := c.Create(ctx, bad); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "leaseDurationSeconds") {
		t.Errorf("holder with leaseDurationSeconds 0: Create = %v; want 422 Invalid", err)
	}
	ok := &v1alpha1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: "defaults", Namespace: ns},
		Spec:       v1alpha1.DistributedLockSpec{LeaseDurationSeconds: 1},
	}
	if err := c.Create(ctx, ok); err != nil {
		t.Fatalf("Create with leaseDurationSeconds 1: %v", err)
	}
	if ok.Spec.Capacity != 1 {
		t.Errorf("default capacity = %d, want 1", ok.Spec.Capacity)
	}
	// A store takes a lock object that an administrator created.
	s := newDL(t, controlPlane(t), ns)
	g, err := s.TryAcquire(ctx, "defaults", req("pod-a", time.Minute))
	// No token was issued on it yet: the first is its resourceVersion, so
	// deleting and creating it again never repeats a token.
	if err != nil || strconv.FormatUint(g.Token, 10) != ok.ResourceVersion {
		t.Fatalf("TryAcquire of a pre-created lock: token %d, %v; want its resourceVersion %s", g.Token, err, ok.ResourceVersion)
	}
	// The store rejects TTLs the schema would reject, before writing.
	if _, err := s.TryAcquire(ctx, "too-long", req("pod-a", 25*time.Hour)); !errors.Is(err, backend.ErrInvalidOptions) {
		t.Errorf("TryAcquire with a 25h TTL: %v; want ErrInvalidOptions", err)
	}
}

// TestDistributedLockPrinterColumns: the CRD declares the Holder, Token,
// Renewed and Age columns, and the API server's table view shows the
// holder and token.
func TestDistributedLockPrinterColumns(t *testing.T) {
	t.Parallel()
	cfg := crdPlane(t)
	data, err := os.ReadFile(crdPath)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	if crd.Name != "distributedlocks.baton.dev" || crd.Spec.Scope != apiextensionsv1.NamespaceScoped || len(crd.Spec.Versions) != 1 {
		t.Fatalf("CRD %s, scope %s, %d versions", crd.Name, crd.Spec.Scope, len(crd.Spec.Versions))
	}
	v := crd.Spec.Versions[0]
	if v.Subresources != nil && v.Subresources.Status != nil {
		t.Errorf("the CRD has a status subresource; every write must carry spec and status together")
	}
	cols := map[string]apiextensionsv1.CustomResourceColumnDefinition{}
	for _, c := range v.AdditionalPrinterColumns {
		cols[c.Name] = c
	}
	for name, path := range map[string]string{
		"Holder": ".status.holders[0].identity", "Token": ".status.token",
		"Renewed": ".status.holders[0].renewTime", "Age": ".metadata.creationTimestamp",
	} {
		c, ok := cols[name]
		if !ok || c.JSONPath != path || c.Priority != 0 {
			t.Errorf("printer column %s = %+v; want JSONPath %s, priority 0", name, c, path)
		}
	}
	min := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["leaseDurationSeconds"].Minimum
	if min == nil || *min != 1 {
		t.Errorf("spec.leaseDurationSeconds minimum = %v, want 1", min)
	}

	ns := newNamespace(t)
	ctx := t.Context()
	s := newDL(t, cfg, ns)
	g, err := s.TryAcquire(ctx, "report", req("pod-a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// A created object carries a placeholder token until its first write
	// after the creation (package kubestore, "Fencing tokens"); kubectl shows
	// the real one from the first renew on.
	if g, err = s.Renew(ctx, g); err != nil {
		t.Fatal(err)
	}
	rc := rest.CopyConfig(cfg)
	rc.GroupVersion = &v1alpha1.GroupVersion
	rc.APIPath = "/apis"
	rc.NegotiatedSerializer = serializer.NewCodecFactory(kubestore.Scheme()).WithoutConversion()
	r, err := rest.RESTClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := r.Get().Namespace(ns).Resource("distributedlocks").Name("report").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			names = append(names, c.Name)
		}
	}
	if got, want := strings.Join(names, " "), "Name Holder Token Renewed Age"; got != want {
		t.Errorf("kubectl columns %q, want %q", got, want)
	}
	if len(table.Rows) != 1 || len(table.Rows[0].Cells) < 3 {
		t.Fatalf("table rows %+v", table.Rows)
	}
	cells := table.Rows[0].Cells
	if cells[1] != "pod-a" || cells[2] != float64(g.Token) {
		t.Errorf("kubectl row %v; want holder pod-a and token %d", cells, g.Token)
	}
}

// TestDistributedLockRefusals: an object of another application and an
// object in a newer record format are never written.
func TestDistributedLockRefusals(t *testing.T) {
	t.Parallel()
	cfg := crdPlane(t)
	ns := newNamespace(t)
	ctx := t.Context()
	billing := newDL(t, cfg, ns, kubestore.WithApplication("billing"))
	reports := newDL(t, cfg, ns, kubestore.WithApplication("reports"))
	if _, err := billing.TryAcquire(ctx, "nightly", req("pod-a", time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, err := reports.TryAcquire(ctx, "nightly", req("pod-b", time.Minute))
	var ae *kubestore.ApplicationError
	if !errors.As(err, &ae) || ae.Have != "billing" || ae.Want != "reports" || !errors.Is(err, backend.ErrForbidden) {
		t.Fatalf("TryAcquire by another application: %v; want an ApplicationError", err)
	}

	c := dlAdmin(t)
	future := &v1alpha1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: "future", Namespace: ns},
		Spec:       v1alpha1.DistributedLockSpec{LeaseDurationSeconds: 10, Application: "billing"},
		Status:     v1alpha1.DistributedLockStatus{Token: 7, ProtocolVersion: v1alpha1.ProtocolVersion + 1},
	}
	if err := c.Create(ctx, future); err != nil {
		t.Fatal(err)
	}
	if _, err := billing.TryAcquire(ctx, "future", req("pod-a", time.Minute)); !errors.Is(err, backend.ErrCorruptRecord) {
		t.Fatalf("TryAcquire of a newer record format: %v; want ErrCorruptRecord", err)
	}
	var got v1alpha1.DistributedLock
	if err := c.Get(ctx, client.ObjectKeyFromObject(future), &got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != future.ResourceVersion {
		t.Errorf("the newer-format object was written")
	}
}

// TestDistributedLockRole: a user with only the Role of
// deploy/rbac-crd/role.yaml can lock, renew, wait through a
// watch and unlock; without "create" it gets an actionable error.
func TestDistributedLockRole(t *testing.T) {
	t.Parallel()
	cfg := crdPlane(t)
	role := dlRole(t)
	ns := newNamespace(t)
	bindDL(t, cfg, ns, "dl-replica", role)
	ucfg := addUser(t, "dl-replica")
	ctx := t.Context()
	a, b := newDL(t, ucfg, ns), newDL(t, ucfg, ns)
	const ttl = 2 * time.Second
	ma, err := baton.NewMutex(a, "job", baton.WithIdentity("pod-a"), baton.WithTTL(ttl), quiet)
	if err != nil {
		t.Fatal(err)
	}
	bw, watching := watchUp(b)
	mb, err := baton.NewMutex(bw, "job", baton.WithIdentity("pod-b"), baton.WithTTL(ttl), quiet)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ma.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock with the shipped Role: %v", err)
	}
	time.Sleep(ttl + ttl/2) // renewals keep it
	if err := l.Err(); err != nil {
		t.Fatalf("the lease ended: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		l2, err := mb.Lock(ctx)
		if err == nil {
			err = l2.Unlock(ctx)
		}
		done <- err
	}()
	awaitWatch(t, watching) // the second replica waits through a watch, which the Role allows
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with the shipped Role: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the second replica: %v", err)
		}
		t.Logf("handover after release: %v", time.Since(released).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the second replica did not get the lock")
	}

	// Without create, the error names the verb and the rule.
	ns2 := newNamespace(t)
	restricted := role.DeepCopy()
	restricted.Rules[0].Verbs = []string{"get", "watch", "update"}
	bindDL(t, cfg, ns2, "dl-restricted", restricted)
	s := newDL(t, addUser(t, "dl-restricted"), ns2)
	_, err = s.TryAcquire(ctx, "nightly", req("pod-a", 2*time.Second))
	if !errors.Is(err, backend.ErrForbidden) {
		t.Fatalf("TryAcquire without create: %v; want ErrForbidden", err)
	}
	for _, want := range []string{`verb "create"`, "distributedlocks.baton.dev", `namespace "` + ns2 + `"`,
		`- apiGroups: ["baton.dev"]`, `resources: ["distributedlocks"]`, `verbs: ["get", "watch", "create", "update"]`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %s:\n%v", want, err)
		}
	}
}

// dlRole reads the Role from deploy/rbac-crd/role.yaml.
func dlRole(t *testing.T) *rbacv1.Role {
	t.Helper()
	const path = "../deploy/rbac-crd/role.yaml"
	r := roleFrom(t, path)
	if len(r.Rules) != 1 || strings.Join(r.Rules[0].Verbs, ",") != "get,watch,create,update" ||
		strings.Join(r.Rules[0].Resources, ",") != "distributedlocks" || strings.Join(r.Rules[0].APIGroups, ",") != "baton.dev" {
		t.Fatalf("%s: unexpected rules %+v", path, r.Rules)
	}
	return r
}

// bindDL creates role in ns, binds it to user and waits until it works.
func bindDL(t *testing.T, cfg *rest.Config, ns, user string, role *rbacv1.Role) {
	t.Helper()
	ctx := t.Context()
	cs := adminClient(t)
	role = role.DeepCopy()
	role.Namespace = ns
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := newDL(t, addUser(t, user), ns)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Get(ctx, "rbac-probe")
		if errors.Is(err, backend.ErrNotFound) || time.Now().After(deadline) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDistributedLockNeedsScheme: a client whose scheme lacks the type is
// refused at construction.
func TestDistributedLockNeedsScheme(t *testing.T) {
	c, err := client.NewWithWatch(controlPlane(t), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubestore.NewDistributedLock(c, "default"); err == nil || !strings.Contains(err.Error(), "kubestore.Scheme()") {
		t.Fatalf("NewDistributedLock with a client that does not know the type: %v", err)
	}
}

// TestDistributedLockListUnreadable: List leaves out an object it cannot
// read (here one of a newer record format, as a rollback meets), names it
// and says why in an error matching ErrCorruptRecord, and returns the
// others, as the Lease and ConfigMap stores' List do; it skipped such an
// object without a word, so baton status showed every other lock, exited
// 0, and hid that one.
func TestDistributedLockListUnreadable(t *testing.T) {
	t.Parallel()
	cfg := crdPlane(t)
	ns := newNamespace(t)
	ctx := t.Context()
	s := newDL(t, cfg, ns)
	g, err := s.TryAcquire(ctx, "good", req("pod-a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	future := &v1alpha1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: "future", Namespace: ns},
		Spec:       v1alpha1.DistributedLockSpec{LeaseDurationSeconds: 10},
		Status:     v1alpha1.DistributedLockStatus{Token: 7, ProtocolVersion: v1alpha1.ProtocolVersion + 1},
	}
	if err := dlAdmin(t).Create(ctx, future); err != nil {
		t.Fatal(err)
	}
	recs, err := s.List(ctx)
	if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), ns+"/future") || !strings.Contains(err.Error(), "newer") {
		t.Errorf("List: %v; want ErrCorruptRecord naming %s/future and its newer format", err, ns)
	}
	if len(recs) != 1 || recs[0].Key != "good" || recs[0].Holder != "pod-a" || recs[0].Token != g.Token {
		t.Errorf("List returned %+v; want the good record, held by pod-a with token %d", recs, g.Token)
	}
}
