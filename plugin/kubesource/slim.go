package kubesource

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unique"
	"unsafe"
	"weak"

	"github.com/coredns/coredns/plugin/kubernetes/object"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/clusterid"
	"vksfleet.dev/fleet/mcs/locality"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/plugin/zone"
)

// The informers keep no Kubernetes object: their transforms turn each one into the few fields the zone reads,
// already parsed, as CoreDNS's kubernetes plugin does (plugin/kubernetes/object, whose Empty gives the
// metav1.Object methods nothing calls). The API object is garbage as soon as it is transformed, and the informer
// store holds the slim object only: there is no second copy. Strings repeated across objects (namespaces,
// cluster ids, port names and protocols) are interned, so that thousands of objects share one copy of each.

// meta is the part of metav1.Object the informer machinery reads: the store key and the resource version.
type meta struct {
	namespace, name, version string
}

func slimMeta(in *metav1.ObjectMeta) meta {
	return meta{namespace: intern(in.Namespace), name: in.Name, version: in.ResourceVersion}
}

// GetNamespace implements metav1.Object.
func (m *meta) GetNamespace() string { return m.namespace }

// SetNamespace implements metav1.Object; slim objects are never changed.
func (m *meta) SetNamespace(string) {}

// GetName implements metav1.Object.
func (m *meta) GetName() string { return m.name }

// SetName implements metav1.Object; slim objects are never changed.
func (m *meta) SetName(string) {}

// GetResourceVersion implements metav1.Object.
func (m *meta) GetResourceVersion() string { return m.version }

// SetResourceVersion implements metav1.Object; slim objects are never changed.
func (m *meta) SetResourceVersion(string) {}

// serviceImport is what the informer keeps of a ServiceImport of either served version (v1alpha1 and v1beta1
// share the schema of these fields).
type serviceImport struct {
	object.Empty
	meta
	headless bool
	ips      []netip.Addr
	ports    []zone.Port
	// preferred is the member's ranking of the import's clusters, from the locality annotation.
	preferred []string
}

// DeepCopyObject implements runtime.Object. The copy shares the slices, which are never modified.
func (s *serviceImport) DeepCopyObject() runtime.Object { c := *s; return &c }

// endpointSlice is what the informer keeps of an imported EndpointSlice: its service, source cluster and
// endpoints, each carrying the cluster and the slice's ports.
type endpointSlice struct {
	object.Empty
	meta
	service, cluster string
	endpoints        []zone.Endpoint
	// changed is the time of the change in the exporting cluster that made the slice what it is
	// (endpoints.kubernetes.io/last-change-trigger-time, which the controller carries); zero when unknown.
	changed time.Time
}

// DeepCopyObject implements runtime.Object. The copy shares the slices, which are never modified.
func (s *endpointSlice) DeepCopyObject() runtime.Object { c := *s; return &c }

// namespace is what the informer keeps of a Namespace: its name.
type namespace struct {
	object.Empty
	meta
}

// DeepCopyObject implements runtime.Object.
func (n *namespace) DeepCopyObject() runtime.Object { c := *n; return &c }

// slimServiceImport turns a ServiceImport of either version into a *serviceImport.
func slimServiceImport(obj any) (any, error) {
	switch in := obj.(type) {
	case *mcsv1beta1.ServiceImport:
		ports := make([]zone.Port, 0, len(in.Spec.Ports))
		for _, p := range in.Spec.Ports {
			ports = append(ports, port(p.Name, string(p.Protocol), p.Port))
		}
		return newServiceImport(&in.ObjectMeta, in.Spec.Type == mcsv1beta1.Headless, in.Spec.IPs, internPorts(ports)), nil
	case *mcsv1alpha1.ServiceImport:
		ports := make([]zone.Port, 0, len(in.Spec.Ports))
		for _, p := range in.Spec.Ports {
			ports = append(ports, port(p.Name, string(p.Protocol), p.Port))
		}
		return newServiceImport(&in.ObjectMeta, in.Spec.Type == mcsv1alpha1.Headless, in.Spec.IPs, internPorts(ports)), nil
	}
	return obj, nil // tombstones
}

