package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/controller/reach"
	"vksfleet.dev/fleet/mcs/locality"
	"vksfleet.dev/fleet/mcs/names"
)

// TestGatherRefusesHostileBrokerData: what members publish on the broker enters through gather, which keeps the
// honest exports and endpoints and leaves out, one by one, what no member should have written.
func TestGatherRefusesHostileBrokerData(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	now := time.Now()
	port := []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}
	rec := func(cluster string, edit func(*merge.Export)) client.Object {
		e := merge.Export{Cluster: cluster, Created: now, Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: port}, Slices: -1}
		if edit != nil {
			edit(&e)
		}
		r, err := broker.Record(key, e)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	slice := func(cluster, name string, eps ...discoveryv1.Endpoint) client.Object {
		return broker.Slice(cluster, key, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name}, AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps,
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		})
	}
	ep := func(addr string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName: ptr.To("node-of-a"), TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "victim"}}
	}
	crafted := strings.Repeat("a", 52) + "." + strings.Repeat("b", 60) + `\`
	forgedRecord := rec("b", nil) // written by d in its own namespace, claiming to be b
	forgedRecord.SetNamespace(names.BrokerNamespace("d"))
	forgedRecord.SetName(names.RecordName("ns", "web") + "-forged")
	objs := []client.Object{
		rec("b", func(e *merge.Export) {
			e.Annotations = map[string]string{names.AnnotationLocality: `{"dnsClusters":["b"]}`, "example.com/ok": "1"}
			e.Labels = map[string]string{"team": "payments team", "tier": "gold"}
			e.Region = "region 1"
		}),
		// Spec fields no Service could have: each record is refused whole, with its reason.
		rec("e", func(e *merge.Export) { e.Spec.IPFamilies = []corev1.IPFamily{"IPv6", "x"} }),
		rec("f", func(e *merge.Export) {
			e.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			e.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](0)}}
		}),
		rec("g", func(e *merge.Export) { e.Spec.TrafficDistribution = ptr.To("Anywhere") }),
		rec("h", func(e *merge.Export) {
			e.Spec.InternalTrafficPolicy = ptr.To[corev1.ServiceInternalTrafficPolicy]("Node")
		}),
		rec("i", func(e *merge.Export) { e.Spec.Type = "LoadBalancer" }),
		slice("b", "b-1", ep("10.1.0.1"), ep("127.0.0.1")),
		rec(crafted, nil), slice(crafted, "x-1", ep("10.9.0.1")),
		rec("c", func(e *merge.Export) { e.Spec.Ports = []mcsv1beta1.ServicePort{{Port: 80}, {Port: 81}} }),
		slice("c", "c-1", ep("10.3.0.1")),
		forgedRecord,
	}
	local, brokerCluster := newFakeCluster(t), newFakeCluster(t, objs...)
	r := testReconciler(local, brokerCluster)
	r.liveness = broker.NewLiveness("a", time.Minute)
	var leases []coordinationv1.Lease
	for _, id := range []string{"b", "c", crafted} {
		leases = append(leases, coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: names.BrokerNamespace(id), Name: names.LeaseName,
				Annotations: map[string]string{names.AnnotationClusterID: id}},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now}},
		})
	}
	r.liveness.Observe(leases, now)

	exports, sources, err := r.gather(context.Background(), key, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(exports) != 1 || exports[0].Cluster != "b" {
		t.Fatalf("exports %+v, want b's alone (the crafted id, c's unnamed ports, d's forgery and e-i's specs refused)", exports)
	}
	if exports[0].Region != "" {
		t.Errorf("region %q: a region that is no label value must be left out", exports[0].Region)
	}
	refused := map[[2]string]bool{}
	for f := range r.refusals.last[key] {
		refused[[2]string{f.from, f.problem.Reason}] = true
	}
	for cluster, reason := range map[string]string{"b": admit.ReasonRegion, "e": admit.ReasonIPFamilies, "f": admit.ReasonSessionAffinity,
		"g": admit.ReasonTrafficDistribution, "h": admit.ReasonInternalTrafficPolicy, "i": admit.ReasonType} {
		if !refused[[2]string{cluster, reason}] {
			t.Errorf("%s's record: no refusal %s among %v", cluster, reason, refused)
		}
	}
	if a := exports[0].Annotations; len(a) != 1 || a["example.com/ok"] != "1" {
		t.Errorf("annotations %v: the reserved key must be dropped", a)
	}
	if l := exports[0].Labels; len(l) != 1 || l["tier"] != "gold" {
		t.Errorf("labels %v: the invalid value must be dropped", l)
	}
	if len(sources) != 1 || sources[0].Cluster != "b" {
		t.Fatalf("sources %+v, want b's slice alone", sources)
	}
	want := []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}
	if got := sources[0].Slice.Endpoints; len(got) != 1 || got[0].Addresses[0] != want[0].Addresses[0] || got[0].NodeName != nil || got[0].TargetRef != nil {
		t.Errorf("endpoints %+v, want %+v: no loopback address, node name or target reference", got, want)
	}
}

// TestGatherTakesRegionsFromTheDirectory: an exporter's region is the one the member directory records for it,
// whatever its record claims, and none when the directory records none; only without a directory does the
// record's own claim count.
func TestGatherTakesRegionsFromTheDirectory(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	var objs []client.Object
	for _, c := range []string{"b", "c"} {
		rec, err := broker.Record(key, merge.Export{Cluster: c, Created: time.Now(), Region: "us-east", Slices: -1,
			Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}}}})
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, rec)
	}
	for _, tt := range []struct {
		name    string
		regions map[string]string
		want    map[string]string
	}{
		{"the directory's region wins, none when it records none", map[string]string{"b": "eu-west"}, map[string]string{"b": "eu-west", "c": ""}},
		{"a directory that records no region", map[string]string{}, map[string]string{"b": "", "c": ""}},
		{"no directory: the records' claims", nil, map[string]string{"b": "us-east", "c": "us-east"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := testReconciler(newFakeCluster(t), newFakeCluster(t, objs...))
			r.regions = newMemberRegions(tt.regions)
			exports, _, err := r.gather(context.Background(), key, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, e := range exports {
				got[e.Cluster] = e.Region
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("regions %v, want %v", got, tt.want)
			}
		})
	}
}

// TestImportRefusesServicesNoMemberMayImport: records for a service whose name or namespace the API server would
// refuse, or in a namespace denied to imports, are refused, counted once, and make nothing here: no error that
// retries forever, no write. An import made in a denied namespace before (by a release without the list) is
// withdrawn whole.
func TestImportRefusesServicesNoMemberMayImport(t *testing.T) {
	ctx := context.Background()
	record := func(key types.NamespacedName) client.Object {
		r, err := broker.Record(key, merge.Export{Cluster: "b", Created: time.Now(), Slices: -1, Spec: mcsv1beta1.ServiceImportSpec{
			Type: mcsv1beta1.ClusterSetIP, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	cases := []struct {
		namespace, name string
		denied          []string
		want            string // the refusal's reason, "" for an import
	}{
		{"ns", "web", []string{"default"}, ""},
		{"default", "web", nil, ""}, // the operator opened default to imports
		{"default", "kubernetes", []string{"default"}, admit.ReasonNamespaceNotAllowed},
		{"shared", "web", []string{"default", "shared"}, admit.ReasonNamespaceNotAllowed},
		{"kube-system", "kube-dns", nil, admit.ReasonNamespaceNotAllowed},
		{"kube-public", "web", []string{}, admit.ReasonNamespaceNotAllowed},
		{"kube-node-lease", "web", nil, admit.ReasonNamespaceNotAllowed},
		{"ns", "Web_1", nil, admit.ReasonServiceName},
		{"ns", "web.1", nil, admit.ReasonServiceName},
		{"ns", "1web", nil, admit.ReasonServiceName},
		{"N_S", "web", nil, admit.ReasonServiceName},
	}
	for _, c := range cases {
		key := types.NamespacedName{Namespace: c.namespace, Name: c.name}
		local := newFakeCluster(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.namespace}})
		r := testReconciler(local, newFakeCluster(t, record(key)))
		r.deniedImport = c.denied
		r.liveness = broker.NewLiveness("a", time.Minute)
		r.withdrawals = newHold(0)
		exports, sources, err := r.gather(ctx, key, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var reasons []string
		for f := range r.refusals.last[key] {
			reasons = append(reasons, f.problem.Reason)
		}
		if c.want == "" {
			if len(exports) != 1 || len(reasons) > 0 {
				t.Errorf("%s (denied %v): exports %+v, refusals %v; want b's export", key, c.denied, exports, reasons)
			}
			continue
		}
		if len(exports) != 0 || len(reasons) != 1 || reasons[0] != c.want {
			t.Errorf("%s (denied %v): exports %+v, refusals %v; want none and one %s", key, c.denied, exports, reasons, c.want)
		}
		if _, err := r.importService(ctx, key, exports, merge.Merge(exports), sources, locality.Topology{}); err != nil {
			t.Errorf("%s: importService() = %v, want nothing to do", key, err)
		}
		if n := local.writes.Load(); n != 0 {
			t.Errorf("%s: %d writes, want none", key, n)
		}
	}

	// An import in default from before: refused once default is denied to imports, it goes, all of it.
	key := types.NamespacedName{Namespace: "default", Name: "web"}
	local, brokerCluster := newFakeCluster(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}), newFakeCluster(t, record(key))
	r := testReconciler(local, brokerCluster)
	r.liveness = broker.NewLiveness("a", time.Minute)
	r.trust, r.withdrawals = broker.NewTrust(time.Minute), newHold(0)
	if err := brokerCluster.Create(ctx, broker.Sentinel("a")); err != nil {
		t.Fatal(err)
	}
	r.trust.Vouch()
	r.trust.Observe(true, time.Now())
	importOnce := func() {
		t.Helper()
		exports, sources, err := r.gather(ctx, key, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.importService(ctx, key, exports, merge.Merge(exports), sources, locality.Topology{}); err != nil {
			t.Fatal(err)
		}
	}
	importOnce()
	derivedKey := types.NamespacedName{Namespace: "default", Name: names.DerivedServiceName("default", "web")}
	if err := local.Get(ctx, derivedKey, &corev1.Service{}); err != nil {
		t.Fatalf("the import from before the upgrade was not made: %v", err)
	}
	r.deniedImport = []string{"default"}
	importOnce()
	if err := local.Get(ctx, key, &mcsv1beta1.ServiceImport{}); !apierrors.IsNotFound(err) {
		t.Errorf("ServiceImport %s: %v, want it gone", key, err)
	}
	if err := local.Get(ctx, derivedKey, &corev1.Service{}); !apierrors.IsNotFound(err) {
		t.Errorf("derived Service %s: %v, want it gone", derivedKey, err)
	}
}

// TestRefusedRecordEvent: a record refused whole is told in one Warning Event on this member's cluster id
// ClusterProperty, naming the member and the problem, when it appears: not at every gather while it stands, and
// again once it went and came back. A record that still counts, with a field dropped, records none.
func TestRefusedRecordEvent(t *testing.T) {
	ctx := context.Background()
	spec := mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}
	const property = " {kind=ClusterProperty,apiVersion=about.k8s.io/v1alpha1}"
	cases := []struct {
		name    string
		key     types.NamespacedName
		cluster string
		edit    func(*merge.Export)
		want    string // the Event, "" for none
		in      string // the broker namespace the record is in, when not its cluster's
	}{
		{"an invalid service name", types.NamespacedName{Namespace: "ns", Name: "Web_1"}, "b", nil,
			`Warning InvalidServiceName Import Member b's export of ns/Web_1 is not imported: service name "Web_1": `, ""},
		{"a namespace that takes no import", types.NamespacedName{Namespace: "kube-system", Name: "kube-dns"}, "b", nil,
			"Warning NamespaceNotAllowed Import Member b's export of kube-system/kube-dns is not imported: namespace kube-system takes no imports", ""},
		{"a spec no Service could have", types.NamespacedName{Namespace: "ns", Name: "web"}, "b",
			func(e *merge.Export) { e.Spec.Type = "LoadBalancer" },
			`Warning InvalidServiceType Import Member b's export of ns/web is not imported: type "LoadBalancer" is neither`, ""},
		{"an invalid cluster id", types.NamespacedName{Namespace: "ns", Name: "web"}, "-b-", nil,
			"Warning InvalidClusterID Import Member " + names.BrokerNamespace("-b-") + "'s export of ns/web is not imported: ", ""},
		{"a region dropped: the export counts", types.NamespacedName{Namespace: "ns", Name: "web"}, "b",
			func(e *merge.Export) { e.Region = "region 1" }, "", ""},
		{"a record in another member's namespace", types.NamespacedName{Namespace: "ns", Name: "web"}, "b", nil,
			"Warning ForeignNamespace Import Member " + names.BrokerNamespace("c") + `'s export of ns/web is not imported: its record claims cluster "b", whose broker namespace is ` + names.BrokerNamespace("b"),
			names.BrokerNamespace("c")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := merge.Export{Cluster: c.cluster, Created: time.Now(), Slices: -1, Spec: spec}
			if c.edit != nil {
				c.edit(&e)
			}
			record, err := broker.Record(c.key, e)
			if err != nil {
				t.Fatal(err)
			}
			if c.in != "" {
				record.Namespace = c.in
			}
			brokerCluster := newFakeCluster(t, record.DeepCopyObject().(client.Object))
			r := testReconciler(newFakeCluster(t), brokerCluster)
			r.liveness = broker.NewLiveness("a", time.Minute)
			recorder := events.NewFakeRecorder(10)
			recorder.Verbose = true
			r.events = recorder
			gather := func() []string {
				t.Helper()
				if _, _, err := r.gather(ctx, c.key, nil, nil); err != nil {
					t.Fatal(err)
				}
				return drain(recorder)
			}
			check := func(when string, got []string) {
				t.Helper()
				if c.want == "" {
					if len(got) != 0 {
						t.Errorf("%s: events %q, want none", when, got)
					}
					return
				}
				if len(got) != 1 || !strings.HasPrefix(got[0], c.want) || !strings.HasSuffix(got[0], property) {
					t.Errorf("%s: events %q, want one %q... on the ClusterProperty", when, got, c.want)
				}
			}
			check("first gather", append(gather(), gather()...))
			// The record goes and comes back: a new appearance.
			if err := brokerCluster.Delete(ctx, record.DeepCopyObject().(client.Object)); err != nil {
				t.Fatal(err)
			}
			if got := gather(); len(got) != 0 {
				t.Errorf("record gone: events %q, want none", got)
			}
			if err := brokerCluster.Create(ctx, record.DeepCopyObject().(client.Object)); err != nil {
				t.Fatal(err)
			}
			check("back", append(gather(), gather()...))
		})
	}
}

