// Package admit decides what of another cluster's or a namespace user's data the controller takes in. Everything
// on the broker was written by some member, and a ServiceExport by any user of its namespace; both reach every
// member's ServiceImports, EndpointSlices and DNS. Values are checked here, once, where they enter: what fails
// is dropped or refused with a reason, so that one bad value never stops the rest of the clusterset. It is pure.
package admit

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/clusterid"
	"vksfleet.dev/fleet/mcs/names"
)

// Limits on what one export may carry. They are far above what a real Service has, and low enough that no member
// can make every other member's controller and DNS hold unbounded data for it.
const (
	// MaxPorts bounds the ports of one export, and so of the union the merge forms from a few exports.
	MaxPorts = 100
	// MaxEndpointsPerSlice is the API server's own limit on an EndpointSlice's endpoints.
	MaxEndpointsPerSlice = 1000
	// MaxSlicesPerExport bounds the EndpointSlices one cluster publishes for one service, whatever the endpoint
	// limits allow (SlicesPerService): 1,000 slices of the 100 endpoints an exporter puts in each are 100,000
	// endpoints.
	MaxSlicesPerExport = 1000
	// MaxExportedMetadataBytes bounds the exported labels and annotations together (keys and values), so that
	// they fit on the broker record, and on the ServiceImport next to the controller's own annotations, within
	// the API server's 256 KiB.
	MaxExportedMetadataBytes = 64 << 10
)

// Reasons a value is refused; they are the values of the controller's refusal metric's reason label.
const (
	ReasonRecord        = "InvalidRecord"
	ReasonClusterID     = "InvalidClusterID"
	ReasonMetadata      = "InvalidExportedMetadata"
	ReasonReservedKey   = "ReservedKey"
	ReasonPorts         = "InvalidPorts"
	ReasonEndpoint      = "InvalidEndpoint"
	ReasonAddressType   = "InvalidAddressType"
	ReasonTooManySlices = "TooManySlices"
	// ReasonForeignNamespace refuses a record in the broker namespace of another cluster than the one it names: a
	// member writes only in its own, so it is one member claiming to be another.
	ReasonForeignNamespace = "ForeignNamespace"
	// ReasonServiceName and ReasonNamespaceNotAllowed refuse a record for a service that no member may import: a
	// name the API server would refuse, or a namespace in the importer's denied list (AlwaysDeniedNamespaces and
	// the controller's --denied-import-namespaces).
	ReasonServiceName         = "InvalidServiceName"
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
	// The reasons of a record field the Service API would refuse (Spec).
	ReasonType                  = "InvalidServiceType"
	ReasonIPFamilies            = "InvalidIPFamilies"
	ReasonSessionAffinity       = "InvalidSessionAffinity"
	ReasonInternalTrafficPolicy = "InvalidInternalTrafficPolicy"
	ReasonTrafficDistribution   = "InvalidTrafficDistribution"
	// ReasonRegion drops a record's region that is no label value (Region).
	ReasonRegion = "InvalidRegion"
)

// AlwaysDeniedNamespaces are the namespaces no import lands in, whatever the operator configures: every cluster has
// them, they hold the control plane's own Services, and an import there would let any member answer for them.
var AlwaysDeniedNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// Problem is one refused value, with the reason and what was wrong.
type Problem struct {
	Reason  string
	Message string
}

// protocols are the protocols a Service or EndpointSlice port may have; an unset protocol means TCP.
var protocols = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}

// reservedPrefixes are the key prefixes exported metadata may not carry: the MCS API's own and this project's,
// which the controller and the DNS plugin read from ServiceImports (an exported mcs.vksfleet.dev/locality would
// steer every member's headless DNS).
var reservedPrefixes = []string{"multicluster.kubernetes.io/", "multicluster.x-k8s.io/", names.KeyPrefix}

// reserved says whether key is in a namespace the MCS API or this project keeps for itself.
func reserved(key string) bool {
	return slices.ContainsFunc(reservedPrefixes, func(p string) bool { return strings.HasPrefix(key, p) })
}

