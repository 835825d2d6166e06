package mcsversion

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
)

func TestDetect(t *testing.T) {
	served := func(gv schema.GroupVersion, resources ...string) *metav1.APIResourceList {
		l := &metav1.APIResourceList{GroupVersion: gv.String()}
		for _, r := range resources {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: r})
		}
		return l
	}
	beta, alpha := mcsv1beta1.SchemeGroupVersion, mcsv1alpha1.SchemeGroupVersion
	imports, exports := mcsv1beta1.ServiceImportPluralName, mcsv1beta1.ServiceExportPluralName
	tests := []struct {
		name    string
		served  []*metav1.APIResourceList
		fail    error // every discovery request fails with it
		want    schema.GroupVersion
		wantErr string
	}{
		{name: "v1beta1 served", served: []*metav1.APIResourceList{served(alpha, exports, imports), served(beta, exports, imports)}, want: beta},
		{name: "only v1alpha1", served: []*metav1.APIResourceList{served(alpha, exports, imports)}, want: alpha},
		{name: "v1beta1 without serviceimports", served: []*metav1.APIResourceList{served(beta, exports), served(alpha, imports)}, want: alpha},
		{name: "neither", served: []*metav1.APIResourceList{served(beta, exports)}, wantErr: mcsv1beta1.ServiceImportFullName},
		{name: "discovery fails", fail: errors.New("connection refused"), wantErr: "connection refused"},
	}
	for _, tt := range tests {
		d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: tt.served}}
		if tt.fail != nil {
			d.AddReactor("*", "*", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, tt.fail })
		}
		gv, err := Detect(d)
		switch {
		case tt.wantErr == "" && (err != nil || gv != tt.want):
			t.Errorf("%s: Detect() = %v, %v; want %v", tt.name, gv, err, tt.want)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: Detect() = %v, %v; want an error containing %q", tt.name, gv, err, tt.wantErr)
		}
	}
}

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
