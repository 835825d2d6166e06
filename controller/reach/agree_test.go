package reach

import (
	"slices"
	"testing"
	"time"
)

func TestAgreed(t *testing.T) {
	now := time.Unix(1000, 0)
	peer := func(node string, age time.Duration, unreachable ...string) Verdict {
		return Verdict{Node: node, At: now.Add(-age), Unreachable: unreachable}
	}
	tests := []struct {
		name  string
		own   State
		node  string
		peers []Verdict
		want  State
	}{
		{"reachable needs no second node", Reachable, "n1", nil, Reachable},
		{"unknown stays unknown", Unknown, "n1", []Verdict{peer("n2", 0, "b")}, Unknown},
		{"a peer alone decides nothing", Reachable, "n1", []Verdict{peer("n2", 0, "b")}, Reachable},
		{"another node agrees", Unreachable, "n1", []Verdict{peer("n2", 500*time.Millisecond, "b")}, Unreachable},
		{"one replica, no other node to ask", Unreachable, "n1", nil, Unreachable},
		{"both on one node, no other node to ask", Unreachable, "n1", []Verdict{peer("n1", 0), peer("n1", 0, "b")}, Unreachable},
		{"the other node silent", Unreachable, "n1", []Verdict{peer("n2", time.Minute, "b")}, Unknown},
		{"the other node finds it reachable", Unreachable, "n1", []Verdict{peer("n2", 0, "c")}, Unknown},
		{"the other node's verdict is stale", Unreachable, "n1", []Verdict{peer("n2", Agreement, "b")}, Unknown},
		{"a verdict just fresh", Unreachable, "n1", []Verdict{peer("n2", Agreement-time.Millisecond, "b")}, Unreachable},
		{"a verdict from a clock far ahead", Unreachable, "n1", []Verdict{peer("n2", -2*time.Second, "b")}, Unknown},
		{"a verdict slightly ahead", Unreachable, "n1", []Verdict{peer("n2", -500*time.Millisecond, "b")}, Unreachable},
		{"a peer without a node", Unreachable, "n1", []Verdict{peer("", 0, "b")}, Unknown},
		{"this replica's node unknown", Unreachable, "", []Verdict{peer("n2", 0, "b")}, Unknown},
		{"one of several agrees", Unreachable, "n1",
			[]Verdict{peer("n1", 0, "b"), peer("n2", 5*time.Second, "b"), peer("n3", 0, "b")}, Unreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Agreed("b", tt.own, tt.node, tt.peers, now); got != tt.want {
				t.Errorf("Agreed = %v, want %v", got, tt.want)
			}
		})
	}
}

// Under agreement, a member's own failed rounds change nothing until another node's fresh verdict agrees, and
// nothing more once that verdict goes stale.
func TestTrackerAgree(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tr := New(1, 1)
	tr.RequireAgreement()
	tr.Observe("b", true, t0)
	if changed := tr.Agree("n1", nil, t0); !slices.Equal(changed, []string{"b"}) || tr.State("b") != Reachable {
		t.Fatalf("a good round: changed %v, state %v", changed, tr.State("b"))
	}
	if tr.Observe("b", false, t0.Add(time.Second)) {
		t.Error("Observe says the state changed, which only Agree does")
	}
	if got := tr.Own(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("Own = %v, want [b]", got)
	}
	silent := []Verdict{{Node: "n2", At: t0.Add(-time.Minute)}}
	changed := tr.Agree("n1", silent, t0.Add(time.Second))
	if !slices.Equal(changed, []string{"b"}) || tr.State("b") != Unknown || !slices.Equal(tr.Uncorroborated(), []string{"b"}) {
		t.Fatalf("alone: changed %v, state %v, uncorroborated %v; want unknown", changed, tr.State("b"), tr.Uncorroborated())
	}
	at := t0.Add(1500 * time.Millisecond)
	tr.Agree("n1", []Verdict{{Node: "n2", At: at, Unreachable: []string{"b"}}}, at)
	if tr.State("b") != Unreachable || !tr.Since("b").Equal(at) || len(tr.Uncorroborated()) != 0 {
		t.Errorf("agreed: state %v since %v, uncorroborated %v", tr.State("b"), tr.Since("b"), tr.Uncorroborated())
	}
	if got := tr.States(); got["b"] != Unreachable {
		t.Errorf("States = %v", got)
	}
	tr.Agree("n1", []Verdict{{Node: "n2", At: at, Unreachable: []string{"b"}}}, at.Add(Agreement))
	if tr.State("b") != Unknown {
		t.Errorf("the other node's verdict went stale: state %v, want unknown", tr.State("b"))
	}
}
