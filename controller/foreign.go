package controller

import (
	"context"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/names"
)

// ReasonNameInUse is the reason of the Warning Event on another implementation's ServiceImport, and on the local
// ServiceExport, while that ServiceImport keeps the controller from importing the service.
const ReasonNameInUse = "NameInUse"

// importsNotOurs counts, per controller, the services the clusterset exports whose local ServiceImport is another
// implementation's: they are not imported here while it stands.
var importsNotOurs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "mcs_controller_service_imports_not_ours",
	Help: "Services the clusterset exports whose ServiceImport in this member was created by another implementation " +
		"(no label " + names.LabelImportManagedBy + "): the controller leaves it alone and does not import the " +
		"service here until it is deleted.",
}, []string{"cluster_id"})

// ownsImport says whether the stored ServiceImport is the controller's, which it may write and delete: marked
// with names.LabelImportManagedBy, or made by a release before the mark: carrying its locality annotation, or named
// as their owner by the controller's own derived Service, imported slices or cluster-local objects (the next write
// marks it). A
// ServiceImport of another implementation (Submariner Lighthouse, Cilium) is neither.
func ownsImport(got storedImport) bool {
	if got.si.Labels[names.LabelImportManagedBy] == names.ManagedBy {
		return true
	}
	// Every import an earlier release wrote carries its locality, a key in this project's prefix, which exported
	// annotations may not carry (admit.Metadata): a headless import with no slice yet is still recognised.
	if _, ok := got.si.Annotations[names.AnnotationLocality]; ok {
		return true
	}
	ownedBySI := func(obj metav1.Object) bool {
		return slices.ContainsFunc(obj.GetOwnerReferences(), func(o metav1.OwnerReference) bool { return o.UID == got.si.UID })
	}
	if got.derived != nil && isOurs(got.derived) && ownedBySI(got.derived) {
		return true
	}
	if got.clusterLocal != nil && reflects(got.clusterLocal, got.si.Name) && ownedBySI(got.clusterLocal) {
		return true
	}
	// Both lists hold only the controller's slices (localSliceIndex).
	for _, list := range [][]discoveryv1.EndpointSlice{got.slices, got.clusterLocalSlices} {
		for i := range list {
			if ownedBySI(&list[i]) {
				return true
			}
		}
	}
	return false
}

// besideForeign handles a service whose ServiceImport here is another implementation's (ownsImport): that
// ServiceImport is never written or deleted, and what the controller made for the service before is removed,
// since it cannot own it. While the clusterset exports the service (exported), the import waits, and that is
// reported once, when it starts: in the log, in importsNotOurs, and as a Warning Event on the ServiceImport and on
// the local ServiceExport, if any. Deleting that ServiceImport brings the service back, and the import is made.
func (r *reconciler) besideForeign(ctx context.Context, key types.NamespacedName, got storedImport, exported bool) error {
	if !exported {
		r.foreigns.forget(r.id, key)
	} else if r.foreigns.note(r.id, key, got.si.UID) {
		r.log.Info("leaving alone a ServiceImport another implementation created: the service is not imported here while it exists",
			"service", key, "labels", got.si.Labels)
		note := "ServiceImport " + key.String() + " has no label " + names.LabelImportManagedBy + "=" + names.ManagedBy +
			": another implementation made it, and " + names.ManagedBy + " leaves it alone. The clusterset exports " +
			key.String() + ", which is not imported into this cluster until this ServiceImport is deleted."
		r.events.Eventf(got.si, nil, corev1.EventTypeWarning, ReasonNameInUse, "Import", "%s", note)
		if se, err := getOrNil(ctx, r.local, key, &mcsv1beta1.ServiceExport{}); err == nil && se != nil {
			r.events.Eventf(se, nil, corev1.EventTypeWarning, ReasonNameInUse, "Import", "%s", note)
		}
	}
	return r.unimport(ctx, key, got)
}

// notOursLog keeps, per controller, the services whose import another implementation's ServiceImport holds, by
// that ServiceImport's UID, so that each is reported once and importsNotOurs counts them. The zero value is ready
// for use; services reconcile concurrently.
type notOursLog struct {
	mu   sync.Mutex
	uids map[types.NamespacedName]types.UID
}

// note records that uid holds key's import, and says whether that is news: not so at the previous reconcile.
func (l *notOursLog) note(id string, key types.NamespacedName, uid types.UID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.uids == nil {
		l.uids = map[types.NamespacedName]types.UID{}
	}
	old, ok := l.uids[key]
	fresh := !ok || old != uid
	l.uids[key] = uid
	importsNotOurs.WithLabelValues(id).Set(float64(len(l.uids)))
	return fresh
}

// forget records that nothing of another implementation's holds key's import, or that the service is not exported.
func (l *notOursLog) forget(id string, key types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.uids[key]; !ok {
		return
	}
	delete(l.uids, key)
	importsNotOurs.WithLabelValues(id).Set(float64(len(l.uids)))
}