// newServiceImport parses what the zone reads of a ServiceImport: IPs that do not parse are skipped, and a
// locality ranking that does not parse ranks nothing.
func newServiceImport(m *metav1.ObjectMeta, headless bool, ips []string, ports []zone.Port) *serviceImport {
	out := &serviceImport{meta: slimMeta(m), headless: headless, ports: ports}
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil {
			out.ips = append(out.ips, a)
		}
	}
	if v, ok := m.Annotations[names.AnnotationLocality]; ok {
		if a, err := locality.Decode(v); err == nil && len(a.DNSClusters) > 0 {
			for _, c := range a.DNSClusters {
				out.preferred = append(out.preferred, intern(c))
			}
		}
	}
	return out
}

// Reasons the source leaves something out, as the Observer's Dropped reports them.
const (
	// DropInvalidClusterID is an imported slice whose source cluster id fails cluster-id validation: its
	// endpoints would be named under it.
	DropInvalidClusterID = "invalid_cluster_id"
	// DropInvalidHostname is an endpoint whose hostname is not a DNS label: its own name would be made of it.
	DropInvalidHostname = "invalid_hostname"
	// DropUnpackableRecord is a record of the index that does not pack (see zone.Index.Apply).
	DropUnpackableRecord = "unpackable_record"
	// DropBuildPanic is a service whose index build panicked: it keeps its last good entry.
	DropBuildPanic = "build_panic"
)

// dropped is what slimEndpointSlice left out of one slice: n items for reason, and why.
type dropped struct {
	reason string
	n      int
	why    error
}

// slimEndpointSlice turns an EndpointSlice into an *endpointSlice. Ports without a number are skipped, a port
// without a protocol is TCP, an endpoint of unknown readiness is ready, and addresses that do not parse are
// skipped. Whoever may write an EndpointSlice in a namespace with an import, or a member through the broker,
// writes what comes here, and it becomes DNS names in every member: a slice whose source cluster id is not a
// valid cluster id keeps no endpoint, and an endpoint whose hostname is not a DNS label is left out; what is
// left out is returned, for the caller to report.
func slimEndpointSlice(obj any) (any, []dropped) {
	in, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	out := &endpointSlice{
		meta:    slimMeta(&in.ObjectMeta),
		service: in.Labels[mcsv1beta1.LabelServiceName],
	}
	cluster := sourceCluster(&in.ObjectMeta)
	if cluster == "" {
		return out, nil // not an imported slice: toService ignores it
	}
	if err := clusterid.Validate(cluster); err != nil {
		return out, []dropped{{DropInvalidClusterID, 1, err}}
	}
	out.cluster = intern(cluster)
	if t, err := time.Parse(time.RFC3339Nano, in.Annotations[corev1.EndpointsLastChangeTriggerTime]); err == nil {
		out.changed = t
	}
	var ports []zone.Port
	for _, p := range in.Ports {
		if p.Port == nil {
			continue
		}
		name, protocol := "", "TCP"
		if p.Name != nil {
			name = *p.Name
		}
		if p.Protocol != nil {
			protocol = string(*p.Protocol)
		}
		ports = append(ports, port(name, protocol, *p.Port))
	}
	ports = internPorts(ports)
	var drops []dropped
	out.endpoints = make([]zone.Endpoint, 0, len(in.Endpoints))
	for _, e := range in.Endpoints {
		ep := zone.Endpoint{Cluster: out.cluster, Ports: ports, Ready: e.Conditions.Ready == nil || *e.Conditions.Ready}
		if e.Hostname != nil {
			if errs := validation.IsDNS1123Label(*e.Hostname); len(errs) > 0 {
				if len(drops) == 0 {
					drops = append(drops, dropped{DropInvalidHostname, 0, fmt.Errorf("hostname %q: %s", *e.Hostname, strings.Join(errs, "; "))})
				}
				drops[0].n++
				continue
			}
			ep.Hostname = *e.Hostname
		}
		if len(e.Addresses) > 0 {
			ep.Addresses = make([]netip.Addr, 0, len(e.Addresses))
		}
		for _, a := range e.Addresses {
			if addr, err := netip.ParseAddr(a); err == nil {
				ep.Addresses = append(ep.Addresses, addr)
			}
		}
		out.endpoints = append(out.endpoints, ep)
	}
	return out, drops
}

