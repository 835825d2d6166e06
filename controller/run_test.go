package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/reach"
	"vksfleet.dev/fleet/mcs/names"
)

// What a run decided about the members holds in the next run of the process, which starts at every join or leave
// anywhere: a member cut off from here stays unreachable, a dead member whose clock runs ahead stays dead, and the
// next run's liveness waits for its own first look at the Leases.
func TestRunKeepsDecisions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	kept := newDecisions("a", Options{LeaseGrace: 10 * time.Second, DataPlaneProbe: true})
	lease := func(id string, renewed time.Time) coordinationv1.Lease {
		return coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: names.BrokerNamespace(id), Name: names.LeaseName,
				Annotations: map[string]string{names.AnnotationClusterID: id}},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}},
		}
	}
	// The first run: b lives but does not answer from here; c, whose clock runs an hour ahead, renewed once more and died.
	kept.newRun()
	ahead := lease("c", t0.Add(time.Hour))
	kept.liveness.Observe([]coordinationv1.Lease{lease("b", t0), ahead}, t0)
	ahead.Spec.RenewTime = &metav1.MicroTime{Time: t0.Add(time.Hour + time.Second)}
	kept.liveness.Observe([]coordinationv1.Lease{lease("b", t0.Add(time.Second)), ahead}, t0.Add(time.Second))
	for round := range probeDown {
		kept.reach.Observe("b", false, t0.Add(time.Duration(round)*probeInterval))
	}
	kept.liveness.Observe([]coordinationv1.Lease{lease("b", t0.Add(15*time.Second)), ahead}, t0.Add(15*time.Second))
	if kept.liveness.Alive("c") || !kept.liveness.Alive("b") || kept.reach.State("b") != reach.Unreachable {
		t.Fatalf("first run: c alive %v, b alive %v, b %v", kept.liveness.Alive("c"), kept.liveness.Alive("b"), kept.reach.State("b"))
	}

	// The next run, on a new cache.
	kept.newRun()
	select {
	case <-kept.liveness.Observed():
		t.Error("the next run's liveness is known before it looked at its cache's Leases")
	default:
	}
	if got := kept.reach.State("b"); got != reach.Unreachable {
		t.Errorf("the next run finds b %v, want still unreachable: its endpoints would be imported ready again", got)
	}
	if got := kept.renewer.Unreachable(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("the next run's Lease says %v are unreachable, want [b]", got)
	}
	kept.liveness.Observe([]coordinationv1.Lease{lease("b", t0.Add(15*time.Second)), ahead}, t0.Add(16*time.Second))
	if kept.liveness.Alive("c") {
		t.Error("the next run's first look revives c, dead with its clock ahead")
	}
	if !kept.liveness.Alive("b") {
		t.Error("the next run's first look finds b dead")
	}
}

// Deletions on the broker wait until a renewal has shown that no other cluster renews this member's Lease: once per
// process, not again at each run, as long as the renewals go on showing none.
func TestDuplicateIDKeptAcrossRuns(t *testing.T) {
	ctx := context.Background()
	const grace = 10 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := fake.NewClientBuilder().Build()
	// A process before this one left the Lease.
	previous := &broker.Renewer{ClusterID: "a", Holder: "a/pod-0/old"}
	if _, _, err := previous.Renew(ctx, c, grace, t0); err != nil {
		t.Fatal(err)
	}
	kept := newDecisions("a", Options{LeaseGrace: grace})
	at := t0
	renew := func() {
		at = at.Add(grace / 3)
		created, foreign, err := kept.renewer.Renew(ctx, c, grace, at)
		if err != nil {
			t.Fatal(err)
		}
		kept.duplicate.observe(created, foreign, at)
	}
	kept.newRun()
	renew()
	if kept.duplicate.mayDelete() {
		t.Error("the process's first renewal of a Lease it found allows deletions")
	}
	renew()
	if !kept.duplicate.mayDelete() {
		t.Fatal("no deletion after two clean renewals")
	}
	kept.newRun()
	if !kept.duplicate.mayDelete() {
		t.Error("a new run holds deletions back again until its second renewal")
	}
	renew()
	if !kept.duplicate.mayDelete() {
		t.Error("the new run's first clean renewal holds deletions back")
	}
	// Another cluster with the same id renews between two runs: the next run's first renewal sees it.
	kept.newRun()
	other := &broker.Renewer{ClusterID: "a", Holder: "a/elsewhere/x"}
	if _, _, err := other.Renew(ctx, c, grace, at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	renew()
	if kept.duplicate.mayDelete() {
		t.Error("a renewal that found another holder's change allows deletions")
	}
}
