package monitoring

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"vksfleet.dev/fleet/test/framework/promtool"
)

func TestPrometheusRuleUpToDate(t *testing.T) {
	rules, err := os.ReadFile("rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want, err := PrometheusRule(rules)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("prometheusrule.yaml")
	if err != nil || !bytes.Equal(have, want) {
		t.Errorf("prometheusrule.yaml is not rules.yaml's (%v): run go generate ./build/deploy/monitoring", err)
	}
}

// TestRules checks the rules as Prometheus reads them and runs their unit tests, which must make every alert
// both fire and stay silent.
func TestRules(t *testing.T) {
	promtool.Run(t, nil, "check", "rules", "rules.yaml")
	promtool.Run(t, nil, "test", "rules", "rules_test.yaml")

	alerts, err := Alerts(RulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	readYAML(t, "rules_test.yaml", &tests)
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			fires[a.Alertname] = fires[a.Alertname] || len(a.ExpAlerts) > 0
			silent[a.Alertname] = silent[a.Alertname] || len(a.ExpAlerts) == 0
		}
	}
	var exprs []string
	for _, r := range alerts {
		if !fires[r.Alert] || !silent[r.Alert] {
			t.Errorf("alert %s: rules_test.yaml must show it firing (%v) and silent (%v)", r.Alert, fires[r.Alert], silent[r.Alert])
		}
		exprs = append(exprs, r.Expr)
	}
	checkMetricsExist(t, "rules.yaml", exprs)
}

// TestDashboard checks that every panel's query parses as PromQL (promtool checks them as recording rules) and asks
// for metrics that exist.
func TestDashboard(t *testing.T) {
	panels, err := Panels(DashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	var exprs []string
	for i, p := range panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for j, target := range p.Targets {
			q, _ := json.Marshal(target.Expr)
			fmt.Fprintf(&rules, "      - record: dashboard:panel%d_%d\n        expr: %s\n", i, j, q)
			exprs = append(exprs, target.Expr)
		}
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	promtool.Run(t, nil, "check", "rules", file)
	checkMetricsExist(t, "dashboard.json", exprs)
}

// TestComponent renders the component over the controller base, as an operator's overlay would.
func TestComponent(t *testing.T) {
	// An in-memory copy, since kustomize takes bases by relative path only.
	fs := filesys.MakeFsInMemory()
	for _, glob := range []string{"../controller/*.yaml", "*.yaml"} {
		files, _ := filepath.Glob(glob)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			dir := "/deploy/monitoring"
			if strings.HasPrefix(f, "../") {
				dir = "/deploy/controller"
			}
			if err := fs.WriteFile(path.Join(dir, filepath.Base(f)), b); err != nil {
				t.Fatal(err)
			}
		}
	}
	kustomization := "resources:\n  - ../deploy/controller\ncomponents:\n  - ../deploy/monitoring\n"
	if err := fs.WriteFile("/overlay/kustomization.yaml", []byte(kustomization)); err != nil {
		t.Fatal(err)
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/overlay")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, r := range res.Resources() {
		kinds[r.GetKind()]++
	}
	if kinds["ServiceMonitor"] != 3 || kinds["PrometheusRule"] != 1 || kinds["Service"] != 1 {
		t.Errorf("rendered kinds %v: want 3 ServiceMonitors, a PrometheusRule and the metrics Service", kinds)
	}
}

func readYAML(t *testing.T, file string, into any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

var (
	// queried are the metric names of ours a query asks for; a histogram's series name their family.
	queried = regexp.MustCompile(`\b(?:mcs_controller|coredns_multicluster)_[a-z_]+`)
	// controllerName is a metric name as the controller's sources spell it; pluginName is a name the plugin's
	// metrics.go gives after its namespace and subsystem.
	controllerName = regexp.MustCompile(`"(mcs_controller_[a-z_]+)"`)
	pluginName     = regexp.MustCompile(`(?:Name:\s+|BuildFQName\(plugin\.Namespace, Name, )"([a-z_]+)"`)
)

// checkMetricsExist fails t for every metric exprs ask for that neither the controller nor the plugin defines.
func checkMetricsExist(t *testing.T, file string, exprs []string) {
	t.Helper()
	defined := map[string]bool{}
	for _, glob := range []string{"../../../controller/*.go", "../../../controller/*/*.go"} {
		files, _ := filepath.Glob(glob)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range controllerName.FindAllStringSubmatch(string(b), -1) {
				defined[m[1]] = true
			}
		}
	}
	b, err := os.ReadFile("../../../plugin/multicluster/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range pluginName.FindAllStringSubmatch(string(b), -1) {
		defined["coredns_multicluster_"+m[1]] = true
	}
	for _, e := range exprs {
		for _, name := range queried.FindAllString(e, -1) {
			family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
			if !defined[name] && !defined[family] {
				t.Errorf("%s asks for %s, which no metric of the controller or the plugin is", file, name)
			}
		}
	}
}
