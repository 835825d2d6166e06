//go:build tools

// Package tools records the command this module builds beside e2e.test, agnhost (the image the DNS specs' pods
// run, test/env/nodeimages), so that go mod tidy keeps its dependencies.
package tools

import (
	_ "k8s.io/kubernetes/test/images/agnhost"
)
