package imports

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/names"
)

var key = types.NamespacedName{Namespace: "ns", Name: "web"}

func merged(edit func(*merge.Result)) merge.Result {
	m := merge.Result{
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:       mcsv1beta1.ClusterSetIP,
			Ports:      []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		},
		Labels:   map[string]string{"team": "a"},
		Clusters: []string{"a", "b.east"},
	}
	if edit != nil {
		edit(&m)
	}
	return m
}

func TestServiceImportAndReady(t *testing.T) {
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	derived := &corev1.Service{Spec: corev1.ServiceSpec{
		ClusterIPs: []string{"10.0.0.9", "fd00::9"}, IPFamilies: []corev1.IPFamily{v4, v6},
	}}
	headless := func(m *merge.Result) { m.Spec.Type = mcsv1beta1.Headless }
	cases := []struct {
		name         string
		m            merge.Result
		served       []corev1.IPFamily
		derived      *corev1.Service
		wantFamilies []corev1.IPFamily
		wantIPs      []string
		wantReason   string
	}{
		{"waiting for IPs", merged(nil), nil, nil, []corev1.IPFamily{v4, v6}, nil, "Pending"},
		{"IPs from the derived Service", merged(nil), nil, derived, []corev1.IPFamily{v4, v6}, []string{"10.0.0.9", "fd00::9"}, "Ready"},
		{"headless has no IPs", merged(headless), nil, derived, []corev1.IPFamily{v4, v6}, nil, "Ready"},
		{"no common family", merged(func(m *merge.Result) { m.Spec.IPFamilies = nil }), nil, nil, nil, nil, "IPFamilyNotSupported"},
		{"an IPv4-only cluster narrows a dual-stack import", merged(nil), []corev1.IPFamily{v4}, nil, []corev1.IPFamily{v4}, nil, "Pending"},
		{"an IPv4-only cluster cannot serve an IPv6 import", merged(func(m *merge.Result) { m.Spec.IPFamilies = []corev1.IPFamily{v6} }),
			[]corev1.IPFamily{v4}, nil, nil, nil, "IPFamilyNotSupported"},
		{"headless ignores the service CIDRs", merged(headless), []corev1.IPFamily{v6}, nil, []corev1.IPFamily{v4, v6}, nil, "Ready"},
	}
	for _, c := range cases {
		si := ServiceImport(key, Served(c.m, c.served, c.derived), c.derived)
		if !reflect.DeepEqual(si.Spec.IPs, c.wantIPs) || !reflect.DeepEqual(si.Spec.IPFamilies, c.wantFamilies) {
			t.Errorf("%s: ips = %v, families %v; want %v, %v", c.name, si.Spec.IPs, si.Spec.IPFamilies, c.wantIPs, c.wantFamilies)
		}
		if want := []mcsv1beta1.ClusterStatus{{Cluster: "a"}, {Cluster: "b.east"}}; !reflect.DeepEqual(si.Status.Clusters, want) {
			t.Errorf("%s: clusters = %v", c.name, si.Status.Clusters)
		}
		if si.Status.EndpointSliceObjects != mcsv1beta1.EndpointSliceObjectsPresent {
			t.Errorf("%s: endpointSliceObjects = %q", c.name, si.Status.EndpointSliceObjects)
		}
		if !reflect.DeepEqual(si.Labels, map[string]string{"team": "a", names.LabelImportManagedBy: names.ManagedBy}) || si.Namespace != "ns" || si.Name != "web" {
			t.Errorf("%s: meta = %+v", c.name, si.ObjectMeta)
		}
		r := Ready(si, c.m.Spec.IPFamilies, 1)
		if r.Reason != c.wantReason || (r.Status == metav1.ConditionTrue) != (c.wantReason == "Ready") {
			t.Errorf("%s: Ready = %+v, want reason %s", c.name, r, c.wantReason)
		}
	}
	if m := merged(nil); !reflect.DeepEqual(Served(m, []corev1.IPFamily{v6}, nil).Spec.IPFamilies, []corev1.IPFamily{v6}) ||
		!reflect.DeepEqual(m.Spec.IPFamilies, []corev1.IPFamily{v4, v6}) {
		t.Errorf("Served must narrow a copy: the merged families became %v", m.Spec.IPFamilies)
	}
}

