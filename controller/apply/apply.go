// Package apply makes stored objects equal desired ones with as few writes as possible: it compares before it
// writes, so that a reconcile with nothing to change makes no request at all.
package apply

import (
	"context"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Slices makes the EndpointSlices in existing (all the controller's slices of one service, in one namespace)
// equal desired: it creates missing ones, updates changed ones, recreates those whose immutable address type
// changed and deletes the rest.
func Slices(ctx context.Context, c client.Client, existing, desired []discoveryv1.EndpointSlice) error {
	have := make(map[string]*discoveryv1.EndpointSlice, len(existing))
	for i := range existing {
		have[existing[i].Name] = &existing[i]
	}
	var errs []error
	for i := range desired {
		want := &desired[i]
		got, ok := have[want.Name]
		delete(have, want.Name)
		switch {
		case !ok:
			errs = append(errs, c.Create(ctx, want.DeepCopy()))
		case got.AddressType != want.AddressType:
			errs = append(errs, Delete(ctx, c, got), c.Create(ctx, want.DeepCopy()))
		case !SameSlice(got, want):
			upd := got.DeepCopy()
			upd.Labels, upd.Annotations, upd.OwnerReferences = want.Labels, want.Annotations, want.OwnerReferences
			upd.Endpoints, upd.Ports = want.Endpoints, want.Ports
			_, err := Update(ctx, c, upd, want)
			errs = append(errs, err)
		}
	}
	for _, got := range have {
		errs = append(errs, Delete(ctx, c, got))
	}
	return errors.Join(errs...)
}

// Update writes upd, the changed copy of a cached object, and returns the object as stored. When the object is
// gone though the cache still shows it (a cache that lags, or an API server that lost its data and has not been
// relisted yet), it creates want instead, so that what this controller writes returns without waiting for the
// cache.
func Update[T client.Object](ctx context.Context, c client.Client, upd, want T) (T, error) {
	err := c.Update(ctx, upd)
	if !apierrors.IsNotFound(err) {
		return upd, err
	}
	created := want.DeepCopyObject().(T)
	created.SetResourceVersion("")
	return created, c.Create(ctx, created)
}

// ServiceImport makes the stored ServiceImport got (nil: none yet) carry want's labels, annotations and spec, and
// returns it as stored. The status is left alone: it is a subresource, written on its own.
func ServiceImport(ctx context.Context, c client.Client, got, want *mcsv1beta1.ServiceImport) (*mcsv1beta1.ServiceImport, error) {
	if got == nil {
		created := want.DeepCopy()
		return created, c.Create(ctx, created)
	}
	if SameMeta(got, want) && equality.Semantic.DeepEqual(got.Spec, want.Spec) {
		return got, nil
	}
	upd := got.DeepCopy()
	upd.Labels, upd.Annotations, upd.Spec = want.Labels, want.Annotations, want.Spec
	return Update(ctx, c, upd, want)
}

// Service makes the stored Service got (nil: none yet) carry want's labels and owner references and what fields
// copies from want onto upd, a copy of got, and returns it as stored; it writes only on a difference. The rest of
// a stored Service (its ClusterIPs, say) is the API server's, and fields leaves it alone. what names the Service in
// errors ("derived Service").
func Service(ctx context.Context, c client.Client, what string, got, want *corev1.Service, fields func(upd, want *corev1.Service)) (*corev1.Service, error) {
	if got == nil {
		if err := c.Create(ctx, want); err != nil {
			return nil, fmt.Errorf("creating %s %s/%s: %w", what, want.Namespace, want.Name, err)
		}
		return want, nil
	}
	upd := got.DeepCopy()
	upd.Labels, upd.OwnerReferences = want.Labels, want.OwnerReferences
	fields(upd, want)
	if equality.Semantic.DeepEqual(upd, got) {
		return got, nil
	}
	if err := c.Update(ctx, upd); err != nil {
		return nil, fmt.Errorf("updating %s %s/%s: %w", what, got.Namespace, got.Name, err)
	}
	return upd, nil
}

// SameSlice says whether a stored slice already has the desired content.
func SameSlice(got, want *discoveryv1.EndpointSlice) bool {
	return SameMeta(got, want) && equality.Semantic.DeepEqual(got.OwnerReferences, want.OwnerReferences) &&
		equality.Semantic.DeepEqual(got.Endpoints, want.Endpoints) && equality.Semantic.DeepEqual(got.Ports, want.Ports)
}

// SameMeta says whether a stored object already has the desired labels and annotations (nil equals empty).
func SameMeta(got, want metav1.Object) bool {
	return maps.Equal(got.GetLabels(), want.GetLabels()) && maps.Equal(got.GetAnnotations(), want.GetAnnotations())
}

// Delete deletes obj unless it is already gone or going, guarded by its UID so that a newer object of the same
// name is never deleted by mistake.
func Delete(ctx context.Context, c client.Client, obj client.Object) error {
	if !obj.GetDeletionTimestamp().IsZero() {
		return nil
	}
	uid := obj.GetUID()
	err := c.Delete(ctx, obj, client.Preconditions{UID: &uid})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}
