// Package imports builds what a member writes for one imported service from the merged export and the
// clusters' exported endpoints: the ServiceImport, the derived Service that holds a ClusterSetIP import's
// virtual IPs, the imported EndpointSlices and, where cluster.local must stand in for clusterset.local, the
// cluster-local Service and its slices. It is pure; the controller compares and writes.
//
// Imported slices carry kubernetes.io/service-name set to the derived Service's name for both import types, so
// that kube-proxy routes the virtual IP to every cluster's endpoints while the cluster.local Service of the same
// name in an exporting cluster never sees imported endpoints. Headless imports get no derived Service; their
// slices are found through multicluster.kubernetes.io/service-name.
package imports

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/names"
)

// defaultClientIPTimeout is the API server's default for sessionAffinityConfig.clientIP.timeoutSeconds; the
// derived Service spells it out so that the stored object equals the desired one.
const defaultClientIPTimeout = 10800

// Source is one exported slice of the service and the cluster it comes from.
type Source struct {
	Cluster string
	Slice   discoveryv1.EndpointSlice
}

// ServiceImport is the desired ServiceImport. derived is the derived Service as stored (nil when there is none
// yet): its allocated IPs and families become spec.ips and spec.ipFamilies, so both stay stable for its life.
// This implementation always writes EndpointSlices, so status.endpointSliceObjects is Present, as the KEP asks
// an implementation that does to publish. Its labels are the exported ones and names.LabelImportManagedBy, the
// mark that tells the controller's ServiceImports from another implementation's.
func ServiceImport(svc types.NamespacedName, m merge.Result, derived *corev1.Service) *mcsv1beta1.ServiceImport {
	labels := maps.Clone(m.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[names.LabelImportManagedBy] = names.ManagedBy
	si := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name, Labels: labels, Annotations: m.Annotations},
		Spec:       *m.Spec.DeepCopy(),
		Status:     mcsv1beta1.ServiceImportStatus{EndpointSliceObjects: mcsv1beta1.EndpointSliceObjectsPresent},
	}
	if si.Spec.Ports == nil {
		si.Spec.Ports = []mcsv1beta1.ServicePort{}
	}
	for _, c := range m.Clusters {
		si.Status.Clusters = append(si.Status.Clusters, mcsv1beta1.ClusterStatus{Cluster: c})
	}
	if m.Spec.Type == mcsv1beta1.ClusterSetIP && derived != nil && len(derived.Spec.ClusterIPs) > 0 {
		si.Spec.IPs = slices.Clone(derived.Spec.ClusterIPs)
		si.Spec.IPFamilies = slices.Clone(derived.Spec.IPFamilies)
	}
	return si
}

// Served narrows a ClusterSetIP import to the IP families this cluster allocates ClusterIPs from (its service
// CIDRs), in this cluster's order, its primary family first: the derived Service cannot hold a VIP of any other
// family, and no exporter's order decides which family is primary here. served nil means unknown, and narrows
// nothing. Headless imports carry pod addresses, which no service CIDR limits.
//
// derived is the derived Service as stored (nil when there is none): its VIP stays for the life of the import.
// Its primary family, which the API server never changes, stays first while the import has it. While an export
// that shares no family with the others was left out of the intersection (merge.Result.FamilyDisjoint), or the
// exports share none this cluster serves, it stays too: a family mismatch, by mistake or by a hostile member,
// never deletes an existing ClusterSetIP. Exports that share families narrow the import to them, as the SPEC's
// intersection says, even when that changes the VIP's family.
func Served(m merge.Result, served []corev1.IPFamily, derived *corev1.Service) merge.Result {
	if m.Spec.Type != mcsv1beta1.ClusterSetIP {
		return m
	}
	m.Spec = *m.Spec.DeepCopy()
	if served != nil {
		exported := m.Spec.IPFamilies
		m.Spec.IPFamilies = slices.DeleteFunc(slices.Clone(served), func(f corev1.IPFamily) bool { return !slices.Contains(exported, f) })
	}
	if derived != nil && len(derived.Spec.IPFamilies) > 0 {
		primary := derived.Spec.IPFamilies[0]
		conflict := slices.ContainsFunc(m.Conflicts, func(c merge.Conflict) bool {
			return c.Reason == mcsv1beta1.ServiceExportReasonIPFamilyConflict
		})
		if slices.Contains(m.Spec.IPFamilies, primary) ||
			(conflict && (len(m.FamilyDisjoint) > 0 || len(m.Spec.IPFamilies) == 0) && (served == nil || slices.Contains(served, primary))) {
			others := slices.DeleteFunc(m.Spec.IPFamilies, func(f corev1.IPFamily) bool { return f == primary })
			m.Spec.IPFamilies = append([]corev1.IPFamily{primary}, others...)
		}
	}
	if len(m.Spec.IPFamilies) == 0 {
		m.Spec.IPFamilies = nil
	}
	return m
}