func TestServed(t *testing.T) {
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	fams := func(f ...corev1.IPFamily) []corev1.IPFamily { return f }
	exported := func(f ...corev1.IPFamily) merge.Result {
		return merged(func(m *merge.Result) { m.Spec.IPFamilies = f })
	}
	conflicting := func(f ...corev1.IPFamily) merge.Result {
		m := exported(f...)
		m.Conflicts = []merge.Conflict{{Reason: mcsv1beta1.ServiceExportReasonIPFamilyConflict, Message: "Conflicting IP families."}}
		return m
	}
	disjoint := func(f ...corev1.IPFamily) merge.Result {
		m := conflicting(f...)
		m.FamilyDisjoint = []string{"c"}
		return m
	}
	stored := func(f ...corev1.IPFamily) *corev1.Service {
		return &corev1.Service{Spec: corev1.ServiceSpec{IPFamilies: f}}
	}
	cases := []struct {
		name    string
		m       merge.Result
		served  []corev1.IPFamily
		derived *corev1.Service
		want    []corev1.IPFamily
	}{
		{"unknown families narrow nothing", exported(v4, v6), nil, nil, fams(v4, v6)},
		{"an IPv6-primary cluster puts IPv6 first", exported(v4, v6), fams(v6, v4), nil, fams(v6, v4)},
		{"an IPv4-primary cluster puts IPv4 first", exported(v4, v6), fams(v4, v6), nil, fams(v4, v6)},
		{"an IPv6-only cluster narrows", exported(v4, v6), fams(v6), nil, fams(v6)},
		{"a cluster serving none of them", exported(v6), fams(v4), nil, nil},
		// A derived Service made primary-first by another rule (an older controller's, another ServiceCIDR order)
		// keeps its VIP.
		{"the stored primary family stays first", exported(v4, v6), fams(v4, v6), stored(v6, v4), fams(v6, v4)},
		{"the stored primary family stays first, families unknown", exported(v4, v6), nil, stored(v6), fams(v6, v4)},
		{"the exports agree on other families: the stored one goes", exported(v6), fams(v4, v6), stored(v4), fams(v6)},
		{"the exports agree on a family not served: nothing", exported(v6), fams(v4), stored(v4), nil},
		// A family mismatch never deletes a ClusterSetIP: a disjoint export, or a hostile one, took the families.
		{"a disjoint export left out keeps the stored primary family", disjoint(v6), fams(v4, v6), stored(v4), fams(v4, v6)},
		{"exports sharing a family narrow the import to it", conflicting(v6), fams(v4, v6), stored(v4), fams(v6)},
		{"a family conflict leaving none served keeps it", conflicting(v6), fams(v4), stored(v4), fams(v4)},
		{"a family conflict leaving no family keeps it", conflicting(), fams(v4), stored(v4), fams(v4)},
		{"a family conflict does not keep a family no longer served", conflicting(v6), fams(v6), stored(v4), fams(v6)},
		{"no stored Service, nothing to keep", conflicting(v6), fams(v4), nil, nil},
		{"headless: untouched", merged(func(m *merge.Result) { m.Spec.Type = mcsv1beta1.Headless; m.Spec.IPFamilies = fams(v6, v4) }),
			fams(v4), stored(v4), fams(v6, v4)},
	}
	for _, c := range cases {
		before := slices.Clone(c.m.Spec.IPFamilies)
		got := Served(c.m, c.served, c.derived)
		if !reflect.DeepEqual(got.Spec.IPFamilies, c.want) {
			t.Errorf("%s: families %v, want %v", c.name, got.Spec.IPFamilies, c.want)
		}
		if !slices.Equal(c.m.Spec.IPFamilies, before) {
			t.Errorf("%s: Served changed the merged families to %v", c.name, c.m.Spec.IPFamilies)
		}
	}
}

