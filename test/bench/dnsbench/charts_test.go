package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vksfleet.dev/fleet/test/env/proc"
)

// TestChartsFromReport checks that a report's QPS figures read back as they were measured, so that charts drawn
// from a recorded report show the run's own numbers, and that both charts are drawn with every class.
func TestChartsFromReport(t *testing.T) {
	d := dataset{namespaces: 10, clusterSetIP: 5000, headless: 1000, clusters: 3, endpoints: 4}
	classes := d.queryClasses()
	res := map[string]map[string]measurement{}
	want := map[string]map[string]float64{}
	for i, server := range []string{"ours", "stock", "ceiling", "bare", "ours-deployed", "stock-deployed"} {
		res[server], want[server] = map[string]measurement{}, map[string]float64{}
		for j, q := range classes {
			qps := float64(10000*(i+1) + 100*j)
			res[server][q.name] = measurement{qps: qps, latencyMs: 0.1}
			want[server][q.name] = qps
		}
	}
	mem := map[string]proc.Usage{}
	for _, server := range []string{"ours", "stock", "ours-deployed", "stock-deployed"} {
		mem[server] = proc.Usage{RSS: 100 << 20, PeakRSS: 120 << 20}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "dns.md")
	if err := os.WriteFile(path, []byte(report(d, classes, res, mem, 5*time.Second)), 0o644); err != nil {
		t.Fatal(err)
	}
	gotClasses, got, err := parseReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(gotClasses) != len(classes) {
		t.Fatalf("classes %q, want %d", gotClasses, len(classes))
	}
	for server, byClass := range want {
		for class, qps := range byClass {
			if got[server][class] != qps {
				t.Errorf("%s, %s: read %v, want %v", server, class, got[server][class], qps)
			}
		}
	}
	if err := writeCharts(dir, gotClasses, got); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{minimalChart, deployedChart} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range classes {
			if !strings.Contains(string(b), ">"+q.name+"<") {
				t.Errorf("%s has no label %q", file, q.name)
			}
		}
	}
}
