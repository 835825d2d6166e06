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

// A resumed verdict holds as one of the tracker's own, hysteresis included, and never overrides a verdict the
// tracker reached itself.
func TestTrackerResume(t *testing.T) {
	t0 := time.Unix(1000, 0)
	since := t0.Add(-time.Minute)
	tests := []struct {
		name      string
		before    string // rounds before Resume: o good, x failed
		resume    State
		after     string // rounds after Resume
		want      State
		resumed   bool
		wantSince time.Time
	}{
		{"unreachable holds until up good rounds", "", Unreachable, "o", Unreachable, true, since},
		{"unreachable turns reachable after up good rounds", "", Unreachable, "oo", Reachable, true, t0.Add(2 * time.Second)},
		{"reachable holds until down failed rounds", "", Reachable, "xx", Reachable, true, since},
		{"reachable turns unreachable after down failed rounds", "", Reachable, "xxx", Unreachable, true, t0.Add(3 * time.Second)},
		{"a failed round before resuming counts towards the next verdict", "x", Reachable, "xx", Unreachable, true, t0.Add(3 * time.Second)},
		{"the tracker's own verdict stands", "o", Unreachable, "", Reachable, false, t0},
		{"an unknown verdict resumes nothing", "", Unknown, "", Unknown, false, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := New(3, 2)
			at := t0
			for _, r := range tt.before {
				tr.Observe("b", r == 'o', at)
				at = at.Add(time.Second)
			}
			if got := tr.Resume("b", tt.resume, since); got != tt.resumed {
				t.Errorf("Resume = %v, want %v", got, tt.resumed)
			}
			for _, r := range tt.after {
				at = at.Add(time.Second)
				tr.Observe("b", r == 'o', at)
			}
			if got := tr.State("b"); got != tt.want {
				t.Errorf("state %v, want %v", got, tt.want)
			}
			if got := tr.Since("b"); !got.Equal(tt.wantSince) {
				t.Errorf("since %v, want %v", got, tt.wantSince)
			}
		})
	}
}

// Under agreement, a resumed verdict is the settled State until the next Agree settles it again with the other
// replicas' verdicts.
func TestTrackerResumeUnderAgreement(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name  string
		peers []Verdict
		want  State
	}{
		{"another node agrees", []Verdict{{Node: "n2", At: t0, Unreachable: []string{"b"}}}, Unreachable},
		{"no other node agrees", []Verdict{{Node: "n2", At: t0}}, Unknown},
		{"no other node to ask", nil, Unreachable},
	} {
		tr := New(2, 2)
		tr.RequireAgreement()
		tr.Resume("b", Unreachable, t0.Add(-time.Minute))
		if got := tr.State("b"); got != Unreachable {
			t.Errorf("%s: resumed, state %v before any Agree, want unreachable", tc.name, got)
		}
		tr.Agree("n1", tc.peers, t0)
		if got := tr.State("b"); got != tc.want {
			t.Errorf("%s: state %v after Agree, want %v", tc.name, got, tc.want)
		}
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
