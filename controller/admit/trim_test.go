package admit

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/names"
)

func TestTrimSlice(t *testing.T) {
	ready := discoveryv1.EndpointConditions{Ready: ptr.To(true)}
	in := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "mcs-member-b",
			Labels: map[string]string{names.LabelManagedBy: names.ManagedBy, mcsv1beta1.LabelServiceName: "web",
				mcsv1beta1.LabelSourceCluster: "b", "padding": "x"},
			Annotations:     map[string]string{names.AnnotationClusterID: "b", "padding": string(make([]byte, 1<<10))},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "m"}},
			OwnerReferences: []metav1.OwnerReference{{Name: "o"}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{"10.2.0.1", "10.2.0.2", "10.2.0.3"}, Conditions: ready, Hostname: ptr.To("h"), Zone: ptr.To("z"),
			NodeName: ptr.To("n"), TargetRef: &corev1.ObjectReference{Name: "p"},
			Hints:              &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z"}}},
			DeprecatedTopology: map[string]string{"k": "v"},
		}, {Addresses: []string{"10.2.0.4"}, Conditions: ready}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80)}},
	}
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "mcs-member-b",
			Labels: map[string]string{names.LabelManagedBy: names.ManagedBy, mcsv1beta1.LabelServiceName: "web",
				mcsv1beta1.LabelSourceCluster: "b"},
			Annotations: map[string]string{names.AnnotationClusterID: "b"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.2.0.1"}, Conditions: ready, Hostname: ptr.To("h"), Zone: ptr.To("z")},
			{Addresses: []string{"10.2.0.4"}, Conditions: ready},
		},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80)}},
	}
	TrimSlice(in)
	if !reflect.DeepEqual(in, want) {
		t.Errorf("TrimSlice:\n got %+v\nwant %+v", in, want)
	}
	// A slice with no metadata keeps none.
	empty := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4}
	TrimSlice(empty)
	if empty.Labels != nil || empty.Annotations != nil {
		t.Errorf("TrimSlice of a bare slice: %+v", empty)
	}
}
