package kubestore

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/storeerr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	// ErrOtherApplication: the lock object was created by another
	// application (see WithApplication) or by a tool other than baton. The
	// error unwraps to *ApplicationError.
	ErrOtherApplication = errors.New("lock object belongs to another application")
	// ErrNamespaceNotFound: the store's namespace does not exist. It also
	// matches backend.ErrMisconfigured, so the engine does not retry it: a
	// lock that waits for a namespace nobody creates would wait forever.
	ErrNamespaceNotFound = errors.New("namespace not found")
	// ErrNotAPIServer: the server at the configured URL answered as no
	// Kubernetes API server does (a web page, a proxy's or a login page,
	// JSON of another service). It also matches backend.ErrMisconfigured.
	ErrNotAPIServer = errors.New("not a Kubernetes API server")
	// ErrThrottled: the API server throttles the store's requests (429
	// Too Many Requests, from API Priority and Fairness or its
	// --max-requests-inflight), past client-go's own retries or until the
	// caller's context ended. It also matches backend.ErrUnavailable: the
	// engine retries it.
	ErrThrottled = errors.New("the API server throttles requests")
	// ErrRateLimited: requests of the store's own client (the ForConfig
	// constructors) waited in its client-side rate limiter (WithRateLimit)
	// and were not sent in time. Its errors name the QPS and Burst and
	// the fix. A step-down whose renew waited there carries it.
	ErrRateLimited = errors.New("requests wait in baton's client-side rate limiter")
)

// ApplicationError reports a lock object that this store must not take
// over: it was created for another application, or not by baton at all.
//
// It matches ErrOtherApplication and also backend.ErrForbidden, so that
// baton's engine treats it as permanent and Mutex.Lock returns it at once
// instead of retrying forever: two applications that picked the same lock
// name would otherwise block each other silently.
type ApplicationError struct {
	Namespace, Name string
	Resource        string // e.g. "leases.coordination.k8s.io"
	// Want is this store's application; Have is the object's (empty when
	// the object has no baton.dev/app label).
	Want, Have string
	// Foreign reports an object without baton's annotations: created by
	// client-go leader election, kubectl, or another tool.
	Foreign bool
	// Holder is the object's current holderIdentity, for the message.
	Holder string
}

func (e *ApplicationError) Error() string {
	if e.Foreign {
		return fmt.Sprintf("kube: %s %s/%s was not created by baton (it has no %s annotation, %s label or %s finalizer; holder %q): "+
			"it belongs to another tool, such as client-go leader election; baton will not take it over. "+
			"If baton replaces that tool: %s. Another lock name is another lock, which baton and that tool would both hold at once while the tool runs. "+
			"Otherwise use another lock name",
			e.Resource, e.Namespace, e.Name, AnnotationToken, LabelApplication, FinalizerClaim, e.Holder, e.migration())
	}
	field := "label " + LabelApplication
	if e.Resource == dlResource {
		field = "spec.application"
	}
	return fmt.Sprintf("kube: %s %s/%s belongs to application %q (%s), but this store is for application %q: "+
		"either two applications use the same lock name (give one of them another name), or this application was renamed "+
		"(its --app or WithApplication changed): then give the object the new name, %s; its holder keeps its claim, "+
		"and processes still on the old name are refused from then on",
		e.Resource, e.Namespace, e.Name, e.Have, field, e.Want, e.RenameCommand())
}

// migration says how to move from the tool that wrote a foreign object
// to baton without two leaders.
func (e *ApplicationError) migration() string {
	stop := fmt.Sprintf("stop every process of that tool first, then delete the object (kubectl delete %s %s -n %s)", e.Resource, e.Name, e.Namespace)
	if e.Resource != leaseResource {
		return stop
	}
	return "open the store with kubestore.WithAdoption (baton run and lock: --adopt), which takes over client-go leader election's Lease one replica at a time " +
		"(docs/kubernetes.md, \"Migrating from client-go leader election\"); or " + stop
}

// RenameCommand is the kubectl command that gives the object the
// application Want, for an application that was renamed (see
// WithApplication). A DistributedLock keeps its application in
// spec.application, and the label too; the other kinds in the label.
func (e *ApplicationError) RenameCommand() string {
	if e.Resource == dlResource {
		return fmt.Sprintf(`kubectl patch %s %s -n %s --type merge -p '{"metadata":{"labels":{%q:%q}},"spec":{"application":%q}}'`,
			e.Resource, e.Name, e.Namespace, LabelApplication, e.Want, e.Want)
	}
	return fmt.Sprintf("kubectl label %s %s -n %s %s=%s --overwrite", e.Resource, e.Name, e.Namespace, LabelApplication, e.Want)
}

