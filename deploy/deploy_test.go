// Package deploy_test checks that every kustomization of deploy/ applies,
// as `kubectl apply -k DIR` does, to an empty cluster: a real
// kube-apiserver started by envtest, with nothing of baton in it.
package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/baton-go/baton/internal/testenv"
)

// kustomizations are the directories of deploy/ and objects each must
// create (kind/namespace/name; the namespace empty for cluster-scoped
// kinds), as docs/kubernetes.md lists them. They are applied one after
// the other to one API server, but for those marked own, which include
// another's objects (deploy/rbac-* include deploy/rbac) and get an API
// server of their own; none needs anything another creates, and each
// subtest first checks that none of its objects, nor their namespaces,
// exists yet, so each meets a cluster empty for it. example goes first:
// it is the one that used to need its namespace created by hand.
var kustomizations = []struct {
	dir  string
	own  bool
	want []string
	// not are objects the kustomization must not create: the other
	// backends' Roles (least privilege).
	not []string
}{
	{"example", false, []string{
		"Namespace//baton-example",
		"ServiceAccount/baton-example/baton",
		"Role/baton-example/baton-locks",
		"RoleBinding/baton-example/baton-locks",
		"Role/baton-example/baton-leader-label",
		"RoleBinding/baton-example/baton-leader-label",
		"Deployment/baton-example/nightly-report",
		"Service/baton-example/nightly-report-leader",
	}, []string{"Role/baton-example/baton-configmaps", "Role/baton-example/baton-distributedlocks"}},
	{"rbac", false, []string{
		"Namespace//baton",
		"ServiceAccount/baton/baton",
		"Role/baton/baton-locks",
		"RoleBinding/baton/baton-locks",
	}, []string{"Role/baton/baton-configmaps", "Role/baton/baton-distributedlocks"}},
	{"crd", false, []string{
		"CustomResourceDefinition//distributedlocks.baton.dev",
	}, nil},
	{"rbac-configmap", true, []string{
		"Namespace//baton",
		"ServiceAccount/baton/baton",
		"Role/baton/baton-locks",
		"RoleBinding/baton/baton-locks",
		"Role/baton/baton-configmaps",
		"RoleBinding/baton/baton-configmaps",
	}, []string{"Role/baton/baton-distributedlocks"}},
	{"rbac-crd", true, []string{
		"Namespace//baton",
		"ServiceAccount/baton/baton",
		"Role/baton/baton-locks",
		"RoleBinding/baton/baton-locks",
		"Role/baton/baton-distributedlocks",
		"RoleBinding/baton/baton-distributedlocks",
	}, []string{"Role/baton/baton-configmaps"}},
}

func TestApplyToEmptyCluster(t *testing.T) {
	shared := newCluster(t)
	for _, k := range kustomizations {
		t.Run(k.dir, func(t *testing.T) {
			c := shared
			if k.own {
				c = newCluster(t)
			}
			objs := render(t, k.dir)
			for _, w := range k.want {
				if !slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return id(o) == w }) {
					t.Errorf("%s renders no %s", k.dir, w)
				}
			}
			for _, n := range k.not {
				if slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return id(o) == n }) {
					t.Errorf("%s renders %s, which its backend does not need", k.dir, n)
				}
			}
			checkOrder(t, objs)
			checkSubjects(t, objs)
			c.checkAbsent(t, objs)
			for _, o := range objs {
				if err := c.apply(t.Context(), o); err != nil {
					t.Fatalf("kubectl apply -k deploy/%s: %s: %v", k.dir, id(o), err)
				}
			}
			for _, o := range objs {
				if _, err := c.get(t.Context(), o); err != nil {
					t.Errorf("after applying deploy/%s: %s: %v", k.dir, id(o), err)
				}
			}
		})
	}
}

// render builds the kustomization dir as kubectl apply -k does: kubectl
// sorts the objects in kustomize's legacy order (namespaces and CRDs
// first) and applies them in that order.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build deploy/%s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range m.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatalf("deploy/%s: %s: %v", dir, r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			t.Fatalf("deploy/%s: %s: %v", dir, r.CurId(), err)
		}
		objs = append(objs, u)
	}
	if len(objs) == 0 {
		t.Fatalf("deploy/%s renders no object", dir)
	}
	return objs
}

// id names o as kind/namespace/name.
func id(o *unstructured.Unstructured) string {
	return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
}

// checkOrder checks that Namespaces and CustomResourceDefinitions come
// before every other object, so that one pass creates what the others
// need first.
func checkOrder(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	var other string
	for _, o := range objs {
		switch first := o.GetKind() == "Namespace" || o.GetKind() == "CustomResourceDefinition"; {
		case !first && other == "":
			other = id(o)
		case first && other != "":
			t.Errorf("%s comes after %s: apply would create it too late", id(o), other)
		}
	}
}

