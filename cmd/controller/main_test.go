package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"vksfleet.dev/fleet/controller"
)

func TestParseFlags(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
		check   func(flags) bool
	}{
		{[]string{"--broker-kubeconfig=/b"}, "", func(f flags) bool {
			return f.brokerKubeconfig == "/b" && f.opts.LeaseGrace == controller.DefaultLeaseGrace && f.opts.Workers == controller.DefaultWorkers && f.qps == 200 && f.burst == 400 && !f.opts.ClusterLocalServices &&
				slices.Equal(f.opts.DeniedExportNamespaces, []string{"kube-system", "kube-public", "kube-node-lease", "default"}) &&
				f.opts.HealthProbeBindAddress == ":8081" && f.opts.MetricsBindAddress == ":8080"
		}},
		{[]string{"--broker-kubeconfig=/b", "--denied-export-namespaces= kube-system, shared-tools"}, "", func(f flags) bool {
			return slices.Equal(f.opts.DeniedExportNamespaces, []string{"kube-system", "shared-tools"})
		}},
		{[]string{"--broker-kubeconfig=/b", "--denied-export-namespaces="}, "", func(f flags) bool {
			return f.opts.DeniedExportNamespaces != nil && len(f.opts.DeniedExportNamespaces) == 0
		}},
		{[]string{"--broker-kubeconfig=/b", "--denied-export-namespaces=default,Not_A_Namespace"}, "--denied-export-namespaces", nil},
		{[]string{"--broker-kubeconfig=/b"}, "", func(f flags) bool { return f.opts.DeniedImportNamespaces == nil }},
		{[]string{"--broker-kubeconfig=/b", "--denied-import-namespaces= default, shared-tools"}, "", func(f flags) bool {
			return slices.Equal(f.opts.DeniedImportNamespaces, []string{"default", "shared-tools"})
		}},
		{[]string{"--broker-kubeconfig=/b", "--denied-import-namespaces="}, "", func(f flags) bool {
			return f.opts.DeniedImportNamespaces != nil && len(f.opts.DeniedImportNamespaces) == 0
		}},
		{[]string{"--broker-kubeconfig=/b", "--denied-import-namespaces=Not_A_Namespace"}, "--denied-import-namespaces", nil},
		{[]string{"--broker-secret=mcs-system/broker", "--cluster-id=east.prod", "--lease-grace=5s"}, "", func(f flags) bool {
			return f.brokerSecret == types.NamespacedName{Namespace: "mcs-system", Name: "broker"} && f.opts.ClusterID == "east.prod" &&
				f.opts.LeaseGrace == 5*time.Second
		}},
		{[]string{"--broker-kubeconfig=/b", "--cluster-local-services"}, "", func(f flags) bool { return f.opts.ClusterLocalServices }},
		{[]string{"--broker-kubeconfig=/b", "--cluster-local-services=maybe"}, "invalid boolean value", nil},
		{nil, "one of --broker-kubeconfig and --broker-secret is required", nil},
		{[]string{"--print-broker-namespace", "--cluster-id=east.prod"}, "", func(f flags) bool {
			return f.printBrokerNamespace && f.opts.ClusterID == "east.prod"
		}},
		{[]string{"--print-broker-namespace"}, "needs --cluster-id", nil},
		{[]string{"--broker-kubeconfig=/b", "--broker-secret=a/b"}, "exclude each other", nil},
		{[]string{"--broker-secret=broker"}, "is not namespace/name", nil},
		{[]string{"--broker-secret=a/b/c"}, "is not namespace/name", nil},
		{[]string{"--broker-kubeconfig=/b", "--cluster-id=Bad_ID"}, "--cluster-id", nil},
		{[]string{"--broker-kubeconfig=/b", "--lease-grace=100ms"}, "shorter than 1s", nil},
		{[]string{"--broker-kubeconfig=/b", "--qps=0"}, "must be positive", nil},
		{[]string{"--broker-kubeconfig=/b", "--workers=-1"}, "must be positive", nil},
		{[]string{"--broker-kubeconfig=/b", "--workers=0"}, "--workers", nil},
		{[]string{"--broker-kubeconfig=/b", "--lease-grace=0"}, "--lease-grace", nil},
		{[]string{"--broker-kubeconfig=/b", "--workers=4", "--leader-elect", "--leader-election-namespace=mcs-system",
			"--health-probe-bind-address=0", "--metrics-bind-address=:9090"}, "", func(f flags) bool {
			return f.opts.Workers == 4 && f.opts.LeaderElection && f.opts.LeaderElectionNamespace == "mcs-system" &&
				f.opts.HealthProbeBindAddress == "0" && f.opts.MetricsBindAddress == ":9090"
		}},
		{[]string{"--broker-kubeconfig=/b"}, "", func(f flags) bool {
			return f.opts.MaxEndpointsPerService == controller.DefaultMaxEndpointsPerService &&
				f.opts.MaxEndpointsPerMember == controller.DefaultMaxEndpointsPerMember && f.opts.MaxSlicesPerNamespace == controller.DefaultMaxSlicesPerNamespace
		}},
		{[]string{"--broker-kubeconfig=/b", "--max-endpoints-per-service=5000", "--max-endpoints-per-member=20000", "--max-slices-per-namespace=800"}, "",
			func(f flags) bool {
				return f.opts.MaxEndpointsPerService == 5000 && f.opts.MaxEndpointsPerMember == 20000 && f.opts.MaxSlicesPerNamespace == 800
			}},
		{[]string{"--broker-kubeconfig=/b", "--max-endpoints-per-service=200000"}, "--max-endpoints-per-service", nil},
		{[]string{"--broker-kubeconfig=/b", "--max-slices-per-namespace=0"}, "--max-slices-per-namespace", nil},
		{[]string{"--broker-secret=a/b", "--broker-token-renew-before=2m"}, "", func(f flags) bool { return f.renewBefore == 2*time.Minute }},
		{[]string{"--broker-kubeconfig=/b", "--broker-token-renew-before=-1s"}, "must not be negative", nil},
		{[]string{"--broker-kubeconfig=/b", "extra"}, "unexpected arguments", nil},
		{[]string{"--no-such-flag"}, "not defined", nil},
		{[]string{"--broker-kubeconfig=/b", "--logging-format=json", "-v=4"}, "", func(f flags) bool {
			return f.logging.Format == "json" && f.logging.Verbosity == 4
		}},
		{[]string{"--broker-kubeconfig=/b", "--logging-format=xml"}, `logging flags: format: Invalid value: "xml": Unsupported log format`, nil},
	}
	for _, c := range cases {
		f, err := parseFlags(c.args, io.Discard)
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("parseFlags(%q) error = %v, want one containing %q", c.args, err, c.wantErr)
			}
		case err != nil:
			t.Errorf("parseFlags(%q) = %v", c.args, err)
		case !c.check(f):
			t.Errorf("parseFlags(%q) = %+v", c.args, f)
		}
	}
}

