package controller

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/names"
)

// record is cluster's broker record of its export of namespace/service.
func record(cluster, namespace, service string) *mcsv1beta1.ServiceImport {
	return &mcsv1beta1.ServiceImport{ObjectMeta: objMeta(names.BrokerNamespace(cluster), names.RecordName(namespace, service),
		names.LabelManagedBy, names.ManagedBy, names.LabelServiceNamespace, namespace, mcsv1beta1.LabelServiceName, service)}
}

// sortedKeys are the service keys of items as strings, sorted, for comparing what a mapper or a trigger enqueues.
func sortedKeys[T any](items []T, key func(T) types.NamespacedName) []string {
	out := make([]string, 0, len(items))
	for _, it := range items {
		out = append(out, key(it).String())
	}
	slices.Sort(out)
	return out
}

func requestKey(r reconcile.Request) types.NamespacedName { return r.NamespacedName }

func TestMapLocal(t *testing.T) {
	ours := func(l ...string) []string { return append([]string{names.LabelManagedBy, names.ManagedBy}, l...) }
	oursSlice := func(l ...string) []string { return append([]string{discoveryv1.LabelManagedBy, names.ManagedBy}, l...) }
	svc := func(name string, l ...string) client.Object {
		return &corev1.Service{ObjectMeta: objMeta("ns", name, l...)}
	}
	slice := func(name string, l ...string) client.Object {
		return &discoveryv1.EndpointSlice{ObjectMeta: objMeta("ns", name, l...)}
	}
	local := newFakeCluster(t,
		&mcsv1beta1.ServiceExport{ObjectMeta: objMeta("ns", "web")},
		&mcsv1beta1.ServiceExport{ObjectMeta: objMeta("ns", "db-clusterset")},
		&mcsv1beta1.ServiceImport{ObjectMeta: objMeta("ns", "db")},
		&mcsv1beta1.ServiceImport{ObjectMeta: objMeta("ns", "cache")},
		&mcsv1beta1.ServiceImport{ObjectMeta: objMeta("other", "cache")},
	)
	cases := []struct {
		name         string
		obj          client.Object
		clusterLocal bool
		want         []string
	}{
		{"derived Service", svc(names.DerivedServiceName("ns", "web"), ours(mcsv1beta1.LabelServiceName, "web")...), false, []string{"ns/web"}},
		{"imported slice", slice("web-abc", oursSlice(mcsv1beta1.LabelServiceName, "web", discoveryv1.LabelServiceName, "web-mcs-x")...), false, []string{"ns/web"}},
		{"cluster-local Service", svc("db-clusterset", ours(names.LabelClusterLocalOf, "db")...), true, []string{"ns/db"}},
		{"cluster-local slice", slice("db-abc-clusterset", oursSlice(names.LabelClusterLocalOf, "db")...), true, []string{"ns/db"}},
		{"ours without a service label", svc("stray", ours()...), false, nil},
		{"slice of an exported service", slice("web-1", discoveryv1.LabelServiceName, "web"), false, []string{"ns/web"}},
		{"slice of an unexported service", slice("api-1", discoveryv1.LabelServiceName, "api"), false, nil},
		{"slice of no service", slice("loose"), false, nil},
		{"exported Service", svc("web"), false, []string{"ns/web"}},
		{"unexported Service", svc("api"), false, nil},
		{"another's Service with a cluster-local name", svc("cache-clusterset"), true, []string{"ns/cache"}},
		{"the same with the mode off", svc("cache-clusterset"), false, nil},
		{"an exported one with a cluster-local name", svc("db-clusterset"), true, []string{"ns/db", "ns/db-clusterset"}},
		{"a cluster-local name nobody wants", svc("api-clusterset"), true, nil},
	}
	for _, c := range cases {
		r := testReconciler(local, nil)
		r.clusterLocal = c.clusterLocal
		if got := sortedKeys(r.mapLocal(context.Background(), c.obj), requestKey); !slices.Equal(got, c.want) {
			t.Errorf("%s: mapLocal = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestMapNamespace(t *testing.T) {
	foreign := record("b", "ns", "foreign")
	delete(foreign.Labels, names.LabelManagedBy)
	brokerC := newFakeCluster(t, record("a", "ns", "web"), record("b", "ns", "web"), record("b", "ns", "db"),
		record("a", "other", "web"), foreign)
	r := testReconciler(nil, brokerC)
	for ns, want := range map[string][]string{"ns": {"ns/db", "ns/web"}, "other": {"other/web"}, "empty": nil} {
		obj := &corev1.Namespace{ObjectMeta: objMeta("", ns)}
		if got := sortedKeys(r.mapNamespace(context.Background(), obj), requestKey); !slices.Equal(got, want) {
			t.Errorf("mapNamespace(%s) = %v, want %v", ns, got, want)
		}
	}
}

func TestServices(t *testing.T) {
	noNamespace := record("a", "ns", "web")
	delete(noNamespace.Labels, names.LabelServiceNamespace)
	records := func(rs ...*mcsv1beta1.ServiceImport) []mcsv1beta1.ServiceImport {
		out := make([]mcsv1beta1.ServiceImport, 0, len(rs))
		for _, r := range rs {
			out = append(out, *r)
		}
		return out
	}
	cases := []struct {
		name    string
		records []mcsv1beta1.ServiceImport
		want    []types.NamespacedName
	}{
		{"none", nil, nil},
		{"each service once, in order", records(record("a", "ns", "web"), record("a", "ns", "db"), record("b", "ns", "web")),
			[]types.NamespacedName{{Namespace: "ns", Name: "web"}, {Namespace: "ns", Name: "db"}}},
		{"a record without its service namespace", records(noNamespace), nil},
	}
	for _, c := range cases {
		if got := services(c.records); !slices.Equal(got, c.want) {
			t.Errorf("%s: services = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestIndexLocalSlice(t *testing.T) {
	cases := []struct {
		name   string
		labels []string
		want   []string
	}{
		{"source slice", []string{discoveryv1.LabelManagedBy, "endpointslice-controller.k8s.io", discoveryv1.LabelServiceName, "web"},
			[]string{sourceSlice + "web"}},
		{"imported slice, named for its derived Service too", []string{discoveryv1.LabelManagedBy, names.ManagedBy,
			mcsv1beta1.LabelServiceName, "web", discoveryv1.LabelServiceName, "web-mcs-x"}, []string{importedSlice + "web"}},
		{"cluster-local slice", []string{discoveryv1.LabelManagedBy, names.ManagedBy, names.LabelClusterLocalOf, "web",
			discoveryv1.LabelServiceName, "web-clusterset"}, []string{clusterLocalSlice + "web"}},
		{"ours without labels", []string{discoveryv1.LabelManagedBy, names.ManagedBy}, nil},
		{"foreign managed-by without labels", []string{discoveryv1.LabelManagedBy, "other-mcs"}, nil},
		{"foreign with a multicluster label only", []string{discoveryv1.LabelManagedBy, "other-mcs", mcsv1beta1.LabelServiceName, "web"}, nil},
	}
	for _, c := range cases {
		if got := indexLocalSlice(&discoveryv1.EndpointSlice{ObjectMeta: objMeta("ns", "s", c.labels...)}); !slices.Equal(got, c.want) {
			t.Errorf("%s: indexLocalSlice = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestIndexByService(t *testing.T) {
	rec := record("a", "ns", "web")
	slice := &discoveryv1.EndpointSlice{ObjectMeta: rec.ObjectMeta}
	local := &mcsv1beta1.ServiceImport{ObjectMeta: objMeta("ns", "web")}
	cases := []struct {
		name string
		obj  client.Object
		want []string
	}{
		{"broker record", rec, []string{"ns/web"}},
		{"broker slice", slice, []string{"ns/web"}},
		{"a local import", local, nil},
	}
	for _, c := range cases {
		if got := indexByService(c.obj); !slices.Equal(got, c.want) {
			t.Errorf("%s: indexByService = %v, want %v", c.name, got, c.want)
		}
	}
}
