// Package mcsversion picks the mcs-api version a server serves and builds a scheme that reads and writes the
// controller's (v1beta1) Go types in that version. v1beta1 and v1alpha1 share one schema, so a server that only
// serves v1alpha1 is used through the same types, registered under the v1alpha1 group version.
package mcsversion

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
)

// Detect returns the mcs-api group version to use with the server: v1beta1 when it serves ServiceImports there,
// else v1alpha1 when it serves them there, else an error naming the missing CRD.
func Detect(cfg *rest.Config) (schema.GroupVersion, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return schema.GroupVersion{}, err
	}
	for _, gv := range []schema.GroupVersion{mcsv1beta1.SchemeGroupVersion, mcsv1alpha1.SchemeGroupVersion} {
		resources, err := dc.ServerResourcesForGroupVersion(gv.String())
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return schema.GroupVersion{}, fmt.Errorf("discovering %s: %w", gv, err)
		}
		for _, r := range resources.APIResources {
			if r.Name == mcsv1beta1.ServiceImportPluralName {
				return gv, nil
			}
		}
	}
	return schema.GroupVersion{}, fmt.Errorf("the server serves no %s: install the mcs-api CRDs", mcsv1beta1.ServiceImportFullName)
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
