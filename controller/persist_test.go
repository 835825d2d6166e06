package controller

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/controller/reach"
	"vksfleet.dev/fleet/mcs/names"
)

// What is written: every renewal the Liveness remembers, the verdicts that change a decision, and past the bound
// the unreachable members first.
func TestRememberAt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	alive := func(id string) bool { return id != "lapsed" }
	renewal := broker.Renewal{RenewTime: t0.Add(-time.Minute), SeenAt: t0.Add(-time.Second)}
	got := rememberAt(map[string]broker.Renewal{"behind": renewal, "cut": renewal}, map[string]verdict{
		"cut":     {reach.Unreachable, t0.Add(-time.Hour)},
		"lapsed":  {reach.Reachable, t0.Add(-2 * time.Hour)},
		"fine":    {reach.Reachable, t0.Add(-time.Hour)},
		"probing": {reach.Unknown, t0},
		"late":    {reach.Unreachable, t0.Add(time.Millisecond)}, // a round that ended after the renewal read the clock
	}, alive, t0)
	want := memory{At: t0, Members: map[string]memberMemory{
		"behind": {Renewed: renewal.RenewTime, Seen: renewal.SeenAt},
		"cut":    {Renewed: renewal.RenewTime, Seen: renewal.SeenAt, Reach: "unreachable", Since: t0.Add(-time.Hour)},
		"lapsed": {Reach: "reachable", Since: t0.Add(-2 * time.Hour)},
		"late":   {Reach: "unreachable", Since: t0},
	}}
	if !got.At.Equal(want.At) || !maps.Equal(got.Members, want.Members) {
		t.Errorf("rememberAt =\n%+v\nwant\n%+v", got, want)
	}
	if _, err := decodeMemory(got.encode(), "a"); err != nil {
		t.Errorf("what is written is not read back: %v", err)
	}
	if s := rememberAt(map[string]broker.Renewal{}, map[string]verdict{"fine": {reach.Reachable, t0}}, alive, t0).encode(); s != "" {
		t.Errorf("nothing to remember is written as %q, want nothing", s)
	}

	// Past the bound: the unreachable members first, then the kept-in-use, then renewals.
	renewals, verdicts := map[string]broker.Renewal{}, map[string]verdict{}
	for i := range maxRemembered {
		renewals[fmt.Sprintf("r%03d", i)] = renewal
	}
	verdicts["z-cut"] = verdict{reach.Unreachable, t0}
	verdicts["lapsed"] = verdict{reach.Reachable, t0}
	m := rememberAt(renewals, verdicts, alive, t0)
	if len(m.Members) != maxRemembered || m.Members["z-cut"].Reach == "" || m.Members["lapsed"].Reach == "" {
		t.Errorf("past the bound: %d members kept, z-cut %+v, lapsed %+v", len(m.Members), m.Members["z-cut"], m.Members["lapsed"])
	}
	if _, ok := m.Members[fmt.Sprintf("r%03d", maxRemembered-1)]; ok {
		t.Error("past the bound, the last renewal by id is kept over a verdict")
	}
}