// ReadyResolvesMessage is the message of a Ready condition the controller checked against this cluster's DNS.
const ReadyResolvesMessage = "The service's IPs and endpoints are programmed in this cluster, and its DNS answers the service."

// Ready is the ServiceImport Ready condition of si, the desired import narrowed to this cluster's families, once
// its imported slices are programmed (stored and seen in the controller's cache; the controller writes no status
// before): exported are the families the exports share before that narrowing. A Headless import is ready then,
// a ClusterSetIP one once its virtual IPs are allocated too; one whose families this cluster cannot serve never is.
func Ready(si *mcsv1beta1.ServiceImport, exported []corev1.IPFamily, generation int64) metav1.Condition {
	c := metav1.Condition{
		Type: string(mcsv1beta1.ServiceImportConditionReady), Status: metav1.ConditionTrue,
		Reason: string(mcsv1beta1.ServiceImportReasonReady), Message: "The service's IPs and endpoints are programmed in this cluster.",
		ObservedGeneration: generation,
	}
	clusterSetIP := si.Spec.Type == mcsv1beta1.ClusterSetIP
	switch {
	case clusterSetIP && len(exported) == 0:
		c.Status, c.Reason = metav1.ConditionFalse, string(mcsv1beta1.ServiceImportReasonIPFamilyNotSupported)
		c.Message = "The service exports share no IP family."
	case clusterSetIP && len(si.Spec.IPFamilies) == 0:
		c.Status, c.Reason = metav1.ConditionFalse, string(mcsv1beta1.ServiceImportReasonIPFamilyNotSupported)
		c.Message = fmt.Sprintf("This cluster serves none of the service's IP families %v.", exported)
	case clusterSetIP && len(si.Spec.IPs) == 0:
		c.Status, c.Reason = metav1.ConditionFalse, string(mcsv1beta1.ServiceImportReasonPending)
		c.Message = "Waiting for the cluster-set IPs to be allocated."
	}
	return c
}

// DerivedService is the desired selector-less ClusterIP Service of a ClusterSetIP import, owned by owner (the
// ServiceImport); nil when the import needs none (Headless, or no common IP family). Fields the API server would
// default are spelled out.
func DerivedService(svc types.NamespacedName, m merge.Result, owner []metav1.OwnerReference) *corev1.Service {
	if m.Spec.Type != mcsv1beta1.ClusterSetIP || len(m.Spec.IPFamilies) == 0 || len(m.Spec.Ports) == 0 {
		return nil
	}
	policy := corev1.IPFamilyPolicySingleStack
	if len(m.Spec.IPFamilies) > 1 {
		policy = corev1.IPFamilyPolicyPreferDualStack
	}
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace, Name: names.DerivedServiceName(svc.Namespace, svc.Name),
			Labels:          map[string]string{names.LabelManagedBy: names.ManagedBy, mcsv1beta1.LabelServiceName: svc.Name},
			OwnerReferences: owner,
		},
		Spec: corev1.ServiceSpec{
			Type:            corev1.ServiceTypeClusterIP,
			IPFamilyPolicy:  &policy,
			IPFamilies:      slices.Clone(m.Spec.IPFamilies),
			SessionAffinity: m.Spec.SessionAffinity,
		},
	}
	s.Spec.Ports = servicePorts(m.Spec.Ports)
	switch s.Spec.SessionAffinity {
	case "", corev1.ServiceAffinityNone:
		s.Spec.SessionAffinity = corev1.ServiceAffinityNone
	case corev1.ServiceAffinityClientIP:
		s.Spec.SessionAffinityConfig = m.Spec.SessionAffinityConfig.DeepCopy()
		if s.Spec.SessionAffinityConfig == nil || s.Spec.SessionAffinityConfig.ClientIP == nil {
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{}}
		}
		if s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil {
			s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = ptr.To[int32](defaultClientIPTimeout)
		}
	}
	return s
}

// servicePorts are an import's ports as a Service's, each targeting its own number as the API server would
// default it.
func servicePorts(ps []mcsv1beta1.ServicePort) []corev1.ServicePort {
	var out []corev1.ServicePort
	for _, p := range ps {
		out = append(out, corev1.ServicePort{
			Name: p.Name, Protocol: p.Protocol, AppProtocol: p.AppProtocol, Port: p.Port,
			TargetPort: intstr.FromInt32(p.Port),
		})
	}
	return out
}

