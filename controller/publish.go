package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/apply"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/export"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/locality"
	"vksfleet.dev/fleet/mcs/names"
)

// export returns what this cluster exports of the service, if anything: its broker record, the endpoint slices
// to publish, and the ServiceExport's Valid condition. The slices are those the limits leave: the first by name
// within --max-endpoints-per-service, and within what the namespace's other exports leave of
// --max-slices-per-namespace; what they leave out shows in the export's Ready condition (limits.limitedOf).
func (r *reconciler) export(ctx context.Context, key types.NamespacedName, se *mcsv1beta1.ServiceExport,
	top locality.Topology) (*merge.Export, []discoveryv1.EndpointSlice, metav1.Condition, error) {
	if se == nil || !se.DeletionTimestamp.IsZero() {
		return nil, nil, metav1.Condition{}, r.unpublished(ctx, key)
	}
	svc, err := getOrNil(ctx, r.local, key, &corev1.Service{})
	if err != nil {
		return nil, nil, metav1.Condition{}, err
	}
	valid, ok := export.Valid(se, svc, r.denied)
	if !ok {
		return nil, nil, valid, r.unpublished(ctx, key)
	}
	own := export.Record(r.id, se, svc)
	own.Region = top.Region
	local := &discoveryv1.EndpointSliceList{}
	if err := r.local.List(ctx, local, client.InNamespace(key.Namespace),
		client.MatchingFields{localSliceIndex: sourceSlice + key.Name}); err != nil {
		return nil, nil, valid, err
	}
	slices, limited := export.Limit(export.Slices(key.Namespace, key.Name, local.Items), r.limits.endpointsPerService)
	n, err := r.namespaceShare(ctx, key, len(slices))
	if err != nil {
		return nil, nil, valid, err
	}
	if len(slices) > n {
		slices, limited = export.Share(slices, n, key.Namespace, r.limits.namespaces.limit)
	}
	r.limits.setLimited(key, limited)
	own.Slices = len(slices)
	return &own, slices, valid, nil
}

// namespaceShare makes the service's export hold up to want of its namespace's broker EndpointSlices, as many as
// the namespace's other exports leave, and returns how many it holds. The shares start from what this member has
// on the broker, so that a restart leaves each export what it had.
func (r *reconciler) namespaceShare(ctx context.Context, key types.NamespacedName, want int) (int, error) {
	err := r.limits.namespaces.seed(func() (map[string]map[types.NamespacedName]int, error) {
		published := &discoveryv1.EndpointSliceList{}
		if err := r.broker.List(ctx, published, client.InNamespace(names.BrokerNamespace(r.id)), client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("counting this member's EndpointSlices on the broker: %w", err)
		}
		held := map[string]map[types.NamespacedName]int{}
		for i := range published.Items {
			if svc, ok := broker.ServiceOf(&published.Items[i]); ok {
				if held[svc.Namespace] == nil {
					held[svc.Namespace] = map[types.NamespacedName]int{}
				}
				held[svc.Namespace][svc]++
			}
		}
		return held, nil
	})
	if err != nil {
		return 0, err
	}
	ones := make([]int, want)
	for i := range ones {
		ones[i] = 1
	}
	return r.limits.namespaces.take(key.Namespace, key, ones), nil
}

// unpublished releases the namespace's share that the service's export held: it is not exported.
func (r *reconciler) unpublished(ctx context.Context, key types.NamespacedName) error {
	r.limits.setLimited(key, nil)
	_, err := r.namespaceShare(ctx, key, 0)
	return err
}

// heldDeletionRetry is how soon a service whose broker deletions were held back (see duplicateID.mayDelete) is
// looked at again.
const heldDeletionRetry = time.Second

// publish makes this cluster's broker record and slices for the service match its export (none when own is nil),
// in records and then in the previous release's layout (layout.go), which that release's members read. While this
// member may not delete on the broker, what it would delete stays, and publish says when to look again.
func (r *reconciler) publish(ctx context.Context, key types.NamespacedName, own *merge.Export, ownSlices []discoveryv1.EndpointSlice) (time.Duration, error) {
	retry, err := r.publishTo(ctx, r.broker, key, own, ownSlices)
	if err != nil || r.mirror == nil {
		return retry, err
	}
	if _, err := r.publishTo(ctx, r.mirror, key, own, ownSlices); err != nil {
		return retry, fmt.Errorf("in the previous release's layout: %w", err)
	}
	return retry, nil
}

// publishTo publishes the service's export with c, which reads and writes one layout.
func (r *reconciler) publishTo(ctx context.Context, c client.Client, key types.NamespacedName, own *merge.Export, ownSlices []discoveryv1.EndpointSlice) (time.Duration, error) {
	ns := names.BrokerNamespace(r.id)
	recordKey := types.NamespacedName{Namespace: ns, Name: names.RecordName(key.Namespace, key.Name)}
	existing, err := getOrNil(ctx, c, recordKey, &mcsv1beta1.ServiceImport{})
	if err != nil {
		return 0, err
	}
	sliceList := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, sliceList, client.InNamespace(ns), client.MatchingFields{serviceIndex: key.String()}); err != nil {
		return 0, err
	}
	var desired []discoveryv1.EndpointSlice
	mayDelete := r.duplicate.mayDelete()
	var retry time.Duration
	if own == nil {
		if existing != nil && !mayDelete {
			retry = heldDeletionRetry
		} else if existing != nil {
			if err := apply.Delete(ctx, c, existing); err != nil {
				return 0, fmt.Errorf("withdrawing %s from the broker: %w", key, err)
			}
		}
	} else {
		want, err := broker.Record(key, *own)
		if err != nil {
			return 0, err
		}
		if _, err := apply.ServiceImport(ctx, c, existing, want); err != nil {
			return 0, fmt.Errorf("publishing %s to the broker: %w", key, err)
		}
		for i := range ownSlices {
			desired = append(desired, *broker.Slice(r.id, key, &ownSlices[i]))
		}
	}
	if !mayDelete {
		// What looks stale here may be another cluster's that claims this id: keep it.
		if kept := keepWithdrawn(desired, sliceList.Items); len(kept) > len(desired) {
			desired, retry = kept, heldDeletionRetry
		}
	}
	if err := apply.Slices(ctx, c, sliceList.Items, desired); err != nil {
		return 0, fmt.Errorf("publishing the endpoints of %s to the broker: %w", key, err)
	}
	return retry, nil
}
