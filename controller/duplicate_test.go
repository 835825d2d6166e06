package controller

import (
	"testing"
	"time"
)

func TestDuplicateID(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := &duplicateID{id: "a", grace: 10 * time.Second}
	steps := []struct {
		name          string
		at            time.Duration
		foreign       bool
		wantChanged   bool
		wantActive    bool
		wantMayDelete bool
	}{
		{"the first renewal: no deletion yet", 0, false, false, false, false},
		{"a second clean renewal", 3 * time.Second, false, false, false, true},
		{"one foreign change: a leader handover, perhaps", 6 * time.Second, true, false, false, false},
		{"clean again", 9 * time.Second, false, false, false, true},
		{"foreign", 12 * time.Second, true, false, false, false},
		{"foreign twice in a row: a conflict", 15 * time.Second, true, true, true, false},
		{"clean, within the grace of the last foreign change", 18 * time.Second, false, false, true, false},
		{"clean for a grace: over", 26 * time.Second, false, true, false, true},
	}
	for _, s := range steps {
		changed := d.observe(false, s.foreign, t0.Add(s.at))
		if changed != s.wantChanged || d.Active() != s.wantActive || d.mayDelete() != s.wantMayDelete {
			t.Errorf("%s: changed %v, active %v, mayDelete %v; want %v, %v, %v", s.name, changed, d.Active(), d.mayDelete(),
				s.wantChanged, s.wantActive, s.wantMayDelete)
		}
	}
	// A second run that meets another holder at once never deletes: its first renewal cannot tell, its second
	// finds the other's change.
	late := &duplicateID{id: "a", grace: 10 * time.Second}
	for i, foreign := range []bool{false, true, true} {
		late.observe(false, foreign, t0.Add(time.Duration(i)*3*time.Second))
		if late.mayDelete() {
			t.Errorf("renewal %d: a run sharing the Lease may delete", i+1)
		}
	}
	// A run that had to create the Lease knows no other process held it: it may delete at once.
	first := &duplicateID{id: "a", grace: 10 * time.Second}
	if first.observe(true, false, t0); !first.mayDelete() {
		t.Error("a run that created its Lease may not delete")
	}
	var none *duplicateID
	if none.Active() || !none.mayDelete() {
		t.Error("no tracker: no conflict, deletions allowed")
	}
}