// Is makes errors.Is match ErrOtherApplication and backend.ErrForbidden.
func (e *ApplicationError) Is(target error) bool {
	return target == ErrOtherApplication || target == backend.ErrForbidden
}

// besides returns " (err)" unless err is (or wraps) cause.
func besides(err, cause error) string {
	if errors.Is(err, cause) {
		return ""
	}
	return fmt.Sprintf(" (%v)", err)
}

// throttleFix says what ends throttling.
const throttleFix = "it passes once the API server's load falls. If it lasts, give this identity a FlowSchema of its own with a " +
	"PriorityLevelConfiguration that has room (kubectl get flowschemas,prioritylevelconfigurations), or lower the load on the API server"

// lockVerbs are the verbs a process taking locks needs on the lock objects.
const lockVerbs = `["get", "watch", "create", "update"]`

// removeVerbs are lockVerbs and "delete", which only Remove uses (package
// schedule's clean-up of the lock objects of finished slots).
const removeVerbs = `["get", "watch", "create", "update", "delete"]`

// errCorrupt marks a record that cannot be decoded.
func errCorrupt(err error) error { return fmt.Errorf("%w: %w", backend.ErrCorruptRecord, err) }

// fail turns an error from the API server into one a user can act on,
// naming the operation, the namespace and the object.
func (s *store) fail(ctx context.Context, op, verb, name string, err error) error {
	where := fmt.Sprintf("%s %s/%s", s.k.resource(), s.ns, name)
	if name == "" {
		where = fmt.Sprintf("%s in namespace %s", s.k.resource(), s.ns)
	}
	switch {
	case ctx.Err() != nil && s.clientNote.recent():
		// client-go was waiting out a 429's Retry-After, or about to.
		return fmt.Errorf("kube: %s %s: %w%s: %w: %w: the API server answered this client 429 Too Many Requests within the last %v, "+
			"and client-go waits out each Retry-After before it tries again; %s", op, where, ctx.Err(), besides(err, ctx.Err()),
			ErrThrottled, backend.ErrUnavailable, throttleWindow, throttleFix)
	case s.clientNote != nil && strings.Contains(err.Error(), "would exceed context deadline"):
		// The store's own limiter did not send the request: its wait
		// would have passed the deadline.
		return fmt.Errorf("kube: %s %s: %w (%v): %w", op, where, context.DeadlineExceeded, err, s.clientNote.limiter.wouldExceed())
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		// client-go's rate limiter reports a wait that cannot finish
		// before the deadline without wrapping the context's error.
		return fmt.Errorf("kube: %s %s: %w (%v)", op, where, ctx.Err(), err)
	case strings.Contains(err.Error(), "would exceed context deadline"):
		// The same, before the deadline has passed: the request would not
		// be sent in time, which is the deadline's doing.
		return fmt.Errorf("kube: %s %s: %w (%v)", op, where, context.DeadlineExceeded, err)
	case errors.Is(err, backend.ErrCorruptRecord):
		return fmt.Errorf("kube: %s %s: %w", op, where, err)
	case apierrors.IsTooManyRequests(err):
		// client-go waited out the Retry-After of each 429 and gave up
		// after its retries: the API server answers, but throttles.
		return fmt.Errorf("kube: %s %s: %w: %w: the API server throttles this client's requests (%s: 429 Too Many Requests, "+
			"from API Priority and Fairness or its --max-requests-inflight), and kept refusing them after every Retry-After; %s",
			op, where, ErrThrottled, backend.ErrUnavailable, apiMessage(err), throttleFix)
	case isRefusal(err):
		return s.refused(op, verb, where, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("kube: %s %s: %w: the API server did not accept the credentials (%v): "+
			"they expired or were revoked (a token whose ServiceAccount, pod or bound object was deleted, a client certificate past its end or of a CA the server no longer trusts), "+
			"or belong to another cluster; check them with kubectl auth whoami and renew them (a token file and client certificate files are read again when they change)",
			op, where, backend.ErrForbidden, apiMessage(err))
	case isMissingCredentialPlugin(err):
		// client-go's exec credential plugin (aws eks get-token,
		// gke-gcloud-auth-plugin, kubelogin) is not on this machine: no
		// attempt can succeed. (An image built FROM baton's has no such
		// binary.)
		return fmt.Errorf("kube: %s %s: %w: the kubeconfig's credential plugin cannot be run here (%v); install it on this machine's PATH, "+
			"or use a kubeconfig (or, in a pod, the service account) whose credentials need no plugin",
			op, where, backend.ErrMisconfigured, err)
	case isPlainHTTPToTLS(err):
		return fmt.Errorf("kube: %s %s: %w: the API server speaks HTTPS and this client sent it plain HTTP (400: Client sent an HTTP request to an HTTPS server): "+
			"client-go takes a server address without a scheme for http:// when the configuration has no CA, client certificate or insecure-skip-tls-verify; "+
			"write the server as https://HOST:PORT (kubectl config set-cluster CLUSTER --server=https://HOST:PORT; in Go, rest.Config's Host)",
			op, where, backend.ErrMisconfigured)
	case verb == "create" && isNamespaceNotFound(err):
		return fmt.Errorf("kube: %s %s: %w (%w): namespace %q does not exist; create it or configure another namespace",
			op, where, ErrNamespaceNotFound, backend.ErrMisconfigured, s.ns)
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		// The generic fix (dial a name the certificate lists) is out of
		// reach behind a proxy, a tunnel or a load balancer whose address
		// the API server's certificate does not list.
		return fmt.Errorf("kube: %s %s: %w; where the API server is reached through a proxy, a tunnel or a load balancer under another name, "+
			"set the kubeconfig cluster's tls-server-name to a name the certificate lists (kubectl config set-cluster CLUSTER --tls-server-name=NAME; "+
			"in Go, rest.Config's TLSClientConfig.ServerName)", op, where, storeerr.Classify(err))
	}
	return fmt.Errorf("kube: %s %s: %w", op, where, storeerr.ClassifyVia(err, s.clientNote.clientProxy()))
}

// isRefusal reports a request that admission or authorization refused (a
// 403, a namespace being deleted, or an admission policy's or webhook's
// denial): refused names it.
func isRefusal(err error) bool {
	return isAdmissionDenial(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) || apierrors.IsForbidden(err)
}

// refused is fail for a refusal (isRefusal) of the request verb on where:
// it names what refused it and what lifts it, if anything does.
func (s *store) refused(op, verb, where string, err error) error {
	switch {
	case isAdmissionDenial(err):
		// Authorization passed (admission runs after it): no Role lifts
		// this, and retrying meets the same policy.
		return fmt.Errorf("kube: %s %s: %w: %s of the cluster refused the %s (%s); RBAC allows it, so no Role lifts this: "+
			"ask the cluster's administrators to let this identity %s %s in namespace %q (see %s), or use another namespace or backend",
			op, where, backend.ErrForbidden, admissionDenier(err), verb, apiMessage(err), verb, s.k.resource(), s.ns, admissionCommand(err))
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		// A 403 that no Role can lift: the namespace is going away.
		return fmt.Errorf("kube: %s %s: %w: namespace %q is being deleted, and the API server creates nothing in it (%s); "+
			"use another namespace, or create this one again once it is gone (until then kubectl get namespace %s shows it Terminating)",
			op, where, backend.ErrMisconfigured, s.ns, apiMessage(err), s.ns)
	case apierrors.IsForbidden(err) && isCRDTerminating(err):
		// Also a 403 that no Role lifts: the CRD is going away, and
		// every DistributedLock with it.
		return fmt.Errorf("kube: %s %s: %w: the DistributedLock CRD is being deleted, and the API server creates no DistributedLock "+
			"until it is gone (%s); install it again once it is gone (kubectl get crd %s shows it Terminating until then; "+
			"then kubectl apply -k deploy/crd), or use another backend",
			op, where, backend.ErrMisconfigured, apiMessage(err), s.k.resource())
	case apierrors.IsForbidden(err) && isQuota(err):
		return fmt.Errorf("kube: %s %s: %w: a ResourceQuota of namespace %q refused the %s (%s); no Role lifts a quota: "+
			"raise it (kubectl describe resourcequota -n %s), or remove lock objects nobody uses any more "+
			"(baton remove NAME..., or Remove: both delete only free ones, and tokens of a name used again still grow; "+
			"package schedule removes its finished slots' objects where its identity may delete them)",
			op, where, backend.ErrForbidden, s.ns, verb, apiMessage(err), s.ns)
	case apierrors.IsForbidden(err) && verb == "delete":
		return fmt.Errorf("kube: %s %s: %w: the API server denied the verb %q on %s in namespace %q (%s). "+
			"Only removing lock objects needs it, which taking locks does not: package schedule's clean-up of each slot it finished, "+
			"baton remove, and a program's own Remove of the object of a lock it no longer uses (a lock per entity), which otherwise stays for ever. "+
			"Bind this identity to a Role in namespace %q with the rule:\n%s\n"+
			"or keep the objects (for package schedule: schedule.KeepSlotLocks)",
			op, where, backend.ErrForbidden, verb, s.k.resource(), s.ns, apiMessage(err), s.ns, s.k.rbacRule(removeVerbs))
	default:
		rule, who := s.k.rbacRule(lockVerbs), "this identity"
		if verb == "list" {
			rule, who = s.k.rbacRule(`["list"]`), "the identity of status views (baton status)"
		}
		return fmt.Errorf("kube: %s %s: %w: the API server denied the verb %q on %s in namespace %q (%s). "+
			"Bind %s to a Role in namespace %q with the rule:\n%s",
			op, where, backend.ErrForbidden, verb, s.k.resource(), s.ns, apiMessage(err), who, s.ns, rule)
	}
}

// isPlainHTTPToTLS reports Go's TLS server's answer to a plain HTTP
// request, as client-go reports it: a 400 whose cause quotes the body.
func isPlainHTTPToTLS(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || !apierrors.IsBadRequest(err) || st.Status().Details == nil {
		return false
	}
	return slices.ContainsFunc(st.Status().Details.Causes, func(c metav1.StatusCause) bool {
		return strings.Contains(c.Message, "Client sent an HTTP request to an HTTPS server")
	})
}

// isNamespaceNotFound reports the 404 of a create in a missing namespace.
func isNamespaceNotFound(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || !apierrors.IsNotFound(err) {
		return false
	}
	d := st.Status().Details
	return d != nil && d.Kind == "namespaces"
}

// isCRDTerminating reports apiextensions-apiserver's refusal of a create
// while the custom resource's CRD is being deleted: a 403 without a status
// cause, which only its message tells from an RBAC denial.
func isCRDTerminating(err error) bool {
	return strings.Contains(apiMessage(err), "while custom resource definition is terminating")
}

// isMissingCredentialPlugin reports client-go's error for a kubeconfig
// whose exec credential plugin is not installed.
func isMissingCredentialPlugin(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "getting credentials: exec: executable ") && strings.Contains(msg, " not found")
}

