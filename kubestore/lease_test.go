package kubestore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

func newLease(t *testing.T, cfg *rest.Config, ns string, opts ...kubestore.Option) *kubestore.LeaseStore {
	t.Helper()
	s, err := kubestore.NewLeaseForConfig(cfg, ns, append([]kubestore.Option{kubestore.WithRateLimit(200, 400)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func req(holder string, ttl time.Duration) backend.Request {
	return backend.Request{Holder: holder, Nonce: baton.NewNonce(), TTL: ttl}
}

var quiet = baton.WithLogger(slog.New(slog.DiscardHandler))

// TestLeaseObjectFormat: the Lease shows the real holder to kubectl, the
// token and nonce live in annotations, release clears the holder and keeps
// the object and its token.
func TestLeaseObjectFormat(t *testing.T) {
	cfg := controlPlane(t)
	ns := newNamespace(t)
	cs := adminClient(t)
	ctx := t.Context()
	s := newLease(t, cfg, ns, kubestore.WithApplication("billing"))
	leases := cs.CoordinationV1().Leases(ns)

	before := time.Now().Add(-time.Second)
	g, err := s.TryAcquire(ctx, "nightly", req("pod-a", 1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	l, err := leases.Get(ctx, "nightly", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sp := l.Spec
	if sp.HolderIdentity == nil || *sp.HolderIdentity != "pod-a" {
		t.Errorf("holderIdentity = %v, want pod-a", sp.HolderIdentity)
	}
	if sp.LeaseDurationSeconds == nil || *sp.LeaseDurationSeconds != 2 {
		t.Errorf("leaseDurationSeconds = %v, want 2 (1.5s rounded up)", sp.LeaseDurationSeconds)
	}
	if sp.AcquireTime == nil || sp.RenewTime == nil || sp.AcquireTime.Before(&metav1.MicroTime{Time: before}) {
		t.Errorf("acquireTime %v, renewTime %v: want both set to about now", sp.AcquireTime, sp.RenewTime)
	}
	if sp.LeaseTransitions == nil || *sp.LeaseTransitions != 0 {
		t.Errorf("leaseTransitions = %v, want 0 for the first holder", sp.LeaseTransitions)
	}
	// The creator's token is the new object's resourceVersion, written as
	// a number with the creator's first renewal or release.
	if got := l.Annotations[kubestore.AnnotationToken]; got != kubestore.TokenFromResourceVersion || strconv.FormatUint(g.Token, 10) != l.ResourceVersion {
		t.Errorf("token annotation %q, grant token %d, resourceVersion %s; want %q and the resourceVersion",
			got, g.Token, l.ResourceVersion, kubestore.TokenFromResourceVersion)
	}
	if got := l.Annotations[kubestore.AnnotationNonce]; got != g.Nonce {
		t.Errorf("nonce annotation %q, want %q", got, g.Nonce)
	}
	if got := l.Labels[kubestore.LabelApplication]; got != "billing" {
		t.Errorf("application label %q, want billing", got)
	}

	if _, err := s.Renew(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	l, err = leases.Get(ctx, "nightly", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("after release: %v (release must keep the object)", err)
	}
	if l.Spec.HolderIdentity != nil {
		t.Errorf("after release holderIdentity = %q, want unset", *l.Spec.HolderIdentity)
	}
	if _, ok := l.Annotations[kubestore.AnnotationNonce]; ok {
		t.Errorf("after release the nonce annotation is still set")
	}
	if got, want := l.Annotations[kubestore.AnnotationToken], strconv.FormatUint(g.Token, 10); got != want {
		t.Errorf("after release token annotation %q, want %q", got, want)
	}
	g2, err := s.TryAcquire(ctx, "nightly", req("pod-b", 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, _ = leases.Get(ctx, "nightly", metav1.GetOptions{})
	if g2.Token != g.Token+1 || l.Annotations[kubestore.AnnotationToken] != strconv.FormatUint(g2.Token, 10) ||
		*l.Spec.LeaseTransitions != 1 || *l.Spec.HolderIdentity != "pod-b" {
		t.Errorf("second holder: token %d (annotation %q), transitions %d, holder %q; want %d, 1, pod-b",
			g2.Token, l.Annotations[kubestore.AnnotationToken], *l.Spec.LeaseTransitions, *l.Spec.HolderIdentity, g.Token+1)
	}
}

// TestSubSecondTTL: leaseDurationSeconds is whole seconds; shorter TTLs
// are rejected, not rounded down to nothing.
func TestSubSecondTTL(t *testing.T) {
	cfg := controlPlane(t)
	s := newLease(t, cfg, newNamespace(t))
	_, err := s.TryAcquire(t.Context(), "short", req("a", 500*time.Millisecond))
	if !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), "whole seconds") {
		t.Errorf("TryAcquire with TTL 500ms: %v; want ErrInvalidOptions explaining whole seconds", err)
	}
}

// TestFirstObservation: a process that sees a held Lease for the first
// time waits its full leaseDurationSeconds from then, whatever renewTime
// says: an hour-old renewTime (a skewed clock, or a stale-looking record)
// must not let it take over.
func TestFirstObservation(t *testing.T) {
	cfg := controlPlane(t)
	ns := newNamespace(t)
	cs := adminClient(t)
	ctx := t.Context()
	a := newLease(t, cfg, ns)
	g, err := a.TryAcquire(ctx, "old", req("pod-a", 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	leases := cs.CoordinationV1().Leases(ns)
	l, err := leases.Get(ctx, "old", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hourAgo := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	l.Spec.RenewTime, l.Spec.AcquireTime = &hourAgo, &hourAgo
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	b := newLease(t, cfg, ns) // a process starting now
	seen := time.Now()
	_, err = b.TryAcquire(ctx, "old", req("pod-b", 2*time.Second))
	took := time.Since(seen)
	var held *backend.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("TryAcquire of a lease renewed (by its renewTime) an hour ago, first seen now: %v; want ErrHeld", err)
	}
	// Counted from the observation, which the call made between seen and
	// seen+took: however slow the machine, RetryAfter is within that.
	if held.RetryAfter < 2*time.Second-took || held.RetryAfter > 2*time.Second {
		t.Errorf("RetryAfter = %v (the call took %v), want the full lease duration 2s counted from the first observation", held.RetryAfter, took)
	}
	for {
		g2, err := b.TryAcquire(ctx, "old", req("pod-b", 2*time.Second))
		if err == nil {
			if d := time.Since(seen); d < 2*time.Second {
				t.Errorf("took over %v after first seeing the lease; want at least its duration 2s", d)
			}
			if g2.Token <= g.Token {
				t.Errorf("token %d after %d", g2.Token, g.Token)
			}
			break
		}
		if !errors.As(err, &held) {
			t.Fatal(err)
		}
		time.Sleep(held.RetryAfter)
	}
	if _, err := a.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Errorf("Renew by the replaced holder: %v, want ErrLost", err)
	}
}

// TestTwoApplications: a lock name used by two applications gives the
// second a clear error naming both, not silent mutual blocking; a Lease
// made by another tool is never taken over.
func TestTwoApplications(t *testing.T) {
	cfg := controlPlane(t)
	ns := newNamespace(t)
	ctx := t.Context()
	billing := newLease(t, cfg, ns, kubestore.WithApplication("billing"))
	reports := newLease(t, cfg, ns, kubestore.WithApplication("reports"))

	g, err := billing.TryAcquire(ctx, "nightly", req("billing-0", 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_, err = reports.TryAcquire(ctx, "nightly", req("reports-0", 10*time.Second))
	if !errors.Is(err, kubestore.ErrOtherApplication) || errors.Is(err, backend.ErrHeld) {
		t.Fatalf("TryAcquire by another application: %v; want ErrOtherApplication, not ErrHeld", err)
	}
	for _, want := range []string{`"billing"`, `"reports"`, ns + "/nightly", "leases.coordination.k8s.io"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	t.Logf("the error: %v", err)

	// The engine gives up at once instead of retrying forever.
	m, err := baton.NewMutex(reports, "nightly", baton.WithTTL(2*time.Second), quiet)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := m.Lock(lctx); !errors.Is(err, kubestore.ErrOtherApplication) {
		t.Errorf("Mutex.Lock by another application: %v; want ErrOtherApplication at once", err)
	}
	if err := billing.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, err := reports.TryAcquire(ctx, "nightly", req("reports-0", 10*time.Second)); !errors.Is(err, kubestore.ErrOtherApplication) {
		t.Errorf("TryAcquire of a released lock of another application: %v; want ErrOtherApplication", err)
	}

	// A Lease of client-go leader election (no baton annotations).
	holder := "controller-0"
	foreign := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "controller-leader"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
	if _, err := adminClient(t).CoordinationV1().Leases(ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = billing.TryAcquire(ctx, "controller-leader", req("billing-0", 10*time.Second))
	var ae *kubestore.ApplicationError
	if !errors.As(err, &ae) || !ae.Foreign || !strings.Contains(err.Error(), "not created by baton") {
		t.Errorf("TryAcquire of a foreign Lease: %v; want an ApplicationError saying it was not created by baton", err)
	}
}

// TestHolderStopsRenewing: a holder that stops renewing is replaced after
// the TTL by a waiting Mutex, and not before.
func TestHolderStopsRenewing(t *testing.T) {
	cfg := controlPlane(t)
	ns := newNamespace(t)
	ctx := t.Context()
	a, b := newLease(t, cfg, ns), newLease(t, cfg, ns)
	const ttl = 2 * time.Second
	sent := time.Now()
	g, err := a.TryAcquire(ctx, "stalled", req("pod-a", ttl)) // never renewed
	if err != nil {
		t.Fatal(err)
	}
	m, err := baton.NewMutex(b, "stalled", baton.WithIdentity("pod-b"), baton.WithTTL(ttl),
		baton.WithRenewDeadline(1500*time.Millisecond), baton.WithRetryPeriod(500*time.Millisecond), quiet)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	l, err := m.Lock(lctx)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(sent)
	defer l.Unlock(context.Background())
	if took < ttl-baton.DefaultSafetyMargin(ttl) {
		t.Errorf("took over %v after the stalled holder's acquire; want at least the TTL %v", took, ttl)
	}
	if took > ttl+3*time.Second {
		t.Errorf("took over only %v after the stalled holder's acquire (TTL %v)", took, ttl)
	}
	t.Logf("replaced %v after the last acquire (TTL %v)", took.Round(time.Millisecond), ttl)
	if l.Token() <= g.Token {
		t.Errorf("token %d after %d", l.Token(), g.Token)
	}
	if _, err := a.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Errorf("Renew by the stalled holder: %v, want ErrLost", err)
	}
}

// TestReleaseTakenOverThroughWatch: a standby waiting in Mutex.Lock takes
// over within a round trip of a graceful release, long before its retry
// period, because it watches the Lease.
func TestReleaseTakenOverThroughWatch(t *testing.T) {
	cfg := controlPlane(t)
	ns := newNamespace(t)
	ctx := t.Context()
	a, b := newLease(t, cfg, ns), newLease(t, cfg, ns)
	opts := []baton.Option{baton.WithTTL(15 * time.Second), baton.WithRenewDeadline(10 * time.Second),
		baton.WithRetryPeriod(5 * time.Second), quiet}
	leader, err := baton.NewMutex(a, "leader", append(opts, baton.WithIdentity("pod-a"))...)
	if err != nil {
		t.Fatal(err)
	}
	bw, watching := watchUp(b)
	standby, err := baton.NewMutex(bw, "leader", append(opts, baton.WithIdentity("pod-b"))...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := leader.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *baton.Lease
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		l, err := standby.Lock(ctx)
		done <- result{l, err, time.Now()}
	}()
	awaitWatch(t, watching) // the standby found it held and watches it
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Unlock(context.Background())
	d := r.at.Sub(released)
	t.Logf("handover %v after Unlock returned", d)
	if d > 2500*time.Millisecond { // half the retry period (jittered by 10%): only the watch wakes it this soon, however slow the machine
		t.Errorf("the standby took over %v after the release; a watch should wake it well before its retry period 5s", d)
	}
	if r.l.Token() <= l.Token() {
		t.Errorf("token %d after %d", r.l.Token(), l.Token())
	}
}

// TestMissingNamespace: a store for a namespace that does not exist says
// so.
func TestMissingNamespace(t *testing.T) {
	cfg := controlPlane(t)
	s := newLease(t, cfg, "no-such-namespace")
	_, err := s.TryAcquire(t.Context(), "x", req("a", 2*time.Second))
	if !errors.Is(err, kubestore.ErrNamespaceNotFound) || !strings.Contains(err.Error(), `namespace "no-such-namespace" does not exist`) {
		t.Errorf("TryAcquire in a missing namespace: %v; want ErrNamespaceNotFound naming it", err)
	}
	t.Logf("the error: %v", err)
}

// TestTerminatingNamespace: in a namespace being deleted, the API server
// refuses to create anything with 403 Forbidden. That is not a missing
// permission: the error says the namespace is going away, and matches
// ErrMisconfigured so that a waiting Lock does not wait for it.
func TestTerminatingNamespace(t *testing.T) {
	cfg := controlPlane(t)
	ns := newNamespace(t)
	// envtest runs no namespace controller: the namespace stays Terminating.
	if err := adminClient(t).CoreV1().Namespaces().Delete(t.Context(), ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s := newLease(t, cfg, ns)
	_, err := s.TryAcquire(t.Context(), "x", req("a", 2*time.Second))
	t.Logf("the error: %v", err)
	if !errors.Is(err, backend.ErrMisconfigured) || errors.Is(err, backend.ErrForbidden) ||
		!strings.Contains(err.Error(), fmt.Sprintf("namespace %q is being deleted", ns)) || strings.Contains(err.Error(), "Role") {
		t.Errorf("TryAcquire in a terminating namespace: %v; want ErrMisconfigured saying it is being deleted, not a missing Role", err)
	}
}

// TestQuotaExceeded: a ResourceQuota that allows no more Leases makes the
// API server answer 403 Forbidden to a create. No Role lifts it: the error
// names the quota and what frees it, not a rule to bind.
func TestQuotaExceeded(t *testing.T) {
	cfg := controlPlane(t)
	ns := newNamespace(t)
	cs := adminClient(t)
	const resource = "count/leases.coordination.k8s.io"
	q, err := cs.CoreV1().ResourceQuotas(ns).Create(t.Context(), &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "leases"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{resource: k8sresource.MustParse("1")}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// envtest runs no quota controller: write the usage it would.
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{resource: k8sresource.MustParse("1")}}
	if _, err := cs.CoreV1().ResourceQuotas(ns).UpdateStatus(t.Context(), q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := newLease(t, cfg, ns)
	_, err = s.TryAcquire(t.Context(), "x", req("a", 2*time.Second))
	t.Logf("the error: %v", err)
	if !errors.Is(err, backend.ErrForbidden) || !strings.Contains(err.Error(), "ResourceQuota") || strings.Contains(err.Error(), "Bind") {
		t.Errorf("TryAcquire beyond a quota: %v; want ErrForbidden naming the quota, not a Role to bind", err)
	}
}

// shippedRole reads the Lease backend's Role from deploy/rbac/rbac.yaml.
func shippedRole(t *testing.T) *rbacv1.Role { return roleFrom(t, "../deploy/rbac/rbac.yaml") }

// roleFrom reads the Role from the manifest at path.
func roleFrom(t *testing.T, path string) *rbacv1.Role {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
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

// bind creates role in ns and binds it to user.
func bind(t *testing.T, ns, user string, role *rbacv1.Role) {
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
	// RBAC caches update within milliseconds; wait until the binding works.
	deadline := time.Now().Add(10 * time.Second)
	ucfg := addUser(t, user)
	s := newLease(t, ucfg, ns)
	for {
		_, err := s.Get(ctx, "rbac-probe")
		if errors.Is(err, backend.ErrNotFound) || time.Now().After(deadline) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestForbiddenWithoutCreate: a user whose Role lacks "create" gets an
// error that names the namespace, the resource, the missing verb and the
// Role rule that fixes it, for Leases and ConfigMaps.
func TestForbiddenWithoutCreate(t *testing.T) {
	ns := newNamespace(t)
	role := shippedRole(t)
	role.Rules = append(role.Rules, roleFrom(t, "../deploy/rbac-configmap/role.yaml").Rules...)
	var rules []rbacv1.PolicyRule
	for _, r := range role.Rules {
		var verbs []string
		for _, v := range r.Verbs {
			if v != "create" {
				verbs = append(verbs, v)
			}
		}
		if len(verbs) > 0 { // a rule that only granted create goes
			r.Verbs = verbs
			rules = append(rules, r)
		}
	}
	role.Rules = rules
	bind(t, ns, "restricted", role)
	ucfg := addUser(t, "restricted")
	lease := newLease(t, ucfg, ns)
	cm, err := kubestore.NewConfigMapForConfig(ucfg, ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		b        backend.Backend
		resource string
		rule     []string
	}{
		{"Lease", lease, "leases.coordination.k8s.io",
			[]string{`- apiGroups: ["coordination.k8s.io"]`, `resources: ["leases"]`, `verbs: ["get", "watch", "create", "update"]`}},
		{"ConfigMap", cm, "configmaps",
			[]string{`- apiGroups: [""]`, `resources: ["configmaps"]`, `verbs: ["get", "watch", "create", "update"]`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.b.TryAcquire(t.Context(), "nightly", req("pod-a", 2*time.Second))
			if !errors.Is(err, backend.ErrForbidden) {
				t.Fatalf("TryAcquire without create: %v; want ErrForbidden", err)
			}
			for _, want := range append([]string{`verb "create"`, c.resource, `namespace "` + ns + `"`}, c.rule...) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not contain %s:\n%v", want, err)
				}
			}
			t.Logf("the error:\n%v", err)
		})
	}
}

// TestShippedRole: a user with only the Role from deploy/rbac/rbac.yaml can
// lock, renew, wait through a watch, and unlock a Lease, and cannot touch
// ConfigMaps, which only the ConfigMap backend's Role grants.
func TestShippedRole(t *testing.T) {
	ns := newNamespace(t)
	bind(t, ns, "replica", shippedRole(t))
	ucfg := addUser(t, "replica")
	ctx := t.Context()
	a, b := newLease(t, ucfg, ns), newLease(t, ucfg, ns)
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
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with the shipped Role: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the second replica: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second replica did not get the lock")
	}
	// Status views need "list", which the replicas' Role does not grant.
	if _, err := a.List(ctx); !errors.Is(err, backend.ErrForbidden) || !strings.Contains(err.Error(), `verb "list"`) {
		t.Errorf("List with the shipped Role: %v; want ErrForbidden naming the verb list", err)
	}
	if _, err := a.Get(ctx, "job"); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("Get with the shipped Role: %v", err)
	}
	// ConfigMaps are the ConfigMap backend's Role's (deploy/rbac-configmap).
	cm, err := kubestore.NewConfigMapForConfig(ucfg, ns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cm.TryAcquire(ctx, "job", req("pod-a", ttl)); !errors.Is(err, backend.ErrForbidden) {
		t.Errorf("a ConfigMap lock with the Lease backend's Role: %v; want ErrForbidden", err)
	}
}

// TestConfigMapObjectFormat: the ConfigMap record lives in annotations,
// as documented, and leaves data alone.
func TestConfigMapObjectFormat(t *testing.T) {
	cfg := controlPlane(t)
	ns := newNamespace(t)
	ctx := t.Context()
	s, err := kubestore.NewConfigMapForConfig(cfg, ns, kubestore.WithApplication("billing"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.TryAcquire(ctx, "nightly", req("pod-a", 1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cms := adminClient(t).CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(ctx, "nightly", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := cm.Annotations
	want := map[string]string{
		kubestore.AnnotationToken: kubestore.TokenFromResourceVersion, kubestore.AnnotationNonce: g.Nonce, kubestore.AnnotationHolder: "pod-a",
		kubestore.AnnotationDuration: "2", kubestore.AnnotationTransitions: "0",
	}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, a[k], v)
		}
	}
	for _, k := range []string{kubestore.AnnotationAcquireTime, kubestore.AnnotationRenewTime} {
		if _, err := time.Parse(time.RFC3339Nano, a[k]); err != nil {
			t.Errorf("annotation %s = %q: %v", k, a[k], err)
		}
	}
	if cm.Labels[kubestore.LabelApplication] != "billing" || len(cm.Data) != 0 {
		t.Errorf("labels %v, data %v; want the application label and no data", cm.Labels, cm.Data)
	}
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	cm, err = cms.Get(ctx, "nightly", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	if _, held := cm.Annotations[kubestore.AnnotationHolder]; held || cm.Annotations[kubestore.AnnotationToken] != strconv.FormatUint(g.Token, 10) {
		t.Errorf("after release annotations %v; want no holder and token %d", cm.Annotations, g.Token)
	}
}

// An administrator's forced release frees a live claim and keeps the token;
// the holder's next renew fails with ErrLost, and the next holder gets a
// larger token.
func TestForceRelease(t *testing.T) {
	t.Parallel()
	cfg := controlPlane(t)
	ns := newNamespace(t)
	ctx := context.Background()
	holder, admin := newLease(t, cfg, ns), newLease(t, cfg, ns)
	if err := admin.ForceRelease(ctx, "forced"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("ForceRelease of a missing lock = %v, want ErrNotFound", err)
	}
	g, err := holder.TryAcquire(ctx, "forced", req("holder-a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.ForceRelease(ctx, "forced"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("Renew after a forced release = %v, want ErrLost", err)
	}
	g2, err := admin.TryAcquire(ctx, "forced", req("holder-b", time.Minute))
	if err != nil {
		t.Fatalf("TryAcquire after a forced release: %v", err)
	}
	if g2.Token <= g.Token {
		t.Fatalf("token after a forced release %d, want more than %d", g2.Token, g.Token)
	}
	if err := admin.ForceRelease(ctx, "forced"); err != nil {
		t.Fatal(err)
	}
	if err := admin.ForceRelease(ctx, "forced"); err != nil {
		t.Fatalf("ForceRelease of a free lock = %v, want nil", err)
	}
}
