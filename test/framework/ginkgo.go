package framework

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// GinkgoNode is one node of a ginkgo JSON report (--json-report, --ginkgo.json-report), as the suites that run a
// ginkgo suite of someone else's read it: the upstream MCS API conformance suite and Kubernetes' e2e.test.
type GinkgoNode struct {
	ContainerHierarchyTexts []string
	LeafNodeType            string
	LeafNodeText            string
	// State is passed, skipped, pending, failed, panicked, interrupted, aborted or timedout.
	State   string
	RunTime time.Duration
	Failure struct{ Message string }
}

// IsSpec says whether the node is a spec (an It), rather than a set-up or reporting node (BeforeSuite, ...).
func (n GinkgoNode) IsSpec() bool { return n.LeafNodeType == "It" }

// Text is the node's full text: its containers' and its own, the empty ones left out.
func (n GinkgoNode) Text() string {
	return strings.Join(slices.DeleteFunc(append(slices.Clone(n.ContainerHierarchyTexts), n.LeafNodeText),
		func(s string) bool { return s == "" }), " ")
}

// GinkgoNodes reads a ginkgo JSON report: the nodes of every suite it holds, in its order.
func GinkgoNodes(report []byte) ([]GinkgoNode, error) {
	var suites []struct{ SpecReports []GinkgoNode }
	if err := json.Unmarshal(report, &suites); err != nil {
		return nil, fmt.Errorf("ginkgo JSON report: %w", err)
	}
	if len(suites) == 0 {
		return nil, errors.New("ginkgo JSON report: no suite")
	}
	var nodes []GinkgoNode
	for _, s := range suites {
		nodes = append(nodes, s.SpecReports...)
	}
	return nodes, nil
}

// Compact puts a message on one line, cut to n bytes: a ginkgo failure message carries whole pod logs.
func Compact(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + " ..."
	}
	return s
}
