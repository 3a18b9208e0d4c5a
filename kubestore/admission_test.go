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

// TestAdmissionPolicyDenied: a ValidatingAdmissionPolicy that refuses the
// creation of Leases in the namespace (a cluster's policy, not RBAC) is a
// permanent refusal naming the policy, whatever status code the policy
// chose: with its default reason (422 Invalid) TryAcquire's error was an
// unclassified failure, which the engine retried for ever (baton lock
// exited 1 once --wait ran out), and with reason Forbidden it said to bind
// a Role the identity already had.
func TestAdmissionPolicyDenied(t *testing.T) {
	cfg := controlPlane(t)
	cs := adminClient(t)
	for _, reason := range []metav1.StatusReason{"", metav1.StatusReasonForbidden} {
		t.Run("reason="+string(reason), func(t *testing.T) {
			ns := newNamespace(t)
			name := denyLeaseCreates(t, cs, ns, reason)
			s := newLease(t, cfg, ns)
			err := awaitPolicy(t, func(lock string) error {
				_, err := s.TryAcquire(t.Context(), lock, req("a", 2*time.Second))
				return err
			})
			t.Logf("the error: %v", err)
			if !errors.Is(err, backend.ErrForbidden) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+name+"'") ||
				!strings.Contains(err.Error(), "no Role lifts") || strings.Contains(err.Error(), "Bind") {
				t.Errorf("TryAcquire refused by an admission policy: %v; want ErrForbidden naming the policy, not a Role to bind", err)
			}
		})
	}
}

// denyLeaseCreates installs a ValidatingAdmissionPolicy, and its binding,
// that refuses every create of a Lease in ns with the given reason, and
// returns its name. Both go at the end of the test.
func denyLeaseCreates(t *testing.T, cs kubernetes.Interface, ns string, reason metav1.StatusReason) string {
	t.Helper()
	name := "deny-leases-" + ns
	fail := admissionv1.Fail
	v := admissionv1.Validation{Expression: "false", Message: "no Leases here (the platform's policy)"}
	if reason != "" {
		v.Reason = &reason
	}
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"leases"}},
				},
			}}},
			Validations: []admissionv1.Validation{v},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns},
			}},
		},
	}
	api := cs.AdmissionregistrationV1()
	if _, err := api.ValidatingAdmissionPolicies().Create(t.Context(), policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = api.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if _, err := api.ValidatingAdmissionPolicyBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = api.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// awaitPolicy calls try on fresh lock names until its error comes from an
// admission policy (the API server loads a new policy within about a
// second; nothing tells when), for at most 20 s, and returns its last
// error.
func awaitPolicy(t *testing.T, try func(lock string) error) error {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		err := try(fmt.Sprintf("x-%d", i))
		if err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
