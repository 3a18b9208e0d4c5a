package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/kube"
	"github.com/baton-go/baton/kube/api/v1alpha1"
)

const doctorLong = `Check that baton can work here, without taking any lock: the timing
settings, the identity, the store's reachability and, on Kubernetes, every
verb the lock needs (with SelfSubjectAccessReview) and whether the lock name
is already used by another application. Prints one row per check and, for
each problem, the fix. Exits 1 if any check fails.`

// check is one row of the doctor's report.
type check struct {
	name   string
	result string // PASS, WARN or FAIL
	detail string
	fix    string
}

func (a *app) doctorCommand() *cobra.Command {
	var f lockFlags
	cmd := &cobra.Command{
		Use:   "doctor [--backend B] [--name NAME] [flags]",
		Short: "Check permissions, timings, identity and name collisions",
		Long:  doctorLong,
		Example: `  baton doctor --backend lease -n jobs --name nightly-report --app reports
  baton doctor --name nightly-report --ttl 30s`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if f.name != "" {
				if err := baton.ValidateName(f.name); err != nil {
					return usageErrorf("--name: %w", err)
				}
			}
			if err := f.storeFlags.validate(); err != nil {
				return err
			}
			checks := a.doctor(cmd.Context(), &f)
			if err := printChecks(a.stdout, checks); err != nil {
				return err
			}
			for _, c := range checks {
				if c.result == "FAIL" {
					return exitCode(ExitFailure)
				}
			}
			return nil
		}),
	}
	f.register(cmd.Flags())
	cmd.Flags().Lookup("name").Usage = "lock name to check for collisions (optional)"
	return cmd
}

func (a *app) doctor(ctx context.Context, f *lockFlags) []check {
	name := f.name
	if name == "" {
		name = "doctor"
	}
	var checks []check
	// Timing: baton's own validation, then what the values mean.
	m, err := baton.NewMutex(validationOnly{}, name, f.options(a.log)...)
	if err != nil {
		checks = append(checks, check{"timing", "FAIL", err.Error(),
			"choose --ttl, --renew-deadline and --retry-period with retry < renew deadline < TTL minus the safety margin; or give --ttl alone, and the others scale with it"})
	} else {
		ttl := f.ttl
		rd := ttl * 2 / 3
		if f.fs != nil && f.fs.Changed("renew-deadline") {
			rd = f.renewDeadline
		}
		margin := baton.DefaultSafetyMargin(ttl)
		checks = append(checks, check{"timing", "PASS", fmt.Sprintf(
			"TTL %v, renew deadline %v: a holder cut off from the store stops %v after its last good renew, %v before anyone else may take over",
			ttl, rd, rd, ttl-margin-rd), ""})
	}
	if f.identity == "" {
		id := "<host>-<random>"
		if m != nil {
			id = m.Identity()
		}
		checks = append(checks, check{"identity", "PASS", fmt.Sprintf("default identity (here %s): the host name plus a random suffix, new for every process", id), ""})
	} else {
		checks = append(checks, check{"identity", "WARN", fmt.Sprintf("--identity %q is fixed: two replicas started with the same value are shown as one holder (baton still tells them apart by a per-acquisition nonce)", f.identity),
			"give every replica its own identity, such as the pod name, or leave --identity out"})
	}

	st, where, err := f.open()
	if err != nil {
		return append(checks, check{"store", "FAIL", err.Error(), "check the backend flags and that the store is reachable"})
	}
	defer closeStore(st)
	c, rec := a.storeCheck(ctx, st, where, f.name)
	checks = append(checks, c)
	if f.identity != "" && f.name != "" {
		if rec.Held() && rec.Holder == f.identity {
			checks = append(checks, check{"identity in use", "FAIL",
				fmt.Sprintf("lock %q is held right now by identity %q, the one given here: if that is another process, two replicas share an identity", f.name, f.identity),
				"give every replica its own identity, such as the pod name, or leave --identity out (the default adds a random suffix)"})
		}
	}
	switch f.backend {
	case "lease", "configmap", "crd":
		checks = append(checks, a.kubeChecks(ctx, f)...)
	case "redis", "redlock":
		checks = append(checks, check{"persistence", "WARN", "baton cannot read the server's persistence settings with the lock ACL",
			"run Redis with appendonly yes and appendfsync always: without it a restart frees every lock and restarts fencing tokens (docs/backends.md)"})
	}
	return checks
}

// storeCheck reads the lock (or any lock) to show that the store answers.
// It also returns the record of the lock name when it exists (else the zero
// Record), for the checks that depend on it.
func (a *app) storeCheck(ctx context.Context, st store, where, name string) (check, baton.Record) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	probe := name
	if probe == "" {
		probe = "doctor-probe"
	}
	r, err := st.Get(ctx, probe)
	switch {
	case errors.Is(err, baton.ErrNotFound):
		return check{"store", "PASS", "reached " + where, ""}, baton.Record{}
	case err != nil:
		return check{"store", "FAIL", err.Error(), "check the backend flags, the network path and the permissions to read lock records"}, baton.Record{}
	case name == "":
		return check{"store", "PASS", "reached " + where, ""}, baton.Record{}
	case r.Held():
		return check{"store", "PASS", fmt.Sprintf("reached %s; lock %q is held by %q (token %d)", where, name, r.Holder, r.Token), ""}, r
	default:
		return check{"store", "PASS", "reached " + where, ""}, r
	}
}

