package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/locality"
	"vksfleet.dev/fleet/mcs/names"
)

// topology reads where this member is, from the cache: its region (the ClusterProperty
// region.topology.k8s.io, "" when absent) and its nodes' zones.
func (r *reconciler) topology(ctx context.Context) (locality.Topology, error) {
	top := locality.Topology{Cluster: r.id}
	cp := &aboutv1alpha1.ClusterProperty{}
	switch err := r.local.Get(ctx, client.ObjectKey{Name: aboutv1alpha1.RegionName}, cp); {
	case err == nil:
		top.Region = cp.Spec.Value
	case !apierrors.IsNotFound(err):
		return top, fmt.Errorf("reading ClusterProperty %s: %w", aboutv1alpha1.RegionName, err)
	}
	// Nodes are watched as metadata only, and listed without a copy: a reconcile needs one label of each.
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := r.local.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return top, fmt.Errorf("listing nodes for their zones: %w", err)
	}
	for _, n := range nodes.Items {
		if z := n.Labels[corev1.LabelTopologyZone]; z != "" && !slices.Contains(top.Zones, z) {
			top.Zones = append(top.Zones, z)
		}
	}
	slices.Sort(top.Zones)
	return top, nil
}

// zoneChanged passes the node events that can move this member's zones: nodes coming and going or changing
// zone. Node status updates, which are most events, pass none; of the others, mapTopology acts only on those that
// did move them.
var zoneChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return true },
	DeleteFunc: func(event.DeleteEvent) bool { return true },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetLabels()[corev1.LabelTopologyZone] != e.ObjectNew.GetLabels()[corev1.LabelTopologyZone]
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// regionChanged passes the events of the region ClusterProperty.
var regionChanged = predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == aboutv1alpha1.RegionName })

// topologySeen is the topology that the last node or region event found. Most node events that pass zoneChanged
// (an autoscaler adding or removing a node, a spot node reclaimed) leave this member's zones and region as they
// were, and each would otherwise bring every service back, each of which reads every node again.
type topologySeen struct {
	mu  sync.Mutex
	top *locality.Topology
}

// changed records top and says whether its region or zones differ from the last recorded (always, the first
// time). Two events racing may record an older topology last: the next event then enqueues once more, and no
// change is missed, as every event reads the cache after its change.
func (s *topologySeen) changed(top locality.Topology) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.top != nil && s.top.Region == top.Region && slices.Equal(s.top.Zones, top.Zones) {
		return false
	}
	s.top = &top
	return true
}

// mapTopology maps a change of this member's topology to every service this member imports or exports: imports
// are re-hinted, and exports republish the region. An event that changed neither the zones nor the region maps
// to none.
func (r *reconciler) mapTopology(ctx context.Context, _ client.Object) []reconcile.Request {
	if top, err := r.topology(ctx); err != nil {
		r.log.Error(err, "reading this member's topology after a node or region event: reconciling every service")
	} else if !r.topologySeen.changed(top) {
		return nil
	}
	seen := map[reconcile.Request]bool{}
	var reqs []reconcile.Request
	add := func(ns, name string) {
		req := reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}
		if !seen[req] {
			seen[req] = true
			reqs = append(reqs, req)
		}
	}
	sis := &mcsv1beta1.ServiceImportList{}
	if err := r.local.List(ctx, sis); err != nil {
		r.log.Error(err, "listing imports after a topology change")
	}
	for _, si := range sis.Items {
		add(si.Namespace, si.Name)
	}
	ses := &mcsv1beta1.ServiceExportList{}
	if err := r.local.List(ctx, ses); err != nil {
		r.log.Error(err, "listing exports after a topology change")
	}
	for _, se := range ses.Items {
		add(se.Namespace, se.Name)
	}
	return reqs
}

// locate ranks the import's endpoints: it sets the zone hints on the desired slices, records the tiers in the
// desired ServiceImport's annotations, and reports tier changes as an event and in metrics. An import whose
// endpoints all count alike gets neither hints nor the annotation.
func (r *reconciler) locate(stored, want *mcsv1beta1.ServiceImport, top locality.Topology, exports []merge.Export, desired []discoveryv1.EndpointSlice) {
	origins := make(map[string]locality.Origin, len(exports))
	for _, e := range exports {
		origins[e.Cluster] = locality.Origin{Region: e.Region, Draining: e.Draining}
	}
	srcs := make([]locality.Source, len(desired))
	for i := range desired {
		srcs[i] = locality.Source{Cluster: desired[i].Annotations[names.AnnotationClusterID], Slice: &desired[i]}
	}
	plan := locality.Apply(top, origins, locality.ModeOf(want.Spec.TrafficDistribution), srcs)
	key := client.ObjectKeyFromObject(want)
	if plan.Zones == nil {
		forgetLocality(r.id, key)
		return
	}
	ann := locality.Annotate(plan)
	want.Annotations = maps.Clone(want.Annotations)
	if want.Annotations == nil {
		want.Annotations = map[string]string{}
	}
	want.Annotations[names.AnnotationLocality] = ann.Encode()
	recordLocality(r.id, key, plan)

	if old, ok := stored.Annotations[names.AnnotationLocality]; ok {
		before, err := locality.Decode(old)
		if err != nil {
			return // written by someone else: nothing to compare with
		}
		if changes := tierChanges(before, ann); len(changes) > 0 {
			failoversTotal.WithLabelValues(r.id).Add(float64(worse(before, ann)))
			r.events.Eventf(stored, nil, corev1.EventTypeNormal, "LocalityChanged", "Rank", "%s", strings.Join(changes, "; "))
		}
	}
}

// tierChanges describes what moved between two annotations, zone by zone, then the DNS.
func tierChanges(before, after locality.Annotation) []string {
	var out []string
	for _, z := range slices.Sorted(maps.Keys(after.Zones)) {
		if b := before.Zones[z]; b != "" && b != after.Zones[z] {
			out = append(out, fmt.Sprintf("zone %s: %s -> %s", z, b, after.Zones[z]))
		}
	}
	if before.DNSTier != after.DNSTier {
		out = append(out, fmt.Sprintf("DNS: %s -> %s %v", before.DNSTier, after.DNSTier, after.DNSClusters))
	}
	return out
}

// worse counts the zones, and the DNS, that moved to a farther tier: the failovers.
func worse(before, after locality.Annotation) int {
	rank := locality.Rank
	n := 0
	for z, t := range after.Zones {
		if b, ok := before.Zones[z]; ok && rank(t) > rank(b) {
			n++
		}
	}
	if before.DNSTier != "" && rank(after.DNSTier) > rank(before.DNSTier) {
		n++
	}
	return n
}
