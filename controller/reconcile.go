package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
	"vksfleet.dev/fleet/controller/apply"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/export"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/locality"
	"vksfleet.dev/fleet/mcs/names"
)

// maxRetryDelay caps the backoff of a failing service.
const maxRetryDelay = 30 * time.Second

// reconciler reconciles one service key (namespace/name) at a time, both ways: it publishes the local export of
// the service to the broker and writes the local import of the service from every cluster's export. Keeping both
// in one reconcile gives each ServiceExport's status a single writer.
type reconciler struct {
	id     string
	siAPI  string        // the local ServiceImport apiVersion, for owner references
	local  client.Client // cached reads
	broker client.Client // cached reads of the controller's broker objects
	denied []string      // namespaces never exported from
	// clusterLocal reflects imports into cluster.local (Options.ClusterLocalServices).
	clusterLocal bool
	// localHost and brokerHost name the API servers in errors.
	localHost, brokerHost string
	// trust says whether the broker's view may be acted on with deletions, and withdrawals holds them until the
	// view has shown them long enough.
	trust       *broker.Trust
	withdrawals *withdrawalHold
	// races backs off the retries of races with the caches, which bypass the controller's failure backoff.
	races    workqueue.TypedRateLimiter[reconcile.Request]
	liveness *broker.Liveness
	events   events.EventRecorder
	log      logr.Logger

	mu    sync.Mutex
	queue workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// setup registers the controller and its watches: local ServiceExports, Services, EndpointSlices, ServiceImports
// and Namespaces, and the broker's export records and slices, each mapped to the service it belongs to.
func (r *reconciler) setup(mgr ctrl.Manager, brokerCluster cluster.Cluster, workers int) error {
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
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.mapTopology), builder.WithPredicates(topologyChanged)).
		Watches(&aboutv1alpha1.ClusterProperty{}, handler.EnqueueRequestsFromMapFunc(r.mapTopology), builder.WithPredicates(topologyChanged)).
		WatchesRawSource(source.Kind(brokerCluster.GetCache(), client.Object(&mcsv1beta1.ServiceImport{}), byBroker)).
		WatchesRawSource(source.Kind(brokerCluster.GetCache(), client.Object(&discoveryv1.EndpointSlice{}), byBroker)).
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.queue = q
			return nil
		})).
		Complete(r)
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
	return requests(records.Items)
}

// enqueueCluster enqueues every service the given member exports, after its liveness changed.
func (r *reconciler) enqueueCluster(ctx context.Context, clusterID string) error {
	r.mu.Lock()
	q := r.queue
	r.mu.Unlock()
	if q == nil {
		return nil // the controller has not started: its first reconciles see the new liveness anyway
	}
	records := &mcsv1beta1.ServiceImportList{}
	if err := r.broker.List(ctx, records, client.InNamespace(names.BrokerNamespace(clusterID))); err != nil {
		return err
	}
	for _, req := range requests(records.Items) {
		q.Add(req)
	}
	return nil
}

// enqueueAll enqueues every service this member exports or imports and every service on the broker.
func (r *reconciler) enqueueAll(ctx context.Context) error {
	r.mu.Lock()
	q := r.queue
	r.mu.Unlock()
	if q == nil {
		return nil
	}
	if err := r.enqueueExports(ctx); err != nil {
		return err
	}
	imports := &mcsv1beta1.ServiceImportList{}
	if err := r.local.List(ctx, imports); err != nil {
		return err
	}
	for _, si := range imports.Items {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: si.Namespace, Name: si.Name}})
	}
	records := &mcsv1beta1.ServiceImportList{}
	if err := r.broker.List(ctx, records); err != nil {
		return err
	}
	for _, req := range requests(records.Items) {
		q.Add(req)
	}
	return nil
}

// enqueueExports enqueues every service exported from this cluster.
func (r *reconciler) enqueueExports(ctx context.Context) error {
	r.mu.Lock()
	q := r.queue
	r.mu.Unlock()
	if q == nil {
		return nil
	}
	exports := &mcsv1beta1.ServiceExportList{}
	if err := r.local.List(ctx, exports); err != nil {
		return err
	}
	for _, se := range exports.Items {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: se.Namespace, Name: se.Name}})
	}
	return nil
}

