//go:build tools

// Package tools pins controller-gen, which generates the API types' DeepCopy methods (make generate).
package tools

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
