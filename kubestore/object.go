package kubestore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/watch"
)

// Annotation and label keys of the record format. See the package
// documentation for what each holds.
const (
	// AnnotationToken holds the last fencing token issued for the lock, as
	// a decimal uint64 ("42"), or TokenFromResourceVersion on an object
	// whose creator has not written its token yet. It is incremented, by
	// one, on each acquisition; release keeps it. See "Fencing tokens" in
	// the package documentation.
	AnnotationToken = "baton.dev/token"
	// TokenFromResourceVersion is the value of AnnotationToken on a lock
	// object as baton creates it: the creator's token is the
	// resourceVersion the API server gave the object, which the creator
	// learns from the create's response and writes as a number with its
	// first renewal or release. Until then, readers take the object's
	// current resourceVersion (never smaller) as its token.
	TokenFromResourceVersion = "resourceVersion"
	// AnnotationNonce holds the current holder's per-acquisition nonce. It
	// is removed on release.
	AnnotationNonce = "baton.dev/nonce"
	// LabelApplication names the application that owns the lock name (see
	// WithApplication). It is set on create and never changed by baton.
	LabelApplication = "baton.dev/app"
	// FinalizerClaim is on a lock object while it holds a claim: baton
	// adds it with the acquisition and removes it with the release (or
	// ForceRelease), in the same conditional writes. It turns kubectl
	// delete of a held object into a deletion that waits for the claim to
	// end (see Deleted lock objects in the package documentation).
	FinalizerClaim = "baton.dev/claim"
)

// withClaimFinalizer returns fs with FinalizerClaim present if held and
// absent if not, leaving other finalizers as they are. It never adds the
// finalizer to an object being deleted (the API server refuses that); no
// write of baton's needs to, since a deleting object is never acquired or
// renewed.
func withClaimFinalizer(fs []string, held, deleting bool) []string {
	has := slices.Contains(fs, FinalizerClaim)
	switch {
	case held && !has && !deleting:
		return append(slices.Clone(fs), FinalizerClaim)
	case !held && has:
		return slices.DeleteFunc(slices.Clone(fs), func(f string) bool { return f == FinalizerClaim })
	}
	return fs
}

// object is one lock record as read from (or to be written to) the API
// server, independent of the Kubernetes kind that holds it.
type object struct {
	name string
	rv   string // metadata.resourceVersion; "" for an object to create
	uid  string // metadata.uid; "" for an object to create
	// deleting: metadata.deletionTimestamp is set (someone deleted the
	// object; FinalizerClaim, or another finalizer, keeps it until
	// removed).
	deleting bool
	claimed  bool // FinalizerClaim is on the object

	app    string // value of LabelApplication
	hasApp bool   // LabelApplication is present
	baton  bool   // AnnotationToken is present: baton created the object

	holder string
	nonce  string
	token  uint64
	// pending: AnnotationToken is TokenFromResourceVersion; token is the
	// object's resourceVersion (0 on an object to create).
	pending     bool
	durationSec int32 // leaseDurationSeconds; 0 if unset
	acquire     time.Time
	renew       time.Time
	transitions int32

	// raw is the kind's typed object this was decoded from; writes start
	// from a deep copy of it, so fields baton does not own (other labels,
	// annotations, owner references) are kept.
	raw any
}

// ttl is the lease duration recorded on the object.
func (o object) ttl() time.Duration { return time.Duration(o.durationSec) * time.Second }

// kind is what the store needs from one Kubernetes object kind (Lease,
// ConfigMap). Every write is conditional: create fails if the object
// exists, update fails unless the object's resourceVersion is still o.rv.
type kind interface {
	// resource is the resource in RBAC terms, e.g. "leases.coordination.k8s.io".
	resource() string
	// rbacRule is a Role rule (YAML) granting verbs (a YAML flow list).
	rbacRule(verbs string) string
	get(ctx context.Context, name string) (object, error)
	create(ctx context.Context, o object) (object, error)
	update(ctx context.Context, o object) (object, error)
	// deleteVersion deletes the object o.name if its resourceVersion and
	// uid are still o's (a delete with preconditions; see
	// deletePreconditions): it fails with a Conflict if the object changed
	// since o was read, or was deleted and created again.
	deleteVersion(ctx context.Context, o object) error
	// list needs the "list" verb, which only status views use. Objects
	// that do not decode are left out and reported in the error (an
	// errors.Join naming each); the others are still returned.
	list(ctx context.Context) ([]object, error)
	watch(ctx context.Context, name, resourceVersion string) (watch.Interface, error)
}