// ClusterLocal is what reflects an import into this cluster's own cluster.local zone, for clusters whose DNS
// cannot be changed to serve clusterset.local (the controller's --cluster-local-services): a selector-less
// headless Service named names.ClusterLocalServiceName, and EndpointSlices labelled with its name, from which
// stock DNS answers <name>.<namespace>.svc.cluster.local. A ClusterSetIP import's slices hold its ClusterSetIPs,
// one slice per family, so that the name answers what <svc>.<namespace>.svc.clusterset.local answers, and
// kube-proxy routes it through the derived Service (a headless Service gets no rules of its own). A Headless
// import's slices are copies of its imported ones, so that the name answers every cluster's ready pod addresses
// and <hostname>.<name>.<namespace>.svc.cluster.local each endpoint with a hostname. si is the desired import
// (spec.ips filled in), imported its desired slices, owner the stored ServiceImport.
func ClusterLocal(si *mcsv1beta1.ServiceImport, imported []discoveryv1.EndpointSlice, owner []metav1.OwnerReference) (*corev1.Service, []discoveryv1.EndpointSlice) {
	name := names.ClusterLocalServiceName(si.Namespace, si.Name)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: si.Namespace, Name: name, OwnerReferences: owner,
			Labels: map[string]string{names.LabelManagedBy: names.ManagedBy, names.LabelClusterLocalOf: si.Name},
		},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: corev1.ClusterIPNone, Ports: servicePorts(si.Spec.Ports)},
	}
	slice := func(base string, family discoveryv1.AddressType, endpoints []discoveryv1.Endpoint, ports []discoveryv1.EndpointPort) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: si.Namespace, Name: names.ClusterLocalSliceName(base), OwnerReferences: owner,
				Labels: map[string]string{
					discoveryv1.LabelManagedBy:   names.ManagedBy,
					discoveryv1.LabelServiceName: name,
					names.LabelClusterLocalOf:    si.Name,
				},
			},
			AddressType: family, Endpoints: endpoints, Ports: ports,
		}
	}
	var out []discoveryv1.EndpointSlice
	if si.Spec.Type == mcsv1beta1.Headless {
		for i := range imported {
			s := imported[i].DeepCopy()
			out = append(out, slice(s.Name, s.AddressType, s.Endpoints, s.Ports))
		}
		return svc, out
	}
	for i, ip := range si.Spec.IPs {
		family := discoveryv1.AddressTypeIPv4
		if i < len(si.Spec.IPFamilies) && si.Spec.IPFamilies[i] == corev1.IPv6Protocol {
			family = discoveryv1.AddressTypeIPv6
		}
		var ports []discoveryv1.EndpointPort
		for _, p := range si.Spec.Ports {
			ports = append(ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Port: ptr.To(p.Port), AppProtocol: p.AppProtocol})
			if p.Protocol != "" {
				ports[len(ports)-1].Protocol = ptr.To(p.Protocol)
			}
		}
		endpoint := discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
		out = append(out, slice(si.Name+"-"+strings.ToLower(string(family)), family, []discoveryv1.Endpoint{endpoint}, defaultPorts(ports)))
	}
	return svc, out
}

// The ServiceImport conditions that tell which exporters this member does not take as they are.
const (
	// ConditionStale is True while an exporter's control plane is lost (its broker Lease lapsed) but its endpoints
	// still answer from this member: they stay in use as last published.
	ConditionStale = "Stale"
	// ReasonControlPlaneLost is the reason of ConditionStale.
	ReasonControlPlaneLost = "ControlPlaneLost"
	// ConditionUnreachable is True while an exporter's endpoints do not answer from this member: they are
	// imported not ready, so that neither kube-proxy nor DNS uses them here, whatever the exporter's Lease says.
	ConditionUnreachable = "Unreachable"
	// ReasonDataPlaneUnreachable is the reason of ConditionUnreachable.
	ReasonDataPlaneUnreachable = "DataPlaneUnreachable"
)

// ConditionClusterLocalService is the ServiceImport condition that says whether the import is reflected into
// cluster.local; the controller sets it only with --cluster-local-services.
const ConditionClusterLocalService = "ClusterLocalService"

// ClusterLocalCondition is the ClusterLocalService condition of si: True once its cluster-local Service is
// written, False with reason NameInUse while a Service the controller does not own has the name.
func ClusterLocalCondition(si *mcsv1beta1.ServiceImport, nameInUse bool, generation int64) metav1.Condition {
	name := names.ClusterLocalServiceName(si.Namespace, si.Name)
	c := metav1.Condition{
		Type: ConditionClusterLocalService, Status: metav1.ConditionTrue, Reason: "Reflected",
		Message:            fmt.Sprintf("Reflected into this cluster's DNS as Service %s.", name),
		ObservedGeneration: generation,
	}
	if nameInUse {
		c.Status, c.Reason = metav1.ConditionFalse, "NameInUse"
		c.Message = fmt.Sprintf("Service %s/%s exists and is not managed by %s: the import is not reflected into this cluster's DNS.",
			si.Namespace, name, names.ManagedBy)
	}
	return c
}

