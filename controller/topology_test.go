package controller

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"vksfleet.dev/fleet/mcs/locality"
)

func TestTierChanges(t *testing.T) {
	before := locality.Annotation{Zones: map[string]string{"z1": "same-zone", "z2": "same-zone"}, DNSTier: "same-cluster"}
	after := locality.Annotation{Zones: map[string]string{"z1": "same-region", "z2": "same-zone", "z3": "same-zone"},
		DNSTier: "same-region", DNSClusters: []string{"b"}}
	want := []string{"zone z1: same-zone -> same-region", "DNS: same-cluster -> same-region [b]"}
	if got := tierChanges(before, after); !slices.Equal(got, want) {
		t.Errorf("tierChanges = %q, want %q", got, want)
	}
	if n := worse(before, after); n != 2 {
		t.Errorf("worse = %d, want 2 (zone z1 and the DNS moved farther; new zone z3 is no failover)", n)
	}
	if n := worse(after, before); n != 0 {
		t.Errorf("moving back closer counts %d failovers, want 0", n)
	}
}

func TestTopologyReadsNodeZones(t *testing.T) {
	node := func(name, zone string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if zone != "" {
			n.Labels = map[string]string{corev1.LabelTopologyZone: zone}
		}
		return n
	}
	r := testReconciler(newFakeCluster(t, node("n1", "z2"), node("n2", "z1"), node("n3", "z2"), node("n4", "")), nil)
	top, err := r.topology(context.Background())
	if err != nil || !slices.Equal(top.Zones, []string{"z1", "z2"}) || top.Cluster != "a" || top.Region != "" {
		t.Errorf("topology() = %+v, %v", top, err)
	}
}
