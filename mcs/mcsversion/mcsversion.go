// Package mcsversion picks the mcs-api version a server serves, for the controller, kubectl-mcs and the CoreDNS
// plugin alike, and builds a scheme that reads and writes the v1beta1 Go types in that version. v1beta1 and
// v1alpha1 share one schema, so a server that only serves v1alpha1 is used through the same types, registered
// under the v1alpha1 group version.
package mcsversion

import (
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
)

// Detect returns the mcs-api group version to use with the server: v1beta1 when it serves ServiceImports there,
// else v1alpha1 when it serves them there, else an error naming the missing CRD.
func Detect(d discovery.DiscoveryInterface) (schema.GroupVersion, error) {
	for _, gv := range []schema.GroupVersion{mcsv1beta1.SchemeGroupVersion, mcsv1alpha1.SchemeGroupVersion} {
		ok, err := Serves(d, gv.WithResource(mcsv1beta1.ServiceImportPluralName))
		if err != nil {
			return schema.GroupVersion{}, err
		}
		if ok {
			return gv, nil
		}
	}
	return schema.GroupVersion{}, fmt.Errorf("the server serves no %s: install the mcs-api CRDs", mcsv1beta1.ServiceImportFullName)
}

// Serves says whether the server serves r; a group version it does not serve at all is no error.
func Serves(d discovery.DiscoveryInterface, r schema.GroupVersionResource) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(r.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", r.GroupVersion(), err)
	}
	return slices.ContainsFunc(list.APIResources, func(a metav1.APIResource) bool { return a.Name == r.Resource }), nil
}

// NewScheme returns a scheme with the built-in types, ClusterProperty and the v1beta1 mcs-api Go types registered
// under gv.
func NewScheme(gv schema.GroupVersion) (*runtime.Scheme, error) {
	if gv != mcsv1beta1.SchemeGroupVersion && gv != mcsv1alpha1.SchemeGroupVersion {
		return nil, fmt.Errorf("unsupported mcs-api version %s", gv)
	}
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := aboutv1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	s.AddKnownTypes(gv, &mcsv1beta1.ServiceExport{}, &mcsv1beta1.ServiceExportList{},
		&mcsv1beta1.ServiceImport{}, &mcsv1beta1.ServiceImportList{})
	metav1.AddToGroupVersion(s, gv)
	return s, nil
}
