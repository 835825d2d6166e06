package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
)

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

// importStatus writes the ServiceImport's status: the clusters, endpointSliceObjects, Ready and, when reflecting
// into cluster.local, ClusterLocalService, with a Warning Event when that one turns False for a new reason.
func (r *reconciler) importStatus(ctx context.Context, si, want *mcsv1beta1.ServiceImport, ready metav1.Condition,
	clusterLocal *metav1.Condition) error {
	status := si.Status.DeepCopy()
	status.Clusters = want.Status.Clusters
	status.EndpointSliceObjects = want.Status.EndpointSliceObjects
	meta.SetStatusCondition(&status.Conditions, ready)
	before := meta.FindStatusCondition(si.Status.Conditions, imports.ConditionClusterLocalService)
	if clusterLocal != nil {
		meta.SetStatusCondition(&status.Conditions, *clusterLocal)
	} else {
		meta.RemoveStatusCondition(&status.Conditions, imports.ConditionClusterLocalService)
	}
	if equality.Semantic.DeepEqual(*status, si.Status) {
		return nil
	}
	upd := si.DeepCopy()
	upd.Status = *status
	if err := r.local.Status().Update(ctx, upd); err != nil {
		return fmt.Errorf("updating the status of ServiceImport %s/%s: %w", si.Namespace, si.Name, err)
	}
	if c := clusterLocal; c != nil && c.Status == metav1.ConditionFalse && (before == nil || before.Reason != c.Reason) {
		r.events.Eventf(upd, nil, corev1.EventTypeWarning, c.Reason, "Reflect", "%s", c.Message)
	}
	return nil
}
