// Package kubee2e builds Kubernetes' e2e test binary, e2e.test, with the specs of k8s.io/kubernetes/test/e2e/network
// alone, which hold every `[sig-network] DNS` spec (`make conformance-k8s-dns`, test/e2e/k8sdns). Upstream's
// test/e2e/e2e_test.go imports every area of the suite (storage, DRA, autoscaling, ...), whose specs run nowhere
// here and would only lengthen the build; this file is its TestMain with that one area. The suite's set-up
// (package e2e: checks of the nodes and kube-system pods, the cluster's IP family) and flags are upstream's.
package kubee2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	testfixtures "k8s.io/kubernetes/test/fixtures"

	// Define and freeze the feature labels, as upstream's TestMain does.
	_ "k8s.io/kubernetes/test/e2e/feature"
	// The specs: [sig-network], DNS among them.
	_ "k8s.io/kubernetes/test/e2e/network"

	// Reconfigure the framework, as upstream's TestMain does.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/format"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown additional command line arguments: %s\n", flag.Args())
		os.Exit(1)
	}
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(testfixtures.GetTestFixturesFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) {
	e2e.RunE2ETests(t)
}