// sourceCluster returns the id of an imported slice's source cluster, which its DNS names carry. The
// source-cluster label can only hold names.LabelValue(id), shortened and hashed for an id longer than a label
// value, so the full id comes from the annotation the controller writes beside it. The annotation counts only
// when it agrees with the label, which stays the normative field; a slice without it is named by its label, and
// a slice without the label is not an imported slice. Anyone can compute the label of any string, so the id is
// returned as found: the caller validates it.
func sourceCluster(m *metav1.ObjectMeta) string {
	label := m.Labels[mcsv1beta1.LabelSourceCluster]
	if id, ok := m.Annotations[names.AnnotationClusterID]; ok && label != "" && names.LabelValue(id) == label {
		return id
	}
	return label
}

// slimNamespace turns a Namespace into a *namespace.
func slimNamespace(obj any) (any, error) {
	in, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &namespace{meta: slimMeta(&in.ObjectMeta)}, nil
}

func port(name, protocol string, number int32) zone.Port {
	return zone.Port{Name: intern(name), Protocol: intern(protocol), Port: uint16(number)}
}

// intern returns the canonical copy of s.
func intern(s string) string { return unique.Make(s).Value() }

// portLists holds one copy of each list of ports in use, by content (see portsKey): most services of a clusterset
// declare one of a few lists (http/80, grpc/9090...), and thousands of imports and slices then share it. The
// table holds each list weakly, and a cleanup removes the entry of a list that nothing holds any more: anyone who
// may write an EndpointSlice (or a member, through the broker) can churn port numbers, and a table that kept
// every list seen would grow until CoreDNS runs out of memory (review finding #12).
var portLists = struct {
	sync.Mutex
	m map[string]weakPorts
}{m: map[string]weakPorts{}}

// weakPorts is an entry of portLists: a weak pointer to the list's first port, which is where its own allocation
// starts, and its length.
type weakPorts struct {
	first weak.Pointer[zone.Port]
	n     int
}

// internPorts returns the shared copy of ports; the caller must not modify either.
func internPorts(ports []zone.Port) []zone.Port {
	if len(ports) == 0 {
		return nil
	}
	key := portsKey(ports)
	portLists.Lock()
	defer portLists.Unlock()
	if w, ok := portLists.m[key]; ok {
		if first := w.first.Value(); first != nil {
			// The weak pointer only gives the first port back; the list is the n ports allocated from there.
			return unsafe.Slice(first, w.n)
		}
	}
	shared := slices.Clip(slices.Clone(ports)) // an allocation of its own, which the cleanup watches
	portLists.m[key] = weakPorts{first: weak.Make(&shared[0]), n: len(shared)}
	goruntime.AddCleanup(&shared[0], forgetPorts, key)
	return shared
}

// forgetPorts removes the entry of a list that has been collected, unless the key has a live list again.
func forgetPorts(key string) {
	portLists.Lock()
	defer portLists.Unlock()
	if w, ok := portLists.m[key]; ok && w.first.Value() == nil {
		delete(portLists.m, key)
	}
}

// portsKey encodes a list of ports as a string, unambiguously: each name and protocol with its length.
func portsKey(ports []zone.Port) string {
	var b []byte
	for _, p := range ports {
		b = binary.AppendUvarint(b, uint64(len(p.Name)))
		b = append(b, p.Name...)
		b = binary.AppendUvarint(b, uint64(len(p.Protocol)))
		b = append(b, p.Protocol...)
		b = binary.BigEndian.AppendUint16(b, p.Port)
	}
	return string(b)
}

var (
	_ cache.TransformFunc = slimServiceImport
	_ cache.TransformFunc = slimNamespace
	_ metav1.Object       = &serviceImport{}
	_ metav1.Object       = &endpointSlice{}
	_ metav1.Object       = &namespace{}
)
