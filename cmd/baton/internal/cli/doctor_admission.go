package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/baton-go/baton/kubestore"
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
)

// admissionProbe is the object admissionCheck creates in a dry run when no
// lock name was given.
const admissionProbe = "baton-doctor-probe"

// admissionCheck asks the API server to create the lock object as a first
// acquisition would, in a dry run (dryRun=All: admission runs, nothing is
// stored), so that a ValidatingAdmissionPolicy or an admission webhook of
// the cluster that refuses it shows here; SelfSubjectAccessReview sees
// RBAC alone. An object of that name that exists already passed
// admission before the API server found it there.
func admissionCheck(ctx context.Context, cfg *rest.Config, gvr schema.GroupVersionResource, f *lockFlags, ns string) check {
	label := "admission " + qualifiedResource(gvr)
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return check{label, resultFail, err.Error(), ""}
	}
	name := f.name
	if name == "" {
		name = admissionProbe
	}
	obj := probeObject(f.backend, name, f.app, f.ttl)
	_, err = dc.Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil || apierrors.IsAlreadyExists(err) {
		return check{label, resultPass, "the API server's admission accepts a new lock object (a dry run: nothing was created)", ""}
	}
	msg := apiStatusMessage(err)
	switch {
	case apierrors.IsForbidden(err) && strings.Contains(msg, "cannot create resource"):
		return check{label, resultSkip, fmt.Sprintf("not checked: this identity may not create %s in namespace %s (see the rbac create row)", qualifiedResource(gvr), ns), ""}
	case strings.Contains(msg, "does not support dry run"):
		return check{label, resultWarn, "cannot tell: an admission webhook does not support dry runs (" + msg + ")",
			"an operator can read what the cluster's webhooks check: kubectl get validatingwebhookconfigurations,mutatingwebhookconfigurations"}
	case isAPIRefusal(err):
		return check{label, resultFail, "the API server refuses a new lock object: " + msg,
			fmt.Sprintf("no Role lifts an admission policy: ask the cluster's administrators to let this identity create %s in namespace %s "+
				"(kubectl get validatingadmissionpolicies,validatingadmissionpolicybindings,validatingwebhookconfigurations), or use another namespace or backend",
				qualifiedResource(gvr), ns)}
	}
	return kubeFailure(label, err)
}

// isAPIRefusal reports an answer of the API server that refuses the
// request as made (4xx), not a failure on the way or throttling.
func isAPIRefusal(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	code := st.Status().Code
	return code >= 400 && code < 500 && code != 429 && code != 408
}

// qualifiedResource is gvr's resource as RBAC names it (leases.coordination.k8s.io).
func qualifiedResource(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Resource
	}
	return gvr.Resource + "." + gvr.Group
}

// probeObject is the object a first acquisition of name would create on
// backend: the holder, the lease duration and baton's marks, as kubestore
// writes them, so that a policy that reads them judges what it will see.
func probeObject(backend, name, app string, ttl time.Duration) *unstructured.Unstructured {
	now := time.Now().UTC()
	secs := int64(math.Ceil(ttl.Seconds()))
	meta := map[string]any{
		"name":       name,
		"labels":     map[string]any{kubestore.LabelApplication: app},
		"finalizers": []any{kubestore.FinalizerClaim},
	}
	marks := map[string]any{kubestore.AnnotationToken: kubestore.TokenFromResourceVersion, kubestore.AnnotationNonce: "baton-doctor"}
	obj := map[string]any{"metadata": meta}
	switch backend {
	case "configmap":
		obj["apiVersion"], obj["kind"] = "v1", "ConfigMap"
		marks[kubestore.AnnotationHolder] = "baton-doctor"
		marks[kubestore.AnnotationDuration] = fmt.Sprint(secs)
		marks[kubestore.AnnotationAcquireTime] = now.Format(time.RFC3339Nano)
		marks[kubestore.AnnotationRenewTime] = now.Format(time.RFC3339Nano)
		marks[kubestore.AnnotationTransitions] = "0"
		meta["annotations"] = marks
	case "crd":
		obj["apiVersion"], obj["kind"] = v1alpha1.GroupVersion.String(), "DistributedLock"
		obj["spec"] = map[string]any{"leaseDurationSeconds": secs, "capacity": int64(1), "application": app}
	default:
		obj["apiVersion"], obj["kind"] = "coordination.k8s.io/v1", "Lease"
		meta["annotations"] = marks
		micro := now.Format("2006-01-02T15:04:05.000000Z07:00")
		obj["spec"] = map[string]any{"holderIdentity": "baton-doctor", "leaseDurationSeconds": secs,
			"acquireTime": micro, "renewTime": micro, "leaseTransitions": int64(0)}
	}
	return &unstructured.Unstructured{Object: obj}
}
