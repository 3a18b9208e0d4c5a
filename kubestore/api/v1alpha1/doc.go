// Package v1alpha1 is the baton.dev/v1alpha1 API: the DistributedLock
// custom resource that package kubestore uses as a lock store (see
// kubestore.NewDistributedLock).
//
// The CustomResourceDefinition is generated from these types by
// controller-gen into deploy/crd (tools/crdgen/gen.sh), as are the DeepCopy
// methods in zz_generated.deepcopy.go. Install it before use:
//
//	kubectl apply -f deploy/crd/baton.dev_distributedlocks.yaml
//
// +kubebuilder:object:generate=true
// +groupName=baton.dev
package v1alpha1
