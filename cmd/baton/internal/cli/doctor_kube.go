package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/baton-go/baton/internal/storeerr"
	"github.com/baton-go/baton/kubestore"
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
)

// kubeCheckTimeout bounds the Kubernetes checks together.
const kubeCheckTimeout = 30 * time.Second

// presence is what a check learned about something the lock needs.
type presence int

const (
	present presence = iota
	absent
	deleting   // a namespace marked for deletion: nothing can be created in it
	cannotTell // the check could not tell
)

// kubeChecks checks, on the API server, that the namespace exists, that
// the DistributedLock CRD is installed (--backend crd), that this identity
// may use each verb a lock needs (SelfSubjectAccessReview), and whether
// the lock object (if it exists) belongs to this application.
func (a *app) kubeChecks(ctx context.Context, f *lockFlags) []check {
	ctx, cancel := context.WithTimeout(ctx, kubeCheckTimeout)
	defer cancel()
	cfg, ns, err := f.kube.restConfig()
	if err != nil {
		return []check{{"kubernetes", resultFail, err.Error(), ""}}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return []check{{"kubernetes", resultFail, err.Error(), ""}}
	}
	gvr := kubeResource(f.backend)
	nsCheck, nsState := namespaceCheck(ctx, cs, ns)
	checks := []check{nsCheck}
	crdState := present
	if f.backend == "crd" {
		var c check
		c, crdState = crdCheck(cs)
		checks = append(checks, c)
	}
	checks = append(checks, rbacChecks(ctx, cs, gvr, ns)...)
	if nsState != absent && nsState != deleting && crdState != absent {
		checks = append(checks, admissionCheck(ctx, cfg, gvr, f, ns))
	}
	if f.name != "" {
		label := "name " + f.name
		switch {
		case nsState == absent:
			checks = append(checks, check{label, resultSkip, fmt.Sprintf("not checked: namespace %s does not exist", ns), ""})
		case nsState == deleting:
			checks = append(checks, check{label, resultSkip, fmt.Sprintf("not checked: namespace %s is being deleted", ns), ""})
		case crdState == absent:
			checks = append(checks, check{label, resultSkip, "not checked: the DistributedLock CRD is not installed", ""})
		default:
			checks = append(checks, nameCheck(ctx, cfg, gvr, f.backend, ns, f.name, f.app, nsState, f.kube.adopt))
		}
	}
	return checks
}

// kubeResource is the resource that holds a backend's lock objects.
func kubeResource(backend string) schema.GroupVersionResource {
	switch backend {
	case "configmap":
		return schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	case "crd":
		return v1alpha1.Resource
	}
	return schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
}

// namespaceCheck reads the namespace. An identity that may not read
// namespaces (a namespaced Role cannot grant it) gets a warning: it cannot
// tell.
func namespaceCheck(ctx context.Context, cs kubernetes.Interface, ns string) (check, presence) {
	label := "namespace " + ns
	got, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	switch {
	case err == nil && got.DeletionTimestamp != nil:
		return check{label, resultFail, fmt.Sprintf("namespace %s is being deleted (since %s): the API server creates no lock object in it", ns, got.DeletionTimestamp.UTC().Format(time.RFC3339)),
			fmt.Sprintf("use another namespace, or create this one again once it is gone; if it stays Terminating, kubectl get namespace %s -o yaml names what holds it (a lock held by a process that is gone: baton release --force NAME)", ns)}, deleting
	case err == nil:
		return check{label, resultPass, "exists", ""}, present
	case apierrors.IsNotFound(err):
		return check{label, resultFail, fmt.Sprintf("namespace %s does not exist: every lock there fails", ns),
			fmt.Sprintf("create it (kubectl create namespace %s), or give the namespace the lock should use with -n/--namespace or the kubeconfig context", ns)}, absent
	case apierrors.IsForbidden(err):
		return check{label, resultWarn, fmt.Sprintf("cannot tell whether namespace %s exists: this identity may not get namespaces (%s)", ns, apiStatusMessage(err)),
			fmt.Sprintf("an operator can check with: kubectl get namespace %s", ns)}, cannotTell
	}
	return kubeFailure(label, err), cannotTell
}

