package framework

import (
	"context"
	"strings"
	"testing"

	"vksfleet.dev/fleet/test/env/clusterset"
)

// TestFaultChecks: a fault that names no known kind, member or peer, or a peer that is the member itself, is
// refused with a message that says what is wrong, before anything is done.
func TestFaultChecks(t *testing.T) {
	f := &Fleet{pods: true}
	for _, name := range []string{"cluster-a", "cluster-b"} {
		f.Members = append(f.Members, &Member{Cluster: &clusterset.Cluster{Name: name}, fleet: f})
	}
	for _, c := range []struct {
		fault Fault
		want  string
	}{
		{Fault{Kind: "reboot", Member: "cluster-a"}, `unknown fault "reboot"; the faults are stop-control-plane, start-control-plane, cut-data-plane, lossy, heal`},
		{Fault{Kind: CutDataPlane}, "cut-data-plane needs a member: one of cluster-a, cluster-b"},
		{Fault{Kind: StopControlPlane, Member: "cluster-z"}, `"cluster-z" is not a member; the members are cluster-a, cluster-b`},
		{Fault{Kind: CutDataPlane, Member: "cluster-a", Peer: "cluster-a"}, "must be another member than cluster-a"},
		{Fault{Kind: CutDataPlane, Member: "cluster-a", Peer: "broker"}, `peer "broker" is not a member`},
		{Fault{Kind: StopControlPlane, Member: "cluster-a", Peer: "cluster-b"}, "stop-control-plane takes no peer"},
		{Fault{Kind: Lossy, Member: "cluster-a", Loss: 101}, "a loss of 101% is not between 0 and 100"},
	} {
		err := f.Fault(context.Background(), c.fault)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Fault(%+v) = %v, want an error with %q", c.fault, err, c.want)
		}
	}
	// A stopped control plane starts again, and start is idempotent: with none stopped, nothing is done.
	if err := f.Fault(context.Background(), Fault{Kind: StartControlPlane, Member: "cluster-b"}); err != nil {
		t.Errorf("start-control-plane of a running control plane: %v", err)
	}
	if err := (&Fleet{}).Fault(context.Background(), Fault{Kind: Heal}); err == nil || !strings.Contains(err.Error(), "need a fleet with nodes") {
		t.Errorf("heal on a fleet without nodes = %v, want it refused", err)
	}
}
