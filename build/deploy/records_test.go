package deploy

import (
	"bytes"
	"reflect"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	sigsyaml "sigs.k8s.io/yaml"

	brokerv1alpha1 "vksfleet.dev/fleet/api/broker/v1alpha1"
	"vksfleet.dev/fleet/build/deploy/crds"
)

// TestRecordCRDs: the broker base serves the records, in the group and under the kinds and resources the
// controller's scheme names, and an ExportRecord's spec is validated as a v1beta1 ServiceImport's is, so that
// what members wrote as ServiceImports before passes as ExportRecords, and nothing more.
func TestRecordCRDs(t *testing.T) {
	out, err := Render("broker")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := sigsyaml.Unmarshal(doc, crd); err != nil || crd.Kind != "CustomResourceDefinition" || crd.Spec.Group != brokerv1alpha1.GroupName {
			continue
		}
		found[crd.Spec.Names.Kind] = crd
	}
	for i, kind := range []string{brokerv1alpha1.ExportRecord, brokerv1alpha1.EndpointRecord, brokerv1alpha1.MemberLease} {
		crd, ok := found[kind]
		if !ok {
			t.Errorf("the broker base has no CRD of %s", kind)
			continue
		}
		if crd.Spec.Names.Plural != brokerv1alpha1.Resources[i] || crd.Spec.Scope != apiextensionsv1.NamespaceScoped ||
			len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != brokerv1alpha1.SchemeGroupVersion.Version {
			t.Errorf("CRD %s: resource %s, scope %s, versions %d; want %s, namespaced, %s alone", crd.Name, crd.Spec.Names.Plural,
				crd.Spec.Scope, len(crd.Spec.Versions), brokerv1alpha1.Resources[i], brokerv1alpha1.SchemeGroupVersion.Version)
		}
	}
	si, err := crds.Parse(crds.ServiceImport)
	if err != nil {
		t.Fatal(err)
	}
	var want apiextensionsv1.JSONSchemaProps
	for _, v := range si[0].Spec.Versions {
		if v.Name == "v1beta1" {
			want = v.Schema.OpenAPIV3Schema.Properties["spec"]
		}
	}
	if er, ok := found[brokerv1alpha1.ExportRecord]; ok {
		if got := er.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]; !reflect.DeepEqual(got, want) {
			t.Error("ExportRecord's spec schema differs from ServiceImport v1beta1's: copy it again into build/deploy/broker/records.yaml")
		}
	}
}
