package export

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/merge"
)

// The ServiceExport's conditions are computed here, and only here: Valid (is the export allowed), Ready (is it
// published) and Conflict (do the exports agree, from merge.Condition); the controller compares and writes them.

// ReasonClusterIDConflict is the ServiceExport Ready=False reason while another cluster claims this member's id.
const ReasonClusterIDConflict = "ClusterIDConflict"

// Valid is the ServiceExport Valid condition for the Service it names (nil when there is none), with denied the
// namespaces not exported from. Only a valid export is published. Exported labels and annotations with reserved
// keys are not exported (see Record) and the message says so; any other that Kubernetes would refuse on the
// ServiceImport makes the export invalid, rather than its import fail in every member.
func Valid(se *mcsv1beta1.ServiceExport, svc *corev1.Service, denied []string) (metav1.Condition, bool) {
	c := metav1.Condition{
		Type: string(mcsv1beta1.ServiceExportConditionValid), Status: metav1.ConditionTrue,
		Reason: string(mcsv1beta1.ServiceExportReasonValid), Message: "Service is valid for export.",
		ObservedGeneration: se.Generation,
	}
	switch {
	case slices.Contains(denied, se.Namespace):
		c.Status, c.Reason = metav1.ConditionFalse, ReasonNamespaceNotAllowed
		c.Message = fmt.Sprintf("Services in namespace %s are not exported: every cluster has this namespace, so its "+
			"Services would be merged with unrelated ones. The mcs-controller flag --denied-export-namespaces lists "+
			"the namespaces refused.", se.Namespace)
	case svc == nil || !svc.DeletionTimestamp.IsZero():
		c.Status, c.Reason = metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonNoService)
		c.Message = fmt.Sprintf("Service %s/%s does not exist.", se.Namespace, se.Name)
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		c.Status, c.Reason = metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonInvalidServiceType)
		c.Message = fmt.Sprintf("Service %s/%s is of type ExternalName, which cannot be exported.", se.Namespace, se.Name)
	default:
		_, _, problems := admit.Metadata(se.Spec.ExportedLabels, se.Spec.ExportedAnnotations)
		var invalid, reserved []string
		for _, p := range problems {
			if p.Reason == admit.ReasonReservedKey {
				reserved = append(reserved, p.Message)
			} else {
				invalid = append(invalid, p.Message)
			}
		}
		if len(invalid) > 0 {
			c.Status, c.Reason = metav1.ConditionFalse, ReasonInvalidExportedMetadata
			c.Message = "Not exported: " + list(invalid) + "."
		} else if len(reserved) > 0 {
			c.Message += " Not exported: " + list(reserved) + "."
		}
	}
	return c, c.Status == metav1.ConditionTrue
}

// Ready is the ServiceExport Ready condition: True once the export is published to the broker; False while it is
// not valid (Pending), while publishing fails (Failed), while another cluster claims this member's id
// (ReasonClusterIDConflict, with idConflict, the message saying so; "" when none does), or while a limit leaves
// part of its endpoints unpublished (limited, nil when none does).
func Ready(exported bool, publishErr error, idConflict string, limited *Limited, generation int64) metav1.Condition {
	ready := metav1.Condition{
		Type: string(mcsv1beta1.ServiceExportConditionReady), Status: metav1.ConditionTrue,
		Reason: string(mcsv1beta1.ServiceExportReasonExported), Message: "The service is exported to the clusterset.",
		ObservedGeneration: generation,
	}
	switch {
	case !exported:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonPending),
			"The service is not valid for export."
	case publishErr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonFailed),
			"Publishing to the broker failed: "+publishErr.Error()
	case idConflict != "":
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonClusterIDConflict, idConflict
	case limited != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, limited.Reason, limited.Message
	}
	return ready
}

// Conditions returns current (a ServiceExport's conditions, not changed) with Valid, Ready and Conflict set as
// valid, Ready and the merge's conflicts say: an export that is not published has no Conflict condition, since
// it takes no part in the merge.
func Conditions(current []metav1.Condition, valid metav1.Condition, exported bool, publishErr error, idConflict string,
	limited *Limited, conflicts []merge.Conflict, generation int64) []metav1.Condition {
	conds := append([]metav1.Condition(nil), current...)
	meta.SetStatusCondition(&conds, valid)
	meta.SetStatusCondition(&conds, Ready(exported, publishErr, idConflict, limited, generation))
	if exported {
		meta.SetStatusCondition(&conds, merge.Condition(conflicts, generation))
	} else {
		meta.RemoveStatusCondition(&conds, string(mcsv1beta1.ServiceExportConditionConflict))
	}
	return conds
}
