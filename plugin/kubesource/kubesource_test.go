package kubesource

import (
	"fmt"
	"net/netip"
	"reflect"
	goruntime "runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/plugin/zone"
)

func TestSlimServiceImportFromEitherVersion(t *testing.T) {
	full := mcstest.Import("ns", "web", mcsv1beta1.ClusterSetIP, []string{"10.0.0.1", "bogus"}, mcstest.Port("http", corev1.ProtocolTCP, 80))
	full.Annotations = map[string]string{"big": "value", names.AnnotationLocality: `{"dnsClusters":["a"]}`}
	full.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
	full.Status.Clusters = []mcsv1beta1.ClusterStatus{{Cluster: "a"}}
	full.ResourceVersion = "42"
	// The two versions share their schema: the v1alpha1 object is the same JSON decoded into the other type.
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(full)
	if err != nil {
		t.Fatal(err)
	}
	alpha := &mcsv1alpha1.ServiceImport{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, alpha); err != nil {
		t.Fatal(err)
	}
	want := &serviceImport{meta: meta{namespace: "ns", name: "web", version: "42"}, ips: []netip.Addr{netip.MustParseAddr("10.0.0.1")},
		ports: []zone.Port{{Name: "http", Protocol: "TCP", Port: 80}}, preferred: []string{"a"}}
	for version, in := range map[string]any{"v1alpha1": alpha, "v1beta1": full} {
		out, err := slimServiceImport(in)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(out, want) {
			t.Errorf("%s: slim import = %+v, want %+v", version, out, want)
		}
		if key, err := cache.MetaNamespaceKeyFunc(out); err != nil || key != "ns/web" {
			t.Errorf("%s: store key %q, %v", version, key, err)
		}
	}
	tombstone := cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: full}
	if out, err := slimServiceImport(tombstone); err != nil || out != any(tombstone) {
		t.Errorf("a tombstone was changed: %v, %v", out, err)
	}
	full.Annotations[names.AnnotationLocality] = "not json"
	if out, _ := slimServiceImport(full); out.(*serviceImport).preferred != nil {
		t.Errorf("a broken ranking prefers %v, want every cluster", out.(*serviceImport).preferred)
	}
}

