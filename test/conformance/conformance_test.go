package conformance

import (
	"bytes"
	"cmp"
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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"vksfleet.dev/fleet/test/clusterset"
	"vksfleet.dev/fleet/test/dataplane"
	"vksfleet.dev/fleet/test/fleet"
	"vksfleet.dev/fleet/test/nodeimages"
	"vksfleet.dev/fleet/test/poll"
	"vksfleet.dev/fleet/test/proc"
	"vksfleet.dev/fleet/test/workload"
)

// Environment of TestConformance; the Makefile's conformance target sets them.
const (
	// envRun must be set for TestConformance to run: it takes minutes beyond the rest of `go test ./...`.
	envRun = "FLEET_CONFORMANCE"
	// envSuite is the suite's folder, absolute or relative to the repository's root; default DefaultSuite.
	envSuite = "FLEET_CONFORMANCE_SUITE"
)

// TestConformance starts a fleet of the 3 default members with 2 kubelet nodes each, checks that the tools of
// the suite's images run in pods there, then runs the unmodified upstream MCS API conformance suite against the
// members and requires every spec to pass. The suite's reports are copied to results/.
func TestConformance(t *testing.T) {
	if os.Getenv(envRun) == "" {
		t.Skipf("the MCS API conformance suite runs for minutes: `make conformance`, or set %s=1", envRun)
	}
	if os.Geteuid() != 0 {
		t.Skip("kubelet nodes need root (network namespaces, cgroups, containerd): run as root")
	}
	if err := dataplane.CheckHost(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	src := cmp.Or(os.Getenv(envSuite), DefaultSuite)
	if !filepath.IsAbs(src) {
		src = filepath.Join(repo, src)
	}

	start := time.Now()
	suite, err := buildSuite(ctx, src, filepath.Join(repo, ".conformance"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("conformance suite from %s: %s, ready %s after the test started", src, suite, since(start))

	log := proc.TestLog(t)
	start = time.Now()
	f, err := fleet.Start(ctx, fleet.Options{ClusterSet: clusterset.Options{Members: clusterset.MemberNames(3), Nodes: 2, Log: log}, Log: log})
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

	if !t.Run("the suite's images run their tools in pods", func(t *testing.T) { testImages(t, f.Members[0].Cluster) }) {
		t.FailNow() // the suite's failures would only repeat this one
	}
	t.Run("suite", func(t *testing.T) { runSuite(t, repo, suite, kubeconfig, f) })
}

// runSuite runs the suite against the fleet's members, copies its reports to results/ and fails t unless every
// spec passed.
func runSuite(t *testing.T, repo, suite, kubeconfig string, f *fleet.Fleet) {
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

	results := filepath.Join(repo, "test", "conformance", "results")
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
	summary := summarize(version, elapsed, specs, report)
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
func summarize(version string, elapsed string, specs specResults, report conformanceReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# MCS API conformance: VKS Fleet %s\n\n", version)
	fmt.Fprintf(&b, "Run %s by `make conformance`: the unmodified upstream suite against a local fleet of 3 members "+
		"with 2 kubelet nodes each; report.yaml and report.html beside this file are the suite's own.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"))
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

// testImages runs a socat listener from the alpine/socat image behind a dual-stack Service, and a pod of the
// netshoot image on each node, set as the suite sets its pods, and checks in them every tool the suite and its
// readers use: the versions, name lookups through the member's DNS, and the suite's own nc commands for both
// families.
func testImages(t *testing.T, c *clusterset.Cluster) {
	ctx := context.Background()
	const ns = "images"
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
	assets, err := clusterset.AssetsDir("")
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) (string, int) {
		stdout, stderr, code, err := workload.Kubectl(ctx, filepath.Join(assets, "kubectl"), c.KubeconfigPath, c.Name,
			append([]string{"-n", ns}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return stdout + stderr, code
	}

	// As the suite's hello pods: Command and Args set, no imagePullPolicy (IfNotPresent for a tag other than
	// latest), so the kubelet must find the image under the name the pod gives.
	listener := `first_ip=$(echo "$MY_POD_IPS" | tr ',' ' ' | awk '{print $1}'); export first_ip; ` +
		`exec socat -v TCP6-LISTEN:42,crlf,reuseaddr,fork,ipv6only=0 SYSTEM:'echo "pod ip $first_ip"'`
	pods := []*corev1.Pod{{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Labels: map[string]string{"app": "hello"}},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](1), Containers: []corev1.Container{{
			Name: "hello", Image: nodeimages.Socat, Command: []string{"/bin/sh"}, Args: []string{"-c", listener},
			Env: []corev1.EnvVar{{Name: "MY_POD_IPS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}}},
		}}},
	}}
	// As the suite's request pod: only Args, which run as the command because the image has no entrypoint.
	var requests []string
	for _, n := range c.Nodes {
		name := "request-" + n.Name
		requests = append(requests, name)
		pods = append(pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: n.Name, TerminationGracePeriodSeconds: ptr.To[int64](1), Containers: []corev1.Container{{
				Name: "request", Image: nodeimages.Netshoot, Args: []string{"/bin/sh", "-ec", "while :; do echo '.'; sleep 5 ; done"},
			}}},
		})
	}
	for _, p := range pods {
		if _, err := c.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "hello"}, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyPreferDualStack),
			Ports: []corev1.ServicePort{{Name: "tcp", Port: 42, Protocol: corev1.ProtocolTCP}},
		},
	}
	svc, err = c.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantImage := map[string]string{"hello": "docker.io/" + nodeimages.Socat}
	for _, r := range requests {
		wantImage[r] = "docker.io/" + nodeimages.Netshoot
	}
	poll.T(t, 2*time.Minute, "the pods of both images running", func() error {
		for name, image := range wantImage {
			p, err := c.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
				return fmt.Errorf("%s: %s %+v", name, p.Status.Phase, p.Status.ContainerStatuses)
			}
			if got := p.Status.ContainerStatuses[0].Image; got != image {
				return fmt.Errorf("%s runs image %q, want %q", name, got, image)
			}
		}
		return nil
	})
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("Service hello has ClusterIPs %v; the check wants both families, as the suite's dual-stack pods have", svc.Spec.ClusterIPs)
	}
	v4, v6 := svc.Spec.ClusterIPs[0], svc.Spec.ClusterIPs[1]
	name := "hello." + ns + ".svc.cluster.local"
	checks := []struct {
		pod  string
		cmd  []string
		want string
	}{
		{"hello", []string{"socat", "-V"}, "socat version 1.7.4.4"},
		{"hello", []string{"sh", "-c", "echo 10.1.2.3 | grep -qE '^[0-9]{1,3}(\\.[0-9]{1,3}){3}$' && echo matched"}, "matched"},
	}
	for _, r := range requests {
		checks = append(checks, []struct {
			pod  string
			cmd  []string
			want string
		}{
			{r, []string{"dig", "-v"}, "DiG 9."},
			{r, []string{"curl", "--version"}, "libcurl/"},
			{r, []string{"socat", "-V"}, "socat version"},
			{r, []string{"nc", "-h"}, "OpenBSD netcat"},
			// The suite runs its tools through sh -c: the shell must find them on PATH, not run busybox applets.
			{r, []string{"sh", "-c", "nc -h 2>&1"}, "OpenBSD netcat"},
			{r, []string{"sh", "-c", "nslookup -version"}, "nslookup 9."},
			{r, []string{"nslookup", "-type=A", name + "."}, "Address: " + v4},
			{r, []string{"nslookup", "-type=AAAA", name + "."}, "Address: " + v6},
			{r, []string{"dig", "+short", "AAAA", name}, v6},
			// The suite's commands, as its ncCommand writes them: a name for IPv4, an address nslookup found for IPv6.
			{r, []string{"sh", "-c", "echo hi | nc -v -w 2 -4 " + name + " 42 2>&1"}, "pod ip "},
			{r, []string{"sh", "-c", "addr=$(nslookup -type=AAAA " + name + ". 2>&1 | grep '^Address:' | grep -v '#' | tail -1 | awk '{print $2}'); " +
				"if [ -z \"$addr\" ]; then echo 'No IPv6 address found'; exit 1; fi; echo hi | nc -v -w 2 $addr 42 2>&1"}, "pod ip "},
			{r, []string{"curl", "-sS", "-m", "2", "--http0.9", "http://" + name + ":42/"}, "pod ip "},
		}...)
	}
	for _, ch := range checks {
		var out string
		var code int
		err := poll.Until(ctx, time.Second, 30*time.Second, func() error {
			out, code = kubectl(append([]string{"exec", ch.pod, "--"}, ch.cmd...)...)
			if !strings.Contains(out, ch.want) {
				return fmt.Errorf("exit %d, output %q", code, out)
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: %q: want output containing %q: %v", ch.pod, ch.cmd, ch.want, err)
			continue
		}
		t.Logf("%s: %s: %s", ch.pod, strings.Join(ch.cmd, " "), firstLine(out))
	}
}

func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }

// tailOf returns the last n bytes of s.
func tailOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