// TestMain runs the command itself when a test starts this test binary as the controller.
func TestMain(m *testing.M) {
	if os.Getenv(asController) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// asController, set in a child's environment, makes the test binary the controller.
const asController = "MCS_CONTROLLER_TEST_MAIN"

// controllerProcess starts the controller with args and returns its combined output's reader.
func controllerProcess(t *testing.T, args ...string) (*exec.Cmd, io.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asController+"=1")
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, out
}

func TestLoggingFormat(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// A member that answers nothing: the controller logs that it waits for the broker's credentials, which are
	// missing, before it asks the member anything.
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {token: x}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, out := controllerProcess(t, "--logging-format=json", "-v=2", "--kubeconfig="+kubeconfig,
		"--broker-kubeconfig="+filepath.Join(t.TempDir(), "missing"), "--health-probe-bind-address=0", "--metrics-bind-address=0")
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		t.Fatalf("no log line: %v", lines.Err())
	}
	var line struct {
		Msg    string `json:"msg"`
		Logger string `json:"logger"`
		Reason string `json:"reason"`
		TS     any    `json:"ts"`
	}
	if err := json.Unmarshal(lines.Bytes(), &line); err != nil {
		t.Fatalf("not a JSON line: %q: %v", lines.Text(), err)
	}
	if line.TS == nil || line.Logger != "broker-credentials" || !strings.Contains(line.Reason, "missing") {
		t.Errorf("log line %q: want a timestamp, the logger's name and its key and value pairs as fields", lines.Text())
	}

	cmd, out := controllerProcess(t, "--logging-format=xml", "--broker-kubeconfig=/b")
	all, _ := io.ReadAll(out)
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("an unknown log format: exit %v, want status 1", err)
	}
	if want := `mcs-controller: logging flags: format: Invalid value: "xml": Unsupported log format` + "\n"; string(all) != want {
		t.Errorf("an unknown log format printed %q, want %q", all, want)
	}
}
