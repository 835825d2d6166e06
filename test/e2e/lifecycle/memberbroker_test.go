package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/poll"
)

// TestMemberAsBroker runs the second clusterset, whose broker is one of its members: that member's controller
// must leave the broker objects in its own API server alone while it imports and exports like any member.
func TestMemberAsBroker(t *testing.T) {
	hub, other := all[pairMembers[0]], all[pairMembers[1]]
	ns := namespace(t, pairMembers...)
	deploy(t, hub, ns, app{name: "both", replicas: 1})
	deploy(t, other, ns, app{name: "both", replicas: 2})
	exportService(t, hub, ns, "both")
	exportService(t, other, ns, "both")
	want := map[string]int{hub.ID: 1, other.ID: 2}
	poll.T(t, wait, "both imported in both", func() error {
		for _, m := range []*member{hub, other} {
			imp, err := readImport(m, ns, "both")
			if err != nil {
				return err
			}
			if err := imp.wantEndpoints(want); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
		}
		return nil
	})
	// The broker objects sit in the hub's API server, in the members' broker namespaces, untouched: the
	// service's record, and the member's sentinel record.
	for _, m := range []*member{hub, other} {
		records := &mcsv1beta1.ServiceImportList{}
		if err := hub.Records.List(context.Background(), records, client.InNamespace(names.BrokerNamespace(m.ID))); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range records.Items {
			got = append(got, r.Name)
		}
		want := []string{names.RecordName(ns, "both"), broker.SentinelName}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s's broker records in the hub: %v, want %v", m.Name, got, want)
		}
	}

	unexport(t, hub, ns, "both")
	unexport(t, other, ns, "both")
	poll.T(t, wait, "gone from both", func() error {
		for _, m := range []*member{hub, other} {
			imp, err := readImport(m, ns, "both")
			if err != nil {
				return err
			}
			if err := imp.gone(); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
		}
		return nil
	})
}
