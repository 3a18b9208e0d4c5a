package kube

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/watch"
)

// Annotation and label keys of the record format. See the package
// documentation for what each holds.
const (
	// AnnotationToken holds the last fencing token issued for the lock, as
	// a decimal uint64 ("42"). It is set on create (to "1") and only ever
	// incremented, by one, on each acquisition; release keeps it.
	AnnotationToken = "baton.dev/token"
	// AnnotationNonce holds the current holder's per-acquisition nonce. It
	// is removed on release.
	AnnotationNonce = "baton.dev/nonce"
	// LabelApplication names the application that owns the lock name (see
	// WithApplication). It is set on create and never changed by baton.
	LabelApplication = "baton.dev/app"
)

// object is one lock record as read from (or to be written to) the API
// server, independent of the Kubernetes kind that holds it.
type object struct {
	name string
	rv   string // metadata.resourceVersion; "" for an object to create

	app    string // value of LabelApplication
	hasApp bool   // LabelApplication is present
	baton  bool   // AnnotationToken is present: baton created the object

	holder      string
	nonce       string
	token       uint64
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
	// list needs the "list" verb, which only status views use.
	list(ctx context.Context) ([]object, error)
	watch(ctx context.Context, name, resourceVersion string) (watch.Interface, error)
}

// parseToken decodes AnnotationToken.
func parseToken(s string) (uint64, error) {
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("annotation %s=%q is not a decimal uint64", AnnotationToken, s)
	}
	return t, nil
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
