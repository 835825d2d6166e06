//go:build tools

// Package tools records the kustomize command this module builds, so that go mod tidy keeps its dependencies.
package tools

import _ "sigs.k8s.io/kustomize/kustomize/v5"
