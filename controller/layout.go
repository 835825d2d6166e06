package controller

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The broker holds members' records in two layouts (docs/design.md, "The broker at hundreds of members"): this
// release's records (api/broker/v1alpha1), which a member reads cluster-wide, one watch per kind; and the previous
// release's ServiceImports, EndpointSlices and Leases, which a member read namespace by namespace. A run reads a
// member in the layout the member directory marks it with (brokerScope): every member in records, but for the
// previous release's members, read in their namespaces (legacy). It writes both layouts in its own namespace, so
// that a member of the previous release still imports it (publish.go, heartbeat.go).

// brokerView is the broker as a run reads it: the records cache and the legacy one, one namespace at a time each
// from the cache of its layout, and, listed across namespaces, the records of the directory's members and the
// legacy objects of the previous release's members. Own objects are read from the records: the legacy cache
// holds them too, for the mirror writes, which read it directly.
type brokerView struct {
	records, legacy syncedReader
	own             string          // this member's broker namespace
	legacyNS        map[string]bool // the namespaces read in the previous layout; fixed for a run
	// members are the broker namespaces the directory lists (the own always counts): records elsewhere, such as
	// an evicted member's leftovers, are not imported. nil: no directory, every namespace counts.
	members atomic.Pointer[map[string]bool]
}

var _ client.Reader = (*brokerView)(nil)

func newBrokerView(records, legacy syncedReader, own string, scope brokerScope) *brokerView {
	v := &brokerView{records: records, legacy: legacy, own: own, legacyNS: map[string]bool{}}
	for _, ns := range scope.legacy {
		v.legacyNS[ns] = true
	}
	v.setMembers(scope.members)
	return v
}

// setMembers sets the directory's members (nil: every namespace counts).
func (v *brokerView) setMembers(members map[string]bool) { v.members.Store(&members) }

// member says whether a broker namespace's objects count.
func (v *brokerView) member(ns string) bool {
	members := *v.members.Load()
	return members == nil || ns == v.own || members[ns]
}

// readerFor is the cache that holds namespace ns's objects as this run reads them.
func (v *brokerView) readerFor(ns string) client.Reader {
	if ns != v.own && v.legacyNS[ns] {
		return v.legacy
	}
	return v.records
}

// Get reads one object from the cache of its namespace's layout.
func (v *brokerView) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return v.readerFor(key.Namespace).Get(ctx, key, obj, opts...)
}

// List lists one namespace from the cache of its layout, whether or not the directory lists it (what a member
// that left exported is looked up so); across namespaces, the directory's members only, each in its layout.
func (v *brokerView) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	if o.Namespace != "" {
		return v.readerFor(o.Namespace).List(ctx, list, opts...)
	}
	if err := v.records.List(ctx, list, opts...); err != nil {
		return err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	kept := keepItems(items, func(ns string) bool { return (ns == v.own || !v.legacyNS[ns]) && v.member(ns) })
	if len(v.legacyNS) > 0 {
		old := reflect.New(reflect.TypeOf(list).Elem()).Interface().(client.ObjectList)
		if err := v.legacy.List(ctx, old, opts...); err != nil {
			return err
		}
		items, err := meta.ExtractList(old)
		if err != nil {
			return err
		}
		kept = append(kept, keepItems(items, func(ns string) bool { return ns != v.own && v.legacyNS[ns] && v.member(ns) })...)
	}
	return meta.SetList(list, kept)
}

// keepItems returns the items whose namespace keep accepts.
func keepItems(items []runtime.Object, keep func(ns string) bool) []runtime.Object {
	out := items[:0:0]
	for _, it := range items {
		if o, ok := it.(client.Object); ok && keep(o.GetNamespace()) {
			out = append(out, it)
		}
	}
	return out
}

// WaitForCacheSync waits for both caches.
func (v *brokerView) WaitForCacheSync(ctx context.Context) bool {
	return v.records.WaitForCacheSync(ctx) && v.legacy.WaitForCacheSync(ctx)
}

// errNoRecords explains a broker that does not serve the records: its roles and CRDs are a previous release's.
var errNoRecords = errors.New("the broker does not serve this release's records (broker.mcs.vksfleet.dev exportrecords): run this release's `kubectl mcs broker init` on it")
