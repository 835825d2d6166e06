package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/names"
)

// drain returns what rec recorded, "Type Reason Note" each.
func drain(rec *events.FakeRecorder) []string {
	var got []string
	for {
		select {
		case e := <-rec.Events:
			got = append(got, e)
		default:
			return got
		}
	}
}

func TestConditionEvents(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: "m"}
	}
	valid, ready, conflict := cond("Valid", "True", "Valid"), cond("Ready", "True", "Exported"), cond("Conflict", "False", "NoConflicts")
	pending := cond("Ready", "False", "Pending")
	portConflict := cond("Conflict", "True", "PortConflict")
	long := cond("Ready", "False", "Failed")
	long.Message = strings.Repeat("x", 2000)
	cases := []struct {
		name          string
		before, after []metav1.Condition
		want          []string
	}{
		{"a new export records its Ready alone", nil, []metav1.Condition{valid, ready, conflict},
			[]string{"Normal Exported Ready True/Exported (was unset): m"}},
		{"a new export that is not healthy", nil, []metav1.Condition{cond("Valid", "False", "NoService"), pending},
			[]string{"Warning NoService Valid False/NoService (was unset): m", "Warning Pending Ready False/Pending (was unset): m"}},
		{"a conflict arises", []metav1.Condition{valid, ready, conflict}, []metav1.Condition{valid, ready, portConflict},
			[]string{"Warning PortConflict Conflict True/PortConflict (was False/NoConflicts): m"}},
		{"a new message alone records nothing", []metav1.Condition{pending}, []metav1.Condition{cond("Ready", "False", "Pending")}, nil},
		{"a derived Service refused with another answer", []metav1.Condition{cond("Ready", "False", ReasonDerivedServiceRefused)},
			[]metav1.Condition{{Type: "Ready", Status: "False", Reason: ReasonDerivedServiceRefused, Message: "n"}},
			[]string{"Warning DerivedServiceRefused Ready False/DerivedServiceRefused (was False/DerivedServiceRefused): n"}},
		{"Ready again", []metav1.Condition{pending}, []metav1.Condition{ready},
			[]string{"Normal Exported Ready True/Exported (was False/Pending): m"}},
	}
	for _, c := range cases {
		rec := events.NewFakeRecorder(10)
		conditionEvents(rec, &mcsv1beta1.ServiceExport{}, c.before, c.after)
		if got := drain(rec); !slices.Equal(got, c.want) {
			t.Errorf("%s: events %q, want %q", c.name, got, c.want)
		}
	}
	rec := events.NewFakeRecorder(1)
	conditionEvents(rec, &mcsv1beta1.ServiceImport{}, nil, []metav1.Condition{long})
	if got := drain(rec); len(got) != 1 || len(got[0]) > len("Warning Failed ")+maxNote || !strings.HasSuffix(got[0], "...") {
		t.Errorf("a long message is not cut to the events API's limit: %d bytes", len(got[0]))
	}
}

func TestMemberEvents(t *testing.T) {
	t0 := time.Now()
	lease := func(id string, renewed time.Time) coordinationv1.Lease {
		return coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: names.BrokerNamespace(id), Name: names.LeaseName,
				Annotations: map[string]string{names.AnnotationClusterID: id}},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}},
		}
	}
	l := broker.NewLiveness("a", 10*time.Second)
	rec := events.NewFakeRecorder(10)
	m := &memberEvents{rec: rec, liveness: l}
	observe := func(at time.Duration, leases ...coordinationv1.Lease) {
		for _, id := range l.Observe(leases, t0.Add(at)) {
			m.changed(id, l.Alive(id))
		}
	}
	// At the start b is alive and c long dead: neither is a change.
	observe(0, lease("b", t0), lease("c", t0.Add(-time.Hour)))
	// b stops renewing; c comes back; d joins.
	observe(11*time.Second, lease("b", t0), lease("c", t0.Add(11*time.Second)), lease("d", t0.Add(11*time.Second)))
	observe(12*time.Second, lease("b", t0.Add(12*time.Second)), lease("c", t0.Add(11*time.Second)), lease("d", t0.Add(11*time.Second)))
	got := drain(rec)
	want := []string{
		"Warning MemberLost Member b's broker Lease was not renewed within the lease grace, or is gone: its endpoints are withdrawn.",
		"Normal MemberReturned Member c renews its broker Lease again: its endpoints are imported.",
		"Normal MemberReturned Member b renews its broker Lease again: its endpoints are imported.",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}