func requests(records []mcsv1beta1.ServiceImport) []reconcile.Request {
	seen := map[types.NamespacedName]bool{}
	var reqs []reconcile.Request
	for i := range records {
		if key, ok := broker.ServiceOf(&records[i]); ok && !seen[key] {
			seen[key] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: key})
		}
	}
	return reqs
}

// Reconcile brings one service's export and import up to date. Races with the caches are expected: a create of
// an object the cache has not shown yet (AlreadyExists), an update from a stale copy (Conflict). They are retried
// with their own backoff and logged only at V(1), so that "Reconciler error" in the log always means a failure
// an operator should look at; every other error is returned, naming the API server it came from.
func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	err := r.reconcile(ctx, req)
	switch {
	case err != nil && ctx.Err() != nil:
		return reconcile.Result{}, nil // stopping: the next start reconciles everything anyway
	case err != nil && onlyRaces(err):
		r.log.V(1).Info("retrying after a race with the cache", "service", req.NamespacedName, "error", err.Error())
		return reconcile.Result{RequeueAfter: r.races.When(req)}, nil
	}
	r.races.Forget(req)
	return reconcile.Result{}, err
}

// onlyRaces says whether every error joined in err is an AlreadyExists or a Conflict.
func onlyRaces(err error) bool {
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			if !onlyRaces(inner) {
				return false
			}
		}
		return true
	case interface{ Unwrap() error }:
		return onlyRaces(e.Unwrap())
	}
	return apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err)
}

// at names the API server an error came from.
func at(host string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("API server %s: %w", host, err)
}

func (r *reconciler) reconcile(ctx context.Context, req reconcile.Request) error {
	select {
	case <-r.liveness.Observed():
	case <-ctx.Done():
		return ctx.Err()
	}
	key := req.NamespacedName
	if names.IsBrokerNamespace(key.Namespace) {
		// This member is also the broker: what lies here are broker objects, not exports or imports.
		return nil
	}
	top, err := r.topology(ctx)
	if err != nil {
		return at(r.localHost, err)
	}
	se, err := getOrNil(ctx, r.local, key, &mcsv1beta1.ServiceExport{})
	if err != nil {
		return at(r.localHost, err)
	}
	svc, err := getOrNil(ctx, r.local, key, &corev1.Service{})
	if err != nil {
		return at(r.localHost, err)
	}

	// Export: what this cluster publishes, if anything.
	var own *merge.Export
	var ownSlices []discoveryv1.EndpointSlice
	var valid metav1.Condition
	if se != nil && se.DeletionTimestamp.IsZero() {
		var ok bool
		if valid, ok = export.Valid(se, svc, r.denied); ok {
			e := export.Record(r.id, se, svc)
			e.Region = top.Region
			own = &e
			local := &discoveryv1.EndpointSliceList{}
			if err := r.local.List(ctx, local, client.InNamespace(key.Namespace),
				client.MatchingFields{localSliceIndex: sourceSlice + key.Name}); err != nil {
				return at(r.localHost, err)
			}
			ownSlices = export.Slices(key.Namespace, key.Name, local.Items)
		}
	}
	publishErr := at(r.brokerHost, r.publish(ctx, key, own, ownSlices))

	// Import: every cluster's export, with this cluster's taken from the local truth rather than the broker.
	exports, sources, err := r.gather(ctx, key, own, ownSlices)
	if err != nil {
		return errors.Join(publishErr, at(r.brokerHost, err))
	}
	merged := merge.Merge(exports)
	importErr := at(r.localHost, r.importService(ctx, key, exports, merged, sources, top))

	var statusErr error
	// A publish that lost a race is retried at once: reporting it as Failed would only flap the condition.
	if se != nil && se.DeletionTimestamp.IsZero() && (publishErr == nil || !onlyRaces(publishErr)) {
		statusErr = at(r.localHost, r.exportStatus(ctx, se, valid, own != nil, publishErr, merged))
	}
	return errors.Join(publishErr, importErr, statusErr)
}

