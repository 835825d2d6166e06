package controller

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	brokerv1alpha1 "vksfleet.dev/fleet/api/broker/v1alpha1"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/names"
)

func TestBrokerScopeCache(t *testing.T) {
	records := RecordCacheOptions()
	if records.DefaultNamespaces != nil || records.DefaultLabelSelector == nil {
		t.Errorf("records: namespaces %v, selector %v; want every namespace, ours only", records.DefaultNamespaces, records.DefaultLabelSelector)
	}
	legacy := brokerScope{legacy: []string{"mcs-member-b-2", "mcs-member-c-3"}}.legacyCacheOptions("mcs-member-a-1")
	if want := []string{"mcs-member-a-1", "mcs-member-b-2", "mcs-member-c-3"}; !slices.Equal(slices.Sorted(maps.Keys(legacy.DefaultNamespaces)), want) ||
		legacy.DefaultLabelSelector == nil {
		t.Errorf("previous layout: namespaces %v, selector %v; want %v, ours only", legacy.DefaultNamespaces, legacy.DefaultLabelSelector, want)
	}
	for _, tt := range []struct {
		a, b brokerScope
		want bool
	}{
		{brokerScope{}, brokerScope{members: map[string]bool{"x": true}}, true},
		{brokerScope{members: map[string]bool{"x": true}}, brokerScope{members: map[string]bool{"x": true, "y": true}}, true},
		{brokerScope{legacy: []string{"x"}}, brokerScope{legacy: []string{"x"}}, true},
		{brokerScope{legacy: []string{"x"}}, brokerScope{legacy: []string{"x", "y"}}, false},
		{brokerScope{legacy: []string{"x"}}, brokerScope{}, false},
	} {
		if got := tt.a.equal(tt.b); got != tt.want {
			t.Errorf("%v equal %v = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestScopeReaderLayout: members of this release (marked) are read in records, whatever this member may read of
// the previous layout, and cost no access review; the previous release's members that this member may read in
// that layout are its scope; a member it may not read is still a member (its records count once it writes them).
func TestScopeReaderLayout(t *testing.T) {
	entries := []client.Object{broker.MarkedEntry("a"), broker.MarkedEntry("b"), broker.DirectoryEntry("c"), broker.DirectoryEntry("d"), broker.DirectoryEntry("e")}
	var reviewed []string
	c := fake.NewClientBuilder().WithObjects(entries...).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			attrs := obj.(*authorizationv1.SelfSubjectAccessReview).Spec.ResourceAttributes
			reviewed = append(reviewed, attrs.Namespace)
			obj.(*authorizationv1.SelfSubjectAccessReview).Status.Allowed = attrs.Namespace != names.BrokerNamespace("d")
			return nil
		},
	}).Build()
	r := newScopeReader(c, "e", logr.Discard())
	scope, err := r.read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{names.BrokerNamespace("c")}; !slices.Equal(scope.legacy, want) {
		t.Errorf("previous layout in %v, want %v", scope.legacy, want)
	}
	if len(scope.members) != 5 {
		t.Errorf("members %v, want all 5", scope.members)
	}
	for _, ns := range reviewed {
		if ns != names.BrokerNamespace("c") && ns != names.BrokerNamespace("d") {
			t.Errorf("reviewed access to %q: only the previous release's other members need it", ns)
		}
	}
	reviewed = nil
	if _, err := r.read(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{names.BrokerNamespace("d")}; !slices.Equal(slices.Compact(reviewed), want) {
		t.Errorf("second poll reviewed %v, want %v alone (c was found readable)", reviewed, want)
	}
}

// TestScopeReaderNoDirectory: an identity that may not read the directory imports every namespace's records.
func TestScopeReaderNoDirectory(t *testing.T) {
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		List: func(_ context.Context, _ client.WithWatch, _ client.ObjectList, _ ...client.ListOption) error {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no"))
		},
	}).Build()
	scope, err := newScopeReader(c, "a", logr.Discard()).read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if scope.members != nil || scope.legacy != nil || scope.regions != nil {
		t.Errorf("scope %+v, want every namespace's records", scope)
	}
}

func TestChangedMembers(t *testing.T) {
	joined, left := changedMembers(map[string]bool{"a": true, "b": true}, map[string]bool{"b": true, "c": true, "d": true})
	if !slices.Equal(joined, []string{"c", "d"}) || !slices.Equal(left, []string{"a"}) {
		t.Errorf("joined %v, left %v; want [c d], [a]", joined, left)
	}
	if joined, left := changedMembers(nil, map[string]bool{"a": true}); joined != nil || left != nil {
		t.Errorf("a directory that appears: joined %v, left %v; want none", joined, left)
	}
}

// TestScopeRegions: a region that changed is no new scope: the run goes on, and the members whose region
// changed are the ones to reconcile.
func TestScopeRegions(t *testing.T) {
	was := brokerScope{legacy: []string{"x"}, regions: map[string]string{"b": "us-east"}}
	if now := (brokerScope{legacy: []string{"x"}, regions: map[string]string{"b": "eu-west"}}); !was.equal(now) {
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

// TestScopeReaderRegions: the scope reader reads the regions from the directory entries.
func TestScopeReaderRegions(t *testing.T) {
	entries := []client.Object{broker.RegionEntry("a", "us-east"), broker.RegionEntry("b", "eu-west"), broker.RegionEntry("c", "")}
	bad := broker.RegionEntry("d", "")
	bad.Data["region"] = "not a label value"
	entries = append(entries, bad)
	for _, tt := range []struct {
		name    string
		entries []client.Object
		want    map[string]string
	}{
		{"listed members", entries, map[string]string{"a": "us-east", "b": "eu-west"}},
		{"no member listed", nil, map[string]string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithObjects(tt.entries...).WithInterceptorFuncs(interceptor.Funcs{
				Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
					review := obj.(*authorizationv1.SelfSubjectAccessReview)
					review.Status.Allowed = review.Spec.ResourceAttributes.Namespace != ""
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

// TestScopeReaderEverything: an identity that may read the records but no namespace of the previous layout is told
// so; one that reads every namespace of both, as an administrator, uses no directory, whatever it lists.
func TestScopeReaderEverything(t *testing.T) {
	for _, tt := range []struct {
		name         string
		records, all bool
		wantErr      bool
	}{
		{"a member of the previous release, not joined again", false, false, true},
		{"a member", true, false, false},
		{"an administrator", true, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithObjects(broker.MarkedEntry("a"), broker.MarkedEntry("b")).WithInterceptorFuncs(interceptor.Funcs{
				Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
					attrs := obj.(*authorizationv1.SelfSubjectAccessReview).Spec.ResourceAttributes
					obj.(*authorizationv1.SelfSubjectAccessReview).Status.Allowed = attrs.Namespace == "" &&
						(attrs.Group == brokerv1alpha1.GroupName && tt.records || attrs.Group != brokerv1alpha1.GroupName && tt.all)
					return nil
				},
			}).Build()
			r := newScopeReader(c, "a", logr.Discard())
			if err := r.checkRecords(context.Background()); (err != nil) != tt.wantErr {
				t.Fatalf("checkRecords: %v, want an error: %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			scope, err := r.read(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := scope.members != nil; got == tt.all {
				t.Errorf("members %v: want the directory's unless an administrator", scope.members)
			}
		})
	}
}