// TestGatherRanksByRecords: a forged export time does not win the merge against a record created before it, and
// this member ranks its own export as the others do, by its record.
func TestGatherRanksByRecords(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	spec := func(typ mcsv1beta1.ServiceImportType) mcsv1beta1.ServiceImportSpec {
		return mcsv1beta1.ServiceImportSpec{Type: typ, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}
	}
	record := func(cluster string, exported, recorded time.Time, typ mcsv1beta1.ServiceImportType) client.Object {
		r, err := broker.Record(key, merge.Export{Cluster: cluster, Created: exported, Slices: -1, Spec: spec(typ)})
		if err != nil {
			t.Fatal(err)
		}
		r.CreationTimestamp = metav1.NewTime(recorded)
		return r
	}
	for _, c := range []struct {
		name    string
		records []client.Object
		own     *merge.Export
		want    mcsv1beta1.ServiceImportType
	}{
		{"a forged 1970 after an honest record", []client.Object{
			record("b", t0, t0, mcsv1beta1.ClusterSetIP),
			record("0-forger", time.Unix(0, 0), t0.Add(time.Minute), mcsv1beta1.Headless),
		}, nil, mcsv1beta1.ClusterSetIP},
		// This member's ServiceExport is a day old, but it published it after b: every member, this one included,
		// takes b's.
		{"this member's own old export, published late", []client.Object{
			record("b", t0, t0, mcsv1beta1.ClusterSetIP),
			record("a", t0.Add(-24*time.Hour), t0.Add(time.Hour), mcsv1beta1.Headless),
		}, &merge.Export{Cluster: "a", Created: t0.Add(-24 * time.Hour), Slices: -1, Spec: spec(mcsv1beta1.Headless)}, mcsv1beta1.ClusterSetIP},
	} {
		r := testReconciler(newFakeCluster(t), newFakeCluster(t, c.records...))
		r.liveness = broker.NewLiveness("a", time.Minute)
		exports, _, err := r.gather(context.Background(), key, c.own, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := merge.Merge(exports).Spec.Type; len(exports) != 2 || got != c.want {
			t.Errorf("%s: %d exports merge to type %s, want 2 and %s", c.name, len(exports), got, c.want)
		}
	}
}

// TestHeldWithdrawalLetsOtherChangesThrough: while the broker view is untrusted, a cluster's slice that left the
// view is kept, and every other change to the import, here new endpoints of another cluster, is applied.
func TestHeldWithdrawalLetsOtherChangesThrough(t *testing.T) {
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	local := newFakeCluster(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}})
	r := testReconciler(local, newFakeCluster(t))
	r.trust, r.withdrawals = broker.NewTrust(time.Minute), newHold(time.Minute)
	r.liveness = broker.NewLiveness("a", time.Minute)
	r.events = events.NewFakeRecorder(100)
	export := func(cluster string) merge.Export {
		return merge.Export{Cluster: cluster, Created: time.Unix(0, 0), Slices: 1, Spec: mcsv1beta1.ServiceImportSpec{
			Type: mcsv1beta1.ClusterSetIP, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	}
	source := func(cluster, addr string) imports.Source {
		return imports.Source{Cluster: cluster, Slice: discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: cluster + "-1"}, AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{addr}}},
		}}
	}
	run := func(exports []merge.Export, sources []imports.Source) {
		t.Helper()
		if _, err := r.importService(ctx, key, exports, merge.Merge(exports), sources, locality.Topology{}); err != nil {
			t.Fatal(err)
		}
	}
	run([]merge.Export{export("b"), export("c")}, []imports.Source{source("b", "10.1.0.1"), source("c", "10.2.0.1")})
	// c's export leaves the view while it is untrusted, and b's endpoint moves.
	run([]merge.Export{export("b")}, []imports.Source{source("b", "10.1.0.9")})

	stored := &discoveryv1.EndpointSliceList{}
	if err := local.List(ctx, stored, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range stored.Items {
		got[s.Annotations[names.AnnotationClusterID]] = s.Endpoints[0].Addresses[0]
	}
	if want := map[string]string{"b": "10.1.0.9", "c": "10.2.0.1"}; !maps.Equal(got, want) {
		t.Errorf("imported endpoints by cluster %v, want %v: c's withdrawal held, b's change applied", got, want)
	}
}

