package admit

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/names"
)

// sliceLabels and sliceAnnotations are the metadata of a broker EndpointSlice that the import reads: the broker
// selector's and the service's labels, the exporting cluster's id and the time of its change.
var (
	sliceLabels = []string{names.LabelManagedBy, names.LabelServiceNamespace, mcsv1beta1.LabelServiceName,
		mcsv1beta1.LabelSourceCluster, discoveryv1.LabelManagedBy}
	sliceAnnotations = []string{names.AnnotationClusterID, corev1.EndpointsLastChangeTriggerTime}
)

// TrimSlice cuts a broker EndpointSlice down to what Slice and the import read, before the broker cache keeps it:
// every member's controller holds every slice it may import, and what another member wrote is bounded only by its
// broker quota, so a hostile member's slices must cost no more than an honest member's. Each endpoint keeps its
// first address (kube-proxy and CoreDNS use only that one, as the API allows: the addresses are fungible), its
// conditions, hostname and zone; node names, target references, hints and deprecated topology, which Slice drops
// anyway, go, with managed fields, owner references and every label and annotation the import does not read.
func TrimSlice(s *discoveryv1.EndpointSlice) {
	s.ManagedFields, s.OwnerReferences, s.Finalizers = nil, nil, nil
	s.Labels = keep(s.Labels, sliceLabels)
	s.Annotations = keep(s.Annotations, sliceAnnotations)
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		if len(e.Addresses) > 1 {
			// A copy, so that the decoded array of every address is let go.
			e.Addresses = slices.Clone(e.Addresses[:1])
		}
		e.NodeName, e.TargetRef, e.Hints, e.DeprecatedTopology = nil, nil, nil, nil
		e.Conditions.Ready = shared(e.Conditions.Ready)
		e.Conditions.Serving = shared(e.Conditions.Serving)
		e.Conditions.Terminating = shared(e.Conditions.Terminating)
	}
	// The decoder grew the array by doubling: a copy of the length it holds lets the rest go.
	s.Endpoints = slices.Clip(slices.Clone(s.Endpoints))
}

// yes and no are what every cached endpoint's conditions point at: three small allocations fewer per endpoint, of
// a million. Nothing writes through a cached object's pointers (the cache's objects are read-only; admit.Slice
// copies what it takes).
var yes, no = true, false

// shared is b as a pointer to yes or no, nil for nil.
func shared(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &yes
	default:
		return &no
	}
}

// keep is m with only the given keys, nil when none is there.
func keep(m map[string]string, keys []string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		}
	}
	return out
}
