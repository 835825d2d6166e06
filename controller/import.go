package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/apply"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/locality"
	"vksfleet.dev/fleet/mcs/names"
)

// gather collects every cluster's export of the service and the endpoint slices of the live ones. What other
// clusters wrote on the broker enters here: it passes package admit's checks and the limits (take), or is left
// out and counted. An exporter's region is the one the member directory records for it, not the one its record
// claims, unless there is no directory (memberRegions). Slices are read from the broker cache as they are stored
// there, not copied: only those taken are, so that a member that publishes far more than the limits costs this
// one no more than they allow.
func (r *reconciler) gather(ctx context.Context, key types.NamespacedName, own *merge.Export,
	ownSlices []discoveryv1.EndpointSlice) ([]merge.Export, []imports.Source, error) {
	defer r.reportRefusals(ctx, key)
	var exports []merge.Export
	var sources []imports.Source
	if own != nil {
		exports = append(exports, *own)
		for _, s := range ownSlices {
			if s, ok := r.admitSlice(key, r.id, &s); ok {
				sources = append(sources, imports.Source{Cluster: r.id, Slice: s})
			}
		}
	}
	sel := client.MatchingFields{serviceIndex: key.String()}
	records := &mcsv1beta1.ServiceImportList{}
	if err := r.broker.List(ctx, records, sel); err != nil {
		return nil, nil, err
	}
	exporting := map[string]bool{}
	for i := range records.Items {
		if own != nil {
			r.ownPrecedence(&exports[0], &records.Items[i])
		}
		e, ok := r.admitRecord(key, &records.Items[i])
		if !ok || e.Cluster == r.id {
			continue
		}
		e.Region = r.regions.of(e.Cluster, e.Region)
		exports = append(exports, e)
		exporting[e.Cluster] = true
	}
	// The cache's own objects: nothing here may change them.
	published := &discoveryv1.EndpointSliceList{}
	if err := r.broker.List(ctx, published, sel, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	perCluster := map[string][]*discoveryv1.EndpointSlice{}
	uses := map[string]memberUse{}
	use := func(c string) memberUse {
		u, ok := uses[c]
		if !ok {
			u = r.useOf(c)
			uses[c] = u
		}
		return u
	}
	for i := range published.Items {
		s := &published.Items[i]
		c := broker.ClusterOf(s)
		if !exporting[c] || s.Namespace != names.BrokerNamespace(c) || use(c) == skipEndpoints {
			continue
		}
		perCluster[c] = append(perCluster[c], s)
	}
	taking := map[string]bool{}
	for _, c := range slices.Sorted(maps.Keys(perCluster)) {
		taking[c] = true
		for _, s := range r.take(key, c, perCluster[c]) {
			if s, ok := r.admitSlice(key, c, s); ok {
				sources = append(sources, imports.Source{Cluster: c, Slice: s})
			}
		}
	}
	r.limits.members.keepOnly(key, taking)
	// The endpoints to fall back on are not ready while another exporter has a ready endpoint, and stay as
	// published while none has: the probe moves traffic between exporters, never to nothing.
	sources, open := withVerdicts(sources, use)
	r.reportFailOpen(key, open)
	return exports, sources, nil
}

// take returns the slices of one member's export of the service that the import takes, sorted by name: the longest
// prefix within --max-endpoints-per-service (admit.Fit) and what the member's other services leave of
// --max-endpoints-per-member, the rest refused. The slices are counted as published, before admit.Slice drops
// what it drops, so that what is taken does not depend on what this member's checks make of them.
func (r *reconciler) take(key types.NamespacedName, cluster string, ss []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	slices.SortFunc(ss, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	l := r.limits
	sizes := make([]int, min(len(ss), l.slicesPerService))
	for i := range sizes {
		sizes[i] = admit.Size(ss[i])
	}
	n, _ := admit.Fit(sizes, l.slicesPerService, l.endpointsPerService)
	if n < len(ss) {
		reason := admit.ReasonTooManyEndpoints
		if n == l.slicesPerService {
			reason = admit.ReasonTooManySlices
		}
		r.refuse(key, cluster, admit.Problem{Reason: reason, Message: fmt.Sprintf("EndpointSlices from %s on are left out: "+
			"one member's export of one service may have at most %d endpoints in %d EndpointSlices (--max-endpoints-per-service)",
			ss[n].Name, l.endpointsPerService, l.slicesPerService)})
	}
	m := l.members.take(cluster, key, sizes[:n])
	if m < n {
		r.refuse(key, cluster, admit.Problem{Reason: admit.ReasonTooManyMemberEndpoints, Message: fmt.Sprintf(
			"EndpointSlices from %s on are left out: the imports from one member may have at most %d endpoints in all "+
				"(--max-endpoints-per-member), and its other services hold the rest", ss[m].Name, l.members.limit)})
	}
	return ss[:m]
}

// admitRecord reads a broker export record, or refuses it: a broken record, an invalid cluster id, a record outside
// the namespace of the id it claims (a cluster only writes in its own), a service no member may import here (an
// invalid name, a denied namespace) or a spec no Service could have (admit.Record). A refused record takes no part
// in the import, so an import it alone made is withdrawn as after an unexport. A region that is no label value,
// and exported labels and annotations that could not travel, are left out. The export ranks by the time
// broker.ParseRecord bounds by the record's creation.
func (r *reconciler) admitRecord(key types.NamespacedName, rec *mcsv1beta1.ServiceImport) (merge.Export, bool) {
	e, err := broker.ParseRecord(rec)
	if err != nil {
		r.refuseRecord(key, rec.Namespace, admit.Problem{Reason: admit.ReasonRecord, Message: err.Error()})
		return e, false
	}
	if p := admit.ClusterID(e.Cluster); p != nil {
		r.refuseRecord(key, rec.Namespace, *p)
		return e, false
	}
	if own := names.BrokerNamespace(e.Cluster); rec.Namespace != own {
		r.refuseRecord(key, rec.Namespace, admit.Problem{Reason: admit.ReasonForeignNamespace, Message: fmt.Sprintf(
			"its record claims cluster %q, whose broker namespace is %s: a member writes only in its own", e.Cluster, own)})
		return e, false
	}
	e, problems, ok := admit.Record(key, e, r.deniedImport)
	for _, p := range problems {
		if ok {
			r.refuse(key, e.Cluster, p)
		} else {
			r.refuseRecord(key, e.Cluster, p)
		}
	}
	return e, ok
}

// ownPrecedence ranks this member's own export, which the import takes from the local truth, as every other member
// ranks it from its record (broker.Precedence), so that all agree on which export wins; until the record is in
// the broker cache it ranks by its ServiceExport.
func (r *reconciler) ownPrecedence(own *merge.Export, rec *mcsv1beta1.ServiceImport) {
	if rec.Namespace == names.BrokerNamespace(r.id) && broker.ClusterOf(rec) == r.id {
		own.Created = broker.Precedence(own.Created, rec.CreationTimestamp.Time)
	}
}

// admitSlice returns what this member takes of a cluster's exported slice (admit.Slice), counting what it drops.
func (r *reconciler) admitSlice(key types.NamespacedName, cluster string, s *discoveryv1.EndpointSlice) (discoveryv1.EndpointSlice, bool) {
	out, problems, ok := admit.Slice(s)
	for _, p := range problems {
		r.refuse(key, cluster, p)
	}
	return out, ok
}

// refuse notes a value left out of the service's import, with the cluster that wrote it (its broker namespace
// when its id cannot be trusted); reportRefusals reports it at the end of the gather.
func (r *reconciler) refuse(key types.NamespacedName, from string, p admit.Problem) {
	r.refusals.add(key, refusal{from: from, problem: p})
}

// refuseRecord notes, as refuse does, a cluster's export record that the service's import leaves out whole.
func (r *reconciler) refuseRecord(key types.NamespacedName, from string, p admit.Problem) {
	r.refusals.add(key, refusal{from: from, problem: p, whole: true})
}

// reportRefusals reports what the gather of key refused that the previous one did not (refusalLog): in the
// refusal metric, by reason, and in the log; in a Warning Event too what a limit refused, on the ServiceImport,
// since an import short of endpoints is not otherwise seen where it is used, and a record refused whole, on this
// member's cluster id ClusterProperty (recordEvent), since an export it takes out is seen nowhere here.
func (r *reconciler) reportRefusals(ctx context.Context, key types.NamespacedName) {
	for _, f := range r.refusals.settle(key) {
		refusedTotal.WithLabelValues(r.id, f.from, f.problem.Reason).Inc()
		r.log.Info("leaving out of the import what a cluster published", "service", key, "from", f.from,
			"reason", f.problem.Reason, "problem", f.problem.Message)
		switch {
		case f.whole:
			recordEvent(r.events, key, f.from, f.problem)
		case slices.Contains(admit.LimitReasons, f.problem.Reason):
			limitEvent(ctx, r.local, r.events, key, f.from, f.problem)
		}
	}
}

// importService writes the local import of the service: nothing when no cluster exports it or its namespace does
// not exist here, else the ServiceImport, its derived Service and the imported slices. It returns when to look
// again, if a hold is waiting.
func (r *reconciler) importService(ctx context.Context, key types.NamespacedName, exports []merge.Export,
	merged merge.Result, sources []imports.Source, top locality.Topology) (time.Duration, error) {
	got, err := r.stored(ctx, key)
	if err != nil {
		return 0, err
	}
	ns, err := getOrNil(ctx, r.local, types.NamespacedName{Name: key.Namespace}, &corev1.Namespace{})
	if err != nil {
		return 0, err
	}
	nsGone := ns == nil || !ns.DeletionTimestamp.IsZero()
	// Another implementation's ServiceImport (beside Lighthouse or Cilium, during a migration) is never written or
	// deleted: the service is not imported here while it stands.
	if got.si != nil && !ownsImport(got) {
		return 0, r.besideForeign(ctx, key, got, len(exports) > 0 && !nsGone)
	}
	r.foreigns.forget(r.id, key)
	// The broker may be losing its data, or have lost it and not have it back yet: what a withdrawal would delete
	// is kept while the view is untrusted (regaining trust reconciles every service again), and until the view has
	// shown the withdrawal for the hold, long enough for a lost broker to be noticed. Only the withdrawal waits:
	// every other change to the import goes on. A view untrusted for longer than the hold, which may last, shows
	// on the import (the WithdrawalHeld condition, and an Event when it appears).
	holding, holdWait := false, time.Duration(0)
	var held *metav1.Condition
	if !nsGone && withdraws(got.si, got.derived, got.slices, key, exports, sources) {
		if holdWait = r.withdrawals.wait(key, time.Now()); holdWait > 0 || !r.trusted(ctx) {
			r.log.V(1).Info("holding back a withdrawal", "service", key, "wait", holdWait)
			if holdWait == 0 {
				held = &metav1.Condition{Type: ConditionWithdrawalHeld, Status: metav1.ConditionTrue,
					Reason: ReasonBrokerViewUntrusted, Message: heldMessage}
			}
			if len(exports) == 0 {
				if held != nil && got.si != nil {
					held.ObservedGeneration = got.si.Generation
					_, err := r.updateImportStatus(ctx, got.si, got.si.Status.DeepCopy(), held)
					return 0, err
				}
				return holdWait, nil
			}
			holding = true
		}
	}
	if !holding {
		r.withdrawals.forget(key)
	}
	if len(exports) == 0 || nsGone {
		return 0, r.unimport(ctx, key, got)
	}

	served, err := r.servedFamilies(ctx)
	if err != nil {
		return 0, err
	}
	exported := merged.Spec.IPFamilies
	merged = imports.Served(merged, served, got.derived)
	si := got.si
	if si == nil {
		// The ServiceImport comes first: it owns the derived Service and the slices.
		if si, err = apply.ServiceImport(ctx, r.local, nil, imports.ServiceImport(key, merged, nil)); err != nil {
			return 0, fmt.Errorf("creating ServiceImport %s: %w", key, err)
		}
	}
	// A derived Service the API server refuses must not freeze the rest of the import: the slices keep following
	// the exporters' endpoints, and the error comes back once they are written.
	derived, derivedErr := r.applyDerived(ctx, got.derived, imports.DerivedService(key, merged, imports.Owner(si, r.siAPI)))
	if derivedErr != nil {
		derived = got.derived
	}
	desiredSlices := imports.Slices(key, sources, merged.SlicePorts, imports.Owner(si, r.siAPI))
	if holding {
		desiredSlices = keepWithdrawn(desiredSlices, got.slices)
	}
	want := imports.ServiceImport(key, merged, derived)
	r.locate(si, want, top, exports, desiredSlices)
	if si, err = apply.ServiceImport(ctx, r.local, si, want); err != nil {
		return 0, fmt.Errorf("updating ServiceImport %s: %w", key, err)
	}
	// The slices go before the status, so that Ready can say whether they are programmed: stored, and seen in the
	// cache, where this reconcile read them.
	programmed := allStored(got.slices, desiredSlices)
	if err := apply.Slices(ctx, r.local, got.slices, desiredSlices); err != nil {
		return 0, fmt.Errorf("importing the endpoints of %s: %w", key, err)
	}
	clusterLocalCond, err := r.reflect(ctx, si, want, desiredSlices, got.clusterLocal, got.clusterLocalSlices)
	if err != nil {
		return 0, errors.Join(derivedErr, fmt.Errorf("reflecting %s into cluster.local: %w", key, err))
	}
	var ready *metav1.Condition
	var requeue time.Duration
	switch {
	case derivedErr != nil && !refusedDerived(derivedErr):
		return 0, derivedErr
	case holding && held == nil:
		// The status waits the short hold with the withdrawal: the import is not what the view shows yet.
		return holdWait, derivedErr
	case derivedErr != nil:
		// Shown on the import, and still returned: the retries back off.
		ready = r.derivedRefused(si, derivedErr)
	case !programmed:
		// The slices were just created: their events bring the service back once the cache has them, and the status
		// is written then, once, instead of Pending now and Ready a moment later.
		return 0, nil
	default:
		missing := imports.Missing(exports, sources, r.id, func(c string) bool { return r.useOf(c) != skipEndpoints })
		if ready, requeue = r.ready(si, want, exported, desiredSlices, missing); ready == nil {
			return requeue, nil
		}
	}
	if held != nil {
		held.ObservedGeneration = si.Generation
	}
	stale, unreachable := r.memberConditions(exports, sources, time.Now())
	return requeue, errors.Join(derivedErr, r.importStatus(ctx, si, want, *ready, clusterLocalCond, held, stale, unreachable))
}

// storedImport is what the controller has stored of a service's import, or has in the way of it.
type storedImport struct {
	si      *mcsv1beta1.ServiceImport
	derived *corev1.Service
	slices  []discoveryv1.EndpointSlice
	// clusterLocal is the Service with the name of the import's cluster-local Service, whoever owns it.
	clusterLocal       *corev1.Service
	clusterLocalSlices []discoveryv1.EndpointSlice
}

// stored reads the service's import from the cache.
func (r *reconciler) stored(ctx context.Context, key types.NamespacedName) (storedImport, error) {
	var got storedImport
	var err error
	if got.si, err = getOrNil(ctx, r.local, key, &mcsv1beta1.ServiceImport{}); err != nil {
		return got, err
	}
	derivedKey := types.NamespacedName{Namespace: key.Namespace, Name: names.DerivedServiceName(key.Namespace, key.Name)}
	if got.derived, err = getOrNil(ctx, r.local, derivedKey, &corev1.Service{}); err != nil {
		return got, err
	}
	sliceList := &discoveryv1.EndpointSliceList{}
	if err := r.local.List(ctx, sliceList, client.InNamespace(key.Namespace),
		client.MatchingFields{localSliceIndex: importedSlice + key.Name}); err != nil {
		return got, err
	}
	got.slices = sliceList.Items
	got.clusterLocal, got.clusterLocalSlices, err = r.clusterLocalObjects(ctx, key)
	return got, err
}

// unimport deletes the service's import, all of it: what the controller made, never another implementation's
// ServiceImport of the same name (ownsImport).
func (r *reconciler) unimport(ctx context.Context, key types.NamespacedName, got storedImport) error {
	var errs []error
	if got.si != nil && ownsImport(got) {
		errs = append(errs, apply.Delete(ctx, r.local, got.si))
	}
	if got.derived != nil && isOurs(got.derived) {
		errs = append(errs, apply.Delete(ctx, r.local, got.derived))
	}
	if got.clusterLocal != nil && reflects(got.clusterLocal, key.Name) {
		errs = append(errs, apply.Delete(ctx, r.local, got.clusterLocal))
	}
	errs = append(errs, apply.Slices(ctx, r.local, got.slices, nil), apply.Slices(ctx, r.local, got.clusterLocalSlices, nil))
	forgetLocality(r.id, key)
	r.readyWaits.forget(key)
	if r.dns != nil {
		r.dns.forget(key)
	}
	return errors.Join(errs...)
}

const (
	// ConditionWithdrawalHeld is the ServiceImport condition, True while the broker's view is untrusted and part
	// of the import that left it is kept rather than withdrawn.
	ConditionWithdrawalHeld = "WithdrawalHeld"
	// ReasonBrokerViewUntrusted is the reason of ConditionWithdrawalHeld, and of the Warning Event when it appears.
	ReasonBrokerViewUntrusted = "BrokerViewUntrusted"
)

// heldMessage says why a withdrawal is held and until when: an operator sees what to repair on the broker.
const heldMessage = "What left the broker's view is kept, not withdrawn: the view is untrusted while this member's " +
	"broker Lease or sentinel record is missing or cannot be renewed, as when the broker lost its data " +
	"(mcs_controller_broker_view_trusted). It is withdrawn once the view is trusted again."

// withdrawalHold is how long a withdrawal must show in the broker view before it is applied: a broker losing its
// data (a wiped etcd, a deleted CRD) loses this member's sentinel record with the others' records, and within
// this time its cache shows that too. The server is then asked directly (trusted).
const withdrawalHold = time.Second

// trusted says whether the broker's view may be acted on with deletions: trusted by the heartbeat, and still
// holding this member's sentinel record, which a broker losing its records loses too: in the cache and, read
// directly, on the server.
func (r *reconciler) trusted(ctx context.Context) bool {
	if !r.trust.Trusted() {
		return false
	}
	key := client.ObjectKeyFromObject(broker.Sentinel(r.id))
	if err := r.broker.Get(ctx, key, &mcsv1beta1.ServiceImport{}); err != nil {
		return false
	}
	if r.brokerDirect == nil {
		return true
	}
	return r.brokerDirect.Get(ctx, key, &mcsv1beta1.ServiceImport{}) == nil
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

// keepWithdrawn adds to the desired slices the stored ones they leave out, as stored: a withdrawal held back.
func keepWithdrawn(desired, stored []discoveryv1.EndpointSlice) []discoveryv1.EndpointSlice {
	for _, s := range stored {
		if !slices.ContainsFunc(desired, func(d discoveryv1.EndpointSlice) bool { return d.Name == s.Name }) {
			desired = append(desired, *s.DeepCopy())
		}
	}
	return desired
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