// TestUntrustedViewShowsOnTheImport: a withdrawal the untrusted view holds past the hold shows on the import, as
// the WithdrawalHeld condition and one Warning Event, while the rest of the status goes on; once the view is
// trusted again, the withdrawal is applied and the condition goes.
func TestUntrustedViewShowsOnTheImport(t *testing.T) {
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	local, brokerCluster := newFakeCluster(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}), newFakeCluster(t)
	r := testReconciler(local, brokerCluster)
	r.trust, r.withdrawals, r.readyWaits = broker.NewTrust(time.Minute), newHold(0), newHold(0)
	r.liveness = broker.NewLiveness("a", time.Minute)
	recorder := events.NewFakeRecorder(100)
	r.events = recorder
	export := func(cluster string, port int32) merge.Export {
		return merge.Export{Cluster: cluster, Created: time.Unix(0, 0), Slices: 1, Spec: mcsv1beta1.ServiceImportSpec{
			Type: mcsv1beta1.ClusterSetIP, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: port}}}}
	}
	source := func(cluster string) imports.Source {
		return imports.Source{Cluster: cluster, Slice: discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: cluster + "-1"}, AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}}},
		}}
	}
	run := func(exports []merge.Export, sources ...imports.Source) *mcsv1beta1.ServiceImport {
		t.Helper()
		if _, err := r.importService(ctx, key, exports, merge.Merge(exports), sources, locality.Topology{}); err != nil {
			t.Fatal(err)
		}
		si := &mcsv1beta1.ServiceImport{}
		if err := local.Get(ctx, key, si); err != nil {
			t.Fatal(err)
		}
		return si
	}
	held := func(si *mcsv1beta1.ServiceImport) *metav1.Condition {
		return meta.FindStatusCondition(si.Status.Conditions, ConditionWithdrawalHeld)
	}
	warnings := func() int {
		n := 0
		for {
			select {
			case e := <-recorder.Events:
				if strings.Contains(e, ReasonBrokerViewUntrusted) {
					n++
				}
			default:
				return n
			}
		}
	}
	bc := []merge.Export{export("b", 80), export("c", 80)}
	run(bc, source("b"), source("c"))
	if si := run(bc, source("b"), source("c")); held(si) != nil || len(si.Status.Clusters) != 2 {
		t.Fatalf("trusted view, nothing withdrawn: status %+v", si.Status)
	}

	// c's export leaves the untrusted view, and b's port changes: b's change goes on, status included.
	bOnly := []merge.Export{export("b", 8080)}
	si := run(bOnly, source("b"))
	if c := held(si); c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonBrokerViewUntrusted ||
		c.ObservedGeneration != si.Generation {
		t.Errorf("c's withdrawal held: WithdrawalHeld %+v, want True/%s at generation %d", c, ReasonBrokerViewUntrusted, si.Generation)
	}
	if len(si.Status.Clusters) != 1 || si.Spec.Ports[0].Port != 8080 {
		t.Errorf("the rest of the import held back with the withdrawal: ports %+v, clusters %+v", si.Spec.Ports, si.Status.Clusters)
	}
	// Every export leaves the view, as when the broker lost its data: the import stays, still saying why.
	if si := run(nil); held(si) == nil {
		t.Errorf("all exports gone from the untrusted view: WithdrawalHeld gone, status %+v", si.Status)
	}
	if n := warnings(); n != 1 {
		t.Errorf("%d %s Events, want one, when the condition appeared", n, ReasonBrokerViewUntrusted)
	}

	// The view is trusted again: c's slice leaves, and the condition with it.
	if err := brokerCluster.Create(ctx, broker.Sentinel("a")); err != nil {
		t.Fatal(err)
	}
	r.trust.Vouch()
	r.trust.Observe(true, time.Now())
	si = run(bOnly, source("b"))
	slices := &discoveryv1.EndpointSliceList{}
	if err := local.List(ctx, slices, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	if held(si) != nil || len(slices.Items) != 1 || slices.Items[0].Annotations[names.AnnotationClusterID] != "b" {
		t.Errorf("view trusted: WithdrawalHeld %+v and %d slices, want none and b's alone", held(si), len(slices.Items))
	}
}