// kubeChecks asks the API server, with SelfSubjectAccessReview, whether
// this identity may use each verb a lock needs, and whether the lock
// object (if it exists) belongs to this application.
func (a *app) kubeChecks(ctx context.Context, f *lockFlags) []check {
	cfg, ns, err := f.kube.restConfig()
	if err != nil {
		return []check{{"kubernetes", "FAIL", err.Error(), ""}}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return []check{{"kubernetes", "FAIL", err.Error(), ""}}
	}
	gvr := schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
	switch f.backend {
	case "configmap":
		gvr = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	case "crd":
		gvr = v1alpha1.Resource
	}
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
			checks = append(checks, check{name, "FAIL", "SelfSubjectAccessReview failed: " + err.Error(), "check the connection and that this identity may create selfsubjectaccessreviews (every authenticated user may by default)"})
		case res.Status.Allowed:
			checks = append(checks, check{name, "PASS", "allowed in namespace " + ns, ""})
		case verb == "list":
			checks = append(checks, check{name, "WARN", "denied in namespace " + ns + ": only `baton status` without a NAME needs it",
				fmt.Sprintf("for operators only: a Role in namespace %s with\n- apiGroups: [%q]\n  resources: [%q]\n  verbs: [\"list\"]", ns, group, resource)})
		default:
			missing = append(missing, verb)
			checks = append(checks, check{name, "FAIL", "denied in namespace " + ns + reason(res.Status), ""})
		}
	}
	if len(missing) > 0 {
		fix := fmt.Sprintf("bind this identity to a Role in namespace %s with the rule (deploy/rbac has it):\n- apiGroups: [%q]\n  resources: [%q]\n  verbs: [\"get\", \"watch\", \"create\", \"update\"]\nmissing now: %s",
			ns, group, resource, strings.Join(missing, ", "))
		for i := range checks {
			if checks[i].result == "FAIL" && strings.HasPrefix(checks[i].name, "rbac ") {
				checks[i].fix = fix
				break // one fix for all the missing verbs
			}
		}
	}
	events := &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "events"},
	}}
	if res, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, events, metav1.CreateOptions{}); err == nil && !res.Status.Allowed {
		checks = append(checks, check{"rbac create events", "WARN", "denied in namespace " + ns + ": leadership changes are logged but not recorded as Events",
			fmt.Sprintf("a Role in namespace %s with\n- apiGroups: [\"\"]\n  resources: [\"events\"]\n  verbs: [\"create\"]", ns)})
	} else if err == nil {
		checks = append(checks, check{"rbac create events", "PASS", "allowed in namespace " + ns, ""})
	}
	if f.name != "" {
		checks = append(checks, nameCheck(ctx, cfg, gvr, f.backend, ns, f.name, f.kube.app))
	}
	return checks
}

func reason(s authzv1.SubjectAccessReviewStatus) string {
	if s.Reason != "" {
		return ": " + s.Reason
	}
	return ""
}

// nameCheck tells whether the lock object exists and whose it is. It reads
// only the object's metadata, with the "get" verb the lock needs anyway.
func nameCheck(ctx context.Context, cfg *rest.Config, gvr schema.GroupVersionResource, backend, ns, name, app string) check {
	label := "name " + name
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return check{label, "FAIL", err.Error(), ""}
	}
	meta, err := mc.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return check{label, "PASS", fmt.Sprintf("no %s %s/%s yet: the first acquire creates it", backend, ns, name), ""}
	case err != nil:
		return check{label, "FAIL", err.Error(), ""}
	}
	// A DistributedLock is baton's kind; a Lease or ConfigMap is baton's
	// if it carries the token annotation.
	if _, ok := meta.Annotations[kube.AnnotationToken]; !ok && gvr.Group != "baton.dev" {
		return check{label, "FAIL", fmt.Sprintf("%s %s/%s exists but was not made by baton (another tool uses this name)", backend, ns, name),
			"pick another lock name; baton never takes over another tool's object"}
	}
	if have := meta.Labels[kube.LabelApplication]; have != app {
		return check{label, "FAIL", fmt.Sprintf("%s %s/%s belongs to application %q, not %q: the two would block each other", backend, ns, name, have, app),
			"give one of the applications another lock name, or the same --app if they really share the lock"}
	}
	return check{label, "PASS", fmt.Sprintf("%s %s/%s belongs to application %q", backend, ns, name, app), ""}
}

func printChecks(w io.Writer, checks []check) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
	for _, c := range checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.name, c.result, c.detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	first := true
	for _, c := range checks {
		if c.fix == "" {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nFixes:")
			first = false
		}
		fmt.Fprintf(w, "\n%s (%s):\n  %s\n", c.name, c.result, strings.ReplaceAll(c.fix, "\n", "\n  "))
	}
	return nil
}
