package controller

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
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

// TestMapTopologyOnlyOnChange: node churn that leaves this member's zones and region as they were enqueues nothing;
// a zone that appears or goes, or a new region, enqueues every import and export.
func TestMapTopologyOnlyOnChange(t *testing.T) {
	ctx := context.Background()
	node := func(name, zone string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: zone}}}
	}
	local := newFakeCluster(t, node("n1", "z1"),
		&mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "in"}},
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "out"}})
	r := testReconciler(local, newFakeCluster(t))
	region := &aboutv1alpha1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1alpha1.RegionName},
		Spec: aboutv1alpha1.ClusterPropertySpec{Value: "eu"}}
	for _, step := range []struct {
		name   string
		change func() error
		want   int
	}{
		{"the first event", func() error { return nil }, 2},
		{"the same again", func() error { return nil }, 0},
		{"a node in a known zone", func() error { return local.Create(ctx, node("n2", "z1")) }, 0},
		{"a node in a new zone", func() error { return local.Create(ctx, node("n3", "z2")) }, 2},
		{"a node of a zone with others left", func() error { return local.Delete(ctx, node("n2", "z1")) }, 0},
		{"the last node of a zone", func() error { return local.Delete(ctx, node("n3", "z2")) }, 2},
		{"a region", func() error { return local.Create(ctx, region) }, 2},
		{"a node of the region's zone", func() error { return local.Create(ctx, node("n4", "z1")) }, 0},
	} {
		if err := step.change(); err != nil {
			t.Fatal(err)
		}
		if got := r.mapTopology(ctx, &corev1.Node{}); len(got) != step.want {
			t.Errorf("%s: %d services enqueued, want %d", step.name, len(got), step.want)
		}
	}
}