// crdCheck asks the API server's discovery whether it serves
// distributedlocks in baton.dev/v1alpha1.
func crdCheck(cs kubernetes.Interface) (check, presence) {
	gv := v1alpha1.GroupVersion.String()
	label := "crd " + v1alpha1.Resource.GroupResource().String()
	const install = "install it once (it needs cluster-admin): kubectl apply -k deploy/crd; or use --backend lease, which needs no CRD"
	list, err := cs.Discovery().ServerResourcesForGroupVersion(gv)
	switch {
	case apierrors.IsNotFound(err):
		return check{label, resultFail, fmt.Sprintf("the DistributedLock CRD is not installed: the API server does not serve %s", gv), install}, absent
	case apierrors.IsForbidden(err):
		return check{label, resultWarn, fmt.Sprintf("cannot tell whether the DistributedLock CRD is installed: discovery of %s is denied (%s)", gv, apiStatusMessage(err)),
			"an operator can check with: kubectl get crd " + v1alpha1.Resource.GroupResource().String()}, cannotTell
	case err != nil:
		return kubeFailure(label, err), cannotTell
	}
	if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == v1alpha1.Resource.Resource }) {
		return check{label, resultFail, fmt.Sprintf("the API server serves %s, but not %s", gv, v1alpha1.Resource.Resource), install}, absent
	}
	return check{label, resultPass, "installed: the API server serves " + v1alpha1.Resource.Resource + " in " + gv, ""}, present
}

// kubeFailure is the row of a request to the API server that failed for
// another reason than the answer the check expects: the cause first.
func kubeFailure(label string, err error) check {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return check{label, resultFail, "no permission: " + err.Error(), "give this identity the permission the API server names, or check its credentials"}
	}
	err = storeerr.Classify(err)
	cause, fix := diagnose(err)
	return check{label, resultFail, cause + ": " + err.Error(), fix}
}

// noRequestReached reports an error of a request that failed on its way
// to the API server (client-go's *url.Error) without any answer of the
// API server's: any other request would fail the same way.
func noRequestReached(err error) bool {
	if _, ok := errors.AsType[*url.Error](err); !ok {
		return false
	}
	var st apierrors.APIStatus
	return !errors.As(err, &st)
}

// apiStatusMessage is the API server's message in an error, or the error.
func apiStatusMessage(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Message != "" {
		return st.Status().Message
	}
	return err.Error()
}

// rbacChecks asks, with SelfSubjectAccessReview, whether this identity may
// use each verb a lock needs on gvr in ns, and create Events.
func rbacChecks(ctx context.Context, cs kubernetes.Interface, gvr schema.GroupVersionResource, ns string) []check {
	group, resource := gvr.Group, gvr.Resource
	qualified := resource
	if group != "" {
		qualified += "." + group
	}
	var checks []check
	var missing []string
	for _, verb := range []string{"get", "watch", "create", "update", "list"} {
		review := &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource},
		}}
		res, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		name := fmt.Sprintf("rbac %s %s", verb, qualified)
		switch {
		case err != nil:
			checks = append(checks, check{name, resultFail, "SelfSubjectAccessReview failed: " + err.Error(), "check the connection and that this identity may create selfsubjectaccessreviews (every authenticated user may by default)"})
		case res.Status.Allowed:
			checks = append(checks, check{name, resultPass, "allowed in namespace " + ns, ""})
		case verb == "list":
			checks = append(checks, check{name, resultWarn, "denied in namespace " + ns + ": only `baton status` without a NAME needs it",
				fmt.Sprintf("for operators only: a Role in namespace %s with\n- apiGroups: [%q]\n  resources: [%q]\n  verbs: [\"list\"]", ns, group, resource)})
		default:
			missing = append(missing, verb)
			checks = append(checks, check{name, resultFail, "denied in namespace " + ns + reason(res.Status), ""})
		}
	}
	if len(missing) > 0 {
		fix := fmt.Sprintf("bind this identity to a Role in namespace %s with the rule (%s has it):\n- apiGroups: [%q]\n  resources: [%q]\n  verbs: [\"get\", \"watch\", \"create\", \"update\"]\nmissing now: %s",
			ns, shippedRBAC(resource), group, resource, strings.Join(missing, ", "))
		for i := range checks {
			if checks[i].result == resultFail && strings.HasPrefix(checks[i].name, "rbac ") {
				checks[i].fix = fix
				break // one fix for all the missing verbs
			}
		}
	}
	events := &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "events"},
	}}
	if res, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, events, metav1.CreateOptions{}); err == nil && !res.Status.Allowed {
		checks = append(checks, check{"rbac create events", resultWarn, "denied in namespace " + ns + ": leadership changes are logged but not recorded as Events",
			fmt.Sprintf("a Role in namespace %s with\n- apiGroups: [\"\"]\n  resources: [\"events\"]\n  verbs: [\"create\"]", ns)})
	} else if err == nil {
		checks = append(checks, check{"rbac create events", resultPass, "allowed in namespace " + ns, ""})
	}
	return checks
}

