// Package broker is the clusterset's shared state on the broker, which may be any Kubernetes API server with the
// mcs-api CRDs. Each member owns one namespace there (names.BrokerNamespace), so RBAC can confine it to its own
// records, and writes in it:
//   - per exported service, an export record: a ServiceImport named names.RecordName whose spec is the export
//     (type, ports, IP families, session affinity, traffic policies) and whose annotations carry the ServiceExport
//     creationTimestamp (which the record's own bounds, see Precedence), the exported labels and annotations
//     (JSON), the full cluster id, the cluster's region and whether the export drains;
//   - the service's endpoints as EndpointSlices (names.BrokerSliceName, at most 100 endpoints each);
//   - a Lease named names.LeaseName, renewed while the member's controller runs.
//
// Every object carries app.kubernetes.io/managed-by=names.ManagedBy, the service's namespace and name and the
// source cluster as labels, so that members watch exactly these objects and map each to its service.
package broker

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/names"
)

// Selector selects every object members write on the broker.
var Selector = labels.SelectorFromSet(labels.Set{names.LabelManagedBy: names.ManagedBy})

// Labels are the labels of a cluster's broker objects for one service.
func Labels(clusterID string, svc types.NamespacedName) map[string]string {
	return map[string]string{
		names.LabelManagedBy:          names.ManagedBy,
		names.LabelServiceNamespace:   svc.Namespace,
		mcsv1beta1.LabelServiceName:   svc.Name,
		mcsv1beta1.LabelSourceCluster: names.LabelValue(clusterID),
	}
}

// ServiceOf returns the service a broker object belongs to, from its labels; ok is false for other objects.
func ServiceOf(obj metav1.Object) (types.NamespacedName, bool) {
	l := obj.GetLabels()
	key := types.NamespacedName{Namespace: l[names.LabelServiceNamespace], Name: l[mcsv1beta1.LabelServiceName]}
	return key, l[names.LabelManagedBy] == names.ManagedBy && key.Namespace != "" && key.Name != ""
}

// ClusterOf returns the full id of the cluster that wrote a broker object.
func ClusterOf(obj metav1.Object) string { return obj.GetAnnotations()[names.AnnotationClusterID] }

// Record is the broker object for a cluster's export of svc.
func Record(svc types.NamespacedName, e merge.Export) (*mcsv1beta1.ServiceImport, error) {
	ann := map[string]string{
		names.AnnotationClusterID:     e.Cluster,
		names.AnnotationExportCreated: e.Created.UTC().Format(time.RFC3339Nano),
	}
	if e.Region != "" {
		ann[names.AnnotationRegion] = e.Region
	}
	if e.Draining {
		ann[names.AnnotationDrain] = "true"
	}
	if e.Slices >= 0 {
		ann[names.AnnotationSlices] = strconv.Itoa(e.Slices)
	}
	for key, m := range map[string]map[string]string{
		names.AnnotationExportedLabels: e.Labels, names.AnnotationExportedAnnotations: e.Annotations,
	} {
		if len(m) == 0 {
			continue
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		ann[key] = string(b)
	}
	spec := *e.Spec.DeepCopy()
	spec.IPs = nil
	if spec.Ports == nil {
		spec.Ports = []mcsv1beta1.ServicePort{}
	}
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: names.BrokerNamespace(e.Cluster), Name: names.RecordName(svc.Namespace, svc.Name),
			Labels: Labels(e.Cluster, svc), Annotations: ann,
		},
		Spec: spec,
	}, nil
}

// PrecedenceAllowance is how much older than its broker record an export may rank (Precedence). It covers the
// whole seconds both times are kept in, the delay of a publish that waits in a busy controller's queue or for its
// client rate limit, and the usual skew between the member's clock and the broker's; it is all a member can gain
// by claiming an older export than it has.
const PrecedenceAllowance = 5 * time.Second

// Precedence is the time an export ranks by in the merge (merge.Export.Created, oldest first): its ServiceExport's
// creationTimestamp, exported, as the member claims it, but no earlier than PrecedenceAllowance before the broker
// record's creationTimestamp, recorded, which the broker's API server sets and no member can write. A member that
// claims 1970 or 0001-01-01 so ranks as if it had exported PrecedenceAllowance before it created its record, and
// loses, whatever it claims, to every record created earlier than that. The cost is an honest export older than its record: one published
// late (its controller was down or the broker unreachable when the ServiceExport appeared), by a member that
// joins with existing ServiceExports, or published again on a broker that lost its records, ranks by its record,
// as if exported then. That changes only which of several disagreeing exports wins (and every exporter shows
// that Conflict); it withdraws nothing, and a member that joins late no longer takes over the services others
// already export. A zero recorded time (an object no API server stored) bounds nothing.
func Precedence(exported, recorded time.Time) time.Time {
	if recorded.IsZero() {
		return exported
	}
	if floor := recorded.Add(-PrecedenceAllowance); exported.Before(floor) {
		return floor
	}
	return exported
}

// ParseRecord reads an export back from its broker object. Its Created is the export's Precedence: the
// export-created annotation bounded by the record's creationTimestamp.
func ParseRecord(si *mcsv1beta1.ServiceImport) (merge.Export, error) {
	ann := si.GetAnnotations()
	e := merge.Export{
		Cluster: ann[names.AnnotationClusterID], Spec: *si.Spec.DeepCopy(),
		Region: ann[names.AnnotationRegion], Draining: ann[names.AnnotationDrain] == "true",
	}
	if e.Cluster == "" {
		return e, fmt.Errorf("broker record %s/%s has no %s annotation", si.Namespace, si.Name, names.AnnotationClusterID)
	}
	created, err := time.Parse(time.RFC3339Nano, ann[names.AnnotationExportCreated])
	if err != nil {
		return e, fmt.Errorf("broker record %s/%s: bad %s: %w", si.Namespace, si.Name, names.AnnotationExportCreated, err)
	}
	e.Created = Precedence(created, si.CreationTimestamp.Time)
	e.Slices = -1
	if v, ok := ann[names.AnnotationSlices]; ok {
		if e.Slices, err = strconv.Atoi(v); err != nil || e.Slices < 0 {
			return e, fmt.Errorf("broker record %s/%s: bad %s %q", si.Namespace, si.Name, names.AnnotationSlices, v)
		}
	}
	for key, m := range map[string]*map[string]string{
		names.AnnotationExportedLabels: &e.Labels, names.AnnotationExportedAnnotations: &e.Annotations,
	} {
		if v, ok := ann[key]; ok {
			if err := json.Unmarshal([]byte(v), m); err != nil {
				return e, fmt.Errorf("broker record %s/%s: bad %s: %w", si.Namespace, si.Name, key, err)
			}
		}
	}
	return e, nil
}

// Slice is the broker object for one of a cluster's exported slices of svc (as export.Slices made it).
func Slice(clusterID string, svc types.NamespacedName, s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	out := s.DeepCopy()
	out.Namespace = names.BrokerNamespace(clusterID)
	out.Labels = Labels(clusterID, svc)
	// The endpointslice controllers leave slices alone unless their managed-by is theirs; this one is ours.
	out.Labels[discoveryv1.LabelManagedBy] = names.ManagedBy
	out.Annotations = map[string]string{names.AnnotationClusterID: clusterID}
	// The time of the change that made the source slice what it is travels with it, so that every importing
	// member's kube-proxy measures the network programming latency from the change in the exporting cluster.
	if t, ok := s.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
		out.Annotations[corev1.EndpointsLastChangeTriggerTime] = t
	}
	return out
}