// What is read back: what a controller writes, and nothing of an annotation out of shape.
func TestDecodeMemory(t *testing.T) {
	const at = `"2026-01-01T00:00:00Z"`
	before, after := `"2025-12-31T23:59:00Z"`, `"2026-01-01T00:00:01Z"`
	valid := fmt.Sprintf(`{"at":%s,"members":{"b":{"renewed":%s,"seen":%s},"c":{"reach":"unreachable","since":%s},`+
		`"d":{"renewed":%s,"seen":%s,"unconfirmed":true,"reach":"reachable","since":%s}}}`, at, before, before, before, after, before, before)
	got, err := decodeMemory(valid, "a")
	if err != nil || len(got.Members) != 3 || !got.Members["d"].Unconfirmed || got.Members["c"].Reach != "unreachable" {
		t.Fatalf("valid: %+v, %v", got, err)
	}
	var tooMany []string
	for i := range maxRemembered + 1 {
		tooMany = append(tooMany, fmt.Sprintf(`"m%d":{"reach":"unreachable","since":%s}`, i, before))
	}
	for _, tc := range []struct{ name, annotation string }{
		{"not JSON", "b,c"},
		{"no time", `{"members":{"c":{"reach":"unreachable","since":` + before + `}}}`},
		{"not a cluster id", `{"at":` + at + `,"members":{"Not_An.Id":{"reach":"unreachable","since":` + before + `}}}`},
		{"the member itself", `{"at":` + at + `,"members":{"a":{"reach":"unreachable","since":` + before + `}}}`},
		{"a renew time alone", `{"at":` + at + `,"members":{"b":{"renewed":` + before + `}}}`},
		{"seen alone", `{"at":` + at + `,"members":{"b":{"seen":` + before + `}}}`},
		{"unconfirmed alone", `{"at":` + at + `,"members":{"b":{"unconfirmed":true,"reach":"unreachable","since":` + before + `}}}`},
		{"seen after the write", `{"at":` + at + `,"members":{"b":{"renewed":` + before + `,"seen":` + after + `}}}`},
		{"an unknown verdict", `{"at":` + at + `,"members":{"c":{"reach":"down","since":` + before + `}}}`},
		{"a verdict without since", `{"at":` + at + `,"members":{"c":{"reach":"unreachable"}}}`},
		{"since without a verdict", `{"at":` + at + `,"members":{"b":{"renewed":` + before + `,"seen":` + before + `,"since":` + before + `}}}`},
		{"a verdict since after the write", `{"at":` + at + `,"members":{"c":{"reach":"unreachable","since":` + after + `}}}`},
		{"nothing decided", `{"at":` + at + `,"members":{"c":{}}}`},
		{"more members than written", `{"at":` + at + `,"members":{` + strings.Join(tooMany, ",") + `}}`},
	} {
		if m, err := decodeMemory(tc.annotation, "a"); err == nil {
			t.Errorf("%s: read as %+v, want rejected", tc.name, m)
		}
	}
}

// What is resumed from: decisions written within two graces, on this process's clock.
func TestResumable(t *testing.T) {
	const grace = 30 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	written := func(at time.Time) memory {
		return memory{At: at, Members: map[string]memberMemory{
			"b": {Renewed: at.Add(-time.Hour), Seen: at.Add(-time.Second)},
			"c": {Reach: "unreachable", Since: at.Add(-time.Minute)},
			"d": {Reach: "reachable", Since: at.Add(-time.Minute)},
		}}
	}
	for _, tc := range []struct {
		name    string
		at      time.Time
		ok      bool
		wantAt  time.Time // on this process's clock
		resumed bool
	}{
		{"just written", t0.Add(-time.Second), true, t0.Add(-time.Second), true},
		{"a leader change later", t0.Add(-2 * grace), true, t0.Add(-2 * grace), true},
		{"too old", t0.Add(-2*grace - time.Millisecond), false, time.Time{}, false},
		{"by a clock ahead of this one", t0.Add(10 * time.Second), true, t0, true},
	} {
		renewals, verdicts, at, ok := resumable(written(tc.at), t0, resumeWithin(grace))
		if ok != tc.ok || !at.Equal(tc.wantAt) {
			t.Errorf("%s: ok %v at %v, want %v at %v", tc.name, ok, at, tc.ok, tc.wantAt)
			continue
		}
		if !ok {
			continue
		}
		shift := tc.wantAt.Sub(tc.at)
		wantRenewals := map[string]broker.Renewal{"b": {RenewTime: tc.at.Add(-time.Hour), SeenAt: tc.at.Add(-time.Second + shift)}}
		wantVerdicts := map[string]verdict{"c": {reach.Unreachable, tc.at.Add(-time.Minute + shift)}, "d": {reach.Reachable, tc.at.Add(-time.Minute + shift)}}
		if !maps.Equal(renewals, wantRenewals) || !maps.Equal(verdicts, wantVerdicts) {
			t.Errorf("%s: renewals %v, verdicts %v, want %v, %v", tc.name, renewals, verdicts, wantRenewals, wantVerdicts)
		}
	}
}