// refusingServices is a fake cluster whose API server refuses every Service create and update with refusal while it
// is set, and otherwise allocates a ClusterIP to each Service it creates.
type refusingServices struct {
	*fakeCluster
	refusal error
}

func (c *refusingServices) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if s, ok := obj.(*corev1.Service); ok {
		if c.refusal != nil {
			return c.refusal
		}
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.10", []string{"10.96.0.10"}
	}
	return c.fakeCluster.Create(ctx, obj, opts...)
}

func (c *refusingServices) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if _, ok := obj.(*corev1.Service); ok && c.refusal != nil {
		return c.refusal
	}
	return c.fakeCluster.Update(ctx, obj, opts...)
}

// TestRefusedDerivedServiceShowsOnTheImport: a derived Service the API server refuses turns the import
// Ready=False/DerivedServiceRefused with the API server's answer, and records one Warning Event for each new answer,
// not one at every retry; the error still returns, so that the retries back off. Once the Service is written, Ready
// is what it would otherwise be. A race with the cache shows nothing.
func TestRefusedDerivedServiceShowsOnTheImport(t *testing.T) {
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	local := &refusingServices{fakeCluster: newFakeCluster(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}})}
	r := testReconciler(local, newFakeCluster(t))
	r.trust, r.withdrawals, r.readyWaits = broker.NewTrust(time.Minute), newHold(0), newHold(0)
	r.liveness = broker.NewLiveness("a", time.Minute)
	recorder := events.NewFakeRecorder(100)
	r.events = recorder
	exports := []merge.Export{{Cluster: "b", Created: time.Unix(0, 0), Slices: 1, Spec: mcsv1beta1.ServiceImportSpec{
		Type: mcsv1beta1.ClusterSetIP, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}}
	sources := []imports.Source{{Cluster: "b", Slice: discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "b-1"}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}}},
	}}}
	gr, derived := schema.GroupResource{Resource: "services"}, names.DerivedServiceName("ns", "web")
	denied := apierrors.NewForbidden(gr, derived, errors.New("admission webhook \"policy.example.com\" denied the request"))
	invalid := apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, derived,
		field.ErrorList{field.Invalid(field.NewPath("spec", "ports"), 80, "not allowed here")})
	// run imports the service, wanting an error or not, and returns the stored Ready condition and the
	// DerivedServiceRefused Events recorded.
	run := func(wantErr bool) (*metav1.Condition, []string) {
		t.Helper()
		_, err := r.importService(ctx, key, exports, merge.Merge(exports), sources, locality.Topology{})
		if (err != nil) != wantErr {
			t.Fatalf("importService() = %v, want an error: %v", err, wantErr)
		}
		si := &mcsv1beta1.ServiceImport{}
		if err := local.Get(ctx, key, si); err != nil {
			t.Fatal(err)
		}
		var refused []string
		for _, e := range drain(recorder) {
			if strings.Contains(e, ReasonDerivedServiceRefused) {
				refused = append(refused, e)
			}
		}
		return meta.FindStatusCondition(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady)), refused
	}
	isRefused := func(c *metav1.Condition, answer error) bool {
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonDerivedServiceRefused &&
			strings.Contains(c.Message, answer.Error())
	}

	// A race with the cache is retried at once and shows nothing.
	local.refusal = apierrors.NewAlreadyExists(gr, derived)
	if ready, refused := run(true); ready != nil || len(refused) != 0 {
		t.Errorf("a race: Ready %+v, Events %q; want neither", ready, refused)
	}
	local.refusal = denied
	for i := range 2 {
		ready, refused := run(true)
		if !isRefused(ready, denied) {
			t.Errorf("refused, run %d: Ready %+v, want False/%s with the API server's answer", i+1, ready, ReasonDerivedServiceRefused)
		}
		if want := 1 - i; len(refused) != want || (want == 1 && !strings.HasPrefix(refused[0], "Warning "+ReasonDerivedServiceRefused)) {
			t.Errorf("refused, run %d: Events %q, want %d Warning", i+1, refused, want)
		}
	}
	// Another answer is another refusal.
	local.refusal = invalid
	if ready, refused := run(true); !isRefused(ready, invalid) || len(refused) != 1 {
		t.Errorf("another answer: Ready %+v, Events %q; want it, and one Event", ready, refused)
	}
	// Written at last: Ready again, as without the refusal.
	local.refusal = nil
	ready, refused := run(false)
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.Reason != string(mcsv1beta1.ServiceImportReasonReady) {
		t.Errorf("written: Ready %+v, want True/Ready", ready)
	}
	if len(refused) != 1 || !strings.HasPrefix(refused[0], "Normal Ready Ready True/Ready (was False/"+ReasonDerivedServiceRefused) {
		t.Errorf("written: Events %q, want the Normal Ready one", refused)
	}
}

