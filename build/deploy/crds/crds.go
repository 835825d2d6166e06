// Package crds embeds the CustomResourceDefinitions a member cluster needs: the mcs-api ServiceExport and
// ServiceImport (copies of sigs.k8s.io/mcs-api/config/crd, kept identical by a test) and the project's
// ClusterProperty (KEP-2149). The same files are the kustomize base build/deploy/crds. It embeds the broker's
// records too (records/, api/broker/v1alpha1), which build/deploy/broker installs.
package crds

import (
	_ "embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// The YAML of each CRD.
var (
	//go:embed multicluster.x-k8s.io_serviceexports.yaml
	ServiceExport []byte
	//go:embed multicluster.x-k8s.io_serviceimports.yaml
	ServiceImport []byte
	//go:embed about.k8s.io_clusterproperties.yaml
	ClusterProperty []byte
	//go:embed records/broker.mcs.vksfleet.dev_exportrecords.yaml
	ExportRecord []byte
	//go:embed records/broker.mcs.vksfleet.dev_endpointrecords.yaml
	EndpointRecord []byte
	//go:embed records/broker.mcs.vksfleet.dev_memberleases.yaml
	MemberLease []byte
)

// Parse decodes CRD YAML documents, rejecting unknown fields.
func Parse(docs ...[]byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(docs))
	for _, d := range docs {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(d, crd); err != nil {
			return nil, fmt.Errorf("parsing a CRD: %w", err)
		}
		out = append(out, crd)
	}
	return out, nil
}
