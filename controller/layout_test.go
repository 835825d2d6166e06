package controller

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/mcsversion"
)

// synced is a fake client standing for a synced cache.
type synced struct{ client.Client }

func (synced) WaitForCacheSync(context.Context) bool { return true }

// TestBrokerViewLayouts: each namespace is read in its member's layout, across namespaces and one at a time;
// records of a namespace the directory does not list are not listed, nor are the previous layout's objects of
// members of this release (a rolled-forward member's old objects) or this member's own mirror.
func TestBrokerViewLayouts(t *testing.T) {
	scheme, err := mcsversion.NewScheme(mcsv1beta1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	record := func(ns string) client.Object {
		return &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo.web"}}
	}
	// own is this member; new a member of this release; old one of the previous release; gone left the directory.
	records := fake.NewClientBuilder().WithScheme(scheme).WithObjects(record("own"), record("new"), record("old"), record("gone")).Build()
	legacy := fake.NewClientBuilder().WithScheme(scheme).WithObjects(record("own"), record("new"), record("old")).Build()
	v := newBrokerView(synced{records}, synced{legacy}, "own", brokerScope{legacy: []string{"old"}, members: map[string]bool{"new": true, "old": true}})
	list := func() []string {
		l := &mcsv1beta1.ServiceImportList{}
		if err := v.List(context.Background(), l); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, si := range l.Items {
			out = append(out, si.Namespace)
		}
		slices.Sort(out)
		return out
	}
	if got, want := list(), []string{"new", "old", "own"}; !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
	// Deleting a namespace's object from one layout shows which cache the view reads it from.
	for _, tt := range []struct {
		ns     string
		legacy bool
	}{{"own", false}, {"new", false}, {"old", true}, {"gone", false}} {
		from := client.Client(records)
		if tt.legacy {
			from = legacy
		}
		if err := v.Get(context.Background(), client.ObjectKey{Namespace: tt.ns, Name: "demo.web"}, &mcsv1beta1.ServiceImport{}); err != nil {
			t.Errorf("%s: %v", tt.ns, err)
		}
		l := &mcsv1beta1.ServiceImportList{}
		if err := v.List(context.Background(), l, client.InNamespace(tt.ns)); err != nil || len(l.Items) != 1 {
			t.Errorf("%s listed alone: %d objects, %v; want its one, whether or not listed", tt.ns, len(l.Items), err)
		}
		if err := from.Delete(context.Background(), record(tt.ns)); err != nil {
			t.Fatal(err)
		}
		if err := v.Get(context.Background(), client.ObjectKey{Namespace: tt.ns, Name: "demo.web"}, &mcsv1beta1.ServiceImport{}); err == nil {
			t.Errorf("%s: read from the other layout's cache", tt.ns)
		}
	}
	v.setMembers(nil)
	if err := records.Create(context.Background(), record("gone")); err != nil {
		t.Fatal(err)
	}
	if got := list(); !slices.Contains(got, "gone") {
		t.Errorf("without a directory: listed %v, want every namespace's records", got)
	}
}
