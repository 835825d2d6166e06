package framework

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"vksfleet.dev/fleet/build/deploy/monitoring"
	"vksfleet.dev/fleet/test/framework/promtool"
)

// TestPrometheusConfig: the configuration the fleet gives Prometheus, with the rule file, is one Debian's
// Prometheus accepts (promtool check config, which also checks the rules).
func TestPrometheusConfig(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	config, err := yaml.Marshal(prometheusConfig(rules, filepath.Join(dir, "targets.json")))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "prometheus.yml")
	for file, b := range map[string][]byte{rules: monitoring.RulesFile, path: config} {
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	promtool.Run(t, nil, "check", "config", path)
}
