package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/locality"
	"vksfleet.dev/fleet/mcs/names"
)

// TestOwnsImport: a ServiceImport is the controller's when marked, or, made by a release before the mark, when one
// of the controller's own objects names it as owner; another implementation's is neither, though an object of
// the controller's with the derived name exists.
func TestOwnsImport(t *testing.T) {
	si := func(labels ...string) *mcsv1beta1.ServiceImport {
		s := &mcsv1beta1.ServiceImport{ObjectMeta: objMeta("ns", "web", labels...)}
		s.UID = "si-uid"
		return s
	}
	ownedBy := func(uid types.UID) []metav1.OwnerReference { return []metav1.OwnerReference{{UID: uid}} }
	ours := objMeta("ns", "web-mcs-x", names.LabelManagedBy, names.ManagedBy)
	derived := func(owner types.UID) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ours.Namespace, Name: ours.Name, Labels: ours.Labels,
			OwnerReferences: ownedBy(owner)}}
	}
	slice := func(owner types.UID) []discoveryv1.EndpointSlice {
		return []discoveryv1.EndpointSlice{{ObjectMeta: metav1.ObjectMeta{Name: "web-1", OwnerReferences: ownedBy(owner)}}}
	}
	for _, c := range []struct {
		name string
		got  storedImport
		want bool
	}{
		{"marked", storedImport{si: si(names.LabelImportManagedBy, names.ManagedBy)}, true},
		{"before the mark, owning the derived Service", storedImport{si: si(), derived: derived("si-uid")}, true},
		{"before the mark, owning an imported slice", storedImport{si: si(), slices: slice("si-uid")}, true},
		{"before the mark, owning a cluster-local slice", storedImport{si: si(), clusterLocalSlices: slice("si-uid")}, true},
		{"before the mark, headless without slices: its locality", storedImport{si: func() *mcsv1beta1.ServiceImport {
			s := si()
			s.Annotations = map[string]string{names.AnnotationLocality: "{}"}
			return s
		}()}, true},
		{"Lighthouse's", storedImport{si: si("lighthouse.submariner.io/sourceCluster", "x")}, false},
		{"exported labels saying app.kubernetes.io/managed-by", storedImport{si: si(names.LabelManagedBy, names.ManagedBy)}, false},
		{"another's, beside a derived Service of an older import", storedImport{si: si(), derived: derived("old-uid"), slices: slice("old-uid")}, false},
	} {
		if got := ownsImport(c.got); got != c.want {
			t.Errorf("%s: ownsImport = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestForeignServiceImportLeftAlone: beside another implementation's ServiceImports (Lighthouse's, during a
// migration), the controller imports its own services as ever, but never changes or deletes another's: not when
// the clusterset exports a service of its name, not when that export changes or goes, not when the controller's own
// import beside it is withdrawn. The conflict is reported once, as a Warning Event on that ServiceImport and on the
// local ServiceExport, and in the gauge; once the other's ServiceImport is deleted, the service is imported.
func TestForeignServiceImportLeftAlone(t *testing.T) {
	ctx := context.Background()
	web := types.NamespacedName{Namespace: "ns", Name: "web"}
	api := types.NamespacedName{Namespace: "ns", Name: "api"}
	lighthouse := &mcsv1beta1.ServiceImport{
		ObjectMeta: objMeta("ns", "web", "lighthouse.submariner.io/sourceCluster", "east", names.LabelManagedBy, "lighthouse"),
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: []string{"242.0.0.1"},
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
	}
	se := &mcsv1beta1.ServiceExport{ObjectMeta: objMeta("ns", "web")}
	local := newFakeCluster(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, lighthouse, se)
	const id = "foreign-test" // a gauge of its own
	r := testReconciler(local, newFakeCluster(t, broker.Sentinel(id)))
	r.id = id
	r.liveness = broker.NewLiveness(r.id, time.Minute)
	r.trust, r.withdrawals, r.readyWaits = broker.NewTrust(time.Minute), newHold(0), newHold(0)
	r.trust.Vouch()
	r.trust.Observe(true, time.Now())
	recorder := events.NewFakeRecorder(100)
	r.events = recorder

	stored := &mcsv1beta1.ServiceImport{}
	if err := local.Get(ctx, web, stored); err != nil {
		t.Fatal(err)
	}
	export := func(port int32) []merge.Export {
		return []merge.Export{{Cluster: "b", Created: time.Unix(0, 0), Slices: 1, Spec: mcsv1beta1.ServiceImportSpec{
			Type: mcsv1beta1.ClusterSetIP, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: port}}}}}
	}
	source := []imports.Source{{Cluster: "b", Slice: discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "b-1"}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}}},
	}}}
	run := func(key types.NamespacedName, exports []merge.Export) {
		t.Helper()
		var sources []imports.Source
		if len(exports) > 0 {
			sources = source
		}
		if _, err := r.importService(ctx, key, exports, merge.Merge(exports), sources, locality.Topology{}); err != nil {
			t.Fatalf("importService(%s) = %v", key, err)
		}
	}
	untouched := func(when string) {
		t.Helper()
		now := &mcsv1beta1.ServiceImport{}
		if err := local.Get(ctx, web, now); err != nil {
			t.Fatalf("%s: Lighthouse's ServiceImport: %v, want it kept", when, err)
		}
		if now.ResourceVersion != stored.ResourceVersion || !equality.Semantic.DeepEqual(now, stored) {
			t.Errorf("%s: Lighthouse's ServiceImport changed:\n%+v\nwas\n%+v", when, now, stored)
		}
		derived := &corev1.Service{}
		err := local.Get(ctx, types.NamespacedName{Namespace: "ns", Name: names.DerivedServiceName("ns", "web")}, derived)
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s: a derived Service for web (%v), want none while Lighthouse's ServiceImport stands", when, err)
		}
		slices := &discoveryv1.EndpointSliceList{}
		if err := local.List(ctx, slices, client.InNamespace("ns"), client.MatchingLabels{mcsv1beta1.LabelServiceName: "web"}); err != nil {
			t.Fatal(err)
		}
		if len(slices.Items) != 0 {
			t.Errorf("%s: %d slices imported for web, want none", when, len(slices.Items))
		}
	}

	// Ours beside it: api is imported and marked; web is left alone, whatever its exports do.
	run(api, export(80))
	run(web, export(80))
	untouched("web exported")
	run(web, export(8080))
	untouched("web's export changed")
	ours := &mcsv1beta1.ServiceImport{}
	if err := local.Get(ctx, api, ours); err != nil || ours.Labels[names.LabelImportManagedBy] != names.ManagedBy {
		t.Fatalf("ServiceImport api: %v, labels %v; want it imported and marked", err, ours.Labels)
	}
	if n := notOurs(t, r.id); n != 1 {
		t.Errorf("mcs_controller_service_imports_not_ours = %v, want 1", n)
	}
	var warnings []string
	for _, e := range drain(recorder) {
		if strings.Contains(e, ReasonNameInUse) {
			warnings = append(warnings, e)
		}
	}
	if len(warnings) != 2 {
		t.Errorf("Events %q, want two %s Warnings (on the ServiceImport and the ServiceExport), once", warnings, ReasonNameInUse)
	}

	// Unexported everywhere: our api goes, Lighthouse's web stays.
	run(api, nil)
	run(web, nil)
	untouched("web unexported")
	if err := local.Get(ctx, api, &mcsv1beta1.ServiceImport{}); !apierrors.IsNotFound(err) {
		t.Errorf("ServiceImport api: %v, want it withdrawn", err)
	}
	if n := notOurs(t, r.id); n != 0 {
		t.Errorf("mcs_controller_service_imports_not_ours = %v once web is unexported, want 0", n)
	}

	// The migration's last step: Lighthouse's ServiceImport is deleted, and web is imported.
	if err := local.Delete(ctx, stored); err != nil {
		t.Fatal(err)
	}
	run(web, export(80))
	mine := &mcsv1beta1.ServiceImport{}
	if err := local.Get(ctx, web, mine); err != nil || mine.Labels[names.LabelImportManagedBy] != names.ManagedBy {
		t.Errorf("ServiceImport web after Lighthouse's went: %v, labels %v; want it imported and marked", err, mine.Labels)
	}
}

// notOurs reads mcs_controller_service_imports_not_ours of controller id.
func notOurs(t *testing.T, id string) float64 {
	t.Helper()
	var m dto.Metric
	if err := importsNotOurs.WithLabelValues(id).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}
