// Package export turns a local ServiceExport, its Service and the Service's EndpointSlices into what this cluster
// publishes: the export record that the merge consumes and the endpoints, stripped of everything local to the
// cluster. It is pure; the controller reads the objects and writes the results.
package export

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/names"
)

// MaxEndpointsPerSlice bounds every slice the controller writes, on the broker and in members.
const MaxEndpointsPerSlice = 100

// ReasonNamespaceNotAllowed is the Valid=False reason of a ServiceExport in a namespace the controller never
// exports from. mcs-api has no reason for it; KEP-1645 asks implementations to keep shared namespaces such as
// default and kube-system out of the clusterset.
const ReasonNamespaceNotAllowed = "NamespaceNotAllowed"

// DefaultDeniedNamespaces are the namespaces exported from nowhere unless the operator says otherwise: every
// cluster has them, with unrelated Services of the same names, and kube-system's would expose the control plane.
var DefaultDeniedNamespaces = []string{"kube-system", "kube-public", "kube-node-lease", "default"}

// ReasonInvalidExportedMetadata is the Valid=False reason of a ServiceExport whose exportedLabels or
// exportedAnnotations Kubernetes would refuse on the ServiceImport, or that are too large.
const ReasonInvalidExportedMetadata = admit.ReasonMetadata

// maxListedProblems bounds the problems a Valid message names.
const maxListedProblems = 5

// Record is the export of a valid Service: ClusterIP, NodePort and LoadBalancer Services export as
// ClusterSetIP, those with clusterIP None as Headless. Exported labels and annotations with reserved keys are
// left out.
func Record(clusterID string, se *mcsv1beta1.ServiceExport, svc *corev1.Service) merge.Export {
	labels, annotations, _ := admit.Metadata(se.Spec.ExportedLabels, se.Spec.ExportedAnnotations)
	typ := mcsv1beta1.ClusterSetIP
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		typ = mcsv1beta1.Headless
	}
	ports := make([]mcsv1beta1.ServicePort, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		ports = append(ports, mcsv1beta1.ServicePort{Name: p.Name, Protocol: p.Protocol, AppProtocol: p.AppProtocol, Port: p.Port})
	}
	spec := svc.Spec.DeepCopy()
	return merge.Export{
		Cluster:  clusterID,
		Created:  se.CreationTimestamp.UTC(),
		Draining: se.Annotations[names.AnnotationDrain] == "true",
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:                  typ,
			Ports:                 ports,
			IPFamilies:            spec.IPFamilies,
			SessionAffinity:       spec.SessionAffinity,
			SessionAffinityConfig: spec.SessionAffinityConfig,
			InternalTrafficPolicy: spec.InternalTrafficPolicy,
			TrafficDistribution:   spec.TrafficDistribution,
		},
		Labels:      labels,
		Annotations: annotations,
	}
}

// list joins problems for a condition message, naming at most maxListedProblems.
func list(problems []string) string {
	if extra := len(problems) - maxListedProblems; extra > 0 {
		problems = append(problems[:maxListedProblems:maxListedProblems], fmt.Sprintf("and %d more", extra))
	}
	return strings.Join(problems, "; ")
}

