package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// A ValidatingAdmissionPolicy that refuses the creation of Leases in the
// namespace (the cluster's policy, which SelfSubjectAccessReview does not
// see) fails doctor's admission row, naming the policy, while every rbac
// row passes; doctor passed every row, and the first acquire was refused.
// With the policy gone the row passes, having created nothing.
func TestDoctorKubeAdmissionPolicy(t *testing.T) {
	t.Parallel()
	kc, ns := kubeconfig(t)
	cs, err := kubernetes.NewForConfig(controlPlane(t))
	if err != nil {
		t.Fatal(err)
	}
	const row = "admission leases.coordination.k8s.io"
	code, out, stderr := runCLI(t, "doctor", "--backend", "lease", "--kubeconfig", kc, "--name", "nightly")
	if got := doctorTable(t, out)[row]; code != 0 || got.result != "PASS" {
		t.Fatalf("doctor without a policy: exit %d, row %+v; stderr %s\n%s", code, got, stderr, out)
	}
	name := denyCreates(t, cs, ns)
	deadline := time.Now().Add(20 * time.Second) // the API server loads a policy within about a second; nothing tells when
	for {
		code, out, stderr = runCLI(t, "doctor", "--backend", "lease", "--kubeconfig", kc, "--name", "nightly")
		if strings.Contains(out, "ValidatingAdmissionPolicy") || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("doctor under the policy:\n%s", out)
	got := doctorTable(t, out)[row]
	if code != 1 || got.result != "FAIL" || !strings.Contains(got.detail, "ValidatingAdmissionPolicy '"+name+"'") {
		t.Errorf("doctor under a policy refusing Leases: exit %d, row %+v; want 1 and FAIL naming the policy; stderr %s", code, got, stderr)
	}
	if fix := doctorFix(out, row); !strings.Contains(fix, "no Role lifts") {
		t.Errorf("the row's fix: %q", fix)
	}
	if leases, err := cs.CoordinationV1().Leases(ns).List(t.Context(), metav1.ListOptions{}); err != nil || len(leases.Items) != 0 {
		t.Errorf("Leases after doctor: %v, %v; want none (a dry run)", leases, err)
	}
}

// denyCreates installs a ValidatingAdmissionPolicy, and its binding, that
// refuses every create of a Lease in ns, and returns its name.
func denyCreates(t *testing.T, cs kubernetes.Interface, ns string) string {
	t.Helper()
	name := "deny-" + ns
	fail := admissionv1.Fail
	api := cs.AdmissionregistrationV1()
	_, err := api.ValidatingAdmissionPolicies().Create(t.Context(), &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"leases"}},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: "false", Message: "no Leases here"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = api.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	_, err = api.ValidatingAdmissionPolicyBindings().Create(t.Context(), &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = api.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}
