package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/names"
)

func TestApplyDerived(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	name := types.NamespacedName{Namespace: "ns", Name: names.DerivedServiceName("ns", "web")}
	v4, v6, dual := []corev1.IPFamily{corev1.IPv4Protocol}, []corev1.IPFamily{corev1.IPv6Protocol},
		[]corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	owner := imports.Owner(&mcsv1beta1.ServiceImport{ObjectMeta: objMeta("ns", "web")}, mcsv1beta1.SchemeGroupVersion.String())
	want := func(families []corev1.IPFamily, ports ...int32) *corev1.Service {
		m := merge.Result{Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPFamilies: families}}
		for _, p := range ports {
			m.Spec.Ports = append(m.Spec.Ports, mcsv1beta1.ServicePort{Protocol: corev1.ProtocolTCP, Port: p})
		}
		return imports.DerivedService(key, m, owner)
	}
	// allocated is the Service as the API server stores it, with its cluster IPs.
	allocated := func(s *corev1.Service, ips ...string) *corev1.Service {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips
		return s
	}
	foreign := &corev1.Service{ObjectMeta: objMeta(name.Namespace, name.Name)}
	// shape is what the cases compare of a Service.
	shape := func(s *corev1.Service) string {
		if s == nil {
			return "none"
		}
		var ports []int32
		for _, p := range s.Spec.Ports {
			ports = append(ports, p.Port)
		}
		return fmt.Sprintf("ours=%v ports=%v families=%v ips=%v", isOurs(s), ports, s.Spec.IPFamilies, s.Spec.ClusterIPs)
	}
	cases := []struct {
		name   string
		stored *corev1.Service
		want   *corev1.Service
		writes int32 // over two reconciles: the second must find nothing to do
		final  string
		fails  bool // both calls fail and change nothing
	}{
		{"missing: created", nil, want(v4, 80), 1, "ours=true ports=[80] families=[IPv4] ips=[]", false},
		{"equal: no write", allocated(want(v4, 80), "10.96.0.1"), want(v4, 80), 0, "ours=true ports=[80] families=[IPv4] ips=[10.96.0.1]", false},
		{"ports changed", allocated(want(v4, 80), "10.96.0.1"), want(v4, 80, 443), 1, "ours=true ports=[80 443] families=[IPv4] ips=[10.96.0.1]", false},
		{"dual-stack to IPv4 only", allocated(want(dual, 80), "10.96.0.1", "fd00::1"), want(v4, 80), 1,
			"ours=true ports=[80] families=[IPv4] ips=[10.96.0.1]", false},
		{"primary family changes: deleted, then created", allocated(want(v4, 80), "10.96.0.1"), want(v6, 80), 2,
			"ours=true ports=[80] families=[IPv6] ips=[]", false},
		{"no longer wanted: deleted", allocated(want(v4, 80), "10.96.0.1"), nil, 1, "none", false},
		{"not ours and not wanted: left alone", foreign, nil, 0, "ours=false ports=[] families=[] ips=[]", false},
		{"neither stored nor wanted", nil, nil, 0, "none", false},
		{"not ours but wanted: left alone, an error", foreign, want(v4, 80), 0, "ours=false ports=[] families=[] ips=[]", true},
	}
	for _, c := range cases {
		ctx := context.Background()
		local := newFakeCluster(t)
		if c.stored != nil {
			if err := local.Create(ctx, c.stored.DeepCopy()); err != nil {
				t.Fatal(err)
			}
			local.writes.Store(0)
		}
		r := testReconciler(local, nil)
		stored := func() *corev1.Service {
			s, err := getOrNil(ctx, local, name, &corev1.Service{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		for i := range 2 {
			ret, err := r.applyDerived(ctx, stored(), c.want.DeepCopy())
			if c.fails {
				if err == nil {
					t.Fatalf("%s: call %d: no error", c.name, i+1)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: applyDerived: %v", c.name, err)
			}
			// What is returned is what is stored: nil right after the delete of a family change.
			if now := stored(); c.want != nil && shape(ret) != shape(now) {
				t.Errorf("%s: call %d returned %s, stored %s", c.name, i+1, shape(ret), shape(now))
			}
		}
		if got := shape(stored()); got != c.final {
			t.Errorf("%s: stored %s, want %s", c.name, got, c.final)
		}
		if n := local.writes.Load(); n != c.writes {
			t.Errorf("%s: %d writes, want %d", c.name, n, c.writes)
		}
	}
}

// TestDerivedKeepsItsVIP follows the exports through the merge, this cluster's families and applyDerived to a
// stored derived Service: neither a family mismatch among the exports nor a change of the oldest exporter
// deletes it, so its VIP stays.
func TestDerivedKeepsItsVIP(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	name := types.NamespacedName{Namespace: "ns", Name: names.DerivedServiceName("ns", "web")}
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	fams := func(f ...corev1.IPFamily) []corev1.IPFamily { return f }
	owner := imports.Owner(&mcsv1beta1.ServiceImport{ObjectMeta: objMeta("ns", "web")}, mcsv1beta1.SchemeGroupVersion.String())
	export := func(cluster string, age int, families ...corev1.IPFamily) merge.Export {
		return merge.Export{Cluster: cluster, Created: time.Unix(int64(age), 0), Spec: mcsv1beta1.ServiceImportSpec{
			Type: mcsv1beta1.ClusterSetIP, IPFamilies: families,
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		}}
	}
	// allocated is the derived Service of exports as the API server stores it, with one IP per family.
	allocated := func(exports []merge.Export, served []corev1.IPFamily) *corev1.Service {
		s := imports.DerivedService(key, imports.Served(merge.Merge(exports), served, nil), owner)
		for _, f := range s.Spec.IPFamilies {
			s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, map[corev1.IPFamily]string{v4: "10.96.0.1", v6: "fd00::1"}[f])
		}
		s.Spec.ClusterIP = s.Spec.ClusterIPs[0]
		return s
	}
	honest := []merge.Export{export("a", 1, v4), export("b", 2, v4)}
	dual := []merge.Export{export("a", 1, v4, v6), export("b", 2, v6, v4)}
	cases := []struct {
		name          string
		before, after []merge.Export
		served        []corev1.IPFamily
	}{
		{"an IPv6-only exporter joins IPv4 ones", honest, append(slices.Clone(honest), export("c", 3, v6)), fams(v4)},
		{"an exporter of a family no Service has joins", honest, append(slices.Clone(honest), export("c", 3, "IPv5")), fams(v4)},
		{"a disjoint exporter claims to be the oldest", honest, append(slices.Clone(honest), export("c", 0, v6)), fams(v4)},
		{"... in a dual-stack cluster", honest, append(slices.Clone(honest), export("c", 0, v6)), fams(v4, v6)},
		{"the oldest exporter of another order leaves", dual, dual[1:], fams(v4, v6)},
		{"the oldest exporter of another order leaves, families unknown", dual, dual[1:], nil},
		{"an exporter of another order becomes the oldest", dual, []merge.Export{export("a", 3, v4, v6), dual[1]}, fams(v6, v4)},
	}
	for _, c := range cases {
		ctx := context.Background()
		stored := allocated(c.before, c.served)
		vip := stored.Spec.ClusterIP
		local := newFakeCluster(t, stored.DeepCopy())
		r := testReconciler(local, nil)
		for i := range 2 {
			got, err := getOrNil(ctx, local, name, &corev1.Service{})
			if err != nil {
				t.Fatal(err)
			}
			want := imports.DerivedService(key, imports.Served(merge.Merge(c.after), c.served, got), owner)
			if _, err := r.applyDerived(ctx, got, want); err != nil {
				t.Fatalf("%s: call %d: %v", c.name, i+1, err)
			}
		}
		got, err := getOrNil(ctx, local, name, &corev1.Service{})
		if err != nil {
			t.Fatal(err)
		}
		if got == nil || got.Spec.ClusterIP != vip || len(got.Spec.IPFamilies) == 0 || got.Spec.IPFamilies[0] != stored.Spec.IPFamilies[0] {
			t.Errorf("%s: the derived Service with VIP %s became %v", c.name, vip, got)
		}
	}
}
