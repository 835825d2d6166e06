package kubesource

import (
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/names"
	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/plugin/zone"
)

func TestDetectServiceImport(t *testing.T) {
	resources := func(gv string, names ...string) *metav1.APIResourceList {
		l := &metav1.APIResourceList{GroupVersion: gv}
		for _, n := range names {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: n})
		}
		return l
	}
	tests := []struct {
		name    string
		served  []*metav1.APIResourceList
		want    string
		wantErr bool
	}{
		{"both", []*metav1.APIResourceList{resources("multicluster.x-k8s.io/v1alpha1", "serviceimports"),
			resources("multicluster.x-k8s.io/v1beta1", "serviceexports", "serviceimports")}, "v1beta1", false},
		{"v1alpha1 only", []*metav1.APIResourceList{resources("multicluster.x-k8s.io/v1alpha1", "serviceexports", "serviceimports")},
			"v1alpha1", false},
		{"v1beta1 without imports", []*metav1.APIResourceList{resources("multicluster.x-k8s.io/v1beta1", "serviceexports"),
			resources("multicluster.x-k8s.io/v1alpha1", "serviceimports")}, "v1alpha1", false},
		{"none", nil, "", true},
	}
	for _, tt := range tests {
		d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: tt.served}}
		gvr, err := detectServiceImport(d)
		if (err != nil) != tt.wantErr || gvr.Version != tt.want {
			t.Errorf("%s: got %v, %v; want version %q", tt.name, gvr, err, tt.want)
		}
	}
}

func TestSlimServiceImportFromEitherVersion(t *testing.T) {
	full := mcstest.Import("ns", "web", mcsv1beta1.ClusterSetIP, []string{"10.0.0.1"}, mcstest.Port("http", corev1.ProtocolTCP, 80))
	full.Annotations = map[string]string{"big": "value", names.AnnotationLocality: `{"dnsClusters":["a"]}`}
	full.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
	full.Status.Clusters = []mcsv1beta1.ClusterStatus{{Cluster: "a"}}
	full.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	// The two versions share their schema: the v1alpha1 object is the same JSON decoded into the other type.
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(full)
	if err != nil {
		t.Fatal(err)
	}
	alpha := &mcsv1alpha1.ServiceImport{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, alpha); err != nil {
		t.Fatal(err)
	}
	for version, in := range map[string]any{"v1alpha1": alpha, "v1beta1": full} {
		out, err := slimServiceImport(in)
		if err != nil {
			t.Fatal(err)
		}
		si := out.(*mcsv1beta1.ServiceImport)
		if si.Name != "web" || si.Namespace != "ns" || len(si.Annotations) != 1 || si.Annotations[names.AnnotationLocality] == "" || si.ManagedFields != nil ||
			si.Status.Clusters != nil || !reflect.DeepEqual(si.Spec.IPs, []string{"10.0.0.1"}) ||
			si.Spec.Type != mcsv1beta1.ClusterSetIP || si.Spec.Ports[0].Port != 80 || si.Spec.IPFamilies != nil {
			t.Errorf("%s: slim import = %+v", version, si)
		}
	}
	tombstone := cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: full}
	if out, err := slimServiceImport(tombstone); err != nil || out != any(tombstone) {
		t.Errorf("a tombstone was changed: %v, %v", out, err)
	}
}

func TestSlimEndpointSlice(t *testing.T) {
	sl := mcstest.Slice("ns", "db", "east.prod", discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{mcstest.SlicePort("sql", corev1.ProtocolTCP, 5432)}, mcstest.Endpoint("10.0.0.1", "db-0", true))
	sl.Labels["other"] = "x"
	sl.Endpoints[0].NodeName = ptr.To("node")
	sl.Endpoints[0].Zone = ptr.To("zone")
	out, _ := slimEndpointSlice(sl)
	got := out.(*discoveryv1.EndpointSlice)
	if len(got.Labels) != 2 || got.Labels[mcsv1beta1.LabelSourceCluster] != "east.prod" || got.Endpoints[0].NodeName != nil ||
		got.Endpoints[0].Zone != nil || *got.Endpoints[0].Hostname != "db-0" || !*got.Endpoints[0].Conditions.Ready {
		t.Errorf("slim slice = %+v", got)
	}
}

func TestToService(t *testing.T) {
	ports := []discoveryv1.EndpointPort{mcstest.SlicePort("sql", corev1.ProtocolTCP, 5432), {Name: ptr.To("noport")}}
	unknown := mcstest.Endpoint("10.0.0.3", "", true)
	unknown.Conditions.Ready = nil // unknown readiness counts as ready
	bad := mcstest.Endpoint("not-an-ip", "", true)
	local := mcstest.Slice("ns", "db", "x", discoveryv1.AddressTypeIPv4, ports, mcstest.Endpoint("10.9.9.9", "", true))
	delete(local.Labels, mcsv1beta1.LabelSourceCluster)
	got := toService(mcstest.Import("ns", "db", mcsv1beta1.Headless, []string{"bogus"}), []*discoveryv1.EndpointSlice{
		mcstest.Slice("ns", "db", "east.prod", discoveryv1.AddressTypeIPv4, ports,
			mcstest.Endpoint("10.0.0.1", "db-0", true), mcstest.Endpoint("10.0.0.2", "", false), unknown, bad),
		local,
	})
	sql := []zone.Port{{Name: "sql", Protocol: "TCP", Port: 5432}}
	want := &zone.Service{Namespace: "ns", Name: "db", Type: zone.Headless, Ports: nil, Endpoints: []zone.Endpoint{
		{Cluster: "east.prod", Hostname: "db-0", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Ready: true, Ports: sql},
		{Cluster: "east.prod", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.2")}, Ready: false, Ports: sql},
		{Cluster: "east.prod", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.3")}, Ready: true, Ports: sql},
		{Cluster: "east.prod", Ready: true, Ports: sql},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("toService =\n%+v\nwant\n%+v", got, want)
	}
	ranked := mcstest.Import("ns", "db", mcsv1beta1.Headless, nil)
	ranked.Annotations = map[string]string{names.AnnotationLocality: `{"zones":{},"dnsTier":"same-region","dnsClusters":["b","c"]}`}
	if got := toService(ranked, nil).Preferred; !reflect.DeepEqual(got, []string{"b", "c"}) {
		t.Errorf("preferred clusters %v, want the ranking's [b c]", got)
	}
	ranked.Annotations[names.AnnotationLocality] = "not json"
	if got := toService(ranked, nil).Preferred; got != nil {
		t.Errorf("a broken ranking prefers %v, want every cluster", got)
	}
}