// publish makes this cluster's broker record and slices for the service match its export (none when own is nil).
func (r *reconciler) publish(ctx context.Context, key types.NamespacedName, own *merge.Export, ownSlices []discoveryv1.EndpointSlice) error {
	ns := names.BrokerNamespace(r.id)
	recordKey := types.NamespacedName{Namespace: ns, Name: names.RecordName(key.Namespace, key.Name)}
	existing, err := getOrNil(ctx, r.broker, recordKey, &mcsv1beta1.ServiceImport{})
	if err != nil {
		return err
	}
	sliceList := &discoveryv1.EndpointSliceList{}
	if err := r.broker.List(ctx, sliceList, client.InNamespace(ns), client.MatchingFields{serviceIndex: key.String()}); err != nil {
		return err
	}
	var desired []discoveryv1.EndpointSlice
	if own == nil {
		if existing != nil {
			if err := apply.Delete(ctx, r.broker, existing); err != nil {
				return fmt.Errorf("withdrawing %s from the broker: %w", key, err)
			}
		}
	} else {
		want, err := broker.Record(key, *own)
		if err != nil {
			return err
		}
		switch {
		case existing == nil:
			err = r.broker.Create(ctx, want)
		case !apply.SameMeta(existing, want) || !equality.Semantic.DeepEqual(existing.Spec, want.Spec):
			upd := existing.DeepCopy()
			upd.Labels, upd.Annotations, upd.Spec = want.Labels, want.Annotations, want.Spec
			err = apply.Update(ctx, r.broker, upd, want)
		}
		if err != nil {
			return fmt.Errorf("publishing %s to the broker: %w", key, err)
		}
		for i := range ownSlices {
			desired = append(desired, *broker.Slice(r.id, key, &ownSlices[i]))
		}
	}
	if err := apply.Slices(ctx, r.broker, sliceList.Items, desired); err != nil {
		return fmt.Errorf("publishing the endpoints of %s to the broker: %w", key, err)
	}
	return nil
}

// gather collects every cluster's export of the service and the endpoint slices of the live ones.
func (r *reconciler) gather(ctx context.Context, key types.NamespacedName, own *merge.Export,
	ownSlices []discoveryv1.EndpointSlice) ([]merge.Export, []imports.Source, error) {
	var exports []merge.Export
	var sources []imports.Source
	if own != nil {
		exports = append(exports, *own)
		for _, s := range ownSlices {
			sources = append(sources, imports.Source{Cluster: r.id, Slice: s})
		}
	}
	sel := client.MatchingFields{serviceIndex: key.String()}
	records := &mcsv1beta1.ServiceImportList{}
	if err := r.broker.List(ctx, records, sel); err != nil {
		return nil, nil, err
	}
	exporting := map[string]bool{}
	for i := range records.Items {
		e, err := broker.ParseRecord(&records.Items[i])
		if err != nil {
			r.log.Error(err, "ignoring a broken broker record")
			continue
		}
		// A cluster only writes in its own namespace; a record elsewhere claiming its id is ignored.
		if e.Cluster == r.id || records.Items[i].Namespace != names.BrokerNamespace(e.Cluster) {
			continue
		}
		exports = append(exports, e)
		exporting[e.Cluster] = true
	}
	slices := &discoveryv1.EndpointSliceList{}
	if err := r.broker.List(ctx, slices, sel); err != nil {
		return nil, nil, err
	}
	for _, s := range slices.Items {
		c := broker.ClusterOf(&s)
		if exporting[c] && s.Namespace == names.BrokerNamespace(c) && r.liveness.Alive(c) {
			sources = append(sources, imports.Source{Cluster: c, Slice: s})
		}
	}
	return exports, sources, nil
}

