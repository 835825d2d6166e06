package install

import (
	"context"
	"fmt"
	"io"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	brokerv1alpha1 "vksfleet.dev/fleet/api/broker/v1alpha1"
	"vksfleet.dev/fleet/mcs/clusterid"
	"vksfleet.dev/fleet/mcs/names"
)

// Evict takes the member id out of the clusterset from the broker alone, with the joiner's token of info, for a
// member that is gone or not trusted: its credentials are revoked first, so that it can neither write nor read
// from then on, then its read grants and directory entry go, and its broker namespace with its records, slices
// and Lease (the other members withdraw its endpoints). Only a new join brings it back. The member's cluster is
// left as it is: run unjoin there, if it can be reached, to remove what the controller installed.
func Evict(ctx context.Context, info BrokerInfo, id string, wait time.Duration, out io.Writer) error {
	if err := clusterid.Validate(id); err != nil {
		return err
	}
	b, err := newClient(info.Config(), "broker")
	if err != nil {
		return err
	}
	return evict(ctx, steps{out}, b, id, wait)
}

// evict removes the member id from the broker with client b, as Evict, Unjoin and BrokerUninstall do.
func evict(ctx context.Context, s steps, b client.Client, id string, wait time.Duration) error {
	return evictNamespace(ctx, s, b, names.BrokerNamespace(id), id, wait)
}

// evictNamespace removes the member of the broker namespace ns: its credentials first, then its records, its read
// grants and directory entry when id, the member's id, is known ("" for a namespace no directory entry names, whose
// member's grants are not known by name), and the namespace.
func evictNamespace(ctx context.Context, s steps, b client.Client, ns, id string, wait time.Duration) error {
	err := s.do("broker credentials revoked", func() (string, error) {
		n, err := deleteServiceAccounts(ctx, b, ns)
		return fmt.Sprintf("%d ServiceAccounts of %s deleted, with every token of them", n, ns), err
	})
	if err != nil {
		return err
	}
	// Its records, slices and Lease go at once: every other member withdraws its endpoints as soon as it sees them
	// go, where the namespace's deletion below would leave them to the broker's namespace controller, seconds later.
	err = s.do("records, EndpointSlices and Lease", func() (string, error) {
		for _, gvk := range []schema.GroupVersionKind{brokerv1alpha1.SchemeGroupVersion.WithKind(brokerv1alpha1.ExportRecord),
			brokerv1alpha1.SchemeGroupVersion.WithKind(brokerv1alpha1.EndpointRecord), brokerv1alpha1.SchemeGroupVersion.WithKind(brokerv1alpha1.MemberLease),
			mcsv1beta1.SchemeGroupVersion.WithKind("ServiceImport"), discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"),
			coordinationv1.SchemeGroupVersion.WithKind("Lease")} {
			// By metadata alone: the broker's mcs-api types need not be in this client's scheme.
			obj := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind}}
			if err := deleteAll(ctx, b, obj, ns, wait); err != nil {
				return "", fmt.Errorf("deleting the %ss of %s: %w", gvk.Kind, ns, err)
			}
		}
		return "deleted", nil
	})
	if err != nil {
		return err
	}
	if id != "" {
		err = s.do("read grants and directory entry", func() (string, error) {
			return "deleted", revokeReads(ctx, b, id)
		})
		if err != nil {
			return err
		}
	}
	return s.do("broker namespace", func() (string, error) {
		gone := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if err := b.Delete(ctx, gone); client.IgnoreNotFound(err) != nil {
			return "", fmt.Errorf("deleting namespace %s: %w", ns, err)
		}
		if err := waitGone(ctx, b, gone, wait); err != nil {
			return "", fmt.Errorf("%w: the broker's namespace controller empties it, then removes it", err)
		}
		return fmt.Sprintf("%s deleted, with its records, EndpointSlices and Lease", ns), nil
	})
}

// deleteAll deletes every object of obj's kind in the namespace ns, within wait. A member that filled its quota
// holds tens of thousands of slices, whose deletecollection outlasts the API server's request timeout (60 s) while
// the server goes on deleting them: an error that is no refusal is followed, once a second, by a look at what is
// left and another deletecollection, until nothing is left.
func deleteAll(ctx context.Context, b client.Client, obj *metav1.PartialObjectMetadata, ns string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := b.DeleteAllOf(ctx, obj, client.InNamespace(ns))
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		if refused(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		left := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: obj.APIVersion, Kind: obj.Kind + "List"}}
		if lerr := b.List(ctx, left, client.InNamespace(ns), client.Limit(1)); lerr == nil && len(left.Items) == 0 {
			return nil
		}
	}
}

// refused says whether the API server refused a request, which asking again does not change, rather than ran out
// of time or was not reached.
func refused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsInvalid(err) || apierrors.IsMethodNotSupported(err)
}

// deleteServiceAccounts deletes every ServiceAccount of the namespace ns, which revokes their tokens at once,
// where the namespace's deletion would take them only after what else it holds. The namespace's `default`
// goes too: nothing may act for the member until its namespace is gone.
func deleteServiceAccounts(ctx context.Context, b client.Client, ns string) (int, error) {
	var sas corev1.ServiceAccountList
	if err := b.List(ctx, &sas, client.InNamespace(ns)); err != nil {
		return 0, fmt.Errorf("listing the ServiceAccounts of %s: %w", ns, err)
	}
	n := 0
	for i := range sas.Items {
		if err := b.Delete(ctx, &sas.Items[i]); client.IgnoreNotFound(err) != nil {
			return n, fmt.Errorf("deleting ServiceAccount %s/%s: %w", ns, sas.Items[i].Name, err)
		}
		n++
	}
	return n, nil
}
