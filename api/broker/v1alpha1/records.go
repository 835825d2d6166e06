// Package v1alpha1 is the broker's own API group, broker.mcs.vksfleet.dev: the kinds members write their records
// as on the broker. They carry exactly what today's objects of the same role carry (an export record is a
// ServiceImport's spec, endpoints an EndpointSlice's fields, liveness a Lease's spec), so their Go types are those
// objects' own, registered under these kinds in the broker's scheme: the controller reads and writes them as it
// did the built-in and mcs-api kinds. Being kinds of their own is the point: a member may read them cluster-wide,
// one watch per kind whatever the number of members, and so read nothing else of the broker, which may be a
// member cluster whose own EndpointSlices, ServiceImports and Leases are no other member's business
// (docs/design.md, "The broker at hundreds of members").
package v1alpha1

import (
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// GroupName is the broker's API group.
const GroupName = "broker.mcs.vksfleet.dev"

// SchemeGroupVersion is the group version the records are served at.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// The kinds, and the resources they are served as.
const (
	// ExportRecord is a member's export of one service: a ServiceImport's shape.
	ExportRecord = "ExportRecord"
	// EndpointRecord is up to 100 endpoints of an exported service: an EndpointSlice's shape.
	EndpointRecord = "EndpointRecord"
	// MemberLease is a member's liveness: a Lease's shape.
	MemberLease = "MemberLease"

	ExportRecords   = "exportrecords"
	EndpointRecords = "endpointrecords"
	MemberLeases    = "memberleases"
)

// Resources are the records' resources, in the order of the kinds above.
var Resources = []string{ExportRecords, EndpointRecords, MemberLeases}

// AddToScheme registers the records under this group version: ServiceImport as ExportRecord, EndpointSlice as
// EndpointRecord and Lease as MemberLease, with their lists. A scheme that also registers these Go types under
// their own kinds cannot tell which one a client means: use NewScheme.
func AddToScheme(s *runtime.Scheme) error {
	for kind, pair := range map[string][2]runtime.Object{
		ExportRecord:   {&mcsv1beta1.ServiceImport{}, &mcsv1beta1.ServiceImportList{}},
		EndpointRecord: {&discoveryv1.EndpointSlice{}, &discoveryv1.EndpointSliceList{}},
		MemberLease:    {&coordinationv1.Lease{}, &coordinationv1.LeaseList{}},
	} {
		s.AddKnownTypeWithName(SchemeGroupVersion.WithKind(kind), pair[0])
		s.AddKnownTypeWithName(SchemeGroupVersion.WithKind(kind+"List"), pair[1])
	}
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// NewScheme returns the scheme of the broker's record layout: the records, and the core and authorization types
// a member uses on the broker beside them (its namespace, the member directory's ConfigMaps, access reviews). It
// registers neither discovery.k8s.io, coordination.k8s.io nor multicluster.x-k8s.io, whose Go types name records
// here.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, authorizationv1.AddToScheme, AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}