func TestDerivedService(t *testing.T) {
	owner := Owner(&mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "uid-1"}}, "multicluster.x-k8s.io/v1beta1")
	cases := []struct {
		name       string
		m          merge.Result
		wantNil    bool
		wantPolicy corev1.IPFamilyPolicy
		check      func(*corev1.Service) bool
	}{
		{name: "dual-stack", m: merged(nil), wantPolicy: corev1.IPFamilyPolicyPreferDualStack, check: func(s *corev1.Service) bool {
			return s.Spec.SessionAffinity == corev1.ServiceAffinityNone && s.Spec.Ports[0].TargetPort.IntVal == 80 &&
				s.Spec.Selector == nil && s.OwnerReferences[0].UID == "uid-1"
		}},
		{name: "single stack", m: merged(func(m *merge.Result) { m.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} }),
			wantPolicy: corev1.IPFamilyPolicySingleStack},
		{name: "ClientIP gets the API default timeout", m: merged(func(m *merge.Result) { m.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }),
			wantPolicy: corev1.IPFamilyPolicyPreferDualStack, check: func(s *corev1.Service) bool {
				return *s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds == 10800
			}},
		{name: "headless", m: merged(func(m *merge.Result) { m.Spec.Type = mcsv1beta1.Headless }), wantNil: true},
		{name: "no family", m: merged(func(m *merge.Result) { m.Spec.IPFamilies = nil }), wantNil: true},
	}
	for _, c := range cases {
		s := DerivedService(key, c.m, owner)
		if (s == nil) != c.wantNil {
			t.Errorf("%s: DerivedService() = %v", c.name, s)
			continue
		}
		if s == nil {
			continue
		}
		if s.Name != names.DerivedServiceName("ns", "web") || *s.Spec.IPFamilyPolicy != c.wantPolicy || s.Spec.Type != corev1.ServiceTypeClusterIP {
			t.Errorf("%s: %+v", c.name, s)
		}
		if c.check != nil && !c.check(s) {
			t.Errorf("%s: %+v", c.name, s)
		}
	}
}

func TestSlices(t *testing.T) {
	owner := Owner(&mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "uid-1"}}, "multicluster.x-k8s.io/v1beta1")
	src := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "ns.web.web-abc"},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}}},
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](8080)}},
	}
	renames := merge.SlicePorts{Names: map[string]map[string]string{"a": {"": "tcp-8080"}}}
	got := Slices(key, []Source{{Cluster: "b.east", Slice: src}, {Cluster: "a", Slice: src}}, renames, owner)
	if len(got) != 2 || got[0].Name == got[1].Name {
		t.Fatalf("Slices() = %+v", got)
	}
	// The union names a's unnamed port; b.east's keeps its name.
	portName := map[string]string{"a": "tcp-8080", "b.east": ""}
	for _, s := range got {
		want := map[string]string{
			"multicluster.kubernetes.io/service-name":   "web",
			"endpointslice.kubernetes.io/managed-by":    names.ManagedBy,
			"kubernetes.io/service-name":                names.DerivedServiceName("ns", "web"),
			"multicluster.kubernetes.io/source-cluster": s.Annotations[names.AnnotationClusterID],
		}
		if !reflect.DeepEqual(s.Labels, want) || s.Namespace != "ns" || s.OwnerReferences[0].UID != "uid-1" {
			t.Errorf("slice %s: labels %v, owner %v", s.Name, s.Labels, s.OwnerReferences)
		}
		if *s.Ports[0].Protocol != corev1.ProtocolTCP || *s.Ports[0].Name != portName[s.Annotations[names.AnnotationClusterID]] {
			t.Errorf("slice %s: ports not defaulted: %+v", s.Name, s.Ports[0])
		}
	}
	if src.Ports[0].Protocol != nil || src.Ports[0].Name != nil {
		t.Error("Slices changed its input")
	}
}

