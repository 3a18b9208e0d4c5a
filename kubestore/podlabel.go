package kubestore

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/baton-go/baton/backend"
)

// EnvPodName is the environment variable PodName reads first: set it from
// the downward API (fieldRef metadata.name).
const EnvPodName = "POD_NAME"

// PodName returns this process's Pod name: $POD_NAME if set, else the host
// name (a Pod's host name is its name unless spec.hostname says otherwise).
func PodName() (string, error) {
	if n := os.Getenv(EnvPodName); n != "" {
		return n, nil
	}
	n, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("kube: the Pod name: set %s from the downward API: %w", EnvPodName, err)
	}
	return n, nil
}

// LeaderLabel marks the leader's Pod with a label, so that a Service can
// select the leader (or `kubectl logs -l KEY=VALUE` find it) without
// making standbys unready: readiness stays "healthy", and rollouts never
// wait on leadership.
//
// Call Lead when a term starts and Unlead when it ends, before the lock is
// released (in baton.Elector's work function, as `baton run
// --leader-label` does). Lead removes the label from every other Pod of
// the namespace that carries it (with LeaderOf, which `baton run` gives:
// every other Pod that led the same lock, or that names no lock), then
// sets it on this Pod; Unlead removes it from this Pod. A leader cut off
// from the API server cannot Unlead: the next leader's Lead removes its
// label, and no next leader starts before the cut-off one's validity has
// ended, so a former leader keeps the label at most one round trip past
// its validity end.
//
// While it leads, the Pod also carries the annotation
// AnnotationPodDeletionCost set to LeaderDeletionCost, so that a
// ReplicaSet that scales down (a Deployment's rolling update, kubectl
// scale) deletes the standbys before the leader: in a rolling update the
// leader's Pod goes last among the old ones, and leadership moves once,
// to a new Pod, instead of from old Pod to old Pod. Lead removes it from
// the other Pods with the label, Unlead from this Pod. (A Pod's own
// deletion cost, set by someone else, is overwritten while it leads and
// removed after.)
//
// It needs get, list and patch on pods in the namespace: grant them in a
// Role of their own (deploy/example has one), apart from the lock's.
type LeaderLabel struct {
	cs         kubernetes.Interface
	ns, pod    string
	key, value string
	lock       string // LeaderOf's; "" if not given
}

// AnnotationPodDeletionCost is the Pod annotation a ReplicaSet reads to
// choose which Pods to delete first when it scales down: lower costs go
// first (Kubernetes 1.22 and later).
const AnnotationPodDeletionCost = "controller.kubernetes.io/pod-deletion-cost"

// LeaderDeletionCost is the deletion cost LeaderLabel gives the leader's
// Pod; Pods without the annotation count as 0.
const LeaderDeletionCost = "1000"

// A LeaderLabelOption configures NewLeaderLabel.
type LeaderLabelOption func(*LeaderLabel)

// AnnotationLeaderOf is the Pod annotation that LeaderLabel with LeaderOf
// sets beside the label: the name of the lock whose leader the Pod is.
const AnnotationLeaderOf = "baton.dev/leader-of"

// LeaderOf names the lock whose leader the label marks. Lead then records
// it on this Pod (AnnotationLeaderOf) and takes the label only from Pods
// that lead the same lock, or that carry the label without naming a lock
// (labelled by hand, or by a LeaderLabel without LeaderOf), never from the
// leader of another lock that uses the same label in the namespace (two
// workloads that both copied deploy/example's baton.dev/role=leader).
func LeaderOf(lock string) LeaderLabelOption {
	return func(l *LeaderLabel) { l.lock = lock }
}

// NewLeaderLabel returns a LeaderLabel for Pod pod in namespace ns; label
// is "KEY=VALUE".
func NewLeaderLabel(cfg *rest.Config, ns, pod, label string, opts ...LeaderLabelOption) (*LeaderLabel, error) {
	key, value, err := ParseLabel(label)
	if err != nil {
		return nil, err
	}
	if ns == "" || pod == "" {
		return nil, fmt.Errorf("kube: leader label: %w: the namespace (%q) and the Pod (%q) must be set", backend.ErrInvalidOptions, ns, pod)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube: leader label: %w", err)
	}
	l := &LeaderLabel{cs: cs, ns: ns, pod: pod, key: key, value: value}
	for _, o := range opts {
		if o != nil {
			o(l)
		}
	}
	return l, nil
}

// ParseLabel splits "KEY=VALUE" and checks both parts as Kubernetes does.
func ParseLabel(label string) (key, value string, err error) {
	key, value, ok := strings.Cut(label, "=")
	if !ok || key == "" {
		return "", "", fmt.Errorf("kube: leader label %q: %w: want KEY=VALUE, such as role=leader", label, backend.ErrInvalidOptions)
	}
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return "", "", fmt.Errorf("kube: leader label key %q: %w: %v", key, backend.ErrInvalidOptions, errs)
	}
	if errs := validation.IsValidLabelValue(value); len(errs) > 0 || value == "" {
		return "", "", fmt.Errorf("kube: leader label value %q: %w: %v", value, backend.ErrInvalidOptions, errs)
	}
	return key, value, nil
}

// Lead removes the label from the other Pods that carry it (with LeaderOf:
// those of the same lock, or of none) and sets it on this Pod.
func (l *LeaderLabel) Lead(ctx context.Context) error {
	sel := labels.Set{l.key: l.value}.AsSelector().String()
	pods, err := l.cs.CoreV1().Pods(l.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("kube: leader label: listing Pods with %s in namespace %s: %w", sel, l.ns, err)
	}
	for _, p := range pods.Items {
		if of, ok := p.Annotations[AnnotationLeaderOf]; ok && l.lock != "" && of != l.lock {
			continue // another lock's leader
		}
		if p.Name != l.pod {
			if err := l.patch(ctx, p.Name, nil); err != nil {
				return err
			}
		}
	}
	v := l.value
	return l.patch(ctx, l.pod, &v)
}

// Unlead removes the label and the deletion cost from this Pod.
func (l *LeaderLabel) Unlead(ctx context.Context) error { return l.patch(ctx, l.pod, nil) }

// patch sets the label on Pod name to *value, and its deletion cost to
// LeaderDeletionCost, or removes both if value is nil (a merge patch;
// removing what is not there is no error, nor is a Pod that is gone).
func (l *LeaderLabel) patch(ctx context.Context, name string, value *string) error {
	var cost, of *string
	if value != nil {
		c := LeaderDeletionCost
		cost = &c
		if l.lock != "" {
			of = &l.lock
		}
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]*string{l.key: value},
		"annotations": map[string]*string{AnnotationPodDeletionCost: cost, AnnotationLeaderOf: of},
	}})
	if err != nil {
		return err
	}
	_, err = l.cs.CoreV1().Pods(l.ns).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: "baton"})
	if err != nil && !(value == nil && apierrors.IsNotFound(err)) {
		what := "setting"
		if value == nil {
			what = "removing"
		}
		return fmt.Errorf("kube: leader label: %s %s=%s on Pod %s/%s: %w", what, l.key, l.value, l.ns, name, err)
	}
	return nil
}