// Slices are the endpoints of a Service's local EndpointSlices as this cluster publishes them: one slice per
// source slice (split at MaxEndpointsPerSlice), named for the broker, with address type, ports and, per endpoint,
// its first address, conditions, hostname and zone, and the source's last-change-trigger-time, which broker.Slice
// carries on so that importers' kube-proxies measure from the change here. Node names, target references and hints
// stay local; so do an endpoint's other addresses, which the API makes fungible and kube-proxy never uses, and which
// importers would drop (admit.TrimSlice). The result is sorted by name.
//
// An empty source slice is published empty rather than withdrawn. Scaled to zero, a Service keeps its slice
// (the EndpointSlice controller turns it into an empty placeholder): published as an update, the change reaches
// every importer at once, whereas a withdrawn slice is held back for a while by importers that cannot yet tell
// it from a broker losing its data, and held with its endpoints as last seen, still ready when their pods exited
// before the importer saw them terminate.
func Slices(namespace, service string, local []discoveryv1.EndpointSlice) []discoveryv1.EndpointSlice {
	var out []discoveryv1.EndpointSlice
	for _, s := range local {
		if !s.DeletionTimestamp.IsZero() {
			continue
		}
		eps := make([]discoveryv1.Endpoint, 0, len(s.Endpoints))
		for _, e := range s.Endpoints {
			c := e.DeepCopy()
			eps = append(eps, discoveryv1.Endpoint{Addresses: c.Addresses[:min(1, len(c.Addresses))], Conditions: c.Conditions, Hostname: c.Hostname, Zone: c.Zone})
		}
		slices.SortFunc(eps, func(a, b discoveryv1.Endpoint) int { return strings.Compare(first(a.Addresses), first(b.Addresses)) })
		for part := 0; part == 0 || part*MaxEndpointsPerSlice < len(eps); part++ {
			chunk := eps[part*MaxEndpointsPerSlice : min(len(eps), (part+1)*MaxEndpointsPerSlice)]
			meta := metav1.ObjectMeta{Name: names.BrokerSliceName(namespace, service, s.Name, part)}
			if t, ok := s.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
				meta.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: t}
			}
			out = append(out, discoveryv1.EndpointSlice{
				ObjectMeta:  meta,
				AddressType: s.AddressType,
				Endpoints:   chunk,
				Ports:       clonePorts(s.Ports),
			})
		}
	}
	slices.SortFunc(out, func(a, b discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func clonePorts(ps []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	var out []discoveryv1.EndpointPort
	for _, p := range ps {
		out = append(out, *p.DeepCopy())
	}
	return out
}

// Ready=False reasons of an export a limit leaves partly unpublished: the endpoints of one service
// (ReasonTooManyEndpoints, Limit) or the broker EndpointSlices of one namespace's exports (ReasonNamespaceLimit,
// Share). mcs-api has no reason for either.
const (
	ReasonTooManyEndpoints = admit.ReasonTooManyEndpoints
	ReasonNamespaceLimit   = "NamespaceLimit"
)

// Limited says what a limit leaves unpublished of an export, for its Ready condition.
type Limited struct {
	Reason, Message string
}

// Limit returns the first of slices, sorted by name as Slices makes them, that one member's export of one service
// publishes: as many as fit within maxEndpoints endpoints and admit.SlicesPerService(maxEndpoints) slices
// (admit.Fit), which are those every importer with the same limit takes. limited says what is left out, nil when
// nothing is.
func Limit(slices []discoveryv1.EndpointSlice, maxEndpoints int) (kept []discoveryv1.EndpointSlice, limited *Limited) {
	maxSlices := admit.SlicesPerService(maxEndpoints)
	sizes := make([]int, 0, min(len(slices), maxSlices))
	total := 0
	for i := range slices {
		size := admit.Size(&slices[i])
		total += size
		if len(sizes) < maxSlices {
			sizes = append(sizes, size)
		}
	}
	n, endpoints := admit.Fit(sizes, maxSlices, maxEndpoints)
	if n == len(slices) {
		return slices, nil
	}
	return slices[:n], &Limited{Reason: ReasonTooManyEndpoints, Message: fmt.Sprintf(
		"Published %d of %d endpoints, in the first %d of %d EndpointSlices by name: one member's export of one service "+
			"may have at most %d endpoints in %d EndpointSlices (the mcs-controller flag --max-endpoints-per-service).",
		endpoints, total, n, len(slices), maxEndpoints, maxSlices)}
}

// Share returns the first n of slices, the part of an export that its namespace's share of this member's broker
// EndpointSlices leaves it (at most maxPerNamespace for all the namespace's exports), and limited, saying what is
// left out, nil when nothing is.
func Share(slices []discoveryv1.EndpointSlice, n int, namespace string, maxPerNamespace int) (kept []discoveryv1.EndpointSlice, limited *Limited) {
	if n >= len(slices) {
		return slices, nil
	}
	return slices[:n], &Limited{Reason: ReasonNamespaceLimit, Message: fmt.Sprintf(
		"Published the first %d of %d EndpointSlices by name: the exports of namespace %s may use at most %d of this "+
			"member's EndpointSlices on the broker (the mcs-controller flag --max-slices-per-namespace), and its other "+
			"exports use the rest.", n, len(slices), namespace, maxPerNamespace)}
}
