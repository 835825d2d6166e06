package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestStartPublish(t *testing.T) {
	var p startPublish
	a, b := types.NamespacedName{Namespace: "demo", Name: "a"}, types.NamespacedName{Namespace: "demo", Name: "b"}
	p.published(a) // a reconcile that ran before the start was taken
	if p.done() {
		t.Fatal("done before the start's exports are known")
	}
	p.start([]types.NamespacedName{a, b})
	if p.done() {
		t.Fatal("done with b not published")
	}
	p.start(nil) // a later run's start changes nothing
	p.published(b)
	if !p.done() {
		t.Fatal("not done with both published")
	}
	var none startPublish
	if none.start(nil); !none.done() {
		t.Error("a member without exports is not done")
	}
}