// importService writes the local import of the service: nothing when no cluster exports it or its namespace does
// not exist here, else the ServiceImport, its derived Service and the imported slices.
func (r *reconciler) importService(ctx context.Context, key types.NamespacedName, exports []merge.Export,
	merged merge.Result, sources []imports.Source, top locality.Topology) error {
	existing, err := getOrNil(ctx, r.local, key, &mcsv1beta1.ServiceImport{})
	if err != nil {
		return err
	}
	derivedKey := types.NamespacedName{Namespace: key.Namespace, Name: names.DerivedServiceName(key.Namespace, key.Name)}
	derived, err := getOrNil(ctx, r.local, derivedKey, &corev1.Service{})
	if err != nil {
		return err
	}
	sliceList := &discoveryv1.EndpointSliceList{}
	if err := r.local.List(ctx, sliceList, client.InNamespace(key.Namespace),
		client.MatchingFields{localSliceIndex: importedSlice + key.Name}); err != nil {
		return err
	}
	clusterLocal, clusterLocalSlices, err := r.clusterLocalObjects(ctx, key)
	if err != nil {
		return err
	}
	ns, err := getOrNil(ctx, r.local, types.NamespacedName{Name: key.Namespace}, &corev1.Namespace{})
	if err != nil {
		return err
	}
	nsGone := ns == nil || !ns.DeletionTimestamp.IsZero()
	if !nsGone && withdraws(existing, derived, sliceList.Items, key, exports, sources) {
		if wait := r.withdrawals.hold(key, time.Now()); wait > 0 || !r.trusted(ctx) {
			// The broker may be losing its data, or have lost it and not have it back yet: what this would
			// delete is kept while the view is untrusted (regaining trust reconciles every service again), and
			// until the view has shown the withdrawal for the hold, long enough for a lost broker to be noticed.
			r.log.V(1).Info("holding back a withdrawal", "service", key, "wait", wait)
			if wait > 0 {
				r.requeueAfter(key, wait)
			}
			return nil
		}
	}
	r.withdrawals.forget(key)
	if len(exports) == 0 || nsGone {
		var errs []error
		if existing != nil {
			errs = append(errs, apply.Delete(ctx, r.local, existing))
		}
		if derived != nil && isOurs(derived) {
			errs = append(errs, apply.Delete(ctx, r.local, derived))
		}
		if clusterLocal != nil && reflects(clusterLocal, key.Name) {
			errs = append(errs, apply.Delete(ctx, r.local, clusterLocal))
		}
		errs = append(errs, apply.Slices(ctx, r.local, sliceList.Items, nil), apply.Slices(ctx, r.local, clusterLocalSlices, nil))
		forgetLocality(r.id, key)
		return errors.Join(errs...)
	}

	served, err := r.servedFamilies(ctx)
	if err != nil {
		return err
	}
	exported := merged.Spec.IPFamilies
	merged = imports.Served(merged, served)
	si := existing
	if si == nil {
		si = imports.ServiceImport(key, merged, nil)
		if err := r.local.Create(ctx, si); err != nil {
			return fmt.Errorf("creating ServiceImport %s: %w", key, err)
		}
	}
	if derived, err = r.applyDerived(ctx, derived, imports.DerivedService(key, merged, imports.Owner(si, r.siAPI))); err != nil {
		return err
	}
	desiredSlices := imports.Slices(key, sources, imports.Owner(si, r.siAPI))
	want := imports.ServiceImport(key, merged, derived)
	r.locate(si, want, top, exports, desiredSlices)
	if !apply.SameMeta(si, want) || !equality.Semantic.DeepEqual(si.Spec, want.Spec) {
		upd := si.DeepCopy()
		upd.Labels, upd.Annotations, upd.Spec = want.Labels, want.Annotations, want.Spec
		if err := r.local.Update(ctx, upd); err != nil {
			return fmt.Errorf("updating ServiceImport %s: %w", key, err)
		}
		si = upd
	}
	// The slices go before the status, so that Ready can say whether they are programmed: stored, and seen in the
	// cache, where this reconcile read them.
	programmed := allStored(sliceList.Items, desiredSlices)
	if err := apply.Slices(ctx, r.local, sliceList.Items, desiredSlices); err != nil {
		return fmt.Errorf("importing the endpoints of %s: %w", key, err)
	}
	clusterLocalCond, err := r.reflect(ctx, si, want, desiredSlices, clusterLocal, clusterLocalSlices)
	if err != nil {
		return fmt.Errorf("reflecting %s into cluster.local: %w", key, err)
	}
	if !programmed {
		// The slices were just created: their events bring the service back once the cache has them, and the status
		// is written then, once, instead of Pending now and Ready a moment later.
		return nil
	}
	status := si.Status.DeepCopy()
	status.Clusters = want.Status.Clusters
	status.EndpointSliceObjects = want.Status.EndpointSliceObjects
	meta.SetStatusCondition(&status.Conditions, imports.Ready(want, exported, si.Generation))
	before := meta.FindStatusCondition(si.Status.Conditions, imports.ConditionClusterLocalService)
	if clusterLocalCond != nil {
		meta.SetStatusCondition(&status.Conditions, *clusterLocalCond)
	} else {
		meta.RemoveStatusCondition(&status.Conditions, imports.ConditionClusterLocalService)
	}
	if !equality.Semantic.DeepEqual(*status, si.Status) {
		upd := si.DeepCopy()
		upd.Status = *status
		if err := r.local.Status().Update(ctx, upd); err != nil {
			return fmt.Errorf("updating the status of ServiceImport %s: %w", key, err)
		}
		if c := clusterLocalCond; c != nil && c.Status == metav1.ConditionFalse && (before == nil || before.Reason != c.Reason) {
			r.events.Eventf(upd, nil, corev1.EventTypeWarning, c.Reason, "Reflect", "%s", c.Message)
		}
	}
	return nil
}