// MadeByBaton reports whether the Lease or ConfigMap o is a lock object of
// baton's: it carries AnnotationToken or, where an operator removed that
// annotation by hand (kubectl annotate lease NAME baton.dev/token-),
// LabelApplication, AnnotationNonce or FinalizerClaim. baton takes over no
// other object of a lock's name (but see WithAdoption).
func MadeByBaton(o metav1.Object) bool {
	_, token := o.GetAnnotations()[AnnotationToken]
	_, app := o.GetLabels()[LabelApplication]
	_, nonce := o.GetAnnotations()[AnnotationNonce]
	return token || app || nonce || slices.Contains(o.GetFinalizers(), FinalizerClaim)
}

// tokenOf returns the AnnotationToken value of o, and whether baton made
// it (MadeByBaton). A lock object whose annotation was removed reads as
// TokenFromResourceVersion: its token is its resourceVersion, at least
// every token issued on it, and its holder's next renewal writes its own
// back. (Taken for another tool's object, such a lock was refused to every
// process, its holder included, and to baton release --force.)
func tokenOf(o metav1.Object) (string, bool) {
	if s, ok := o.GetAnnotations()[AnnotationToken]; ok {
		return s, true
	}
	return TokenFromResourceVersion, MadeByBaton(o)
}

// parseToken decodes AnnotationToken of an object at resourceVersion rv.
func parseToken(s, rv string) (t uint64, pending bool, err error) {
	if s == TokenFromResourceVersion {
		if rv == "" {
			return 0, true, nil // an object to create
		}
		t, err := parseResourceVersion(rv)
		return t, true, err
	}
	t, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("annotation %s=%q is not a decimal uint64", AnnotationToken, s)
	}
	return t, false, nil
}

// parseResourceVersion reads a resourceVersion as the number it is. Since
// Kubernetes 1.35 (KEP-5504, "comparable resource versions") the API
// promises that resourceVersions of one resource are positive decimal
// integers without leading zeros, larger for later writes
// (k8s.io/apimachinery/pkg/util/resourceversion); every API server backed
// by etcd has always issued them so (they are etcd revisions).
func parseResourceVersion(rv string) (uint64, error) {
	if _, err := resourceversion.CompareResourceVersion(rv, "1"); err != nil {
		return 0, fmt.Errorf("resourceVersion %q is not a positive decimal integer, so baton cannot derive a fencing token from it "+
			"(the API server must issue comparable resource versions, as Kubernetes 1.35 and later promise): %w", rv, err)
	}
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("resourceVersion %q does not fit a 64-bit fencing token: %w", rv, err)
	}
	return n, nil
}

// versionOf is the Grant.Version of o: its resourceVersion and uid, so
// that a renewal can tell a replaced object (deleted and created again)
// from the one it was granted.
func versionOf(rv, uid string) string {
	if uid == "" {
		return rv
	}
	return rv + "/" + uid
}

// splitVersion undoes versionOf.
func splitVersion(v string) (rv, uid string) {
	rv, uid, _ = strings.Cut(v, "/")
	return rv, uid
}

// tokenAnnotation is the value of AnnotationToken that encodes o.
func tokenAnnotation(o object) string {
	if o.pending {
		return TokenFromResourceVersion
	}
	return strconv.FormatUint(o.token, 10)
}

// durationSeconds rounds ttl up to whole seconds, as leaseDurationSeconds
// stores it.
func durationSeconds(ttl time.Duration) (int32, error) {
	if ttl < time.Second {
		return 0, fmt.Errorf("TTL %v is shorter than one second: Kubernetes stores lease durations in whole seconds", ttl)
	}
	s := (ttl + time.Second - 1) / time.Second
	if s > math.MaxInt32 {
		return 0, fmt.Errorf("TTL %v is too long", ttl)
	}
	return int32(s), nil
}