func TestSlimEndpointSlice(t *testing.T) {
	ports := []discoveryv1.EndpointPort{mcstest.SlicePort("sql", corev1.ProtocolTCP, 5432), {Name: ptr.To("noport")}}
	unknown := mcstest.Endpoint("10.0.0.3", "", true)
	unknown.Conditions.Ready = nil // unknown readiness counts as ready
	bad := mcstest.Endpoint("not-an-ip", "", true)
	sl := mcstest.Slice("ns", "db", "east.prod", discoveryv1.AddressTypeIPv4, ports,
		mcstest.Endpoint("10.0.0.1", "db-0", true), mcstest.Endpoint("10.0.0.2", "", false), unknown, bad)
	sl.Labels["other"] = "x"
	sl.Endpoints[0].NodeName = ptr.To("node")
	out, _ := slimEndpointSlice(sl)
	got := out.(*endpointSlice)
	sql := []zone.Port{{Name: "sql", Protocol: "TCP", Port: 5432}}
	want := []zone.Endpoint{
		{Cluster: "east.prod", Hostname: "db-0", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Ready: true, Ports: sql},
		{Cluster: "east.prod", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.2")}, Ready: false, Ports: sql},
		{Cluster: "east.prod", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.3")}, Ready: true, Ports: sql},
		{Cluster: "east.prod", Addresses: []netip.Addr{}, Ready: true, Ports: sql},
	}
	if got.service != "db" || got.cluster != "east.prod" || got.namespace != "ns" || !reflect.DeepEqual(got.endpoints, want) {
		t.Errorf("slim slice = %+v", got)
	}
}

// TestSlimEndpointSliceSourceCluster checks which cluster id a slice's names carry: the full id from the
// annotation the controller writes beside the source-cluster label, which holds a shortened, hashed value for
// ids longer than 63 characters; the label when the annotation is absent or disagrees with it; none, and no
// endpoint kept, without the label, which marks imported slices.
func TestSlimEndpointSliceSourceCluster(t *testing.T) {
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 36) // 100 characters, two labels
	if len(names.LabelValue(long)) > 63 || names.LabelValue(long) == long {
		t.Fatalf("fixture: label value %q of a 100-character id", names.LabelValue(long))
	}
	tests := []struct {
		name       string
		label      *string // nil: no source-cluster label
		annotation *string // nil: no cluster-id annotation
		want       string
	}{
		{"controller, long id", ptr.To(names.LabelValue(long)), ptr.To(long), long},
		{"controller, short id", ptr.To("east.prod"), ptr.To("east.prod"), "east.prod"},
		{"another implementation", ptr.To("east.prod"), nil, "east.prod"},
		{"another implementation, hashed label", ptr.To(names.LabelValue(long)), nil, names.LabelValue(long)},
		{"annotation disagrees with the label", ptr.To("east.prod"), ptr.To(long), "east.prod"},
		{"empty annotation", ptr.To("east.prod"), ptr.To(""), "east.prod"},
		{"not imported", nil, ptr.To(long), ""},
	}
	for _, tt := range tests {
		sl := mcstest.Slice("ns", "db", "x", discoveryv1.AddressTypeIPv4, nil, mcstest.Endpoint("10.0.0.1", "db-0", true))
		delete(sl.Labels, mcsv1beta1.LabelSourceCluster)
		if tt.label != nil {
			sl.Labels[mcsv1beta1.LabelSourceCluster] = *tt.label
		}
		if tt.annotation != nil {
			// A copy, so that interning, not the fixture, is what makes the results share their bytes.
			sl.Annotations = map[string]string{names.AnnotationClusterID: strings.Clone(*tt.annotation)}
		}
		out, _ := slimEndpointSlice(sl)
		got := out.(*endpointSlice)
		if tt.want == "" {
			if got.cluster != "" || len(got.endpoints) != 0 {
				t.Errorf("%s: cluster %q, %d endpoints; want none", tt.name, got.cluster, len(got.endpoints))
			}
			continue
		}
		if got.cluster != tt.want || got.endpoints[0].Cluster != tt.want {
			t.Errorf("%s: cluster %q, endpoint's %q; want %q", tt.name, got.cluster, got.endpoints[0].Cluster, tt.want)
		}
		if tt.want != "" && unsafe.StringData(got.cluster) != unsafe.StringData(intern(tt.want)) {
			t.Errorf("%s: cluster id %q not interned", tt.name, got.cluster)
		}
	}
}

// TestPortListsAreShared checks that equal lists of ports are one copy, and that different ones stay apart.
func TestPortListsAreShared(t *testing.T) {
	a := internPorts([]zone.Port{{Name: "http", Protocol: "TCP", Port: 80}, {Name: "m", Protocol: "TCP", Port: 9090}})
	b := internPorts([]zone.Port{{Name: "http", Protocol: "TCP", Port: 80}, {Name: "m", Protocol: "TCP", Port: 9090}})
	c := internPorts([]zone.Port{{Name: "http", Protocol: "TCP", Port: 80}, {Name: "mT", Protocol: "CP", Port: 9090}})
	if &a[0] != &b[0] || &a[0] == &c[0] || !reflect.DeepEqual(c[1], zone.Port{Name: "mT", Protocol: "CP", Port: 9090}) {
		t.Errorf("shared %v %v, apart %v", a, b, c)
	}
}

func TestToService(t *testing.T) {
	si, _ := slimServiceImport(mcstest.Import("ns", "db", mcsv1beta1.Headless, nil, mcstest.Port("sql", corev1.ProtocolTCP, 5432)))
	sql := []discoveryv1.EndpointPort{mcstest.SlicePort("sql", corev1.ProtocolTCP, 5432)}
	east, _ := slimEndpointSlice(mcstest.Slice("ns", "db", "east.prod", discoveryv1.AddressTypeIPv4, sql, mcstest.Endpoint("10.0.0.1", "db-0", true)))
	local := mcstest.Slice("ns", "db", "x", discoveryv1.AddressTypeIPv4, sql, mcstest.Endpoint("10.9.9.9", "", true))
	delete(local.Labels, mcsv1beta1.LabelSourceCluster)
	notImported, _ := slimEndpointSlice(local)
	got := toService(si.(*serviceImport), []*endpointSlice{east.(*endpointSlice), notImported.(*endpointSlice)})
	ports := []zone.Port{{Name: "sql", Protocol: "TCP", Port: 5432}}
	want := &zone.Service{Namespace: "ns", Name: "db", Type: zone.Headless, Ports: ports, Endpoints: []zone.Endpoint{
		{Cluster: "east.prod", Hostname: "db-0", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Ready: true, Ports: ports},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("toService =\n%+v\nwant\n%+v", got, want)
	}
}

// TestSlimEndpointSliceRefusesInvalidNames checks the boundary of finding #1: a slice whose source cluster id is
// not a valid cluster id keeps no endpoint, and an endpoint whose hostname is not a DNS label is left out; each
// is reported with its reason.
func TestSlimEndpointSliceRefusesInvalidNames(t *testing.T) {
	payload := strings.Repeat("a", 52) + "." + strings.Repeat("b", 60) + "\\"
	tests := []struct {
		name      string
		cluster   string // the id; the label is names.LabelValue(id), the annotation the id
		hostnames []string
		want      []string // hostnames kept
		drops     []dropped
	}{
		{"valid", "east.prod", []string{"db-0", ""}, []string{"db-0", ""}, nil},
		{"the review's payload", payload, []string{"db-0"}, nil, []dropped{{reason: DropInvalidClusterID, n: 1}}},
		{"upper case id", "East", []string{"db-0"}, nil, []dropped{{reason: DropInvalidClusterID, n: 1}}},
		{"id of 128 characters", strings.Repeat("a", 63) + "." + strings.Repeat("b", 64), []string{"db-0"}, nil,
			[]dropped{{reason: DropInvalidClusterID, n: 1}}},
		{"hostnames", "east", []string{"db-0", "db\\.x", "DB-1", strings.Repeat("h", 64), "db-2"}, []string{"db-0", "db-2"},
			[]dropped{{reason: DropInvalidHostname, n: 3}}},
	}
	for _, tt := range tests {
		var eps []discoveryv1.Endpoint
		for i, h := range tt.hostnames {
			eps = append(eps, mcstest.Endpoint(fmt.Sprintf("10.0.0.%d", i+1), h, true))
		}
		sl := mcstest.Slice("ns", "db", names.LabelValue(tt.cluster), discoveryv1.AddressTypeIPv4, nil, eps...)
		sl.Annotations = map[string]string{names.AnnotationClusterID: tt.cluster}
		out, drops := slimEndpointSlice(sl)
		got := out.(*endpointSlice)
		var hosts []string
		for _, ep := range got.endpoints {
			hosts = append(hosts, ep.Hostname)
		}
		if !reflect.DeepEqual(hosts, tt.want) {
			t.Errorf("%s: hostnames kept %q, want %q", tt.name, hosts, tt.want)
		}
		if tt.want == nil && got.cluster != "" {
			t.Errorf("%s: refused slice keeps cluster %q", tt.name, got.cluster)
		}
		for i := range drops {
			if drops[i].why == nil {
				t.Errorf("%s: drop %s without a reason", tt.name, drops[i].reason)
			}
			drops[i].why = nil
		}
		if !reflect.DeepEqual(drops, tt.drops) {
			t.Errorf("%s: dropped %+v, want %+v", tt.name, drops, tt.drops)
		}
	}
}

// TestSliceSelector checks which slices the slice informer lists: those of a multi-cluster service whose manager
// is one of those named, or of any manager when none is named, and no other.
func TestSliceSelector(t *testing.T) {
	const other = "endpointslice-controller.x-k8s.io"
	ours := map[string]string{mcsv1beta1.LabelServiceName: "db", discoveryv1.LabelManagedBy: names.ManagedBy}
	theirs := map[string]string{mcsv1beta1.LabelServiceName: "db", discoveryv1.LabelManagedBy: other}
	unmanaged := map[string]string{mcsv1beta1.LabelServiceName: "db"}
	local := map[string]string{discoveryv1.LabelManagedBy: names.ManagedBy}
	kubernetes := map[string]string{mcsv1beta1.LabelServiceName: "db", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}
	for _, tt := range []struct {
		managers []string
		selected []map[string]string
		left     []map[string]string
	}{
		{[]string{names.ManagedBy}, []map[string]string{ours}, []map[string]string{theirs, unmanaged, local, kubernetes}},
		{[]string{names.ManagedBy, other}, []map[string]string{ours, theirs}, []map[string]string{unmanaged, local, kubernetes}},
		{nil, []map[string]string{ours, theirs, unmanaged, kubernetes}, []map[string]string{local}},
	} {
		s, err := sliceSelector(tt.managers)
		if err != nil {
			t.Fatal(err)
		}
		sel, err := labels.Parse(s)
		if err != nil {
			t.Fatalf("%v: selector %q: %v", tt.managers, s, err)
		}
		for want, sets := range map[bool][]map[string]string{true: tt.selected, false: tt.left} {
			for _, l := range sets {
				if got := sel.Matches(labels.Set(l)); got != want {
					t.Errorf("managers %v (%q): %v selected: %v, want %v", tt.managers, s, l, got, want)
				}
			}
		}
	}
	for _, bad := range [][]string{{""}, {"not a label value"}, {strings.Repeat("m", 64)}} {
		if s, err := sliceSelector(bad); err == nil {
			t.Errorf("managers %q: selector %q, want an error", bad, s)
		}
	}
}

// TestReviewPayloadDoesNotPanic is the review's finding #1 end to end, without an API server: a namespace user's
// EndpointSlice for a headless import, with the cluster id 52 'a', a dot, 60 'b' and a backslash, the hashed
// source-cluster label names.LabelValue computes for it and the cluster-id annotation, and one ready endpoint with
// a hostname. The service is "web": "b…b\.web" packs as a 64-octet label (with "db" it would be 63 and pack).
// Before the fix the index build panicked in zone.appendRR, and CoreDNS with it; now the slice is refused and the
// service keeps answering with the other cluster's endpoint.
func TestReviewPayloadDoesNotPanic(t *testing.T) {
	id := strings.Repeat("a", 52) + "." + strings.Repeat("b", 60) + "\\"
	ports := []discoveryv1.EndpointPort{mcstest.SlicePort("sql", corev1.ProtocolTCP, 5432)}
	hostile := mcstest.Slice("ns", "web", names.LabelValue(id), discoveryv1.AddressTypeIPv4, ports, mcstest.Endpoint("10.0.0.66", "db-0", true))
	hostile.Annotations = map[string]string{names.AnnotationClusterID: id}
	honest := mcstest.Slice("ns", "web", "east", discoveryv1.AddressTypeIPv4, ports, mcstest.Endpoint("10.0.0.1", "db-0", true))
	si, _ := slimServiceImport(mcstest.Import("ns", "web", mcsv1beta1.Headless, nil, mcstest.Port("sql", corev1.ProtocolTCP, 5432)))
	var filed []*endpointSlice
	for _, sl := range []*discoveryv1.EndpointSlice{hostile, honest} {
		out, _ := slimEndpointSlice(sl)
		filed = append(filed, out.(*endpointSlice))
	}
	ix := zone.New(zone.Options{Zone: "clusterset.local.", TTL: 5})
	ix.SetNamespaces([]string{"ns"})
	// Written to compile against the original code too, where Apply returned nothing, so that it shows the panic.
	ix.Apply(zone.Change{Key: zone.Key("ns", "web"), Service: toService(si.(*serviceImport), filed)})
	r, _ := ix.Snapshot().Lookup("_sql._tcp.web.ns.svc.clusterset.local.", dns.TypeSRV)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.SRV).Target != "db-0.east.web.ns.svc.clusterset.local." {
		t.Errorf("SRV answer %v, want the honest endpoint alone", r.Answer)
	}
}

// TestPortListsAreFreed churns port numbers as a user rewriting a slice in a loop would (review finding #12): the
// lists nothing holds any more leave the intern table, and one still held stays shared.
func TestPortListsAreFreed(t *testing.T) {
	size := func() int {
		portLists.Lock()
		defer portLists.Unlock()
		return len(portLists.m)
	}
	held := internPorts([]zone.Port{{Name: "held", Protocol: "TCP", Port: 1}})
	before := size()
	const churn = 20000
	for i := range churn {
		internPorts([]zone.Port{{Name: "http", Protocol: "TCP", Port: uint16(i)}, {Name: "churn", Protocol: "UDP", Port: uint16(i >> 16)}})
	}
	deadline := time.Now().Add(10 * time.Second)
	for size() > before+100 {
		if time.Now().After(deadline) {
			t.Fatalf("the table still holds %d lists, %d before the churn", size(), before)
		}
		goruntime.GC() // collects the lists; their cleanups then run in the background
		goruntime.Gosched()
	}
	again := internPorts([]zone.Port{{Name: "held", Protocol: "TCP", Port: 1}})
	if &again[0] != &held[0] {
		t.Error("a list still held was dropped from the table")
	}
}
