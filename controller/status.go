package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/export"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
)

// exportStatus writes the ServiceExport's Valid, Ready and Conflict conditions, as export.Conditions computes them.
func (r *reconciler) exportStatus(ctx context.Context, se *mcsv1beta1.ServiceExport, valid metav1.Condition,
	exported bool, publishErr error, merged merge.Result) error {
	idConflict := ""
	if r.duplicate.Active() {
		idConflict = r.duplicate.message()
	}
	limited := r.limits.limitedOf(types.NamespacedName{Namespace: se.Namespace, Name: se.Name})
	conds := export.Conditions(se.Status.Conditions, valid, exported, publishErr, idConflict, limited, merged.Conflicts, se.Generation)
	if equality.Semantic.DeepEqual(conds, se.Status.Conditions) {
		return nil
	}
	upd := se.DeepCopy()
	upd.Status.Conditions = conds
	// A ServiceExport deleted since the cache showed it has no status to write: its deletion reconciles again.
	if err := r.local.Status().Update(ctx, upd); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("updating the status of ServiceExport %s/%s: %w", se.Namespace, se.Name, err)
	}
	conditionEvents(r.events, upd, se.Status.Conditions, conds)
	return nil
}

// importStatus writes the ServiceImport's status: the clusters, endpointSliceObjects, Ready, WithdrawalHeld
// while held is set, Stale and Unreachable while stale and unreachable are, and, when reflecting into
// cluster.local, ClusterLocalService, with an Event for every condition that changed.
func (r *reconciler) importStatus(ctx context.Context, si, want *mcsv1beta1.ServiceImport, ready metav1.Condition,
	clusterLocal, held, stale, unreachable *metav1.Condition) error {
	status := si.Status.DeepCopy()
	status.Clusters = want.Status.Clusters
	status.EndpointSliceObjects = want.Status.EndpointSliceObjects
	meta.SetStatusCondition(&status.Conditions, ready)
	setCondition(&status.Conditions, imports.ConditionClusterLocalService, clusterLocal)
	for _, c := range []struct {
		typ  string
		cond *metav1.Condition
	}{{imports.ConditionStale, stale}, {imports.ConditionUnreachable, unreachable}} {
		if c.cond != nil {
			c.cond.ObservedGeneration = si.Generation
		}
		setCondition(&status.Conditions, c.typ, c.cond)
	}
	_, err := r.updateImportStatus(ctx, si, status, held)
	return err
}

// updateImportStatus writes status as the ServiceImport si's, with the WithdrawalHeld condition held (removed when
// nil), if it differs from the stored one, and says whether it did, with an Event for every condition that changed.
func (r *reconciler) updateImportStatus(ctx context.Context, si *mcsv1beta1.ServiceImport,
	status *mcsv1beta1.ServiceImportStatus, held *metav1.Condition) (bool, error) {
	setCondition(&status.Conditions, ConditionWithdrawalHeld, held)
	if equality.Semantic.DeepEqual(*status, si.Status) {
		return false, nil
	}
	upd := si.DeepCopy()
	upd.Status = *status
	if err := r.local.Status().Update(ctx, upd); apierrors.IsNotFound(err) {
		return false, nil // withdrawn meanwhile: its deletion reconciles again
	} else if err != nil {
		return false, fmt.Errorf("updating the status of ServiceImport %s/%s: %w", si.Namespace, si.Name, err)
	}
	conditionEvents(r.events, upd, si.Status.Conditions, status.Conditions)
	return true, nil
}

// setCondition sets c in conds, or removes the condition of type typ when c is nil.
func setCondition(conds *[]metav1.Condition, typ string, c *metav1.Condition) {
	if c != nil {
		meta.SetStatusCondition(conds, *c)
	} else {
		meta.RemoveStatusCondition(conds, typ)
	}
}

// ReasonDerivedServiceRefused is the reason of an import's Ready=False while its derived Service, which gives it its
// IPs, cannot be written, and of the Warning Event each new refusal records.
const ReasonDerivedServiceRefused = "DerivedServiceRefused"

// refusedDerived says whether a failure to write the derived Service is one to show on the import: the API server
// answered and refused it (invalid, forbidden, denied by a webhook), or a Service of the user's has its name. A
// race with the cache is retried at once, and a request that got no answer in time or was throttled refuses nothing.
func refusedDerived(err error) bool {
	return !onlyRaces(err) && !slices.Contains([]string{"Timeout", "Unreachable", string(metav1.StatusReasonServerTimeout),
		string(metav1.StatusReasonTooManyRequests)}, cause(err))
}

