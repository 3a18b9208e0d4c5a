package kubestore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestDLCreateWhileCRDTerminating: while the DistributedLock CRD is being
// deleted, the API server refuses every create of a DistributedLock with a
// 403 that no Role lifts (apiextensions-apiserver's
// "create not allowed while custom resource definition is terminating",
// seen against a real API server after kubectl delete crd). The acquire
// fails as a misconfiguration naming the CRD's deletion, not as a missing
// RBAC rule (which sent an administrator who had every right to bind a
// Role, and made baton exit 77 instead of 78).
func TestDLCreateWhileCRDTerminating(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return apierrors.NewForbidden(v1alpha1.Resource.GroupResource(), obj.GetName(),
				errors.New("create not allowed while custom resource definition is terminating"))
		},
	}).Build()
	s, err := NewDistributedLock(c, "ns")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.TryAcquire(context.Background(), "x", fakeReq("a"))
	if !errors.Is(err, backend.ErrMisconfigured) || errors.Is(err, backend.ErrForbidden) ||
		!strings.Contains(err.Error(), "CRD") || !strings.Contains(err.Error(), "being deleted") ||
		!strings.Contains(err.Error(), "kubectl apply -k deploy/crd") || strings.Contains(err.Error(), "Role") {
		t.Errorf("TryAcquire while the CRD is terminating: %v; want ErrMisconfigured saying the CRD is being deleted and how to install it again, not a missing Role", err)
	}
}