// clusterLocalObjects reads the Service that has the name of the import's cluster-local Service, whoever owns
// it, and the controller's cluster-local slices of the import.
func (r *reconciler) clusterLocalObjects(ctx context.Context, key types.NamespacedName) (*corev1.Service, []discoveryv1.EndpointSlice, error) {
	name := types.NamespacedName{Namespace: key.Namespace, Name: names.ClusterLocalServiceName(key.Namespace, key.Name)}
	svc, err := getOrNil(ctx, r.local, name, &corev1.Service{})
	if err != nil {
		return nil, nil, err
	}
	list := &discoveryv1.EndpointSliceList{}
	if err := r.local.List(ctx, list, client.InNamespace(key.Namespace),
		client.MatchingFields{localSliceIndex: clusterLocalSlice + key.Name}); err != nil {
		return nil, nil, err
	}
	return svc, list.Items, nil
}

// reflect makes the import's cluster-local Service and slices match the desired import want (stored as si) and
// its desired imported slices, and returns the ClusterLocalService condition to set; with the mode off it deletes
// what the controller made and returns nil, for no condition. A Service of that name that is not the
// controller's is never written, and no slice of the controller's may add endpoints to it.
func (r *reconciler) reflect(ctx context.Context, si, want *mcsv1beta1.ServiceImport, imported []discoveryv1.EndpointSlice,
	got *corev1.Service, stored []discoveryv1.EndpointSlice) (*metav1.Condition, error) {
	ours := got != nil && reflects(got, si.Name)
	if !r.clusterLocal {
		var errs []error
		if ours {
			errs = append(errs, apply.Delete(ctx, r.local, got))
		}
		return nil, errors.Join(append(errs, apply.Slices(ctx, r.local, stored, nil))...)
	}
	if got != nil && !ours {
		c := imports.ClusterLocalCondition(want, true, si.Generation)
		return &c, apply.Slices(ctx, r.local, stored, nil)
	}
	svc, svcSlices := imports.ClusterLocal(want, imported, imports.Owner(si, r.siAPI))
	switch {
	case got == nil:
		if err := r.local.Create(ctx, svc); err != nil {
			return nil, fmt.Errorf("creating Service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
	default:
		upd := got.DeepCopy()
		upd.Labels, upd.OwnerReferences = svc.Labels, svc.OwnerReferences
		upd.Spec.Ports, upd.Spec.Selector = svc.Spec.Ports, nil
		if !equality.Semantic.DeepEqual(upd, got) {
			if err := r.local.Update(ctx, upd); err != nil {
				return nil, fmt.Errorf("updating Service %s/%s: %w", got.Namespace, got.Name, err)
			}
		}
	}
	if err := apply.Slices(ctx, r.local, stored, svcSlices); err != nil {
		return nil, err
	}
	c := imports.ClusterLocalCondition(want, false, si.Generation)
	return &c, nil
}

// reflects says whether a Service is the controller's cluster-local Service of the named import.
func reflects(svc *corev1.Service, name string) bool {
	return isOurs(svc) && svc.Labels[names.LabelClusterLocalOf] == name
}

// trusted says whether the broker's view may be acted on with deletions: trusted by the heartbeat, and still
// holding this member's sentinel record, which a broker losing its records loses too.
func (r *reconciler) trusted(ctx context.Context) bool {
	if !r.trust.Trusted() {
		return false
	}
	err := r.broker.Get(ctx, client.ObjectKeyFromObject(broker.Sentinel(r.id)), &mcsv1beta1.ServiceImport{})
	return err == nil
}

// requeueAfter reconciles the service again after d.
func (r *reconciler) requeueAfter(key types.NamespacedName, d time.Duration) {
	r.mu.Lock()
	q := r.queue
	r.mu.Unlock()
	if q != nil {
		q.AddAfter(reconcile.Request{NamespacedName: key}, d)
	}
}

// withdrawalHold remembers since when each service's view has withdrawn something.
type withdrawalHold struct {
	d     time.Duration
	mu    sync.Mutex
	since map[types.NamespacedName]time.Time
}

// hold returns how much longer the withdrawal of key must wait, counting from the first time it was seen.
func (h *withdrawalHold) hold(key types.NamespacedName, now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	first, ok := h.since[key]
	if !ok {
		h.since[key], first = now, now
	}
	return max(0, h.d-now.Sub(first))
}

// forget ends the hold of key: its view withdraws nothing, or it was withdrawn.
func (h *withdrawalHold) forget(key types.NamespacedName) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.since, key)
}

