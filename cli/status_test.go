package cli

import (
	"slices"
	"testing"

	"vksfleet.dev/fleet/mcs/names"
)

// TestStatusUnreachableFrom: each member's row lists the members whose Leases report its endpoints unreachable,
// and ignores what is not a cluster id.
func TestStatusUnreachableFrom(t *testing.T) {
	s := fixture(t)
	s.Broker.Leases[1].Annotations[names.AnnotationUnreachable] = "cluster-a,../../etc"
	rows := Status(s)
	if got := rows[0].UnreachableFrom; !slices.Equal(got, []string{"cluster-b"}) {
		t.Errorf("cluster-a unreachable from %v, want [cluster-b]", got)
	}
	if got := rows[1].UnreachableFrom; len(got) != 0 {
		t.Errorf("cluster-b unreachable from %v, want none", got)
	}
	table := statusTable(rows)
	if cell := table.Rows[0].Cells[7]; cell != "cluster-b" {
		t.Errorf("Unreachable-From cell %q, want cluster-b", cell)
	}
}