// Metadata returns the exported labels and annotations that may travel: entries with a reserved key are dropped,
// and so are labels whose key or value, and annotations whose key, Kubernetes would refuse. Past
// MaxExportedMetadataBytes, everything is dropped. Each dropped entry gives a problem; nil maps stay nil.
func Metadata(labels, annotations map[string]string) (map[string]string, map[string]string, []Problem) {
	var problems []Problem
	size := 0
	keep := func(m map[string]string, kind string, valid func(k, v string) error) map[string]string {
		if m == nil {
			return nil
		}
		out := make(map[string]string, len(m))
		for _, k := range slices.Sorted(maps.Keys(m)) {
			v := m[k]
			switch err := valid(k, v); {
			case reserved(k):
				problems = append(problems, Problem{ReasonReservedKey, fmt.Sprintf("exported %s key %q is reserved", kind, k)})
			case err != nil:
				problems = append(problems, Problem{ReasonMetadata, fmt.Sprintf("exported %s %q: %v", kind, k, err)})
			default:
				out[k] = v
				size += len(k) + len(v)
			}
		}
		return out
	}
	l := keep(labels, "label", func(k, v string) error {
		return metav1validation.ValidateLabels(map[string]string{k: v}, field.NewPath("")).ToAggregate()
	})
	// Annotation keys are checked as apimachinery's ValidateAnnotations does; its total-size rule gives way to
	// MaxExportedMetadataBytes, which counts the labels too.
	a := keep(annotations, "annotation", func(k, _ string) error {
		if errs := validation.IsQualifiedName(strings.ToLower(k)); len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	})
	if size > MaxExportedMetadataBytes {
		problems = append(problems, Problem{ReasonMetadata, fmt.Sprintf(
			"exported labels and annotations hold %d bytes, more than the %d allowed", size, MaxExportedMetadataBytes)})
		if l != nil {
			l = map[string]string{}
		}
		if a != nil {
			a = map[string]string{}
		}
	}
	return l, a, problems
}

// Ports checks the ports of a broker export record: what a valid Service has (apivalidation's rules for names,
// numbers and protocols; a name on every port when there are several; no two ports of one name or of one protocol
// and number), at most MaxPorts of them. A record whose ports fail is refused whole: a partial port list would
// silently merge into a different service.
func Ports(ports []mcsv1beta1.ServicePort) *Problem {
	bad := func(format string, args ...any) *Problem {
		return &Problem{ReasonPorts, fmt.Sprintf(format, args...)}
	}
	if len(ports) > MaxPorts {
		return bad("%d ports, more than the %d allowed", len(ports), MaxPorts)
	}
	type protoPort struct {
		proto corev1.Protocol
		port  int32
	}
	seenNames, seenPorts := map[string]bool{}, map[protoPort]bool{}
	for _, p := range ports {
		switch {
		case p.Name == "" && len(ports) > 1:
			return bad("port %d has no name, which a Service with several ports needs", p.Port)
		case p.Name != "" && len(validation.IsDNS1123Label(p.Name)) > 0:
			return bad("port name %q is not a DNS label", p.Name)
		case p.Port < 1 || p.Port > 65535:
			return bad("port %d is out of range", p.Port)
		case p.Protocol != "" && !slices.Contains(protocols, p.Protocol):
			return bad("port %d has protocol %q", p.Port, p.Protocol)
		case p.AppProtocol != nil && len(validation.IsQualifiedName(*p.AppProtocol)) > 0:
			return bad("port %d has appProtocol %q, not a qualified name", p.Port, *p.AppProtocol)
		}
		pp := protoPort{p.Protocol, p.Port}
		if pp.proto == "" {
			pp.proto = corev1.ProtocolTCP
		}
		if (p.Name != "" && seenNames[p.Name]) || seenPorts[pp] {
			return bad("port %q (%s/%d) is listed twice", p.Name, pp.proto, p.Port)
		}
		seenNames[p.Name], seenPorts[pp] = true, true
	}
	return nil
}