// withdraws says whether importing the exports would delete any of the import: all of it, or a slice.
func withdraws(si *mcsv1beta1.ServiceImport, derived *corev1.Service, stored []discoveryv1.EndpointSlice,
	key types.NamespacedName, exports []merge.Export, sources []imports.Source) bool {
	if len(exports) == 0 {
		return si != nil || derived != nil || len(stored) > 0
	}
	for _, s := range stored {
		if !slices.ContainsFunc(sources, func(src imports.Source) bool {
			return names.ImportedSliceName(key.Name, src.Cluster, src.Slice.Name) == s.Name
		}) {
			return true
		}
	}
	return false
}

// allStored says whether every desired slice is among the stored ones, whatever their content: an import is
// programmed once its slices exist, and later endpoint changes do not make it unready.
func allStored(stored, desired []discoveryv1.EndpointSlice) bool {
	for _, d := range desired {
		if !slices.ContainsFunc(stored, func(s discoveryv1.EndpointSlice) bool { return s.Name == d.Name }) {
			return false
		}
	}
	return true
}

// servedFamilies are the IP families this member allocates ClusterIPs from: those of its ServiceCIDRs
// (networking.k8s.io/v1, which kube-apiserver creates from --service-cluster-ip-range as "kubernetes"). It is nil,
// unknown, on a server without that API; the kubernetes Service would be no substitute, since it has only the
// primary family of a dual-stack cluster.
func (r *reconciler) servedFamilies(ctx context.Context) ([]corev1.IPFamily, error) {
	cidrs := &networkingv1.ServiceCIDRList{}
	if err := r.local.List(ctx, cidrs); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing ServiceCIDRs for the served IP families: %w", err)
	}
	families := []corev1.IPFamily{}
	for _, sc := range cidrs.Items {
		if !sc.DeletionTimestamp.IsZero() {
			continue
		}
		for _, c := range sc.Spec.CIDRs {
			f := corev1.IPv4Protocol
			if strings.Contains(c, ":") {
				f = corev1.IPv6Protocol
			}
			if !slices.Contains(families, f) {
				families = append(families, f)
			}
		}
	}
	if len(families) == 0 {
		return nil, nil // kube-apiserver keeps its default ServiceCIDR: none is a view not to trust
	}
	return families, nil
}

