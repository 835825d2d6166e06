package mcsversion

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
)

func TestNewScheme(t *testing.T) {
	for _, gv := range []schema.GroupVersion{mcsv1beta1.SchemeGroupVersion, mcsv1alpha1.SchemeGroupVersion} {
		s, err := NewScheme(gv)
		if err != nil {
			t.Fatal(err)
		}
		want := map[runtime.Object]string{
			&mcsv1beta1.ServiceImport{}:      "ServiceImport",
			&mcsv1beta1.ServiceImportList{}:  "ServiceImportList",
			&mcsv1beta1.ServiceExport{}:      "ServiceExport",
			&mcsv1beta1.ServiceExportList{}:  "ServiceExportList",
			&aboutv1alpha1.ClusterProperty{}: "ClusterProperty",
		}
		for obj, kind := range want {
			gvks, _, err := s.ObjectKinds(obj)
			if err != nil || len(gvks) != 1 || gvks[0].Kind != kind {
				t.Errorf("%s: ObjectKinds(%T) = %v, %v", gv, obj, gvks, err)
				continue
			}
			if kind != "ClusterProperty" && gvks[0].GroupVersion() != gv {
				t.Errorf("%s: %T maps to %v", gv, obj, gvks[0])
			}
		}
	}
	if _, err := NewScheme(schema.GroupVersion{Group: "multicluster.x-k8s.io", Version: "v2"}); err == nil {
		t.Error("NewScheme accepted an unknown version")
	}
}
