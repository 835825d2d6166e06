package controller

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/apply"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/mcs/names"
)

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
	if _, err := apply.Service(ctx, r.local, "Service", got, svc, func(upd, want *corev1.Service) {
		upd.Spec.Ports, upd.Spec.Selector = want.Spec.Ports, nil
	}); err != nil {
		return nil, err
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
