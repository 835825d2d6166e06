// Package clusterid finds this cluster's id (KEP-2149): the ClusterProperty cluster.clusterset.k8s.io, created from
// the kube-system namespace UID when absent, and checks that it is a valid id.
package clusterid

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
)

// MaxLen is one more than the longest valid cluster id: KEP-2149 asks for fewer than 128 characters.
const MaxLen = 128

// Validate says why id is not a valid cluster id, or returns nil.
func Validate(id string) error {
	if id == "" {
		return errors.New("cluster id is empty")
	}
	if len(id) >= MaxLen {
		return fmt.Errorf("cluster id %q is %d characters long; it must be shorter than %d", id, len(id), MaxLen)
	}
	if errs := validation.IsDNS1123Subdomain(id); len(errs) > 0 {
		return fmt.Errorf("cluster id %q is not an RFC 1123 DNS subdomain: %v", id, errs)
	}
	// The id becomes one or two labels of clusterset.local names, so each label must fit a DNS label.
	for label := range strings.SplitSeq(id, ".") {
		if len(label) > validation.DNS1123LabelMaxLength {
			return fmt.Errorf("cluster id %q is not an RFC 1123 DNS subdomain: label %q is longer than %d characters",
				id, label, validation.DNS1123LabelMaxLength)
		}
	}
	return nil
}

// Resolve returns this cluster's id and clusterset name. The id comes from the cluster.clusterset.k8s.io
// ClusterProperty; when that is absent it is created with the kube-system namespace UID, KEP-2149's recommended
// default. The clusterset name is empty when clusterset.k8s.io is absent. An invalid id is an error.
func Resolve(ctx context.Context, c client.Client) (id, clusterSet string, err error) {
	cp := &aboutv1alpha1.ClusterProperty{}
	err = c.Get(ctx, client.ObjectKey{Name: aboutv1alpha1.ClusterIDName}, cp)
	switch {
	case apierrors.IsNotFound(err):
		if cp, err = create(ctx, c); err != nil {
			return "", "", err
		}
	case err != nil:
		return "", "", fmt.Errorf("reading ClusterProperty %s: %w", aboutv1alpha1.ClusterIDName, err)
	}
	if err := Validate(cp.Spec.Value); err != nil {
		return "", "", fmt.Errorf("ClusterProperty %s: %w", aboutv1alpha1.ClusterIDName, err)
	}
	set := &aboutv1alpha1.ClusterProperty{}
	if err := c.Get(ctx, client.ObjectKey{Name: aboutv1alpha1.ClusterSetName}, set); err != nil && !apierrors.IsNotFound(err) {
		return "", "", fmt.Errorf("reading ClusterProperty %s: %w", aboutv1alpha1.ClusterSetName, err)
	}
	return cp.Spec.Value, set.Spec.Value, nil
}

// create writes the id ClusterProperty from the kube-system UID. If another controller replica created it first,
// that one is returned: the id must never change once published.
func create(ctx context.Context, c client.Client) (*aboutv1alpha1.ClusterProperty, error) {
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, ns); err != nil {
		return nil, fmt.Errorf("reading the kube-system namespace for a default cluster id: %w", err)
	}
	cp := &aboutv1alpha1.ClusterProperty{
		ObjectMeta: metav1.ObjectMeta{Name: aboutv1alpha1.ClusterIDName},
		Spec:       aboutv1alpha1.ClusterPropertySpec{Value: string(ns.UID)},
	}
	err := c.Create(ctx, cp)
	if apierrors.IsAlreadyExists(err) {
		err = c.Get(ctx, client.ObjectKey{Name: aboutv1alpha1.ClusterIDName}, cp)
	}
	if err != nil {
		return nil, fmt.Errorf("creating ClusterProperty %s: %w", aboutv1alpha1.ClusterIDName, err)
	}
	return cp, nil
}