// Record checks the export record another cluster published for the service key, once broker.ParseRecord has
// read it and its cluster id and namespace are checked. A record is refused whole (ok false) for a service no
// member may import here (Service, with denied the importer's configured namespaces) or for a spec the Service
// API would refuse (Spec): merged in, a single bad field would be every member's derived Service, refused by its
// API server or deleted. A region that is no label value and exported labels and annotations that could not
// travel are left out (Region, Metadata), with a problem each; the rest of the export still counts.
func Record(key types.NamespacedName, e merge.Export, denied []string) (merge.Export, []Problem, bool) {
	if p := Service(key, denied); p != nil {
		return e, []Problem{*p}, false
	}
	if p := Spec(e.Spec); p != nil {
		return e, []Problem{*p}, false
	}
	var problems []Problem
	if p := Region(e.Region); p != nil {
		problems = append(problems, *p)
		e.Region = ""
	}
	var dropped []Problem
	e.Labels, e.Annotations, dropped = Metadata(e.Labels, e.Annotations)
	return e, append(problems, dropped...), true
}

// Service checks the service a broker object names (broker.ServiceOf reads it from label values, which allow
// upper case, "_" and "."): its name must be what the API server accepts as a Service's (a DNS-1035 label) and
// its namespace a namespace's (a DNS-1123 label), else every member would retry a create it refuses, forever.
// Imports never land in AlwaysDeniedNamespaces, nor in denied.
func Service(key types.NamespacedName, denied []string) *Problem {
	if msgs := validation.IsDNS1123Label(key.Namespace); len(msgs) > 0 {
		return &Problem{ReasonServiceName, fmt.Sprintf("namespace %q: %s", key.Namespace, strings.Join(msgs, "; "))}
	}
	if msgs := validation.IsDNS1035Label(key.Name); len(msgs) > 0 {
		return &Problem{ReasonServiceName, fmt.Sprintf("service name %q: %s", key.Name, strings.Join(msgs, "; "))}
	}
	if slices.Contains(AlwaysDeniedNamespaces, key.Namespace) || slices.Contains(denied, key.Namespace) {
		return &Problem{ReasonNamespaceNotAllowed, fmt.Sprintf(
			"namespace %s takes no imports (kube-system, kube-public, kube-node-lease and --denied-import-namespaces)", key.Namespace)}
	}
	return nil
}

// serviceTypes, sessionAffinities, internalTrafficPolicies and trafficDistributions are the values the
// ServiceImport and Service APIs accept. trafficDistribution's are k8s.io/api core/v1's (PreferSameZone and
// PreferSameNode need the PreferSameTrafficDistribution gate, on by default since Kubernetes 1.34): only the
// ServiceImport, a CRD, carries it, never the derived Service, so that no member's API server refuses an import
// for a value its release does not know.
var (
	serviceTypes            = []mcsv1beta1.ServiceImportType{mcsv1beta1.ClusterSetIP, mcsv1beta1.Headless}
	sessionAffinities       = []corev1.ServiceAffinity{"", corev1.ServiceAffinityNone, corev1.ServiceAffinityClientIP}
	internalTrafficPolicies = []corev1.ServiceInternalTrafficPolicy{corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal}
	trafficDistributions    = []string{corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone,
		corev1.ServiceTrafficDistributionPreferSameNode}
)

// maxClientIPTimeout is core/v1 validation's bound on sessionAffinityConfig.clientIP.timeoutSeconds (a day).
const maxClientIPTimeout = 86400

