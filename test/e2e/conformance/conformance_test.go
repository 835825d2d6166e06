package conformance

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/proc"
	"vksfleet.dev/fleet/test/framework"
)

// Environment of TestConformance; the Makefile's conformance target sets them.
const (
	// envRun must be set for TestConformance to run: it takes minutes beyond the rest of `go test ./...`.
	envRun = "FLEET_CONFORMANCE"
	// envSuite is a local copy of the suite's folder, absolute or relative to the repository's root; unset, the
	// pinned commit is fetched (SuiteModule, SuiteCommit).
	envSuite = "FLEET_CONFORMANCE_SUITE"
)

// TestConformance starts a fleet of the 3 default members with 2 kubelet nodes each, then runs the unmodified
// upstream MCS API conformance suite against the members and requires every spec to pass. The suite's reports
// are copied to results/.
func TestConformance(t *testing.T) {
	if os.Getenv(envRun) == "" {
		t.Skipf("the MCS API conformance suite runs for minutes: `make conformance`, or set %s=1", envRun)
	}
	// Root and network namespaces; without them the reason says which is missing.
	if err := dataplane.CheckHost(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	repo, err := clusterset.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	src, err := findSuite(ctx, repo, os.Getenv(envSuite))
	if err != nil {
		t.Fatal(err)
	}
	suite, err := buildSuite(ctx, src, filepath.Join(repo, ".conformance"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("conformance suite from %s: %s, ready %s after the test started", src, suite, since(start))

	log := proc.TestLog(t)
	start = time.Now()
	f, err := framework.Start(ctx, framework.Options{ClusterSet: clusterset.Options{Members: clusterset.MemberNames(3), Nodes: 2, Log: log}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fleet of 3 members with 2 kubelet nodes each ready %s after Start", since(start))
	t.Cleanup(func() {
		start := time.Now()
		if err := f.Stop(); err != nil {
			t.Errorf("stopping the fleet: %v", err)
		}
		t.Logf("fleet stopped in %s", since(start))
		if left := dataplane.Leftovers(); len(left) > 0 {
			t.Errorf("left behind after Stop:\n%s", strings.Join(left, "\n"))
		}
	})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	kc, err := f.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}

	// test/e2e/kubeletnodes (in make test) checks every tool of the suite's images in pods, as the suite runs them.
	runSuite(t, repo, suite, kubeconfig, f)
}

// runSuite runs the suite against the fleet's members, copies its reports to results/ and fails t unless every
// spec passed.
func runSuite(t *testing.T, repo, suite, kubeconfig string, f *framework.Fleet) {
	var contexts []string
	for _, m := range f.Members {
		contexts = append(contexts, m.Name)
	}
	run := t.TempDir() // the suite writes report.html and report.yaml into its working directory
	jsonReport := filepath.Join(run, "ginkgo.json")
	version := "unknown"
	if out, err := exec.Command("git", "-C", repo, "describe", "--always", "--dirty").Output(); err == nil {
		version = strings.TrimSpace(string(out))
	}
	cmd := exec.Command(suite,
		"-contexts", strings.Join(contexts, ","),
		"-project", "VKS Fleet", "-version", version,
		"-ginkgo.v", "-ginkgo.no-color", "-ginkgo.json-report", jsonReport, "-ginkgo.timeout", "45m",
	)
	cmd.Dir = run
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if testing.Verbose() {
		// make conformance shows the suite's progress as it goes.
		cmd.Stdout = io.MultiWriter(&out, os.Stdout)
		cmd.Stderr = cmd.Stdout
	}
	start := time.Now()
	runErr := cmd.Run()
	elapsed := since(start)
	t.Logf("suite ran in %s (exit: %v)", elapsed, runErr)

	specs, err := readSpecs(jsonReport)
	if err != nil {
		t.Fatalf("%v; the suite's output:\n%s", err, tailOf(out.String(), 20000))
	}
	yamlReport, err := os.ReadFile(filepath.Join(run, "report.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	report, err := parseReportYAML(yamlReport)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("specs: %d passed, %d failed, %d skipped of %d; the suite's report: %d of %d conformant tests passed",
		specs.Passed, specs.Failed, specs.Skipped, specs.Total, report.Passed, report.Total)

	results := filepath.Join(repo, "test", "e2e", "conformance", "results")
	if err := os.MkdirAll(results, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"report.yaml", "report.html"} {
		b, err := os.ReadFile(filepath.Join(run, name))
		if err == nil {
			err = os.WriteFile(filepath.Join(results, name), b, 0o644)
		}
		if err != nil {
			t.Errorf("copying %s to %s: %v", name, results, err)
		}
	}
	summary := summarize(version, f.DNSModeText(), elapsed, specs, report)
	if err := os.WriteFile(filepath.Join(results, "summary.md"), []byte(summary), 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("results in %s:\n%s", results, summary)

	for _, s := range specs.SuiteFailures {
		t.Errorf("suite node failed: %s", s)
	}
	for _, s := range specs.Failures {
		t.Errorf("spec failed: %s", s)
	}
	if report.SuiteFailure != "" {
		t.Errorf("the suite's report has a set-up failure: %s", report.SuiteFailure)
	}
	if specs.Total == 0 || specs.Passed != specs.Total || report.Passed != report.Total {
		t.Errorf("%d of %d specs passed (%d skipped), %d of %d in the suite's report; want all", specs.Passed, specs.Total,
			specs.Skipped, report.Passed, report.Total)
	}
	if runErr != nil && !t.Failed() {
		t.Errorf("the suite exited with %v though its reports show no failure; its output:\n%s", runErr, tailOf(out.String(), 20000))
	}
	if t.Failed() {
		t.Logf("the suite's output (end):\n%s", tailOf(out.String(), 60000))
	}
}

func readSpecs(path string) (specResults, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return specResults{}, fmt.Errorf("the suite wrote no JSON report: %w", err)
	}
	return parseGinkgoJSON(b)
}

// summarize renders results/summary.md.
func summarize(version, dnsMode, elapsed string, specs specResults, report conformanceReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# MCS API conformance: VKS Fleet %s\n\n", version)
	fmt.Fprintf(&b, "Run %s by `make conformance`: the unmodified upstream suite against a local fleet of 3 members "+
		"with 2 kubelet nodes each, %s; report.yaml and report.html beside this file are the suite's own.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), dnsMode)
	fmt.Fprintf(&b, "- specs: %d passed, %d failed, %d skipped, of %d\n", specs.Passed, specs.Failed, specs.Skipped, specs.Total)
	fmt.Fprintf(&b, "- the suite's report: %d of %d passed\n", report.Passed, report.Total)
	fmt.Fprintf(&b, "- the suite ran in %s\n", elapsed)
	if failed := append(slices.Clone(specs.SuiteFailures), specs.Failures...); len(failed) > 0 {
		b.WriteString("\n## Failed, as ginkgo reports them\n\n")
		for _, s := range failed {
			fmt.Fprintf(&b, "- %s\n", s)
		}
	}
	if len(report.NotPassed) > 0 {
		// The suite calls a failure non-conformant only when the failing assertion says why; one that does not
		// (reportNonConformant("")) shows as failed, conformance unknown.
		b.WriteString("\n## Not passed, as the suite's report.yaml says\n\n")
		for _, s := range report.NotPassed {
			fmt.Fprintf(&b, "- %s\n", s)
		}
	}
	return b.String()
}

func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }

// tailOf returns the last n bytes of s.
func tailOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