// A restarted controller, or the replica that takes the lead over, resumes from what the last leader wrote on
// this member's Lease: a member cut off from here is not imported ready again in its first reconciles, before the
// probe has failed to reach it twice more. Decisions out of shape or too old are not resumed.
func TestRestartResumesDecisions(t *testing.T) {
	ctx := context.Background()
	const grace = 30 * time.Second
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	now := time.Now() // what the reconciler judges liveness at
	var objs []client.Object
	for _, c := range []string{"cut", "fine"} {
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
	leases := func(renewed time.Time) []coordinationv1.Lease {
		var ls []coordinationv1.Lease
		for _, id := range []string{"cut", "fine"} {
			ls = append(ls, coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: names.BrokerNamespace(id), Name: names.LeaseName,
					Annotations: map[string]string{names.AnnotationClusterID: id}},
				Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}},
			})
		}
		return ls
	}
	opts := Options{LeaseGrace: grace, DataPlaneProbe: true}
	// readiness is how a process's first reconciles import each exporter's endpoints.
	readiness := func(brokerCluster client.Client, d *decisions) map[string]string {
		r := testReconciler(newFakeCluster(t), brokerCluster)
		r.liveness, r.reach = d.liveness, d.reach
		_, sources, err := r.gather(ctx, key, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, s := range sources {
			got[s.Cluster] = "ready"
			if !ptr.Deref(s.Slice.Endpoints[0].Conditions.Ready, true) {
				got[s.Cluster] = "not ready"
			}
		}
		return got
	}
	// restart runs the last leader's renewal at written, then a new process's first renewal and first look at the
	// Leases at now.
	restart := func(written time.Time, edit func(*coordinationv1.Lease)) (*decisions, client.Client) {
		brokerCluster := newFakeCluster(t, objs...)
		last := newDecisions("a", opts)
		last.liveness.Observe(leases(written.Add(-time.Second)), written.Add(-time.Second))
		for round := range probeDown {
			last.reach.Observe("cut", false, written.Add(-time.Duration(probeDown-round)*probeInterval))
		}
		last.reach.Observe("fine", true, written.Add(-time.Second))
		if _, _, err := last.renewer.Renew(ctx, brokerCluster, grace, written); err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			lease := &coordinationv1.Lease{}
			if err := brokerCluster.Get(ctx, client.ObjectKey{Namespace: names.BrokerNamespace("a"), Name: names.LeaseName}, lease); err != nil {
				t.Fatal(err)
			}
			edit(lease)
			if err := brokerCluster.Update(ctx, lease); err != nil {
				t.Fatal(err)
			}
		}
		next := newDecisions("a", opts)
		if _, _, err := next.renewer.Renew(ctx, brokerCluster, grace, now); err != nil {
			t.Fatal(err)
		}
		next.liveness.Observe(leases(now.Add(-time.Second)), now)
		return next, brokerCluster
	}

	next, brokerCluster := restart(now.Add(-5*time.Second), nil)
	if got, want := readiness(brokerCluster, next), map[string]string{"cut": "not ready", "fine": "ready"}; !maps.Equal(got, want) {
		t.Errorf("after a restart: %v, want %v", got, want)
	}
	if since := next.reach.Since("cut"); !since.Before(now.Add(-5 * time.Second)) {
		t.Errorf("cut unreachable since %v, want since the last leader found it so", since)
	}
	// The next process writes what it resumed from: a restart before its probe confirms loses nothing.
	lease := &coordinationv1.Lease{}
	if err := brokerCluster.Get(ctx, client.ObjectKey{Namespace: names.BrokerNamespace("a"), Name: names.LeaseName}, lease); err != nil {
		t.Fatal(err)
	}
	if m, err := decodeMemory(lease.Annotations[names.AnnotationDecisions], "a"); err != nil || m.Members["cut"].Reach != "unreachable" {
		t.Errorf("the next process wrote %+v (%v), want cut unreachable", m, err)
	}

	everyReady := map[string]string{"cut": "ready", "fine": "ready"}
	next, brokerCluster = restart(now.Add(-resumeWithin(grace)-time.Second), nil)
	if got := readiness(brokerCluster, next); !maps.Equal(got, everyReady) {
		t.Errorf("decisions too old resumed: %v", got)
	}
	next, brokerCluster = restart(now.Add(-5*time.Second), func(l *coordinationv1.Lease) {
		l.Annotations[names.AnnotationDecisions] = strings.Replace(l.Annotations[names.AnnotationDecisions], "unreachable", "gone", 1)
	})
	if got := readiness(brokerCluster, next); !maps.Equal(got, everyReady) {
		t.Errorf("decisions out of shape resumed: %v", got)
	}
}