// isAdmissionDenial reports a refusal by a ValidatingAdmissionPolicy or
// an admission webhook. Its status code is the policy's choice (422
// Invalid by default, 403, 401 or 413; a webhook's 403 by default), so
// only its message tells it from a validation error or an RBAC denial.
func isAdmissionDenial(err error) bool {
	msg := apiMessage(err)
	return strings.Contains(msg, "ValidatingAdmissionPolicy '") && strings.Contains(msg, "denied request") ||
		strings.Contains(msg, "admission webhook \"") && strings.Contains(msg, "denied the request")
}

// admissionDenier names what refused the request isAdmissionDenial reports.
func admissionDenier(err error) string {
	if strings.Contains(apiMessage(err), "ValidatingAdmissionPolicy '") {
		return "a ValidatingAdmissionPolicy"
	}
	return "an admission webhook"
}

// admissionCommand is the kubectl command that shows what refused the
// request isAdmissionDenial reports.
func admissionCommand(err error) string {
	if strings.Contains(apiMessage(err), "ValidatingAdmissionPolicy '") {
		return "kubectl get validatingadmissionpolicies,validatingadmissionpolicybindings"
	}
	return "kubectl get validatingwebhookconfigurations"
}

// isQuota reports a refusal by the ResourceQuota admission plugin, which
// gives no status cause: only its message says so.
func isQuota(err error) bool {
	msg := apiMessage(err)
	return strings.Contains(msg, "exceeded quota: ") || strings.Contains(msg, "status unknown for quota: ")
}

func apiMessage(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return st.Status().Message
	}
	return err.Error()
}

// ctxErr returns a context error that names the operation, or nil.
func (s *store) ctxErr(ctx context.Context, op, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kube: %s %s %s/%s: %w", op, s.k.resource(), s.ns, name, err)
	}
	return nil
}
