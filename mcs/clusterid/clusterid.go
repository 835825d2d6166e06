// Package clusterid reads this cluster's id and clusterset name (KEP-2149), the values of the ClusterProperties
// cluster.clusterset.k8s.io and clusterset.k8s.io, and checks that an id is valid. The CoreDNS plugin and
// kubectl-mcs only read them; the controller resolves the id, creating its ClusterProperty from the kube-system
// namespace UID when absent.
package clusterid

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"

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

// resource is the ClusterProperty resource. It is used through the dynamic client, which every caller can make:
// the project generates no typed client for ClusterProperty, and the CoreDNS plugin links no controller-runtime.
var resource = aboutv1alpha1.GroupVersion.WithResource("clusterproperties")

// Read returns this cluster's id and clusterset name, the values of the cluster.clusterset.k8s.io and
// clusterset.k8s.io ClusterProperties. Each is "" when its ClusterProperty, or the ClusterProperty CRD, is
// absent. The id is returned as found: Validate checks it.
func Read(ctx context.Context, dyn dynamic.Interface) (id, clusterSet string, err error) {
	if id, err = property(ctx, dyn, aboutv1alpha1.ClusterIDName); err != nil {
		return "", "", err
	}
	if clusterSet, err = property(ctx, dyn, aboutv1alpha1.ClusterSetName); err != nil {
		return "", "", err
	}
	return id, clusterSet, nil
}

// Resolve is Read for the controller, which publishes the id: when the id ClusterProperty is absent it is
// created with the kube-system namespace UID, KEP-2149's recommended default, and an invalid id is an error.
func Resolve(ctx context.Context, dyn dynamic.Interface) (id, clusterSet string, err error) {
	if id, clusterSet, err = Read(ctx, dyn); err != nil {
		return "", "", err
	}
	if id == "" {
		if id, err = create(ctx, dyn); err != nil {
			return "", "", err
		}
	}
	if err := Validate(id); err != nil {
		return "", "", fmt.Errorf("ClusterProperty %s: %w", aboutv1alpha1.ClusterIDName, err)
	}
	return id, clusterSet, nil
}

// Ensure makes the named ClusterProperty hold value: it creates it when absent, and refuses to change it when it
// holds another value, since a published id or clusterset name must never change under a running member.
func Ensure(ctx context.Context, dyn dynamic.Interface, name, value string) error {
	have, err := property(ctx, dyn, name)
	if err != nil {
		return err
	}
	if have == value {
		return nil
	}
	if have != "" {
		return fmt.Errorf("ClusterProperty %s is %q, not %q: a member keeps its value for life (unjoin, then delete it, to change it)", name, have, value)
	}
	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(aboutv1alpha1.GroupVersion.WithKind("ClusterProperty"))
	cp.SetName(name)
	if err := unstructured.SetNestedField(cp.Object, value, "spec", "value"); err != nil {
		return err
	}
	if _, err := dyn.Resource(resource).Create(ctx, cp, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ClusterProperty %s: %w", name, err)
	}
	return nil
}

// property returns the value of the named ClusterProperty; "" when it or its CRD is absent.
func property(ctx context.Context, dyn dynamic.Interface, name string) (string, error) {
	obj, err := dyn.Resource(resource).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading ClusterProperty %s: %w", name, err)
	}
	v, _, err := unstructured.NestedString(obj.Object, "spec", "value")
	if err != nil {
		return "", fmt.Errorf("ClusterProperty %s: %w", name, err)
	}
	return v, nil
}

// create writes the id ClusterProperty from the kube-system UID and returns the id. If another controller
// replica created it first, that one's id is returned: the id must never change once published. An id
// ClusterProperty that exists with an empty value comes back empty, for Validate to refuse.
func create(ctx context.Context, dyn dynamic.Interface) (string, error) {
	ns, err := dyn.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading the kube-system namespace for a default cluster id: %w", err)
	}
	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(aboutv1alpha1.GroupVersion.WithKind("ClusterProperty"))
	cp.SetName(aboutv1alpha1.ClusterIDName)
	if err := unstructured.SetNestedField(cp.Object, string(ns.GetUID()), "spec", "value"); err != nil {
		return "", err
	}
	_, err = dyn.Resource(resource).Create(ctx, cp, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return property(ctx, dyn, aboutv1alpha1.ClusterIDName)
	}
	if err != nil {
		return "", fmt.Errorf("creating ClusterProperty %s: %w", aboutv1alpha1.ClusterIDName, err)
	}
	return string(ns.GetUID()), nil
}
