package kubesource

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/names"
)

// The informer transforms below keep only what the zone needs, so that the caches of a large clusterset stay
// small: no managed fields, status, unused spec fields or annotations but the locality ranking.

// slimServiceImport turns a ServiceImport of either served version (v1alpha1 and v1beta1 share the schema of
// the fields kept) into a slim *mcsv1beta1.ServiceImport.
func slimServiceImport(obj any) (any, error) {
	var out *mcsv1beta1.ServiceImport
	switch in := obj.(type) {
	case *mcsv1beta1.ServiceImport:
		out = &mcsv1beta1.ServiceImport{ObjectMeta: slimMeta(&in.ObjectMeta, nil)}
		keepLocality(&out.ObjectMeta, &in.ObjectMeta)
		out.Spec.Type, out.Spec.IPs = in.Spec.Type, in.Spec.IPs
		for _, p := range in.Spec.Ports {
			out.Spec.Ports = append(out.Spec.Ports, mcsv1beta1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port})
		}
	case *mcsv1alpha1.ServiceImport:
		out = &mcsv1beta1.ServiceImport{ObjectMeta: slimMeta(&in.ObjectMeta, nil)}
		keepLocality(&out.ObjectMeta, &in.ObjectMeta)
		out.Spec.Type, out.Spec.IPs = mcsv1beta1.ServiceImportType(in.Spec.Type), in.Spec.IPs
		for _, p := range in.Spec.Ports {
			out.Spec.Ports = append(out.Spec.Ports, mcsv1beta1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port})
		}
	default:
		return obj, nil // tombstones
	}
	return out, nil
}

// keepLocality keeps the one annotation the zone reads: the member's ranking of the import's clusters.
func keepLocality(out, in *metav1.ObjectMeta) {
	if v, ok := in.Annotations[names.AnnotationLocality]; ok {
		out.Annotations = map[string]string{names.AnnotationLocality: v}
	}
}

// slimEndpointSlice keeps an EndpointSlice's two multicluster labels, ports and endpoints (addresses, hostname,
// ready condition).
func slimEndpointSlice(obj any) (any, error) {
	in, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta:  slimMeta(&in.ObjectMeta, []string{mcsv1beta1.LabelServiceName, mcsv1beta1.LabelSourceCluster}),
		AddressType: in.AddressType,
	}
	for _, p := range in.Ports {
		out.Ports = append(out.Ports, discoveryv1.EndpointPort{Name: p.Name, Protocol: p.Protocol, Port: p.Port})
	}
	out.Endpoints = make([]discoveryv1.Endpoint, 0, len(in.Endpoints))
	for _, e := range in.Endpoints {
		out.Endpoints = append(out.Endpoints, discoveryv1.Endpoint{
			Addresses:  e.Addresses,
			Hostname:   e.Hostname,
			Conditions: discoveryv1.EndpointConditions{Ready: e.Conditions.Ready},
		})
	}
	return out, nil
}

// slimNamespace keeps a Namespace's name.
func slimNamespace(obj any) (any, error) {
	in, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &corev1.Namespace{ObjectMeta: slimMeta(&in.ObjectMeta, nil)}, nil
}

func slimMeta(in *metav1.ObjectMeta, labels []string) metav1.ObjectMeta {
	out := metav1.ObjectMeta{Name: in.Name, Namespace: in.Namespace, ResourceVersion: in.ResourceVersion, UID: in.UID}
	for _, l := range labels {
		if v, ok := in.Labels[l]; ok {
			if out.Labels == nil {
				out.Labels = map[string]string{}
			}
			out.Labels[l] = v
		}
	}
	return out
}

var (
	_ cache.TransformFunc = slimServiceImport
	_ cache.TransformFunc = slimEndpointSlice
	_ cache.TransformFunc = slimNamespace
)
