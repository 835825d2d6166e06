package reach

import (
	"testing"
	"time"
)

func TestTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name    string
		rounds  string // o: a good round, x: a failed one
		want    State
		changes int
	}{
		{"never probed", "", Unknown, 0},
		{"a first good round", "o", Reachable, 1},
		{"one lost round moves nothing", "oxoxoxxo", Reachable, 1},
		{"two lost rounds move nothing", "oxxoxx", Reachable, 1},
		{"three lost rounds in a row", "oxxx", Unreachable, 2},
		{"never answered", "xxx", Unreachable, 1},
		{"one good round after a cut is not enough", "oxxxo", Unreachable, 2},
		{"two good rounds bring it back", "oxxxoo", Reachable, 3},
		{"a good round between failures restarts the count", "oxxoxxoxx", Reachable, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := New(3, 2)
			changes := 0
			for i, r := range tt.rounds {
				if tr.Observe("b", r == 'o', t0.Add(time.Duration(i)*time.Second)) {
					changes++
				}
			}
			if got := tr.State("b"); got != tt.want {
				t.Errorf("state %v, want %v", got, tt.want)
			}
			if changes != tt.changes {
				t.Errorf("%d changes, want %d", changes, tt.changes)
			}
			if tr.State("c") != Unknown {
				t.Error("an unprobed member is not unknown")
			}
		})
	}
}

func TestTrackerSinceAndForget(t *testing.T) {
	tr := New(2, 1)
	t0 := time.Unix(1000, 0)
	tr.Observe("b", true, t0)
	tr.Observe("b", false, t0.Add(time.Second))
	tr.Observe("b", false, t0.Add(2*time.Second))
	if got := tr.Since("b"); !got.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("unreachable since %v, want the second failed round", got)
	}
	if !tr.Forget("b") || tr.State("b") != Unknown || !tr.Since("b").IsZero() {
		t.Error("Forget left state behind")
	}
	if tr.Forget("b") {
		t.Error("forgetting an unknown member reports a change")
	}
}

func TestDecide(t *testing.T) {
	for _, tt := range []struct {
		alive, overdue bool
		state          State
		want           Decision
	}{
		{true, false, Unknown, Use},
		{true, false, Reachable, Use},
		{true, false, Unreachable, Fallback}, // the probe alone: moves traffic, never takes the last endpoints
		{false, false, Reachable, UseStale},
		{false, true, Reachable, Fallback}, // stale past the limit: only while no other exporter has a ready endpoint
		{false, false, Unknown, Leave},
		{false, true, Unknown, Leave},
		{false, false, Unreachable, Leave}, // both signals agree
		{false, true, Unreachable, Leave},
	} {
		if got := Decide(tt.alive, tt.overdue, tt.state); got != tt.want {
			t.Errorf("Decide(alive %v, overdue %v, %v) = %v, want %v", tt.alive, tt.overdue, tt.state, got, tt.want)
		}
	}
}