// checkSubjects checks that the ServiceAccount subjects of every
// RoleBinding are in the binding's namespace, where the pods run.
func checkSubjects(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "RoleBinding" {
			continue
		}
		subjects, _, err := unstructured.NestedSlice(o.Object, "subjects")
		if err != nil {
			t.Fatalf("%s: %v", id(o), err)
		}
		for _, s := range subjects {
			s, _ := s.(map[string]any)
			if s["kind"] == "ServiceAccount" && s["namespace"] != o.GetNamespace() {
				t.Errorf("%s binds ServiceAccount %v of namespace %v", id(o), s["name"], s["namespace"])
			}
		}
	}
}

// cluster is an API server and the clients to apply arbitrary objects.
type cluster struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// newCluster starts kube-apiserver and etcd for the test (it fails in CI,
// and is skipped elsewhere, if their binaries are missing).
func newCluster(t *testing.T) *cluster {
	t.Helper()
	ctrllog.SetLogger(logr.Discard())
	env := &envtest.Environment{BinaryAssetsDirectory: testenv.KubeAssets(t)}
	env.ControlPlane.GetAPIServer().Configure().Set("advertise-address", testenv.KubeAdvertiseAddress)
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	return clientsFor(t, cfg)
}

func clientsFor(t *testing.T, cfg *rest.Config) *cluster {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// resource returns the client for o's resource, in o's namespace if the
// kind is namespaced. A namespaced object without a namespace is an error:
// kubectl would put it in whatever namespace the caller's context names.
func (c *cluster) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		c.mapper.Reset() // a CRD applied since discovery
		m, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", gvk, err)
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return c.dyn.Resource(m.Resource), nil
	}
	if o.GetNamespace() == "" {
		return nil, errors.New("a namespaced object without a namespace: it would land in the caller's current namespace")
	}
	return c.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), nil
}

// apply applies o with server-side apply.
func (c *cluster) apply(ctx context.Context, o *unstructured.Unstructured) error {
	r, err := c.resource(o)
	if err != nil {
		return err
	}
	_, err = r.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "deploy-test", Force: true})
	return err
}

func (c *cluster) get(ctx context.Context, o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	r, err := c.resource(o)
	if err != nil {
		return nil, err
	}
	return r.Get(ctx, o.GetName(), metav1.GetOptions{})
}

var namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// checkAbsent fails t if any of objs, or a namespace one of them is in,
// exists already.
func (c *cluster) checkAbsent(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ns := c.dyn.Resource(namespaces)
	for _, o := range objs {
		if n := o.GetNamespace(); n != "" {
			_, err := ns.Get(t.Context(), n, metav1.GetOptions{})
			absent(t, "the namespace of "+id(o), err)
		}
		_, err := c.get(t.Context(), o)
		absent(t, id(o), err)
	}
}

// absent fails t unless err, from reading what, is NotFound.
func absent(t *testing.T, what string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("%s exists before the apply: the cluster is not empty for it", what)
	case !apierrors.IsNotFound(err):
		t.Fatalf("reading %s: %v", what, err)
	}
}

// The example cannot stall a rolling update on leadership: readiness asks
// /readyz (healthy and campaigning), never /leader, and the leader is
// routed to by its label: the leader-label flag, POD_NAME from the
// downward API, the pods Role, and a Service that selects the label.
func TestExampleRoutesByLabel(t *testing.T) {
	var dep, svc *unstructured.Unstructured
	roles := map[string]bool{}
	for _, o := range render(t, "example") {
		switch o.GetKind() {
		case "Deployment":
			dep = o
		case "Service":
			svc = o
		case "Role":
			roles[o.GetName()] = true
		}
	}
	if dep == nil || svc == nil || !roles["baton-leader-label"] {
		t.Fatalf("example renders Deployment %v, Service %v, Roles %v", dep != nil, svc != nil, roles)
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	if path, _, _ := unstructured.NestedString(c, "readinessProbe", "httpGet", "path"); path != "/readyz" {
		t.Errorf("readiness probe path %q, want /readyz: a probe on leadership stalls rollouts", path)
	}
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	if !slices.Contains(args, "--leader-label=baton.dev/role=leader") {
		t.Errorf("args %v lack --leader-label=baton.dev/role=leader", args)
	}
	envs, _, _ := unstructured.NestedSlice(c, "env")
	podName := false
	for _, e := range envs {
		m := e.(map[string]any)
		if p, _, _ := unstructured.NestedString(m, "valueFrom", "fieldRef", "fieldPath"); m["name"] == "POD_NAME" && p == "metadata.name" {
			podName = true
		}
	}
	if !podName {
		t.Errorf("env lacks POD_NAME from metadata.name")
	}
	if sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector"); sel["baton.dev/role"] != "leader" {
		t.Errorf("Service selector %v does not select the leader label", sel)
	}
}

// The example names its application (--app), so that a copy of it for
// another service that keeps the lock name is refused with an error naming
// both applications (and baton doctor's name row fails), instead of
// silently sharing one lock with the first: with the default (no
// application) every copy owns every name.
func TestExampleNamesItsApplication(t *testing.T) {
	for _, o := range render(t, "example") {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		for _, a := range args {
			if app, ok := strings.CutPrefix(a, "--app="); ok && app != "" {
				return
			}
		}
		t.Errorf("args %v lack --app=NAME", args)
	}
}