func TestClusterLocal(t *testing.T) {
	owner := Owner(&mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "uid-1"}}, "multicluster.x-k8s.io/v1beta1")
	derived := &corev1.Service{Spec: corev1.ServiceSpec{
		ClusterIPs: []string{"10.0.0.9", "fd00::9"}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
	}}
	src := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "ns.web.web-abc"},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.1.0.1"}, Hostname: ptr.To("db-0"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.1.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
		},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
	}
	imported := Slices(key, []Source{{Cluster: "a", Slice: src}, {Cluster: "b.east", Slice: src}}, merge.SlicePorts{}, owner)
	type slice struct {
		name      string
		family    discoveryv1.AddressType
		addresses []string
		port      int32
	}
	cases := []struct {
		name   string
		si     *mcsv1beta1.ServiceImport
		slices []slice
	}{
		{"ClusterSetIP: the ClusterSetIPs, one slice per family", ServiceImport(key, merged(nil), derived), []slice{
			{"web-ipv4-clusterset", discoveryv1.AddressTypeIPv4, []string{"10.0.0.9"}, 80},
			{"web-ipv6-clusterset", discoveryv1.AddressTypeIPv6, []string{"fd00::9"}, 80},
		}},
		{"ClusterSetIP before its IPs are allocated: no endpoints yet", ServiceImport(key, merged(nil), nil), nil},
		{"Headless: a copy of each imported slice", ServiceImport(key, merged(func(m *merge.Result) { m.Spec.Type = mcsv1beta1.Headless }), nil), []slice{
			{imported[0].Name + "-clusterset", discoveryv1.AddressTypeIPv4, []string{"10.1.0.1", "10.1.0.2"}, 8080},
			{imported[1].Name + "-clusterset", discoveryv1.AddressTypeIPv4, []string{"10.1.0.1", "10.1.0.2"}, 8080},
		}},
	}
	for _, c := range cases {
		svc, got := ClusterLocal(c.si, imported, owner)
		wantLabels := map[string]string{names.LabelManagedBy: names.ManagedBy, names.LabelClusterLocalOf: "web"}
		if svc.Name != "web-clusterset" || svc.Namespace != "ns" || svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Selector != nil ||
			!reflect.DeepEqual(svc.Labels, wantLabels) || svc.OwnerReferences[0].UID != "uid-1" {
			t.Errorf("%s: Service %+v", c.name, svc)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 || svc.Spec.Ports[0].TargetPort.IntVal != 80 {
			t.Errorf("%s: Service ports %+v", c.name, svc.Spec.Ports)
		}
		if len(got) != len(c.slices) {
			t.Errorf("%s: %d slices, want %d: %+v", c.name, len(got), len(c.slices), got)
			continue
		}
		for i, want := range c.slices {
			s := got[i]
			var addrs []string
			for _, e := range s.Endpoints {
				addrs = append(addrs, e.Addresses...)
			}
			labels := map[string]string{
				"endpointslice.kubernetes.io/managed-by": names.ManagedBy,
				"kubernetes.io/service-name":             "web-clusterset",
				names.LabelClusterLocalOf:                "web",
			}
			if s.Name != want.name || s.Namespace != "ns" || s.AddressType != want.family || !reflect.DeepEqual(addrs, want.addresses) ||
				!reflect.DeepEqual(s.Labels, labels) || s.OwnerReferences[0].UID != "uid-1" {
				t.Errorf("%s: slice %d = %+v, want %+v", c.name, i, s, want)
			}
			if len(s.Ports) != 1 || *s.Ports[0].Port != want.port || *s.Ports[0].Protocol != corev1.ProtocolTCP {
				t.Errorf("%s: slice %s ports %+v", c.name, s.Name, s.Ports)
			}
			if c.si.Spec.Type == mcsv1beta1.ClusterSetIP && !*s.Endpoints[0].Conditions.Ready {
				t.Errorf("%s: a ClusterSetIP must always answer", c.name)
			}
		}
		if c.si.Spec.Type == mcsv1beta1.Headless {
			if *got[0].Endpoints[0].Hostname != "db-0" || *got[0].Endpoints[1].Conditions.Ready {
				t.Errorf("%s: endpoints must keep hostnames and conditions: %+v", c.name, got[0].Endpoints)
			}
			got[0].Endpoints[0].Addresses[0] = "changed"
			if imported[0].Endpoints[0].Addresses[0] != "10.1.0.1" {
				t.Errorf("%s: the copies share the imported slices' endpoints", c.name)
			}
		}
	}
}