// Spec checks an export record's spec against the rules the ServiceImport CRD and the Service API apply to the
// same fields: the type (ClusterSetIP or Headless), the ports (Ports), at most two distinct IP families, each IPv4
// or IPv6 (none is allowed: the field is optional), a session affinity of None or ClientIP (or unset) whose
// config, only with ClientIP, has a timeout of 1 to 86400 s when set, and an internal traffic policy and traffic
// distribution among those Kubernetes accepts, when set. An honest exporter's record always passes: its fields
// come from a Service its own API server accepted.
func Spec(s mcsv1beta1.ServiceImportSpec) *Problem {
	if !slices.Contains(serviceTypes, s.Type) {
		return &Problem{ReasonType, fmt.Sprintf("type %q is neither %s nor %s", s.Type, mcsv1beta1.ClusterSetIP, mcsv1beta1.Headless)}
	}
	if p := Ports(s.Ports); p != nil {
		return p
	}
	if len(s.IPFamilies) > 2 {
		return &Problem{ReasonIPFamilies, fmt.Sprintf("%d IP families, more than 2", len(s.IPFamilies))}
	}
	for i, f := range s.IPFamilies {
		switch {
		case f != corev1.IPv4Protocol && f != corev1.IPv6Protocol:
			return &Problem{ReasonIPFamilies, fmt.Sprintf("IP family %q is neither %s nor %s", f, corev1.IPv4Protocol, corev1.IPv6Protocol)}
		case slices.Contains(s.IPFamilies[:i], f):
			return &Problem{ReasonIPFamilies, fmt.Sprintf("IP family %s is listed twice", f)}
		}
	}
	if p := sessionAffinity(s.SessionAffinity, s.SessionAffinityConfig); p != nil {
		return p
	}
	if p := s.InternalTrafficPolicy; p != nil && !slices.Contains(internalTrafficPolicies, *p) {
		return &Problem{ReasonInternalTrafficPolicy, fmt.Sprintf("internal traffic policy %q is neither %s nor %s",
			*p, corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal)}
	}
	if d := s.TrafficDistribution; d != nil && !slices.Contains(trafficDistributions, *d) {
		return &Problem{ReasonTrafficDistribution, fmt.Sprintf("traffic distribution %q is none of %s", *d, strings.Join(trafficDistributions, ", "))}
	}
	return nil
}

// sessionAffinity checks a session affinity and its config as core/v1 validation does, but that a ClientIP
// affinity may come without a config or timeout: the derived Service then gets the API server's default.
func sessionAffinity(a corev1.ServiceAffinity, c *corev1.SessionAffinityConfig) *Problem {
	switch {
	case !slices.Contains(sessionAffinities, a):
		return &Problem{ReasonSessionAffinity, fmt.Sprintf("session affinity %q is neither %s nor %s", a, corev1.ServiceAffinityNone, corev1.ServiceAffinityClientIP)}
	case c != nil && a != corev1.ServiceAffinityClientIP:
		return &Problem{ReasonSessionAffinity, fmt.Sprintf("a session affinity config comes with session affinity %q, not %s", a, corev1.ServiceAffinityClientIP)}
	case c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil &&
		(*c.ClientIP.TimeoutSeconds < 1 || *c.ClientIP.TimeoutSeconds > maxClientIPTimeout):
		return &Problem{ReasonSessionAffinity, fmt.Sprintf("session affinity timeout %d s is not within 1 to %d s", *c.ClientIP.TimeoutSeconds, maxClientIPTimeout)}
	}
	return nil
}

// Region checks the region an export record claims for its cluster ("" for unknown), which importers compare with
// their own (the ClusterProperty region.topology.k8s.io) to rank endpoints: it must be a label value, as a
// node's topology.kubernetes.io/region is. The exporter writes it itself: importers take the region join
// recorded in the member directory instead, and a valid claim only when they read no directory (an identity that
// reads every broker namespace).
func Region(region string) *Problem {
	if msgs := validation.IsValidLabelValue(region); len(msgs) > 0 {
		return &Problem{ReasonRegion, fmt.Sprintf("region %q is left out: %s", region, strings.Join(msgs, "; "))}
	}
	return nil
}

// ClusterID checks an id read from the broker, which any member could have written: it becomes a label of
// clusterset.local names, so it must be what clusterid.Validate accepts.
func ClusterID(id string) *Problem {
	if err := clusterid.Validate(id); err != nil {
		return &Problem{ReasonClusterID, err.Error()}
	}
	return nil
}