// shippedRBAC names the kustomization of deploy/ whose Role grants the
// lock verbs on resource.
func shippedRBAC(resource string) string {
	switch resource {
	case "configmaps":
		return "deploy/rbac-configmap"
	case "distributedlocks":
		return "deploy/rbac-crd"
	}
	return "deploy/rbac"
}

func reason(s authzv1.SubjectAccessReviewStatus) string {
	if s.Reason != "" {
		return ": " + s.Reason
	}
	return ""
}

// nameCheck tells whether the lock object exists and whose it is. It reads
// only the object's metadata, with the "get" verb the lock needs anyway.
// Call it only when the namespace and the resource are not known to be
// missing: the API server answers 404 for those too. nsState says whether
// the namespace is known to exist.
func nameCheck(ctx context.Context, cfg *rest.Config, gvr schema.GroupVersionResource, backend, ns, name, app string, nsState presence, adopt bool) check {
	label := "name " + name
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return check{label, resultFail, err.Error(), ""}
	}
	meta, err := mc.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && nsState == present:
		return check{label, resultPass, fmt.Sprintf("no %s %s/%s yet: the first acquire creates it", backend, ns, name), ""}
	case apierrors.IsNotFound(err):
		return check{label, resultPass, fmt.Sprintf("no %s %s/%s: no other application uses the name (the first acquire creates it if namespace %s exists)", backend, ns, name, ns), ""}
	case apierrors.IsForbidden(err):
		return check{label, resultSkip, fmt.Sprintf("not checked: this identity may not get %s in namespace %s (see the rbac get row)", gvr.GroupResource(), ns), ""}
	case err != nil:
		return kubeFailure(label, err)
	}
	// A DistributedLock is baton's kind; a Lease or ConfigMap is baton's
	// if it carries baton's marks.
	if !kubestore.MadeByBaton(meta) && gvr.Group != v1alpha1.Group {
		return foreignCheck(label, gvr, backend, ns, name, adopt)
	}
	if have := meta.Labels[kubestore.LabelApplication]; have != app {
		return check{label, resultFail, fmt.Sprintf("%s %s/%s belongs to application %q, not %q: the two would block each other", backend, ns, name, have, app),
			"give one of the applications another lock name, or the same --app if they really share the lock; " +
				"if this application was renamed (its --app changed), give the object the new name: " +
				(&kubestore.ApplicationError{Namespace: ns, Name: name, Resource: gvr.GroupResource().String(), Want: app}).RenameCommand()}
	}
	return check{label, resultPass, fmt.Sprintf("%s %s/%s belongs to application %q", backend, ns, name, app), ""}
}

// foreignCheck is the name row of a lock object that another tool made:
// a pass for a Lease that --adopt takes over, else a failure whose fix
// says how baton replaces that tool without two leaders.
func foreignCheck(label string, gvr schema.GroupVersionResource, backend, ns, name string, adopt bool) check {
	if backend == "lease" && adopt {
		return check{label, resultPass, fmt.Sprintf("lease %s/%s was made by another tool, such as client-go leader election: --adopt takes it over once its claim ends", ns, name), ""}
	}
	fix := fmt.Sprintf("if baton replaces that tool, stop every process of it first, then delete the object (kubectl delete %s %s -n %s): "+
		"another lock name is another lock, which baton and that tool would both hold at once while the tool runs; "+
		"otherwise pick another lock name", gvr.GroupResource(), name, ns)
	if backend == "lease" {
		fix = "if baton replaces client-go leader election, give baton run and lock --adopt, which takes its Lease over one replica at a time; " + fix
	}
	return check{label, resultFail, fmt.Sprintf("%s %s/%s exists but was not made by baton (another tool uses this name)", backend, ns, name), fix}
}