// derivedRefused returns the Ready condition of the stored import si while the API server refuses its derived
// Service with err: False, with the API server's answer (its first KiB: the log has all of it). The import waits
// for nothing else meanwhile.
func (r *reconciler) derivedRefused(si *mcsv1beta1.ServiceImport, err error) *metav1.Condition {
	key := types.NamespacedName{Namespace: si.Namespace, Name: si.Name}
	r.readyWaits.forget(key)
	if r.dns != nil {
		r.dns.forget(key)
	}
	return &metav1.Condition{Type: string(mcsv1beta1.ServiceImportConditionReady), Status: metav1.ConditionFalse,
		Reason: ReasonDerivedServiceRefused, ObservedGeneration: si.Generation, Message: cutNote(
			"The derived Service, which gives the import its IPs, cannot be written; retrying: " + err.Error())}
}

const (
	// readyHold is how long an import may wait for its exporters' slices and this cluster's DNS before its status
	// says so: both come within tens of milliseconds as a rule, so a status is written once, Ready.
	readyHold = 2 * time.Second
	// readyRetry is how soon a waiting import is looked at again while its status is held back; once it has been
	// written Pending, it is rechecked after half the time it has waited, at least readyRecheck and at most
	// maxReadyRecheck, so that imports waiting for long leave the workers to the others.
	readyRetry      = 50 * time.Millisecond
	readyRecheck    = time.Second
	maxReadyRecheck = 30 * time.Second
	// missingSlicesWait is how long an import waits for the EndpointSlices its exporters' records count before
	// its status stops saying Pending. An exporter writes a record's slices in the reconcile that writes the
	// record, and retries a failed write within maxRetryDelay, as long as the default lease grace: slices missing
	// for longer are not on their way. This member refused them (admit), or the record counts wrong, by mistake
	// or malice, and one exporter must not keep everyone's import Pending.
	missingSlicesWait = maxRetryDelay
)

// ready returns the Ready condition to write on the stored import si, given the desired import want and its
// slices, and when to look again. A condition that would turn Ready waits for missing, the exporters' slices not
// imported yet (see imports.Missing), and then, with a DNS server to ask, until the server answers the import (a
// headless import, until it has a ready endpoint to answer):
// no condition is returned (nothing to write) while the hold lasts, then Pending saying what is awaited,
// rechecked until it comes; slices still missing after missingSlicesWait turn it False/EndpointSlicesMissing
// instead, naming the exporters, rechecked alike (they may come yet). An import already Ready at its generation is
// not asked about again: later endpoint changes do not make it unready, as they do not for the slices. The DNS server is never asked here: r.dns asks
// it beside the workers, and brings the import back when its answer changes.
func (r *reconciler) ready(si, want *mcsv1beta1.ServiceImport, exported []corev1.IPFamily,
	slices []discoveryv1.EndpointSlice, missing string) (*metav1.Condition, time.Duration) {
	key := types.NamespacedName{Namespace: si.Namespace, Name: si.Name}
	c := imports.Ready(want, exported, si.Generation)
	waitsForDNS := false
	defer func() {
		if r.dns != nil && !waitsForDNS {
			r.dns.forget(key) // asked nothing more, whatever made it stop waiting
		}
	}()
	if c.Status != metav1.ConditionTrue {
		r.readyWaits.forget(key)
		return &c, 0
	}
	if stored := meta.FindStatusCondition(si.Status.Conditions, c.Type); stored != nil &&
		stored.Status == metav1.ConditionTrue && stored.ObservedGeneration == si.Generation {
		return stored, 0
	}
	var waiting string
	if missing != "" {
		waiting = "Waiting for " + missing + "."
	} else if r.dns != nil {
		checks := imports.DNSChecks(want, slices)
		if len(checks) == 0 {
			// Only a headless import with no ready endpoint asks nothing: its name is NXDOMAIN until one is ready.
			waiting = "Waiting for a ready endpoint: a headless service's name resolves to its ready endpoints only."
		} else if why := r.dns.answer(key, checks); why != "" {
			waitsForDNS = true
			waiting = fmt.Sprintf("Waiting for this cluster's DNS server %s to answer the service: %s.", r.dns.addr, why)
		}
	}
	if waiting == "" {
		r.readyWaits.forget(key)
		if r.dns != nil {
			c.Message = imports.ReadyResolvesMessage
		}
		return &c, 0
	}
	if wait := r.readyWaits.wait(key, time.Now()); wait > 0 {
		if waitsForDNS {
			return nil, wait // a new answer brings the import back sooner
		}
		return nil, min(wait, readyRetry)
	}
	waited := r.readyWaits.elapsed(key, time.Now())
	c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(mcsv1beta1.ServiceImportReasonPending), waiting
	if missing != "" && waited >= missingSlicesWait {
		c.Reason = imports.ReasonEndpointSlicesMissing
		c.Message = fmt.Sprintf("Waited %v for %s: their records count slices that did not come, which this member "+
			"refused (mcs_controller_refused_total) or the exporters did not write.", missingSlicesWait, missing)
	}
	// Rechecks grow with the wait, half of it each time: a few seconds at first, then every 30 s at most.
	return &c, min(max(readyRecheck, waited/2), maxReadyRecheck)
}