// applyDerived makes the derived Service match want (nil: none) and returns it as stored.
func (r *reconciler) applyDerived(ctx context.Context, got, want *corev1.Service) (*corev1.Service, error) {
	switch {
	case want == nil:
		if got != nil && isOurs(got) {
			return nil, apply.Delete(ctx, r.local, got)
		}
		return nil, nil
	case got == nil:
		if err := r.local.Create(ctx, want); err != nil {
			return nil, fmt.Errorf("creating derived Service %s/%s: %w", want.Namespace, want.Name, err)
		}
		return want, nil
	}
	if len(got.Spec.IPFamilies) == 0 || got.Spec.IPFamilies[0] != want.Spec.IPFamilies[0] {
		// The primary family of a Service is immutable: the VIP changes, which only a change of the exports' common
		// families causes. The delete's event brings the service back, and that reconcile creates the new one; until
		// then the import has no IPs and is not Ready.
		r.log.Info("derived Service changes its primary IP family: recreating it", "service", client.ObjectKeyFromObject(got),
			"from", got.Spec.IPFamilies, "to", want.Spec.IPFamilies)
		return nil, apply.Delete(ctx, r.local, got)
	}
	upd := got.DeepCopy()
	upd.Labels, upd.OwnerReferences = want.Labels, want.OwnerReferences
	upd.Spec.Ports, upd.Spec.SessionAffinity, upd.Spec.SessionAffinityConfig = want.Spec.Ports, want.Spec.SessionAffinity, want.Spec.SessionAffinityConfig
	upd.Spec.IPFamilyPolicy, upd.Spec.IPFamilies = want.Spec.IPFamilyPolicy, want.Spec.IPFamilies
	if len(want.Spec.IPFamilies) == 1 && len(upd.Spec.ClusterIPs) > 1 {
		upd.Spec.ClusterIPs = upd.Spec.ClusterIPs[:1]
	}
	if equality.Semantic.DeepEqual(upd, got) {
		return got, nil
	}
	if err := r.local.Update(ctx, upd); err != nil {
		return nil, fmt.Errorf("updating derived Service %s/%s: %w", got.Namespace, got.Name, err)
	}
	return upd, nil
}

func isOurs(obj client.Object) bool { return obj.GetLabels()[names.LabelManagedBy] == names.ManagedBy }

// exportStatus writes the ServiceExport's Valid, Ready and Conflict conditions.
func (r *reconciler) exportStatus(ctx context.Context, se *mcsv1beta1.ServiceExport, valid metav1.Condition,
	exported bool, publishErr error, merged merge.Result) error {
	conds := append([]metav1.Condition(nil), se.Status.Conditions...)
	meta.SetStatusCondition(&conds, valid)
	ready := metav1.Condition{
		Type: string(mcsv1beta1.ServiceExportConditionReady), Status: metav1.ConditionTrue,
		Reason: string(mcsv1beta1.ServiceExportReasonExported), Message: "The service is exported to the clusterset.",
		ObservedGeneration: se.Generation,
	}
	switch {
	case !exported:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonPending),
			"The service is not valid for export."
	case publishErr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonFailed),
			"Publishing to the broker failed: "+publishErr.Error()
	}
	meta.SetStatusCondition(&conds, ready)
	if exported {
		meta.SetStatusCondition(&conds, merge.Condition(merged.Conflicts, se.Generation))
	} else {
		meta.RemoveStatusCondition(&conds, string(mcsv1beta1.ServiceExportConditionConflict))
	}
	if equality.Semantic.DeepEqual(conds, se.Status.Conditions) {
		return nil
	}
	upd := se.DeepCopy()
	upd.Status.Conditions = conds
	if err := r.local.Status().Update(ctx, upd); err != nil {
		return fmt.Errorf("updating the status of ServiceExport %s/%s: %w", se.Namespace, se.Name, err)
	}
	return nil
}

// getOrNil reads an object, returning nil when it does not exist.
func getOrNil[T client.Object](ctx context.Context, c client.Client, key types.NamespacedName, obj T) (T, error) {
	var zero T
	if err := c.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return zero, nil
		}
		return zero, err
	}
	return obj, nil
}
