package controller

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"vksfleet.dev/fleet/controller/broker"
)

func TestBrokerScopeCache(t *testing.T) {
	all := brokerScope{all: true}.cacheOptions()
	if all.DefaultNamespaces != nil || all.DefaultLabelSelector == nil {
		t.Errorf("cluster-wide scope: namespaces %v, selector %v", all.DefaultNamespaces, all.DefaultLabelSelector)
	}
	some := brokerScope{namespaces: []string{"mcs-member-a-1", "mcs-member-b-2"}}.cacheOptions()
	if len(some.DefaultNamespaces) != 2 || some.DefaultLabelSelector == nil {
		t.Errorf("namespaced scope: namespaces %v, selector %v", some.DefaultNamespaces, some.DefaultLabelSelector)
	}
	for _, tt := range []struct {
		a, b brokerScope
		want bool
	}{
		{brokerScope{all: true}, brokerScope{all: true}, true},
		{brokerScope{all: true}, brokerScope{namespaces: []string{"x"}}, false},
		{brokerScope{namespaces: []string{"x"}}, brokerScope{namespaces: []string{"x"}}, true},
		{brokerScope{namespaces: []string{"x"}}, brokerScope{namespaces: []string{"x", "y"}}, false},
	} {
		if got := tt.a.equal(tt.b); got != tt.want {
			t.Errorf("%v equal %v = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestScopeRegions: a region that changed is no new scope: the run goes on, and the members whose region
// changed are the ones to reconcile.
func TestScopeRegions(t *testing.T) {
	was := brokerScope{namespaces: []string{"x"}, regions: map[string]string{"b": "us-east"}}
	if now := (brokerScope{namespaces: []string{"x"}, regions: map[string]string{"b": "eu-west"}}); !was.equal(now) {
		t.Errorf("%v and %v, which differ in a region alone, are not one scope", was, now)
	}
	m := newMemberRegions(map[string]string{"b": "eu-west", "c": "us-east", "d": "eu-west"})
	changed := m.set(map[string]string{"b": "eu-west", "c": "eu-west", "e": "us-east"})
	if want := []string{"c", "d", "e"}; !slices.Equal(changed, want) {
		t.Errorf("changed %v, want %v", changed, want)
	}
	for cluster, want := range map[string]string{"b": "eu-west", "c": "eu-west", "d": "", "e": "us-east"} {
		if got := m.of(cluster, "claimed"); got != want {
			t.Errorf("region of %s = %q, want %q", cluster, got, want)
		}
	}
	if got := newMemberRegions(nil).of("b", "claimed"); got != "claimed" {
		t.Errorf("without a directory: region %q, want the record's claim", got)
	}
}

// TestScopeReaderRegions: the scope reader reads the regions from the directory entries; an identity that reads
// every namespace uses no directory and takes the records' claims.
func TestScopeReaderRegions(t *testing.T) {
	entries := []client.Object{broker.RegionEntry("a", "us-east"), broker.RegionEntry("b", "eu-west"), broker.RegionEntry("c", "")}
	bad := broker.RegionEntry("d", "")
	bad.Data["region"] = "not a label value"
	entries = append(entries, bad)
	for _, tt := range []struct {
		name    string
		all     bool
		entries []client.Object
		want    map[string]string
	}{
		{"listed members", false, entries, map[string]string{"a": "us-east", "b": "eu-west"}},
		{"no member listed", false, nil, map[string]string{}},
		{"every namespace", true, entries, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithObjects(tt.entries...).WithInterceptorFuncs(interceptor.Funcs{
				Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
					review := obj.(*authorizationv1.SelfSubjectAccessReview)
					review.Status.Allowed = review.Spec.ResourceAttributes.Namespace != "" || tt.all
					return nil
				},
			}).Build()
			scope, err := newScopeReader(c, "a", logr.Discard()).read(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if (scope.regions == nil) != (tt.want == nil) || !maps.Equal(scope.regions, tt.want) {
				t.Errorf("regions %#v, want %#v", scope.regions, tt.want)
			}
		})
	}
}
