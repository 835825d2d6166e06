package crds

import (
	"bytes"
	"testing"

	mcscrd "sigs.k8s.io/mcs-api/config/crd"
)

// The copies kustomize reads must not drift from the mcs-api release the code is built against.
func TestMCSCopiesMatchModule(t *testing.T) {
	for name, pair := range map[string][2][]byte{
		"ServiceExport": {ServiceExport, mcscrd.ServiceExportCRD},
		"ServiceImport": {ServiceImport, mcscrd.ServiceImportCRD},
	} {
		if !bytes.Equal(pair[0], pair[1]) {
			t.Errorf("%s CRD differs from sigs.k8s.io/mcs-api/config/crd: copy it again", name)
		}
	}
}

func TestParse(t *testing.T) {
	got, err := Parse(ServiceExport, ServiceImport, ClusterProperty)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"serviceexports.multicluster.x-k8s.io", "serviceimports.multicluster.x-k8s.io", "clusterproperties.about.k8s.io"}
	for i, crd := range got {
		if crd.Name != want[i] {
			t.Errorf("CRD %d is %s, want %s", i, crd.Name, want[i])
		}
	}
	if _, err := Parse([]byte("spec:\n  bogus: 1\n")); err == nil {
		t.Error("Parse accepted an unknown field")
	}
}
