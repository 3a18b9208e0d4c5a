package kubestore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestDurationCutByAdmission: a MutatingAdmissionPolicy of the cluster
// that caps the lease duration of Leases (here to 2 s) makes every other
// process judge a claim by the capped duration while its holder's engine
// counts its own TTL. With a TTL of 15 s and a cap of 3 s, two `baton run`
// replicas took the lock from each other every 8 s, each starting its
// command while the other's still ran. An acquisition whose duration the
// API server stored shorter is released and refused as a misconfiguration
// naming the cause, and a renewal so shortened loses the lock at once.
func TestDurationCutByAdmission(t *testing.T) {
	cfg := controlPlane(t)
	cs := adminClient(t)
	ns := newNamespace(t)
	capLeaseDuration(t, cs, ns, 2)
	s := newLease(t, cfg, ns)
	var err error
	var name string
	deadline := time.Now().Add(20 * time.Second) // the API server loads a policy within about a second; nothing tells when
	for i := 0; ; i++ {
		var g backend.Grant
		name = fmt.Sprintf("x-%d", i)
		g, err = s.TryAcquire(t.Context(), name, req("a", 5*time.Second))
		if err != nil || time.Now().After(deadline) {
			break
		}
		_ = s.Release(t.Context(), g)
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the error: %v", err)
	if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "stored a lease duration of 2s, not the 5s written") {
		t.Fatalf("TryAcquire under a policy capping the duration: %v; want ErrMisconfigured naming both durations", err)
	}
	if rec, err := s.Get(t.Context(), name); err != nil || rec.Holder != "" {
		t.Errorf("the refused acquisition's lock: %+v, %v; want it released", rec, err)
	}

	g, err := s.TryAcquire(t.Context(), "z", req("b", 2*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire within the cap: %v", err)
	}
	g.TTL = 4 * time.Second // a renewal that asks for more than the cap
	_, err = s.Renew(t.Context(), g)
	t.Logf("the renewal's error: %v", err)
	if !errors.Is(err, backend.ErrLost) || !strings.Contains(err.Error(), "stored a lease duration of 2s, not the 4s written") {
		t.Errorf("Renew under a policy capping the duration: %v; want ErrLost naming both durations", err)
	}
}

// capLeaseDuration installs a MutatingAdmissionPolicy, and its binding,
// that sets spec.leaseDurationSeconds of every Lease of ns written with a
// longer one to secs.
func capLeaseDuration(t *testing.T, cs kubernetes.Interface, ns string, secs int) {
	t.Helper()
	name := "cap-" + ns
	fail := admissionv1.Fail
	never := admissionv1.NeverReinvocationPolicy
	api := cs.AdmissionregistrationV1()
	_, err := api.MutatingAdmissionPolicies().Create(t.Context(), &admissionv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			FailurePolicy:      &fail,
			ReinvocationPolicy: never,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"leases"}},
				},
			}}},
			MatchConditions: []admissionv1.MatchCondition{{
				Name:       "longer",
				Expression: fmt.Sprintf("has(object.spec.leaseDurationSeconds) && object.spec.leaseDurationSeconds > %d", secs),
			}},
			Mutations: []admissionv1.Mutation{{
				PatchType: admissionv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionv1.ApplyConfiguration{
					Expression: fmt.Sprintf("Object{spec: Object.spec{leaseDurationSeconds: %d}}", secs),
				},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.MutatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	_, err = api.MutatingAdmissionPolicyBindings().Create(t.Context(), &admissionv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: name,
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = api.MutatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}
