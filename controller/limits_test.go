package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/export"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/locality"
)

func TestShare(t *testing.T) {
	web, api, db := types.NamespacedName{Namespace: "ns", Name: "web"}, types.NamespacedName{Namespace: "ns", Name: "api"},
		types.NamespacedName{Namespace: "ns", Name: "db"}
	s := newShare(10)
	steps := []struct {
		name  string
		group string
		key   types.NamespacedName
		sizes []int
		want  int
		total int // the group's, after
	}{
		{"the first takes what fits", "b", web, []int{4, 4, 4}, 2, 8},
		{"another takes what is left", "b", api, []int{1, 2, 3}, 1, 9},
		{"a group has a share of its own", "c", db, []int{10}, 1, 10},
		{"a service keeps what it holds", "b", web, []int{4, 4, 4}, 2, 9},
		{"and may shrink", "b", web, []int{4}, 1, 5},
		{"what it leaves goes to the next that asks", "b", api, []int{1, 2, 3}, 3, 10},
		{"nothing", "b", web, nil, 0, 6},
	}
	for _, st := range steps {
		if got := s.take(st.group, st.key, st.sizes); got != st.want || s.total[st.group] != st.total {
			t.Errorf("%s: take(%s, %s, %v) = %d with total %d, want %d with total %d", st.name, st.group, st.key, st.sizes,
				got, s.total[st.group], st.want, st.total)
		}
	}
	s.keepOnly(api, map[string]bool{"c": true})
	s.keepOnly(db, map[string]bool{"c": true})
	if len(s.held) != 1 || s.total["b"] != 0 || s.total["c"] != 10 {
		t.Errorf("after keepOnly: held %v, totals %v; want only c's db", s.held, s.total)
	}

	seeded := newShare(10)
	read := 0
	seed := func() (map[string]map[types.NamespacedName]int, error) {
		read++
		return map[string]map[types.NamespacedName]int{"ns": {api: 7}}, nil
	}
	for range 2 {
		if err := seeded.seed(seed); err != nil {
			t.Fatal(err)
		}
	}
	if read != 1 || seeded.take("ns", web, []int{1, 1, 1, 1}) != 3 {
		t.Errorf("seeded share: read %d times, held %v; want read once and 7 of 10 held by api", read, seeded.held)
	}
}

