package controller

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestOnlyRaces(t *testing.T) {
	gr := schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}
	exists := apierrors.NewAlreadyExists(gr, "a")
	conflict := apierrors.NewConflict(gr, "b", errors.New("the object has been modified"))
	forbidden := apierrors.NewForbidden(gr, "c", errors.New("no"))
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"AlreadyExists", exists, true},
		{"Conflict, wrapped", at("https://member", fmt.Errorf("updating: %w", conflict)), true},
		{"races joined in a wrapped join", at("h", fmt.Errorf("slices: %w", errors.Join(exists, nil, conflict))), true},
		{"a real error among races", errors.Join(exists, at("h", fmt.Errorf("x: %w", errors.Join(conflict, forbidden)))), false},
		{"a real error", forbidden, false},
		{"not an API error", errors.New("broken"), false},
	}
	for _, c := range cases {
		if got := onlyRaces(c.err); got != c.want {
			t.Errorf("%s: onlyRaces(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