// Slices are the desired imported EndpointSlices, one per source slice, owned by owner (the ServiceImport), with
// their ports as the merged import has them (merge.SlicePorts), so that kube-proxy matches them to the derived
// Service's ports. The result is sorted by name.
func Slices(svc types.NamespacedName, sources []Source, ports merge.SlicePorts, owner []metav1.OwnerReference) []discoveryv1.EndpointSlice {
	derived := names.DerivedServiceName(svc.Namespace, svc.Name)
	out := make([]discoveryv1.EndpointSlice, 0, len(sources))
	for _, src := range sources {
		s := src.Slice.DeepCopy()
		s.Ports = ports.Apply(src.Cluster, s.Ports)
		out = append(out, discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: svc.Namespace, Name: names.ImportedSliceName(svc.Name, src.Cluster, s.Name),
				Labels: map[string]string{
					mcsv1beta1.LabelServiceName:   svc.Name,
					mcsv1beta1.LabelSourceCluster: names.LabelValue(src.Cluster),
					discoveryv1.LabelManagedBy:    names.ManagedBy,
					discoveryv1.LabelServiceName:  derived,
				},
				Annotations:     sliceAnnotations(src),
				OwnerReferences: owner,
			},
			AddressType: s.AddressType,
			Endpoints:   s.Endpoints,
			Ports:       defaultPorts(s.Ports),
		})
	}
	slices.SortFunc(out, func(a, b discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// sliceAnnotations are an imported slice's annotations: its source cluster's id and, when the source slice carries
// a valid one, the time of the change in the exporting cluster that made it what it is (kube-proxy's network
// programming latency then spans the whole way from that change).
func sliceAnnotations(src Source) map[string]string {
	a := map[string]string{names.AnnotationClusterID: src.Cluster}
	if t, ok := src.Slice.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
		if _, err := time.Parse(time.RFC3339Nano, t); err == nil {
			a[corev1.EndpointsLastChangeTriggerTime] = t
		}
	}
	return a
}

// defaultPorts fills in what the API server defaults on EndpointSlice ports.
func defaultPorts(ps []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	for i := range ps {
		if ps[i].Name == nil {
			ps[i].Name = ptr.To("")
		}
		if ps[i].Protocol == nil {
			ps[i].Protocol = ptr.To(corev1.ProtocolTCP)
		}
	}
	return ps
}

// Owner is the owner reference to a stored ServiceImport, whose API version (v1beta1 or, on older servers,
// v1alpha1) is apiVersion. The import's derived Service and slices carry it, so that deleting the import, by
// anyone, deletes them too.
func Owner(si *mcsv1beta1.ServiceImport, apiVersion string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{
		APIVersion: apiVersion, Kind: mcsv1beta1.ServiceImportKindName,
		Name: si.Name, UID: si.UID, Controller: ptr.To(true),
	}}
}

// ReasonEndpointSlicesMissing is the reason of a Ready condition that is False because the EndpointSlices an
// exporter's record counts (see Missing) did not come within the time they take, rather than Pending: they may
// never come.
const ReasonEndpointSlicesMissing = "EndpointSlicesMissing"

// Missing says which live exporters' EndpointSlices are not all among sources yet, or returns "" when none is
// missing: a record arrives on its own, its slices a moment later, and an import that is Ready in between would
// answer without them (a headless name NXDOMAIN). self, this cluster, publishes from the local truth and is never
// missing; an exporter whose record does not count its slices (Slices -1), or that is not alive, is not waited for,
// and neither is one that counts more than admit.MaxSlicesPerExport: no member takes more, so that count is wrong.
func Missing(exports []merge.Export, sources []Source, self string, alive func(cluster string) bool) string {
	have := map[string]int{}
	for _, s := range sources {
		have[s.Cluster]++
	}
	var missing []string
	for _, e := range exports {
		if e.Cluster == self || e.Slices < 0 || e.Slices > admit.MaxSlicesPerExport || !alive(e.Cluster) ||
			have[e.Cluster] >= e.Slices {
			continue
		}
		missing = append(missing, fmt.Sprintf("%s (%d of %d EndpointSlices)", e.Cluster, have[e.Cluster], e.Slices))
	}
	if len(missing) == 0 {
		return ""
	}
	slices.Sort(missing)
	return "the endpoints of " + strings.Join(missing, ", ")
}
