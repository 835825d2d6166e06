package admit

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/merge"
)

func reasons(ps []Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Reason)
	}
	return out
}

func TestMetadata(t *testing.T) {
	cases := []struct {
		name                  string
		labels, annotations   map[string]string
		wantLabels, wantAnnot map[string]string
		wantReasons           []string
	}{
		{name: "nil stays nil"},
		{name: "valid entries travel",
			labels: map[string]string{"team": "a", "example.com/tier": "gold"}, annotations: map[string]string{"example.com/note": "any text at all"},
			wantLabels: map[string]string{"team": "a", "example.com/tier": "gold"}, wantAnnot: map[string]string{"example.com/note": "any text at all"}},
		{name: "reserved keys are dropped",
			labels:      map[string]string{"multicluster.kubernetes.io/service-name": "x", "ok": "1"},
			annotations: map[string]string{"mcs.vksfleet.dev/locality": "{}", "multicluster.x-k8s.io/a": "b"},
			wantLabels:  map[string]string{"ok": "1"}, wantAnnot: map[string]string{},
			wantReasons: []string{ReasonReservedKey, ReasonReservedKey, ReasonReservedKey}},
		{name: "invalid label values and keys are dropped",
			labels:      map[string]string{"team": "payments team", "bad key": "x", strings.Repeat("k", 64): "v", "v": strings.Repeat("x", 64), "ok": "1"},
			wantLabels:  map[string]string{"ok": "1"},
			wantReasons: []string{ReasonMetadata, ReasonMetadata, ReasonMetadata, ReasonMetadata}},
		{name: "invalid annotation keys are dropped",
			annotations: map[string]string{"a b": "x", "/x": "y", "example.com/ok": "z"},
			wantAnnot:   map[string]string{"example.com/ok": "z"},
			wantReasons: []string{ReasonMetadata, ReasonMetadata}},
		{name: "past the size cap nothing travels",
			labels:      map[string]string{"ok": "1"},
			annotations: map[string]string{"example.com/big": strings.Repeat("x", MaxExportedMetadataBytes)},
			wantLabels:  map[string]string{}, wantAnnot: map[string]string{},
			wantReasons: []string{ReasonMetadata}},
	}
	for _, c := range cases {
		l, a, problems := Metadata(c.labels, c.annotations)
		if !reflect.DeepEqual(l, c.wantLabels) || !reflect.DeepEqual(a, c.wantAnnot) || !reflect.DeepEqual(reasons(problems), c.wantReasons) {
			t.Errorf("%s: Metadata() = %v, %v, %v", c.name, l, a, problems)
		}
	}
}

func TestPorts(t *testing.T) {
	p := func(name string, proto corev1.Protocol, n int32) mcsv1beta1.ServicePort {
		return mcsv1beta1.ServicePort{Name: name, Protocol: proto, Port: n}
	}
	many := make([]mcsv1beta1.ServicePort, MaxPorts+1)
	for i := range many {
		many[i] = p(fmt.Sprintf("p%d", i), corev1.ProtocolTCP, int32(i+1))
	}
	cases := []struct {
		name  string
		ports []mcsv1beta1.ServicePort
		want  string // part of the problem, "" for none
	}{
		{"none", nil, ""},
		{"one unnamed", []mcsv1beta1.ServicePort{p("", "", 80)}, ""},
		{"named", []mcsv1beta1.ServicePort{p("http", corev1.ProtocolTCP, 80), p("dns", corev1.ProtocolUDP, 53)}, ""},
		{"one of two unnamed", []mcsv1beta1.ServicePort{p("http", corev1.ProtocolTCP, 80), p("", corev1.ProtocolTCP, 81)}, "has no name"},
		{"bad name", []mcsv1beta1.ServicePort{p("Http_1", corev1.ProtocolTCP, 80)}, "not a DNS label"},
		{"out of range", []mcsv1beta1.ServicePort{p("a", corev1.ProtocolTCP, 70000)}, "out of range"},
		{"zero", []mcsv1beta1.ServicePort{p("a", corev1.ProtocolTCP, 0)}, "out of range"},
		{"bad protocol", []mcsv1beta1.ServicePort{p("a", "ICMP", 80)}, `protocol "ICMP"`},
		{"same name twice", []mcsv1beta1.ServicePort{p("a", corev1.ProtocolTCP, 80), p("a", corev1.ProtocolUDP, 80)}, "listed twice"},
		{"same port twice", []mcsv1beta1.ServicePort{p("a", "", 80), p("b", corev1.ProtocolTCP, 80)}, "listed twice"},
		{"bad appProtocol", []mcsv1beta1.ServicePort{{Name: "a", Port: 80, AppProtocol: ptr.To("a b")}}, "appProtocol"},
		{"too many", many, "more than the 100 allowed"},
	}
	for _, c := range cases {
		got := Ports(c.ports)
		if (got == nil) != (c.want == "") || (got != nil && !strings.Contains(got.Message, c.want)) {
			t.Errorf("%s: Ports() = %v, want %q", c.name, got, c.want)
		}
	}
}

