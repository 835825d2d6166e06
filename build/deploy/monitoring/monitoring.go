// Package monitoring generates the monitoring component's PrometheusRule from rules.yaml, Prometheus' own rule
// file, so that a plain Prometheus and the prometheus-operator load the same rules; `go generate` writes it and
// a test checks that it is up to date.
package monitoring

//go:generate go run ./gen

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// RulesFile is rules.yaml, the rule file a plain Prometheus loads, as built into the program: the local
// clusterset's Prometheus (test/framework) loads it wherever the program runs from.
//
//go:embed rules.yaml
var RulesFile []byte

// ServiceMonitorsFile is servicemonitor.yaml, the component's ServiceMonitors, as built into the program: the Helm
// chart (build/helm) renders them.
//
//go:embed servicemonitor.yaml
var ServiceMonitorsFile []byte

// DashboardFile is dashboard.json, the Grafana dashboard, as built into the program.
//
//go:embed dashboard.json
var DashboardFile []byte

// Alert is one alerting rule of the rule file.
type Alert struct {
	Alert string `json:"alert"`
	Expr  string `json:"expr"`
}

// Alerts returns the alerting rules of a rule file, in order.
func Alerts(rules []byte) ([]Alert, error) {
	var file struct {
		Groups []struct {
			Rules []Alert `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(rules, &file); err != nil {
		return nil, fmt.Errorf("rules.yaml: %w", err)
	}
	var alerts []Alert
	for _, g := range file.Groups {
		alerts = append(alerts, g.Rules...)
	}
	return alerts, nil
}

// Panel is one panel of the dashboard with the PromQL expression of each of its queries.
type Panel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// Panels returns the panels of a Grafana dashboard, in order.
func Panels(dashboard []byte) ([]Panel, error) {
	var dash struct {
		Panels []Panel `json:"panels"`
	}
	if err := json.Unmarshal(dashboard, &dash); err != nil {
		return nil, fmt.Errorf("dashboard.json: %w", err)
	}
	return dash.Panels, nil
}

// Dir is this folder, relative to the package (where go generate and go test run).
const Dir = "."

// header opens the generated file.
const header = "# Generated from rules.yaml by `go generate ./build/deploy/monitoring`: edit rules.yaml.\n"

// PrometheusRule returns the PrometheusRule object holding the groups of the rule file rules.
func PrometheusRule(rules []byte) ([]byte, error) {
	var file struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(rules, &file); err != nil {
		return nil, fmt.Errorf("rules.yaml: %w", err)
	}
	out, err := yaml.Marshal(map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PrometheusRule",
		"metadata": map[string]any{
			"name":      "vksfleet",
			"namespace": "mcs-system",
			"labels":    map[string]string{"app.kubernetes.io/name": "mcs-controller"},
		},
		"spec": map[string]any{"groups": file.Groups},
	})
	if err != nil {
		return nil, err
	}
	return append([]byte(header), out...), nil
}

// Write regenerates dir/prometheusrule.yaml from dir/rules.yaml.
func Write(dir string) error {
	rules, err := os.ReadFile(filepath.Join(dir, "rules.yaml"))
	if err != nil {
		return err
	}
	out, err := PrometheusRule(rules)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "prometheusrule.yaml"), out, 0o644)
}