// TestGatherUnderTwoSignals: with the data-plane probe on, an exporter whose endpoints do not answer from here is
// imported not ready while its Lease lives, one whose Lease lapsed while its endpoints answer keeps them (and the
// import says it is stale), and one that is both lost or never probed leaves; without the probe, the Lease alone
// decides.
func TestGatherUnderTwoSignals(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	now := time.Now()
	var objs []client.Object
	for _, c := range []string{"alive", "cut", "stale", "gone", "unprobed"} {
		rec, err := broker.Record(key, merge.Export{Cluster: c, Created: now, Slices: -1, Spec: mcsv1beta1.ServiceImportSpec{
			Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}})
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, rec, broker.Slice(c, key, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: c}, AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:     []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		}))
	}
	lease := func(id string, renewed time.Time) coordinationv1.Lease {
		return coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: names.BrokerNamespace(id), Name: names.LeaseName,
				Annotations: map[string]string{names.AnnotationClusterID: id}},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}},
		}
	}
	for _, probe := range []bool{true, false} {
		r := testReconciler(newFakeCluster(t), newFakeCluster(t, objs...))
		r.liveness = broker.NewLiveness("self", time.Minute)
		// All seen renewed 2 minutes ago; since, alive and cut renewed, the others did not and are lost by now.
		then := now.Add(-2 * time.Minute)
		r.liveness.Observe([]coordinationv1.Lease{lease("alive", then), lease("cut", then), lease("stale", then),
			lease("gone", then), lease("unprobed", then)}, then)
		r.liveness.Observe([]coordinationv1.Lease{lease("alive", now), lease("cut", now), lease("stale", then),
			lease("gone", then), lease("unprobed", then)}, now)
		want := map[string]string{"alive": "ready", "cut": "ready"}
		if probe {
			r.reach = reach.New(1, 1)
			r.reach.Observe("alive", true, now)
			r.reach.Observe("cut", false, now)
			r.reach.Observe("stale", true, now)
			r.reach.Observe("gone", false, now)
			want = map[string]string{"alive": "ready", "cut": "not ready", "stale": "ready"}
		}
		_, sources, err := r.gather(context.Background(), key, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, s := range sources {
			e := s.Slice.Endpoints[0].Conditions
			got[s.Cluster] = "ready"
			if !ptr.Deref(e.Ready, true) && !ptr.Deref(e.Serving, true) {
				got[s.Cluster] = "not ready"
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("probe %v: endpoints %v, want %v", probe, got, want)
		}
		if !probe {
			continue
		}
		exports, sources, _ := r.gather(context.Background(), key, nil, nil)
		stale, unreachable := r.memberConditions(exports, sources, now)
		if stale == nil || !strings.Contains(stale.Message, "stale (") || strings.Contains(stale.Message, "gone") {
			t.Errorf("Stale condition %+v, want stale alone", stale)
		}
		if unreachable == nil || !strings.Contains(unreachable.Message, "cut (") || !strings.Contains(unreachable.Message, "gone (") {
			t.Errorf("Unreachable condition %+v, want cut and gone", unreachable)
		}
		again, _ := r.memberConditions(exports, sources, now.Add(time.Minute))
		if again.Message != stale.Message {
			t.Errorf("the Stale message changes with time (a status write each reconcile):\n%s\n%s", stale.Message, again.Message)
		}
	}
}

// limitedEndpoints are n ready endpoints with distinct addresses in 10.<net>.0.0/16.
func limitedEndpoints(net, n int) []discoveryv1.Endpoint {
	eps := make([]discoveryv1.Endpoint, n)
	for i := range eps {
		eps[i] = discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", net, i/250, i%250+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	}
	return eps
}

// limitsBroker is a broker of the records and slices, with the Leases of the members that write them.
func limitsBroker(t *testing.T, r *reconciler, objs []client.Object, members ...string) {
	t.Helper()
	r.broker = newFakeCluster(t, objs...)
	r.liveness = broker.NewLiveness("a", time.Minute)
	var leases []coordinationv1.Lease
	for _, id := range members {
		leases = append(leases, coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: names.BrokerNamespace(id), Name: names.LeaseName,
				Annotations: map[string]string{names.AnnotationClusterID: id}},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: time.Now()}},
		})
	}
	r.liveness.Observe(leases, time.Now())
}

