package controller

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"vksfleet.dev/fleet/controller/admit"
)

func TestRefusalLog(t *testing.T) {
	web, db := types.NamespacedName{Namespace: "ns", Name: "web"}, types.NamespacedName{Namespace: "ns", Name: "db"}
	a := refusal{"b", admit.Problem{Reason: admit.ReasonRecord, Message: "broken"}, false}
	b := refusal{"c", admit.Problem{Reason: admit.ReasonTooManySlices, Message: "too many"}, false}
	c := refusal{"c", admit.Problem{Reason: admit.ReasonRecord, Message: "other"}, false}
	// b as the member's slices go on arriving: another slice is the first left out.
	moved := refusal{"c", admit.Problem{Reason: admit.ReasonTooManySlices, Message: "too many, from another slice on"}, false}
	var l refusalLog
	for i, step := range []struct {
		key  types.NamespacedName
		add  []refusal
		want []refusal
	}{
		{web, []refusal{a, b, a}, []refusal{a, b}}, // the first time, each once
		{web, []refusal{a, b}, nil},                // standing: nothing new
		{db, []refusal{a}, []refusal{a}},           // another service keeps its own
		{web, []refusal{a, c}, []refusal{c}},       // b went away, c is new
		{web, nil, nil},                            // all gone
		{web, []refusal{a}, []refusal{a}},          // back: reported again
		{db, []refusal{a}, nil},
		{web, []refusal{a, b}, []refusal{b}},
		{web, []refusal{a, moved}, nil}, // the same limit's refusal, whatever its message says
	} {
		for _, r := range step.add {
			l.add(step.key, r)
		}
		if got := l.settle(step.key); !reflect.DeepEqual(got, step.want) {
			t.Errorf("step %d (%s): settle = %v, want %v", i, step.key, got, step.want)
		}
	}
	l.settle(db)
	l.settle(web)
	if len(l.last) != 0 || len(l.pending) != 0 {
		t.Errorf("services without refusals are still remembered: %v %v", l.last, l.pending)
	}
}
