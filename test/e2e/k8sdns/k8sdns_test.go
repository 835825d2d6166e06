package k8sdns

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

	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/nodeimages"
	"vksfleet.dev/fleet/test/env/proc"
	"vksfleet.dev/fleet/test/framework"
)

// Environment of TestKubernetesDNS; the Makefile's conformance-k8s-dns target sets envRun.
const (
	// envRun must be set for TestKubernetesDNS to run: it takes tens of minutes beyond the rest of `go test ./...`.
	envRun = "FLEET_K8S_DNS"
	// envModes, a comma-separated list, runs only these DNS modes (default both): to try one while working on it.
	envModes = "FLEET_K8S_DNS_MODES"
)

// modes are the DNS modes the specs run against, each on a fleet of its own.
var modes = []string{install.DNSReplace, install.DNSStandalone}

// The run's bounds. The specs that pass take seconds to a minute or two each; one that fails polls for up to 10
// minutes, so the suite's deadline leaves room for a few. Within the deadlines of the Makefile's go test.
const (
	// suiteTimeout is the suite's own deadline (--ginkgo.timeout), per mode; the process is killed a minute later.
	suiteTimeout = 40 * time.Minute
	// readyTimeout bounds the suite's waits for schedulable nodes and ready kube-system pods before it starts:
	// the fleet has waited for both already.
	readyTimeout = 5 * time.Minute
)

// TestKubernetesDNS starts, for each DNS mode, a fleet of one member with 2 kubelet nodes, runs Kubernetes'
// `[sig-network] DNS` specs against that member (all but skips), and writes results/summary.md with each spec's
// result and the suite's JUnit files. It fails unless every spec run passed.
func TestKubernetesDNS(t *testing.T) {
	if os.Getenv(envRun) == "" {
		t.Skipf("Kubernetes' DNS e2e specs run for tens of minutes: `make conformance-k8s-dns`, or set %s=1", envRun)
	}
	// Root and network namespaces; without them the reason says which is missing.
	if err := dataplane.CheckHost(); err != nil {
		t.Skip(err)
	}
	run := modes
	if v := os.Getenv(envModes); v != "" {
		run = strings.Split(v, ",")
		for _, m := range run {
			if !slices.Contains(modes, m) {
				t.Fatalf("%s: no DNS mode %q (one of %v)", envModes, m, modes)
			}
		}
	}
	ctx := context.Background()
	repo, err := clusterset.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]string{}
	for _, name := range []string{"e2e.test", "agnhost", "kubectl"} {
		if tools[name], err = clusterset.Tool(name); err != nil {
			t.Fatalf("%v (`make tools-k8se2e` builds e2e.test and agnhost)", err)
		}
	}
	if err := checkImages(ctx, tools["e2e.test"]); err != nil {
		t.Fatal(err)
	}
	kube, err := clusterset.PinnedKubernetes("kube-e2e")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := framework.Build()
	if err != nil {
		t.Fatal(err)
	}
	// The nameserver specs run /coredns of the agnhost image with stock plugins: our CoreDNS, this tree's build.
	images, err := nodeimages.BuildK8sDNS(ctx, t.TempDir(), nodeimages.K8sDNSPrograms{Agnhost: tools["agnhost"], CoreDNS: filepath.Join(bin, "coredns")})
	if err != nil {
		t.Fatal(err)
	}

	results := filepath.Join(repo, "test", "e2e", "k8sdns", "results")
	if err := os.MkdirAll(results, 0o755); err != nil {
		t.Fatal(err)
	}
	var got []modeResult
	for _, mode := range run {
		t.Run(mode, func(t *testing.T) {
			r := runMode(t, ctx, mode, images, tools, results)
			got = append(got, r)
			checkMode(t, r)
		})
	}
	commit := "unknown"
	if out, err := exec.Command("git", "-C", repo, "describe", "--always", "--dirty").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	summary := summarize(runInfo{Date: time.Now(), Commit: commit, Kubernetes: kube}, got)
	if err := os.WriteFile(filepath.Join(results, "summary.md"), []byte(summary), 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("results in %s:\n%s", results, summary)
}

