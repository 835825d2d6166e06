package reach

import (
	"slices"
	"testing"
	"time"
)

func TestAgreed(t *testing.T) {
	now := time.Unix(1000, 0)
	peer := func(node string, age time.Duration, unreachable ...string) Verdict {
		return Verdict{Node: node, At: now.Add(-age), Unreachable: unreachable, ListsReachable: true}
	}
	// judged is a peer that also finds reachable the members in reachable.
	judged := func(node string, age time.Duration, reachable ...string) Verdict {
		return Verdict{Node: node, At: now.Add(-age), Reachable: reachable, ListsReachable: true}
	}
	// old is the record of an earlier release, which lists only the members it finds unreachable.
	old := func(node string, age time.Duration, unreachable ...string) Verdict {
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
		{"the other node finds it reachable", Unreachable, "n1", []Verdict{judged("n2", 0, "b", "c")}, Unknown},
		{"the other node has not judged it yet (just started)", Unreachable, "n1", []Verdict{judged("n2", 0, "c")}, Unreachable},
		{"an earlier release's record that does not list it", Unreachable, "n1", []Verdict{old("n2", 0, "c")}, Unknown},
		{"an earlier release's record that agrees", Unreachable, "n1", []Verdict{old("n2", 0, "b")}, Unreachable},
		{"the other node stopped, having agreed (its pod replaced)", Unreachable, "n1", []Verdict{peer("n2", time.Minute, "b")}, Unreachable},
		{"the other node stopped, having found it reachable", Unreachable, "n1", []Verdict{judged("n2", Agreement, "b")}, Unknown},
		{"a verdict just fresh", Unreachable, "n1", []Verdict{peer("n2", Agreement-time.Millisecond, "b")}, Unreachable},
		{"a fresh contradiction beats a stale agreement", Unreachable, "n1",
			[]Verdict{peer("n2", Agreement, "b"), judged("n3", 0, "b")}, Unknown},
		{"a fresh agreement beats a stale contradiction", Unreachable, "n1",
			[]Verdict{judged("n2", Agreement, "b"), peer("n3", 0, "b")}, Unreachable},
		{"the stopped replica agreed, its replacement has not judged yet", Unreachable, "n1",
			[]Verdict{peer("n2", 3*time.Second, "b"), judged("n2", 0)}, Unreachable},
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

// Under agreement, a member's own failed rounds change nothing until another node's verdict agrees; a replica that
// stopped having agreed still agrees, until a verdict contradicts it.
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
	if unreachable, reachable := tr.Own(); !slices.Equal(unreachable, []string{"b"}) || len(reachable) != 0 {
		t.Errorf("Own = %v, %v, want [b], []", unreachable, reachable)
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
	tr.Agree("n1", []Verdict{{Node: "n2", At: at, Unreachable: []string{"b"}, ListsReachable: true}}, at.Add(Agreement))
	if tr.State("b") != Unreachable {
		t.Errorf("the other node's agreeing verdict went stale (its replica stopped): state %v, want unreachable", tr.State("b"))
	}
	later := at.Add(Agreement)
	tr.Agree("n1", []Verdict{{Node: "n2", At: later, Reachable: []string{"b"}, ListsReachable: true}}, later)
	if tr.State("b") != Unknown {
		t.Errorf("the other node finds it reachable again: state %v, want unknown", tr.State("b"))
	}
}