func TestClusterLocalCondition(t *testing.T) {
	si := ServiceImport(key, merged(nil), nil)
	for _, c := range []struct {
		nameInUse bool
		status    metav1.ConditionStatus
		reason    string
		message   string
	}{
		{false, metav1.ConditionTrue, "Reflected", "Reflected into this cluster's DNS as Service web-clusterset."},
		{true, metav1.ConditionFalse, "NameInUse", "Service ns/web-clusterset exists and is not managed by " + names.ManagedBy + ": the import is not reflected into this cluster's DNS."},
	} {
		got := ClusterLocalCondition(si, c.nameInUse, 3)
		if got.Type != "ClusterLocalService" || got.Status != c.status || got.Reason != c.reason || got.Message != c.message || got.ObservedGeneration != 3 {
			t.Errorf("ClusterLocalCondition(nameInUse %v) = %+v", c.nameInUse, got)
		}
	}
}

func TestMissing(t *testing.T) {
	exp := func(cluster string, slices int) merge.Export { return merge.Export{Cluster: cluster, Slices: slices} }
	src := func(cluster string) Source { return Source{Cluster: cluster} }
	alive := func(c string) bool { return c != "dead" }
	cases := []struct {
		name    string
		exports []merge.Export
		sources []Source
		want    string
	}{
		{"every slice here", []merge.Export{exp("b", 2), exp("c", 1)}, []Source{src("b"), src("c"), src("b")}, ""},
		{"a record before its slice", []merge.Export{exp("b", 1)}, nil, "the endpoints of b (0 of 1 EndpointSlices)"},
		{"one of two", []merge.Export{exp("c", 2), exp("b", 1)}, []Source{src("c")},
			"the endpoints of b (0 of 1 EndpointSlices), c (1 of 2 EndpointSlices)"},
		{"an exporter without endpoints publishes no slice", []merge.Export{exp("b", 0)}, nil, ""},
		{"this cluster is never waited for", []merge.Export{exp("a", 3)}, nil, ""},
		{"a record that does not count", []merge.Export{exp("b", -1)}, nil, ""},
		{"a member whose lease expired", []merge.Export{exp("dead", 1)}, nil, ""},
		// No member takes more slices of one service than admit.MaxSlicesPerExport: a larger count is wrong or forged.
		{"a count no member takes", []merge.Export{exp("b", admit.MaxSlicesPerExport+1), exp("c", 1_000_000)}, []Source{src("b")}, ""},
		{"the largest count a member takes", []merge.Export{exp("b", admit.MaxSlicesPerExport)}, []Source{src("b")},
			fmt.Sprintf("the endpoints of b (1 of %d EndpointSlices)", admit.MaxSlicesPerExport)},
	}
	for _, c := range cases {
		if got := Missing(c.exports, c.sources, "a", alive); got != c.want {
			t.Errorf("%s: Missing = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestSliceTriggerTime: the time of the exporting cluster's change travels to the imported slice, where kube-proxy
// measures network programming latency from it; a value that is not a time does not.
func TestSliceTriggerTime(t *testing.T) {
	const when = "2026-11-26T02:45:47.123456Z"
	for _, tt := range []struct{ annotation, want string }{
		{when, when},
		{"yesterday", ""},
		{"", ""},
	} {
		src := discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-abc"}, AddressType: discoveryv1.AddressTypeIPv4}
		if tt.annotation != "" {
			src.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: tt.annotation}
		}
		got := Slices(key, []Source{{Cluster: "b", Slice: src}}, merge.SlicePorts{}, nil)[0].Annotations
		if got[corev1.EndpointsLastChangeTriggerTime] != tt.want || got[names.AnnotationClusterID] != "b" {
			t.Errorf("source annotation %q: imported annotations %v, want the trigger time %q", tt.annotation, got, tt.want)
		}
	}
}