// TestExportLimits: an export publishes the first of its slices by name within --max-endpoints-per-service, and
// within what the namespace's other exports leave of --max-slices-per-namespace, which start from what is on the
// broker; its Ready condition says what it leaves out, with a Warning Event. An unexport leaves its share to the
// namespace's other exports.
func TestExportLimits(t *testing.T) {
	ctx := context.Background()
	web, api := types.NamespacedName{Namespace: "ns", Name: "web"}, types.NamespacedName{Namespace: "ns", Name: "api"}
	var objs []client.Object
	for _, key := range []types.NamespacedName{web, api} {
		objs = append(objs, &corev1.Service{ObjectMeta: objMeta(key.Namespace, key.Name), Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.1", Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
			&mcsv1beta1.ServiceExport{ObjectMeta: objMeta(key.Namespace, key.Name)})
	}
	// web: three slices of 100 endpoints; api: two of 10.
	for i := range 3 {
		objs = append(objs, &discoveryv1.EndpointSlice{ObjectMeta: objMeta("ns", fmt.Sprintf("web-%d", i), discoveryv1.LabelServiceName, "web"),
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: limitedEndpoints(i, 100)})
	}
	for i := range 2 {
		objs = append(objs, &discoveryv1.EndpointSlice{ObjectMeta: objMeta("ns", fmt.Sprintf("api-%d", i), discoveryv1.LabelServiceName, "api"),
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: limitedEndpoints(10+i, 10)})
	}
	local := newFakeCluster(t, objs...)
	recorder := events.NewFakeRecorder(10)
	opts := Options{MaxEndpointsPerService: 250, MaxEndpointsPerMember: 1000, MaxSlicesPerNamespace: 3}
	// The broker holds one slice of api's already: a restart leaves api what it had.
	published := broker.Slice("a", api, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "ns.api.api-0"},
		AddressType: discoveryv1.AddressTypeIPv4})
	r := testReconciler(local, newFakeCluster(t, published))
	r.events, r.limits = recorder, newLimits(opts)

	exported := func(key types.NamespacedName) (int, *metav1.Condition) {
		t.Helper()
		se := &mcsv1beta1.ServiceExport{}
		if err := local.Get(ctx, key, se); apierrors.IsNotFound(err) {
			se = nil
		} else if err != nil {
			t.Fatal(err)
		}
		own, _, valid, err := r.export(ctx, key, se, locality.Topology{})
		if err != nil {
			t.Fatal(err)
		}
		if se == nil {
			return 0, nil
		}
		if err := r.exportStatus(ctx, se, valid, own != nil, nil, merge.Result{}); err != nil {
			t.Fatal(err)
		}
		if err := local.Get(ctx, key, se); err != nil {
			t.Fatal(err)
		}
		return own.Slices, meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady))
	}

	// web: 250 endpoints allow 2 of its slices, and the namespace's 3 less api's 1 on the broker leave 2.
	if n, ready := exported(web); n != 2 || ready.Status != metav1.ConditionFalse || ready.Reason != export.ReasonTooManyEndpoints ||
		!strings.Contains(ready.Message, "--max-endpoints-per-service") {
		t.Errorf("web: %d slices, Ready %+v; want 2, False/%s", n, ready, export.ReasonTooManyEndpoints)
	}
	// api: web holds 2 of the namespace's 3.
	if n, ready := exported(api); n != 1 || ready.Status != metav1.ConditionFalse || ready.Reason != export.ReasonNamespaceLimit ||
		!strings.Contains(ready.Message, "namespace ns may use at most 3") {
		t.Errorf("api: %d slices, Ready %+v; want 1, False/%s", n, ready, export.ReasonNamespaceLimit)
	}
	got := drain(recorder)
	if len(got) != 2 || !strings.HasPrefix(got[0], "Warning TooManyEndpoints Ready False/TooManyEndpoints (was unset)") ||
		!strings.HasPrefix(got[1], "Warning NamespaceLimit Ready False/NamespaceLimit (was unset)") {
		t.Errorf("events %q, want a Warning for each limit", got)
	}

	// web is unexported: api takes what it left, and is Ready.
	if err := local.Delete(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: objMeta("ns", "web")}); err != nil {
		t.Fatal(err)
	}
	exported(web)
	if n, ready := exported(api); n != 2 || ready.Status != metav1.ConditionTrue {
		t.Errorf("api after web's unexport: %d slices, Ready %+v; want 2, True", n, ready)
	}
}

// TestBrokerCacheStripsManagedFields: the broker cache holds no managedFields, which the controller never reads.
func TestBrokerCacheStripsManagedFields(t *testing.T) {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "x",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "mcs-controller", Operation: metav1.ManagedFieldsOperationUpdate}}}}
	transform := RecordCacheOptions().DefaultTransform
	if transform == nil {
		t.Fatal("the broker cache has no transform")
	}
	if _, err := transform(s); err != nil || s.ManagedFields != nil {
		t.Errorf("transform left managedFields %v (error %v)", s.ManagedFields, err)
	}
}

// TestBrokerCacheTrimsSlices: the broker cache keeps of an EndpointSlice only what the import reads.
func TestBrokerCacheTrimsSlices(t *testing.T) {
	opts := RecordCacheOptions()
	var transform func(any) (any, error)
	for obj, by := range opts.ByObject {
		if _, ok := obj.(*discoveryv1.EndpointSlice); ok {
			transform = by.Transform
		}
	}
	if transform == nil {
		t.Fatal("the broker cache has no EndpointSlice transform")
	}
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "x",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "mcs-controller"}}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1", "10.0.0.2"}, NodeName: ptr.To("n")}}}
	if _, err := transform(s); err != nil || s.ManagedFields != nil || len(s.Endpoints[0].Addresses) != 1 || s.Endpoints[0].NodeName != nil {
		t.Errorf("transform left %+v (error %v)", s, err)
	}
}