// TestSpec: a record's spec passes only with the values the ServiceImport CRD and core/v1 validation accept, so
// that the merged spec is one every member's API server takes for the derived Service.
func TestSpec(t *testing.T) {
	valid := func(edit func(*mcsv1beta1.ServiceImportSpec)) mcsv1beta1.ServiceImportSpec {
		s := mcsv1beta1.ServiceImportSpec{
			Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, SessionAffinity: corev1.ServiceAffinityNone,
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
		}
		edit(&s)
		return s
	}
	clientIP := func(timeout *int32) func(*mcsv1beta1.ServiceImportSpec) {
		return func(s *mcsv1beta1.ServiceImportSpec) {
			s.SessionAffinity = corev1.ServiceAffinityClientIP
			s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: timeout}}
		}
	}
	cases := []struct {
		name string
		edit func(*mcsv1beta1.ServiceImportSpec)
		want string // the reason, "" for none
	}{
		{"an honest ClusterSetIP export", func(*mcsv1beta1.ServiceImportSpec) {}, ""},
		{"headless, dual-stack", func(s *mcsv1beta1.ServiceImportSpec) {
			s.Type, s.IPFamilies = mcsv1beta1.Headless, []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
		}, ""},
		{"nothing optional set", func(s *mcsv1beta1.ServiceImportSpec) {
			s.IPFamilies, s.SessionAffinity, s.InternalTrafficPolicy = nil, "", nil
		}, ""},
		{"no type", func(s *mcsv1beta1.ServiceImportSpec) { s.Type = "" }, ReasonType},
		{"a Service's type", func(s *mcsv1beta1.ServiceImportSpec) { s.Type = "ClusterIP" }, ReasonType},
		{"invalid ports", func(s *mcsv1beta1.ServiceImportSpec) { s.Ports[0].Port = 0 }, ReasonPorts},
		{"an unknown family", func(s *mcsv1beta1.ServiceImportSpec) { s.IPFamilies = []corev1.IPFamily{"x"} }, ReasonIPFamilies},
		{"a family twice", func(s *mcsv1beta1.ServiceImportSpec) {
			s.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv4Protocol}
		}, ReasonIPFamilies},
		{"three families", func(s *mcsv1beta1.ServiceImportSpec) {
			s.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol, corev1.IPv4Protocol}
		}, ReasonIPFamilies},
		{"ClientIP, the default timeout", clientIP(ptr.To[int32](10800)), ""},
		{"ClientIP, a day", clientIP(ptr.To[int32](86400)), ""},
		{"ClientIP, one second", clientIP(ptr.To[int32](1)), ""},
		{"ClientIP, no timeout", clientIP(nil), ""},
		{"ClientIP, no config", func(s *mcsv1beta1.ServiceImportSpec) { s.SessionAffinity = corev1.ServiceAffinityClientIP }, ""},
		{"ClientIP, timeout 0", clientIP(ptr.To[int32](0)), ReasonSessionAffinity},
		{"ClientIP, timeout negative", clientIP(ptr.To[int32](-1)), ReasonSessionAffinity},
		{"ClientIP, timeout past a day", clientIP(ptr.To[int32](86401)), ReasonSessionAffinity},
		{"an unknown affinity", func(s *mcsv1beta1.ServiceImportSpec) { s.SessionAffinity = "Cookie" }, ReasonSessionAffinity},
		{"a config without ClientIP", func(s *mcsv1beta1.ServiceImportSpec) {
			clientIP(ptr.To[int32](10))(s)
			s.SessionAffinity = corev1.ServiceAffinityNone
		}, ReasonSessionAffinity},
		{"internal traffic policy Local", func(s *mcsv1beta1.ServiceImportSpec) {
			s.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
		}, ""},
		{"an unknown internal traffic policy", func(s *mcsv1beta1.ServiceImportSpec) {
			s.InternalTrafficPolicy = ptr.To[corev1.ServiceInternalTrafficPolicy]("Node")
		}, ReasonInternalTrafficPolicy},
		{"an empty internal traffic policy", func(s *mcsv1beta1.ServiceImportSpec) {
			s.InternalTrafficPolicy = ptr.To[corev1.ServiceInternalTrafficPolicy]("")
		}, ReasonInternalTrafficPolicy},
		{"PreferClose", func(s *mcsv1beta1.ServiceImportSpec) { s.TrafficDistribution = ptr.To("PreferClose") }, ""},
		{"PreferSameZone", func(s *mcsv1beta1.ServiceImportSpec) { s.TrafficDistribution = ptr.To("PreferSameZone") }, ""},
		{"PreferSameNode", func(s *mcsv1beta1.ServiceImportSpec) { s.TrafficDistribution = ptr.To("PreferSameNode") }, ""},
		{"an unknown traffic distribution", func(s *mcsv1beta1.ServiceImportSpec) { s.TrafficDistribution = ptr.To("preferclose") }, ReasonTrafficDistribution},
	}
	for _, c := range cases {
		got := Spec(valid(c.edit))
		if (got == nil) != (c.want == "") || (got != nil && got.Reason != c.want) {
			t.Errorf("%s: Spec() = %v, want reason %q", c.name, got, c.want)
		}
	}
}

