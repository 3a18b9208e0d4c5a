package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version of the API.
const (
	Group   = "baton.dev"
	Version = "v1alpha1"
)

// GroupVersion is baton.dev/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// Resource is the DistributedLock resource, for RBAC and error messages.
var Resource = GroupVersion.WithResource("distributedlocks")

var (
	// SchemeBuilder registers the API's types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds DistributedLock and DistributedLockList to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &DistributedLock{}, &DistributedLockList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