// runMode starts a fleet in the DNS mode, runs the suite against its member and returns the results; the
// suite's JUnit file is copied to results/junit-<mode>.xml.
func runMode(t *testing.T, ctx context.Context, mode string, images []string, tools map[string]string, results string) modeResult {
	r := modeResult{Mode: mode}
	log := proc.TestLog(t)
	start := time.Now()
	f, err := framework.Start(ctx, framework.Options{
		ClusterSet: clusterset.Options{Members: clusterset.MemberNames(1), Nodes: 2, Log: log, Images: images},
		Log:        log,
		DNS:        mode,
	})
	if err != nil {
		r.Err = fmt.Errorf("the fleet did not start: %w", err)
		return r
	}
	r.FleetReady, r.Text = time.Since(start), f.DNSModeText()
	t.Logf("fleet of 1 member with 2 kubelet nodes ready in %s: %s", round(r.FleetReady), r.Text)
	// Nothing left behind is test/e2e/traffic's check: here the next fleet waiting for the machine's data plane
	// (the other mode's, or another suite's) may start as soon as Stop releases it.
	t.Cleanup(func() {
		start := time.Now()
		if err := f.Stop(); err != nil {
			t.Errorf("stopping the fleet: %v", err)
		}
		t.Logf("fleet stopped in %s", round(time.Since(start)))
	})

	dir := t.TempDir()
	jsonReport := filepath.Join(dir, "ginkgo.json")
	reportDir := filepath.Join(dir, "report")
	runCtx, cancel := context.WithTimeout(ctx, suiteTimeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, tools["e2e.test"],
		"--provider=skeleton",
		"--kubeconfig="+f.KubeconfigPath, "--context="+f.Members[0].Name,
		"--kubectl-path="+tools["kubectl"],
		"--report-dir="+reportDir,
		"--node-schedulable-timeout="+readyTimeout.String(), "--system-pods-startup-timeout="+readyTimeout.String(),
		"--ginkgo.focus="+focus, "--ginkgo.skip="+skipPattern(),
		"--ginkgo.timeout="+suiteTimeout.String(),
		"--ginkgo.v", "--ginkgo.no-color", "--ginkgo.json-report="+jsonReport,
	)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if testing.Verbose() {
		// make conformance-k8s-dns shows the suite's progress as it goes.
		cmd.Stdout = io.MultiWriter(&out, os.Stdout)
		cmd.Stderr = cmd.Stdout
	}
	start = time.Now()
	runErr := cmd.Run()
	r.SuiteRan = time.Since(start)
	t.Logf("suite ran in %s (exit: %v)", round(r.SuiteRan), runErr)

	b, err := os.ReadFile(jsonReport)
	if err == nil {
		r.Specs, r.SuiteFailures, err = parseReport(b)
	}
	if err != nil {
		r.Err = fmt.Errorf("the suite wrote no report (exit: %v): %w", runErr, err)
		t.Logf("the suite's output (end):\n%s", tail(out.String()))
		return r
	}
	if pass, fail, _ := r.counts(); runErr != nil && fail == 0 && len(r.SuiteFailures) == 0 {
		r.SuiteFailures = append(r.SuiteFailures, fmt.Sprintf("the suite exited with %v, %d specs passed and none failed", runErr, pass))
	}
	junit, err := os.ReadFile(filepath.Join(reportDir, "junit_01.xml"))
	if err == nil {
		err = os.WriteFile(filepath.Join(results, "junit-"+mode+".xml"), junit, 0o644)
	}
	if err != nil {
		t.Errorf("copying the suite's JUnit report: %v", err)
	}
	if fail := len(r.SuiteFailures); fail > 0 || slices.ContainsFunc(r.Specs, func(s spec) bool { return s.Result == failed }) {
		t.Logf("the suite's output (end):\n%s", tail(out.String()))
	}
	return r
}

// checkMode fails t unless r has every spec run passed, and every skip used.
func checkMode(t *testing.T, r modeResult) {
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	pass, fail, skip := r.counts()
	t.Logf("%s: %d passed, %d failed, %d skipped, of %d", r.Mode, pass, fail, skip, len(r.Specs))
	if pass == 0 {
		t.Error("no spec passed")
	}
	for _, s := range r.Specs {
		if s.Result == failed {
			t.Errorf("failed: %s: %s", s.Text, s.Reason)
		}
	}
	for _, f := range r.SuiteFailures {
		t.Errorf("suite: %s", f)
	}
	for _, s := range unusedSkips(r.Specs) {
		t.Errorf("the skip list names %q, which no spec of the focus has: remove it", s)
	}
}

// checkImages fails unless the suite names the images test/env/nodeimages stands in for: a Kubernetes of
// another version may name other tags, which no node would hold.
func checkImages(ctx context.Context, e2e string) error {
	out, err := exec.CommandContext(ctx, e2e, "--list-images").Output()
	if err != nil {
		return fmt.Errorf("%s --list-images: %w", e2e, err)
	}
	listed := strings.Fields(string(out))
	for _, im := range []string{nodeimages.Agnhost, nodeimages.GlibcDNSTesting} {
		if !slices.Contains(listed, im) {
			return fmt.Errorf("e2e.test names no %s (it lists %v): update test/env/nodeimages/k8sdns.go", im, listed)
		}
	}
	return nil
}

// tail returns the end of the suite's output, where a failure is.
func tail(s string) string {
	const n = 30000
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