// TestService: a record is imported only for a service whose name the API server accepts for a Service, in a
// namespace imports may land in.
func TestService(t *testing.T) {
	cases := []struct {
		namespace, name string
		denied          []string
		want            string // the reason, "" for none
	}{
		{"ns", "web", nil, ""},
		{"ns", "web-1", []string{"default"}, ""},
		{"default", "web", nil, ""},
		{"default", "web", []string{"kube-system", "default"}, ReasonNamespaceNotAllowed},
		{"shared", "web", []string{"shared"}, ReasonNamespaceNotAllowed},
		{"kube-system", "web", nil, ReasonNamespaceNotAllowed},
		{"kube-public", "web", []string{}, ReasonNamespaceNotAllowed},
		{"kube-node-lease", "web", nil, ReasonNamespaceNotAllowed},
		{"ns", "Web_1", nil, ReasonServiceName},
		{"ns", "web.a", nil, ReasonServiceName},
		{"ns", "1web", nil, ReasonServiceName}, // a DNS-1123 label, but no Service name (DNS-1035)
		{"ns", strings.Repeat("w", 64), nil, ReasonServiceName},
		{"ns", "", nil, ReasonServiceName},
		{"Ns", "web", nil, ReasonServiceName},
		{"n_s", "web", nil, ReasonServiceName},
		{"", "web", nil, ReasonServiceName},
	}
	for _, c := range cases {
		got := Service(types.NamespacedName{Namespace: c.namespace, Name: c.name}, c.denied)
		if (got == nil) != (c.want == "") || (got != nil && got.Reason != c.want) {
			t.Errorf("Service(%s/%s, %v) = %v, want reason %q", c.namespace, c.name, c.denied, got, c.want)
		}
	}
}

func TestRegion(t *testing.T) {
	for region, ok := range map[string]bool{"": true, "region-1": true, "eu_west.3": true, "us east": false,
		strings.Repeat("r", 64): false, "-r": false} {
		if got := Region(region); (got == nil) != ok || (got != nil && got.Reason != ReasonRegion) {
			t.Errorf("Region(%q) = %v", region, got)
		}
	}
}

