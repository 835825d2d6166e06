package k8sdns

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// report is a ginkgo JSON report as e2e.test writes it, cut down: the suite's set-up, a spec of the focus that
// passed, one that failed, one of skips, one that skipped itself, and a spec outside the focus, which ginkgo
// reports as skipped too.
const report = `[{"SuiteDescription": "Kubernetes e2e suite", "SpecReports": [
 {"LeafNodeType": "SynchronizedBeforeSuite", "State": "passed"},
 {"ContainerHierarchyTexts": ["[sig-network] DNS"], "LeafNodeType": "It", "LeafNodeText": "should provide DNS for services [Conformance]",
  "State": "passed", "RunTime": 21500000000},
 {"ContainerHierarchyTexts": ["[sig-network] DNS"], "LeafNodeType": "It", "LeafNodeText": "should provide DNS for pods for Hostname [Conformance]",
  "State": "failed", "RunTime": 600000000000, "Failure": {"Message": "timed out waiting for the condition\n\n  Lookups | failed"}},
 {"ContainerHierarchyTexts": ["[sig-network] DNS"], "LeafNodeType": "It", "LeafNodeText": "should provide DNS for the cluster [Provider:GCE]",
  "State": "skipped"},
 {"ContainerHierarchyTexts": ["[sig-network] DNS configMap nameserver", "Change stubDomain"], "LeafNodeType": "It",
  "LeafNodeText": "should be able to change stubDomain configuration [Slow] [Serial]", "State": "skipped",
  "Failure": {"Message": "Only supported for node OS distro [gci ubuntu] (not debian)"}},
 {"ContainerHierarchyTexts": ["[sig-network] Services"], "LeafNodeType": "It", "LeafNodeText": "should serve a basic endpoint from pods [Conformance]",
  "State": "skipped"},
 {"LeafNodeType": "SynchronizedAfterSuite", "State": "failed", "Failure": {"Message": "namespace not deleted"}}
]}]`

func TestParseReport(t *testing.T) {
	specs, suite, err := parseReport([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	want := []spec{
		{Text: "[sig-network] DNS should provide DNS for services [Conformance]", Result: passed, RunTime: 21500 * time.Millisecond},
		{Text: "[sig-network] DNS should provide DNS for pods for Hostname [Conformance]", Result: failed, RunTime: 10 * time.Minute,
			Reason: `failed: timed out waiting for the condition Lookups | failed`},
		{Text: "[sig-network] DNS should provide DNS for the cluster [Provider:GCE]", Result: skipped, Reason: skips[0].reason},
		{Text: "[sig-network] DNS configMap nameserver Change stubDomain should be able to change stubDomain configuration [Slow] [Serial]",
			Result: skipped, Reason: "Only supported for node OS distro [gci ubuntu] (not debian)"},
	}
	if !slices.Equal(specs, want) {
		t.Errorf("specs:\n%+v\nwant (the focus only; skips' reason, else the suite's):\n%+v", specs, want)
	}
	if want := []string{"SynchronizedAfterSuite [failed]: namespace not deleted"}; !slices.Equal(suite, want) {
		t.Errorf("suite failures %q, want %q", suite, want)
	}
	if unused := unusedSkips(specs); !slices.Equal(unused, []string{skips[1].spec}) {
		t.Errorf("unused skips %q, want the one no spec of the report has", unused)
	}

	for _, bad := range []string{"", "[]", `{"SpecReports": []}`} {
		if _, _, err := parseReport([]byte(bad)); err == nil {
			t.Errorf("parseReport(%q) took it; want an error", bad)
		}
	}
}

func TestSkipPattern(t *testing.T) {
	re := regexp.MustCompile(skipPattern())
	for _, k := range skips {
		if text := "[sig-network] DNS " + k.spec; !re.MatchString(text) {
			t.Errorf("the skip pattern %q leaves out %q", re, text)
		}
		if k.reason == "" {
			t.Errorf("%q is skipped without a reason", k.spec)
		}
	}
	// The Conformance spec beside the GCE one: only the bracket tells them apart.
	if text := "[sig-network] DNS should provide DNS for the cluster [Conformance]"; re.MatchString(text) {
		t.Errorf("the skip pattern %q leaves out %q, which can pass here", re, text)
	}
}

func TestSummarize(t *testing.T) {
	specs, suite, err := parseReport([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	got := summarize(runInfo{Date: time.Date(2026, 11, 28, 13, 5, 0, 0, time.UTC), Commit: "5e6c965", Kubernetes: "v1.36.3"}, []modeResult{
		{Mode: "replace", Text: "DNS mode replace: ours", Specs: specs, SuiteFailures: suite, FleetReady: 95 * time.Second, SuiteRan: 12 * time.Minute},
		{Mode: "standalone", Err: errors.New("the fleet did not start: no nodes")},
	})
	for _, want := range []string{
		"Run 2026-11-28 13:05 UTC", "commit 5e6c965", "Kubernetes v1.36.3",
		"## replace\n\nDNS mode replace: ours.\n",
		"- specs: 1 passed, 1 failed, 2 skipped, of 4\n",
		"- the fleet was ready in 1m35s (with any wait for another fleet on this machine to stop); the suite ran in 12m0s\n",
		"- suite node not passed: SynchronizedAfterSuite",
		"| [sig-network] DNS should provide DNS for pods for Hostname [Conformance] | failed | 10m0s | failed: timed out waiting for the condition Lookups \\| failed |\n",
		"| [sig-network] DNS should provide DNS for the cluster [Provider:GCE] | skipped | 0s | GCE only",
		"## standalone\n\n- no results: the fleet did not start: no nodes\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	// Ordered by text, whatever order the suite ran them in.
	if i, j := strings.Index(got, "configMap nameserver"), strings.Index(got, "should provide DNS for services"); i < 0 || j < 0 || i > j {
		t.Errorf("specs not ordered by text:\n%s", got)
	}
}
