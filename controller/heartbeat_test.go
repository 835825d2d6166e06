package controller

import (
	"errors"
	"testing"
)

func TestLeaseLoss(t *testing.T) {
	failed := errors.New("broker unreachable")
	type renewal struct {
		created bool
		err     error
	}
	for _, tc := range []struct {
		name     string
		renewals []renewal
		want     []bool // reset after each renewal
	}{
		{"first renewal creates the Lease: a first start, not a loss",
			[]renewal{{true, nil}, {false, nil}}, []bool{false, false}},
		{"created after being held: lost, the run ends",
			[]renewal{{false, nil}, {true, nil}}, []bool{false, true}},
		{"failures while the broker is away change nothing",
			[]renewal{{false, nil}, {false, failed}, {false, failed}, {false, nil}}, []bool{false, false, false, false}},
		{"the creation after the loss fails: the run ends only once the Lease is written again",
			[]renewal{{false, nil}, {false, failed}, {true, failed}, {true, failed}, {true, nil}}, []bool{false, false, false, false, true}},
		{"the failed creation was stored after all: the next renewal finds it and the run still ends",
			[]renewal{{false, nil}, {true, failed}, {false, nil}}, []bool{false, false, true}},
		{"a creation that failed before any renewal succeeded is a first start",
			[]renewal{{true, failed}, {true, nil}, {false, nil}}, []bool{false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l leaseLoss
			for i, r := range tc.renewals {
				if got := l.observe(r.created, r.err); got != tc.want[i] {
					t.Errorf("renewal %d (created %v, err %v): reset %v, want %v", i, r.created, r.err, got, tc.want[i])
				}
			}
		})
	}
}
