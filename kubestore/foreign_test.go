package kubestore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestForeignObjectMigration: a lock object of client-go leader election
// (a Lease, or the ConfigMap of its older versions) is refused with the
// ways to move to baton without two leaders, and each works: a Lease store
// WithAdoption judges the client-go leader's claim as held, and a ConfigMap
// deleted once the tool is gone is created anew by baton.
func TestForeignObjectMigration(t *testing.T) {
	cfg := controlPlane(t)
	ns := newNamespace(t)
	ctx := t.Context()
	admin := adminClient(t)
	holder, dur := "controller-0", int32(15)
	now := metav1.NowMicro()
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "controller"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, AcquireTime: &now, RenewTime: &now},
	}
	if _, err := admin.CoordinationV1().Leases(ns).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := newLease(t, cfg, ns).TryAcquire(ctx, "controller", req("baton-0", 10*time.Second))
	wantFix(t, err, "kubestore.WithAdoption", fmt.Sprintf("kubectl delete leases.coordination.k8s.io controller -n %s", ns))
	_, err = newLease(t, cfg, ns, kubestore.WithAdoption()).TryAcquire(ctx, "controller", req("baton-0", 10*time.Second))
	if !errors.Is(err, backend.ErrHeld) {
		t.Errorf("TryAcquire WithAdoption while client-go's leader holds: %v; want ErrHeld", err)
	}

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "controller", Annotations: map[string]string{
		"control-plane.alpha.kubernetes.io/leader": `{"holderIdentity":"controller-0","leaseDurationSeconds":15}`,
	}}}
	if cm, err = admin.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cms, err := kubestore.NewConfigMapForConfig(cfg, ns, kubestore.WithRateLimit(200, 400))
	if err != nil {
		t.Fatal(err)
	}
	_, err = cms.TryAcquire(ctx, "controller", req("baton-0", 10*time.Second))
	wantFix(t, err, fmt.Sprintf("kubectl delete configmaps controller -n %s", ns))
	if strings.Contains(err.Error(), "WithAdoption") {
		t.Errorf("the ConfigMap's error %q names WithAdoption, which takes over Leases only", err)
	}
	if err := admin.CoreV1().ConfigMaps(ns).Delete(ctx, "controller", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	g, err := cms.TryAcquire(ctx, "controller", req("baton-0", 10*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire once the tool's ConfigMap is deleted: %v", err)
	}
	t.Logf("baton's first token %d, the tool's ConfigMap was at resourceVersion %s", g.Token, cm.ResourceVersion)
}

// wantFix fails t unless err is an *ApplicationError for a foreign object
// whose message warns that another lock name gives two holders and names
// each of fixes.
func wantFix(t *testing.T, err error, fixes ...string) {
	t.Helper()
	var ae *kubestore.ApplicationError
	if !errors.As(err, &ae) || !ae.Foreign {
		t.Fatalf("TryAcquire of another tool's object: %v; want an ApplicationError (Foreign)", err)
	}
	for _, want := range append(fixes, "would both hold at once") {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
}