// limitsRecord and limitsSlice are a member's broker record of svc and one of its slices, of n endpoints.
func limitsRecord(t *testing.T, svc types.NamespacedName, cluster string) client.Object {
	t.Helper()
	rec, err := broker.Record(svc, merge.Export{Cluster: cluster, Created: time.Now(), Slices: -1, Spec: mcsv1beta1.ServiceImportSpec{
		Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func limitsSlice(svc types.NamespacedName, cluster, name string, net, n int) *discoveryv1.EndpointSlice {
	return broker.Slice(cluster, svc, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: limitedEndpoints(net, n),
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}}})
}

// TestGatherLimits: an import takes, of each member's export, the first slices by name within the endpoints one
// service may have, and within what the member's other services leave of its total; the rest is refused, counted
// once, and told in a Warning Event on the ServiceImport. A service that lets go of its share leaves it to others.
func TestGatherLimits(t *testing.T) {
	ctx := context.Background()
	web, api := types.NamespacedName{Namespace: "ns", Name: "web"}, types.NamespacedName{Namespace: "ns", Name: "api"}
	objs := []client.Object{limitsRecord(t, web, "b"), limitsRecord(t, api, "b"), limitsRecord(t, web, "c")}
	// Listed out of name order: what is kept must not depend on the order the broker lists slices in.
	for _, name := range []string{"web-5", "web-3", "web-1", "web-4", "web-2"} {
		objs = append(objs, limitsSlice(web, "b", name, int(name[4]-'0'), 100))
	}
	for i, n := range []int{100, 100, 50} {
		objs = append(objs, limitsSlice(api, "b", fmt.Sprintf("api-%d", i+1), 10+i, n))
	}
	objs = append(objs, limitsSlice(web, "c", "web-c", 20, 200))
	recorder := events.NewFakeRecorder(10)
	r := testReconciler(newFakeCluster(t), nil)
	r.events = recorder
	r.limits = newLimits(Options{MaxEndpointsPerService: 250, MaxEndpointsPerMember: 400})
	limitsBroker(t, r, objs, "b", "c")
	counted := func(reason string) float64 {
		m := &dto.Metric{}
		if err := refusedTotal.WithLabelValues("a", "b", reason).Write(m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	before := map[string]float64{}
	for _, reason := range admit.LimitReasons {
		before[reason] = counted(reason)
	}
	taken := func(key types.NamespacedName) map[string][]string {
		t.Helper()
		_, sources, err := r.gather(ctx, key, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]string{}
		for _, s := range sources {
			got[s.Cluster] = append(got[s.Cluster], s.Slice.Name)
		}
		return got
	}

	// web: b's first two slices (200 of 250 endpoints), all of c's, which has a share of its own.
	if got, want := taken(web), map[string][]string{"b": {"web-1", "web-2"}, "c": {"web-c"}}; !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("web: took %v, want %v", got, want)
	}
	// api: 200 of b's 400 endpoints are web's, so 2 of its 3 slices (250 endpoints) fit.
	if got, want := taken(api), map[string][]string{"b": {"api-1", "api-2"}}; !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("api: took %v, want %v", got, want)
	}
	for key, reason := range map[types.NamespacedName]string{web: admit.ReasonTooManyEndpoints, api: admit.ReasonTooManyMemberEndpoints} {
		var got []refusal
		for f := range r.refusals.last[key] {
			got = append(got, f)
		}
		if len(got) != 1 || got[0].from != "b" || got[0].problem.Reason != reason {
			t.Errorf("%s: refusals %+v, want one %s from b", key, got, reason)
		}
	}
	// Reconciled again, nothing changed: nothing is counted or told again.
	taken(web)
	taken(api)
	for _, reason := range []string{admit.ReasonTooManyEndpoints, admit.ReasonTooManyMemberEndpoints} {
		if n := counted(reason) - before[reason]; n != 1 {
			t.Errorf("%s counted %v times, want once", reason, n)
		}
	}
	got := drain(recorder)
	if len(got) != 2 || !strings.HasPrefix(got[0], "Warning TooManyEndpoints Member b: EndpointSlices from web-3 on are left out") ||
		!strings.HasPrefix(got[1], "Warning TooManyMemberEndpoints Member b: EndpointSlices from api-3 on are left out") {
		t.Errorf("events %q, want a Warning for each limit", got)
	}

	// b stops exporting web: its share goes to api, once api is gathered again.
	if err := r.broker.Delete(ctx, objs[0]); err != nil {
		t.Fatal(err)
	}
	taken(web)
	if got, want := taken(api), map[string][]string{"b": {"api-1", "api-2", "api-3"}}; !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("api after web's unexport: took %v, want %v", got, want)
	}
}