// TestRecord: a record with a refused service or spec is refused whole, with the one reason; a bad region and
// metadata that cannot travel are dropped from an export that still counts.
func TestRecord(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	honest := merge.Export{Cluster: "b", Region: "region-1", Labels: map[string]string{"tier": "gold"}, Slices: -1,
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{{Name: "http", Port: 80}}}}
	cases := []struct {
		name        string
		key         types.NamespacedName
		edit        func(*merge.Export)
		wantOK      bool
		wantReasons []string
		wantRegion  string
	}{
		{"honest", key, func(*merge.Export) {}, true, nil, "region-1"},
		{"in a denied namespace", types.NamespacedName{Namespace: "default", Name: "web"}, func(*merge.Export) {},
			false, []string{ReasonNamespaceNotAllowed}, ""},
		{"an invalid name", types.NamespacedName{Namespace: "ns", Name: "Web_1"}, func(*merge.Export) {},
			false, []string{ReasonServiceName}, ""},
		{"a bad type", key, func(e *merge.Export) { e.Spec.Type = "LoadBalancer" }, false, []string{ReasonType}, ""},
		{"a region that is no label value", key, func(e *merge.Export) { e.Region = "us east" },
			true, []string{ReasonRegion}, ""},
		{"a reserved label", key, func(e *merge.Export) { e.Labels = map[string]string{"mcs.vksfleet.dev/x": "y"} },
			true, []string{ReasonReservedKey}, "region-1"},
	}
	for _, c := range cases {
		e := honest
		e.Spec = *honest.Spec.DeepCopy()
		c.edit(&e)
		got, problems, ok := Record(c.key, e, []string{"default"})
		if ok != c.wantOK || !reflect.DeepEqual(reasons(problems), c.wantReasons) {
			t.Errorf("%s: Record() = %v, %v; want %v, %v", c.name, ok, problems, c.wantOK, c.wantReasons)
		}
		if ok && got.Region != c.wantRegion {
			t.Errorf("%s: region %q, want %q", c.name, got.Region, c.wantRegion)
		}
	}
}

func TestClusterID(t *testing.T) {
	crafted := strings.Repeat("a", 52) + "." + strings.Repeat("b", 60) + `\`
	for id, ok := range map[string]bool{"cluster-a": true, "east.prod": true, crafted: false, "": false, "UPPER": false} {
		if got := ClusterID(id); (got == nil) != ok {
			t.Errorf("ClusterID(%q) = %v", id, got)
		}
	}
}

func TestSlice(t *testing.T) {
	ready := discoveryv1.EndpointConditions{Ready: ptr.To(true)}
	in := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "s", Namespace: "mcs-member-a-0123456789", Labels: map[string]string{"x": "y"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.1.0.1"}, Conditions: ready, Hostname: ptr.To("db-0"), Zone: ptr.To("z1"),
				NodeName: ptr.To("node-1"), TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "victim"},
				DeprecatedTopology: map[string]string{"a": "b"},
				Hints:              &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z9"}}}},
			{Addresses: []string{"127.0.0.1"}, Conditions: ready},
			{Addresses: []string{"fd00::1"}, Conditions: ready},
			{Addresses: []string{"10.1.0.2"}, Hostname: ptr.To(`b\.x`)},
			{Addresses: []string{"010.1.0.3"}},
			{Addresses: []string{"169.254.0.1"}},
			{Addresses: nil},
			{Addresses: []string{"10.1.0.4"}, Zone: ptr.To("bad zone")},
		},
	}
	out, problems, ok := Slice(&in)
	want := []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}, Conditions: ready, Hostname: ptr.To("db-0"), Zone: ptr.To("z1")}}
	if !ok || !reflect.DeepEqual(out.Endpoints, want) || len(problems) != 7 || out.Name != "s" || out.Labels["x"] != "y" || len(out.Ports) != 1 {
		t.Errorf("Slice() = %+v, %v, %v", out, problems, ok)
	}
	if in.Endpoints[0].NodeName == nil {
		t.Error("Slice changed its input")
	}

	refused := []struct {
		name string
		edit func(*discoveryv1.EndpointSlice)
	}{
		{"FQDN", func(s *discoveryv1.EndpointSlice) { s.AddressType = discoveryv1.AddressTypeFQDN }},
		{"bad port name", func(s *discoveryv1.EndpointSlice) { s.Ports[0].Name = ptr.To("A_B") }},
		{"same port name twice", func(s *discoveryv1.EndpointSlice) { s.Ports = append(s.Ports, s.Ports[0]) }},
		{"bad protocol", func(s *discoveryv1.EndpointSlice) { s.Ports[0].Protocol = ptr.To(corev1.Protocol("X")) }},
		{"port out of range", func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = ptr.To[int32](-1) }},
	}
	for _, c := range refused {
		s := in.DeepCopy()
		c.edit(s)
		if _, problems, ok := Slice(s); ok || len(problems) != 1 {
			t.Errorf("%s: Slice() ok %v, %v", c.name, ok, problems)
		}
	}

	big := discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv6}
	for i := range MaxEndpointsPerSlice + 5 {
		big.Endpoints = append(big.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("fd00::%x", i+1)}})
	}
	if out, problems, ok := Slice(&big); !ok || len(out.Endpoints) != MaxEndpointsPerSlice || len(problems) != 1 {
		t.Errorf("a slice of %d endpoints keeps %d, problems %v", len(big.Endpoints), len(out.Endpoints), problems)
	}
}