// Slice returns what this member takes of a slice another cluster published: its address type (IPv4 or IPv6;
// an FQDN slice is refused), its ports if they are valid, and per endpoint only addresses, conditions, hostname
// and zone, which is all an import needs. Node names, target references and deprecated topology would point at
// this cluster's own nodes and pods and mislead whoever reads the slice. Endpoints with an address that is not a
// unicast address of the slice's type, or a hostname that is not a DNS label, are dropped, as are those past
// MaxEndpointsPerSlice. ok is false when the whole slice is refused.
func Slice(s *discoveryv1.EndpointSlice) (out discoveryv1.EndpointSlice, problems []Problem, ok bool) {
	if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
		return out, []Problem{{ReasonAddressType, fmt.Sprintf("slice %s has address type %q", s.Name, s.AddressType)}}, false
	}
	if p := slicePorts(s.Ports); p != nil {
		p.Message = fmt.Sprintf("slice %s: %s", s.Name, p.Message)
		return out, []Problem{*p}, false
	}
	out = discoveryv1.EndpointSlice{ObjectMeta: *s.ObjectMeta.DeepCopy(), AddressType: s.AddressType}
	for i, e := range s.Endpoints {
		if i == MaxEndpointsPerSlice {
			problems = append(problems, Problem{ReasonEndpoint, fmt.Sprintf(
				"slice %s has %d endpoints; those past %d are dropped", s.Name, len(s.Endpoints), MaxEndpointsPerSlice)})
			break
		}
		if p := endpoint(e, s.AddressType); p != "" {
			problems = append(problems, Problem{ReasonEndpoint, fmt.Sprintf("slice %s: %s", s.Name, p)})
			continue
		}
		c := e.DeepCopy()
		out.Endpoints = append(out.Endpoints, discoveryv1.Endpoint{
			Addresses: c.Addresses, Conditions: c.Conditions, Hostname: c.Hostname, Zone: c.Zone,
		})
	}
	for _, p := range s.Ports {
		out.Ports = append(out.Ports, *p.DeepCopy())
	}
	return out, problems, true
}

// endpoint says what is wrong with an endpoint of a slice of the given address type, or "".
func endpoint(e discoveryv1.Endpoint, family discoveryv1.AddressType) string {
	if len(e.Addresses) == 0 || len(e.Addresses) > 100 {
		return fmt.Sprintf("an endpoint has %d addresses", len(e.Addresses))
	}
	for _, a := range e.Addresses {
		ip, err := netip.ParseAddr(a)
		switch {
		case err != nil || ip.Zone() != "":
			return fmt.Sprintf("address %q is not an IP address", a)
		case ip.Is4() != (family == discoveryv1.AddressTypeIPv4) || ip.Is4In6():
			return fmt.Sprintf("address %s is not of address type %s", a, family)
		case !ip.IsGlobalUnicast():
			return fmt.Sprintf("address %s is not a unicast address", a)
		}
	}
	if e.Hostname != nil && len(validation.IsDNS1123Label(*e.Hostname)) > 0 {
		return fmt.Sprintf("hostname %q is not a DNS label", *e.Hostname)
	}
	if e.Zone != nil && len(validation.IsValidLabelValue(*e.Zone)) > 0 {
		return fmt.Sprintf("zone %q is not a label value", *e.Zone)
	}
	return ""
}

// slicePorts checks an EndpointSlice's ports as the API server would, within MaxPorts.
func slicePorts(ports []discoveryv1.EndpointPort) *Problem {
	if len(ports) > MaxPorts {
		return &Problem{ReasonPorts, fmt.Sprintf("%d ports, more than the %d allowed", len(ports), MaxPorts)}
	}
	seen := map[string]bool{}
	for _, p := range ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		switch {
		case name != "" && len(validation.IsDNS1123Label(name)) > 0:
			return &Problem{ReasonPorts, fmt.Sprintf("port name %q is not a DNS label", name)}
		case seen[name]:
			return &Problem{ReasonPorts, fmt.Sprintf("port name %q is listed twice", name)}
		case p.Port != nil && (*p.Port < 1 || *p.Port > 65535):
			return &Problem{ReasonPorts, fmt.Sprintf("port %d is out of range", *p.Port)}
		case p.Protocol != nil && !slices.Contains(protocols, *p.Protocol):
			return &Problem{ReasonPorts, fmt.Sprintf("port %q has protocol %q", name, *p.Protocol)}
		}
		seen[name] = true
	}
	return nil
}
