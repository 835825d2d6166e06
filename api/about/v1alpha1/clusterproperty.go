// Package v1alpha1 holds the ClusterProperty API of KEP-2149 (group about.k8s.io), which names this cluster and
// its clusterset. The upstream about-api module is not on the module proxy, so the project carries this small copy. Its CustomResourceDefinition is in
// vksfleet.dev/fleet/build/deploy/crds.
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Well-known ClusterProperty names from KEP-2149.
const (
	// ClusterIDName is the ClusterProperty whose value is this cluster's id within its clusterset.
	ClusterIDName = "cluster.clusterset.k8s.io"
	// ClusterSetName is the ClusterProperty whose value is the name of the clusterset this cluster belongs to.
	ClusterSetName = "clusterset.k8s.io"
	// RegionName is the ClusterProperty whose value is this cluster's region, which ranks other clusters'
	// endpoints by locality. It is not part of KEP-2149: this project's convention.
	RegionName = "region.topology.k8s.io"
)

// GroupVersion is the API group and version of ClusterProperty.
var GroupVersion = schema.GroupVersion{Group: "about.k8s.io", Version: "v1alpha1"}

// ClusterProperty is a cluster-scoped name/value pair describing the cluster it lives in.
type ClusterProperty struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ClusterPropertySpec `json:"spec"`
}

// ClusterPropertySpec holds the property's value.
type ClusterPropertySpec struct {
	// Value is the property's value; at most 128k characters.
	Value string `json:"value"`
}

// ClusterPropertyList is a list of ClusterProperty.
type ClusterPropertyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []ClusterProperty `json:"items"`
}

// AddToScheme registers ClusterProperty and ClusterPropertyList with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &ClusterProperty{}, &ClusterPropertyList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// DeepCopyInto copies the receiver into out.
func (in *ClusterProperty) DeepCopyInto(out *ClusterProperty) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
}

// DeepCopy returns a deep copy of the receiver.
func (in *ClusterProperty) DeepCopy() *ClusterProperty {
	if in == nil {
		return nil
	}
	out := new(ClusterProperty)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *ClusterProperty) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyInto copies the receiver into out.
func (in *ClusterPropertyList) DeepCopyInto(out *ClusterPropertyList) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]ClusterProperty, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a deep copy of the receiver.
func (in *ClusterPropertyList) DeepCopy() *ClusterPropertyList {
	if in == nil {
		return nil
	}
	out := new(ClusterPropertyList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *ClusterPropertyList) DeepCopyObject() runtime.Object { return in.DeepCopy() }