// sharedSlices lists EndpointSlices as a cache does: its own objects with client.UnsafeDisableDeepCopy, copies of
// them without.
type sharedSlices struct {
	client.Client
	items []discoveryv1.EndpointSlice
}

func (c sharedSlices) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	l, ok := list.(*discoveryv1.EndpointSliceList)
	if !ok {
		return c.Client.List(ctx, list, opts...)
	}
	o := (&client.ListOptions{}).ApplyOptions(opts)
	l.Items = make([]discoveryv1.EndpointSlice, len(c.items))
	for i := range c.items {
		if o.UnsafeDisableDeepCopy != nil && *o.UnsafeDisableDeepCopy {
			l.Items[i] = c.items[i]
		} else {
			c.items[i].DeepCopyInto(&l.Items[i])
		}
	}
	return nil
}

// TestGatherMemoryBounded: a member that publishes a million endpoints for one service, in a thousand slices,
// costs an import what the limit allows, not what the member published: gather neither copies what it leaves out
// nor keeps more than the limit.
func TestGatherMemoryBounded(t *testing.T) {
	svc := types.NamespacedName{Namespace: "ns", Name: "web"}
	// The slices share one array of endpoints, so that building them costs the test little.
	eps := limitedEndpoints(1, admit.MaxEndpointsPerSlice)
	items := make([]discoveryv1.EndpointSlice, 1000)
	for i := range items {
		s := limitsSlice(svc, "b", fmt.Sprintf("web-%04d", i), 1, 0)
		s.Endpoints = eps
		items[i] = *s
	}
	r := testReconciler(newFakeCluster(t), nil)
	limitsBroker(t, r, []client.Object{limitsRecord(t, svc, "b")}, "b")
	r.broker = sharedSlices{Client: r.broker, items: items}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, sources, err := r.gather(context.Background(), svc, nil, nil)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := 0
	for _, s := range sources {
		endpoints += len(s.Slice.Endpoints)
	}
	if endpoints != DefaultMaxEndpointsPerService || len(sources) != DefaultMaxEndpointsPerService/admit.MaxEndpointsPerSlice {
		t.Errorf("took %d endpoints in %d slices, want %d in %d", endpoints, len(sources), DefaultMaxEndpointsPerService,
			DefaultMaxEndpointsPerService/admit.MaxEndpointsPerSlice)
	}
	// Copying what is taken costs a few hundred bytes an endpoint: a few MB for the limit, against hundreds for
	// the million.
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 32<<20 {
		t.Errorf("gather allocated %d MiB, want at most 32", allocated>>20)
	}
}
