package controller

import (
	"cmp"
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/names"
)

// setup registers the controller and its watches: local ServiceExports, Services, EndpointSlices, ServiceImports
// and Namespaces, and the broker's export records and slices, each mapped to the service it belongs to; and the
// DNS probe, if any, which brings back through the triggers the imports whose DNS answer changed.
func (r *reconciler) setup(mgr ctrl.Manager, b *brokerClients, triggers *triggers, workers int) error {
	if r.dns != nil {
		r.dns.enqueue = triggers.send
		if err := mgr.Add(r.dns); err != nil {
			return err
		}
	}
	byService := handler.EnqueueRequestsFromMapFunc(r.mapLocal)
	byBroker := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		if key, ok := broker.ServiceOf(obj); ok {
			return []reconcile.Request{{NamespacedName: key}}
		}
		return nil
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName(r.id)).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: workers,
			// Failures are retried with backoff up to maxRetryDelay: the broker or an API server may be away for a
			// while, and convergence after it returns should not wait for controller-runtime's 1000 s cap.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay),
		}).
		Watches(&mcsv1beta1.ServiceExport{}, &handler.EnqueueRequestForObject{}).
		Watches(&mcsv1beta1.ServiceImport{}, &handler.EnqueueRequestForObject{}).
		Watches(&corev1.Service{}, byService).
		Watches(&discoveryv1.EndpointSlice{}, byService).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.mapNamespace)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.mapTopology), builder.WithPredicates(zoneChanged), builder.OnlyMetadata).
		Watches(&aboutv1alpha1.ClusterProperty{}, handler.EnqueueRequestsFromMapFunc(r.mapTopology), builder.WithPredicates(regionChanged)).
		WatchesRawSource(source.Kind(b.records.GetCache(), client.Object(&mcsv1beta1.ServiceImport{}), byBroker)).
		WatchesRawSource(source.Kind(b.records.GetCache(), client.Object(&discoveryv1.EndpointSlice{}), byBroker)).
		WatchesRawSource(source.Kind(b.legacy.GetCache(), client.Object(&mcsv1beta1.ServiceImport{}), byBroker, othersOnly(b.view.own))).
		WatchesRawSource(source.Kind(b.legacy.GetCache(), client.Object(&discoveryv1.EndpointSlice{}), byBroker, othersOnly(b.view.own))).
		WatchesRawSource(triggers.source()).
		Complete(r)
}

// othersOnly drops the events of the broker namespace own in the previous layout: this member's mirror writes
// (publish.go), which its records already told of.
func othersOnly(own string) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() != own })
}

// mapLocal maps a local Service or EndpointSlice to its service key: the controller's own derived Services and
// imported slices by their multicluster.kubernetes.io/service-name label, its cluster-local Services and slices
// by their mcs.vksfleet.dev/cluster-local-of label, other slices by kubernetes.io/service-name. Objects of
// services that are not exported, which are most, are dropped here; another's Service with the name of a
// cluster-local Service maps to the import that wants the name too.
func (r *reconciler) mapLocal(ctx context.Context, obj client.Object) []reconcile.Request {
	l := obj.GetLabels()
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	switch {
	case l[names.LabelManagedBy] == names.ManagedBy || l[discoveryv1.LabelManagedBy] == names.ManagedBy:
		key.Name = cmp.Or(l[mcsv1beta1.LabelServiceName], l[names.LabelClusterLocalOf])
	default:
		var reqs []reconcile.Request
		if _, slice := obj.(*discoveryv1.EndpointSlice); slice {
			key.Name = l[discoveryv1.LabelServiceName]
		} else if r.clusterLocal && names.IsClusterLocalServiceName(key.Name) {
			reqs = r.wantingName(ctx, key)
		}
		if key.Name == "" || r.local.Get(ctx, key, &mcsv1beta1.ServiceExport{}) != nil {
			return reqs
		}
		return append(reqs, reconcile.Request{NamespacedName: key})
	}
	if key.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// wantingName returns the imports whose cluster-local Service would be the Service svc, so that they report
// another's Service in their way, and take the name once it is gone.
func (r *reconciler) wantingName(ctx context.Context, svc types.NamespacedName) []reconcile.Request {
	list := &mcsv1beta1.ServiceImportList{}
	if err := r.local.List(ctx, list, client.InNamespace(svc.Namespace)); err != nil {
		r.log.Error(err, "listing ServiceImports", "namespace", svc.Namespace)
		return nil
	}
	var reqs []reconcile.Request
	for _, si := range list.Items {
		if names.ClusterLocalServiceName(si.Namespace, si.Name) == svc.Name {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: si.Namespace, Name: si.Name}})
		}
	}
	return reqs
}

// mapNamespace maps a namespace to every service the clusterset exports in it, so that a namespace created after
// the export gets its imports.
func (r *reconciler) mapNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	records := &mcsv1beta1.ServiceImportList{}
	if err := r.broker.List(ctx, records, client.MatchingLabels{names.LabelServiceNamespace: obj.GetName()}); err != nil {
		r.log.Error(err, "listing broker records", "namespace", obj.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for _, key := range services(records.Items) {
		reqs = append(reqs, reconcile.Request{NamespacedName: key})
	}
	return reqs
}

// services are the services that broker records belong to, each once.
func services(records []mcsv1beta1.ServiceImport) []types.NamespacedName {
	seen := map[types.NamespacedName]bool{}
	var keys []types.NamespacedName
	for i := range records {
		if key, ok := broker.ServiceOf(&records[i]); ok && !seen[key] {
			seen[key] = true
			keys = append(keys, key)
		}
	}
	return keys
}

// serviceIndex indexes broker objects by the service they belong to, so that a reconcile finds a service's
// records and slices among thousands without a scan.
const serviceIndex = "mcs.vksfleet.dev/service"

func indexByService(obj client.Object) []string {
	if key, ok := broker.ServiceOf(obj); ok {
		return []string{key.String()}
	}
	return nil
}

// localSliceIndex indexes local EndpointSlices by role and service name (the cache adds the namespace): a
// Service's own slices as sourceSlice+name, the controller's imported slices as importedSlice+name and its
// cluster-local slices as clusterLocalSlice+name.
const (
	localSliceIndex   = "mcs.vksfleet.dev/slice"
	sourceSlice       = "source/"
	importedSlice     = "imported/"
	clusterLocalSlice = "cluster-local/"
)

func indexLocalSlice(obj client.Object) []string {
	l := obj.GetLabels()
	if l[discoveryv1.LabelManagedBy] == names.ManagedBy {
		if name := l[mcsv1beta1.LabelServiceName]; name != "" {
			return []string{importedSlice + name}
		}
		if name := l[names.LabelClusterLocalOf]; name != "" {
			return []string{clusterLocalSlice + name}
		}
		return nil
	}
	if name := l[discoveryv1.LabelServiceName]; name != "" {
		return []string{sourceSlice + name}
	}
	return nil
}
