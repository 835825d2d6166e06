//go:build tools

// Package tools records the helm command this module builds, so that go mod tidy keeps its dependencies.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
