// Package policy embeds the admission policy of the deploy manifests that denies ServiceExports in the
// namespaces every cluster shares, so that the local clusterset installs the same objects an operator applies. The
// same files are the kustomize base build/deploy/policy.
package policy

import (
	_ "embed"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

var (
	//go:embed policy.yaml
	policyYAML []byte
	//go:embed binding.yaml
	bindingYAML []byte
)

// Objects returns the ValidatingAdmissionPolicy and its binding, decoded strictly.
func Objects() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := yaml.UnmarshalStrict(policyYAML, p); err != nil {
		return nil, nil, fmt.Errorf("parsing the export namespace policy: %w", err)
	}
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := yaml.UnmarshalStrict(bindingYAML, b); err != nil {
		return nil, nil, fmt.Errorf("parsing the export namespace policy binding: %w", err)
	}
	return p, b, nil
}
