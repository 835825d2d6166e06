package main

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/proc"
)

func TestInts(t *testing.T) {
	for _, tc := range []struct {
		in    string
		want  []int
		fails bool
	}{
		{in: "3", want: []int{3}},
		{in: "3,6, 10", want: []int{3, 6, 10}},
		{in: "3,,6", fails: true},
		{in: "0", fails: true},
		{in: "three", fails: true},
	} {
		got, err := ints(tc.in)
		if tc.fails != (err != nil) || !slices.Equal(got, tc.want) {
			t.Errorf("ints(%q) = %v, %v; want %v, fails %v", tc.in, got, err, tc.want, tc.fails)
		}
	}
}

func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want string
	}{
		{nil, "–"},
		{[]float64{62.2}, "62"},
		{[]float64{62.2, 61.9}, "62"},
		{[]float64{70, 41.6, 55}, "42–70"},
	} {
		if got := spread(tc.in); got != tc.want {
			t.Errorf("spread(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestScaleReport draws the table and charts of fixed points: a row and a column per point, a line per member
// count (p99 and p50, and kube-proxy's and CoreDNS's p99 where measured) and per service count.
func TestScaleReport(t *testing.T) {
	mk := func(members, services int, p99 float64) point {
		p := point{Members: members, Services: services, Endpoints: 4, Date: "2026-11-24",
			Export: map[string]latency{}, ExportPooled: latency{P50: p99 / 3, P99: p99}, ExportLast: latency{P99: p99},
			WritesPerServiceMember: map[string]float64{"PUT serviceimports": 2, "POST services": 1},
			Controllers:            map[string]controllerUse{"cluster-a": {ExportCPUSeconds: 3, PeakMiB: 60}},
			Broker:                 map[string]objects{"serviceimports": {Count: services, Bytes: int64(services) * 1400}},
		}
		for _, m := range clusterset.MemberNames(members)[1:] {
			p.Export[m] = latency{P50: p99 / 3, P99: p99}
			p.Controllers[m] = controllerUse{ExportCPUSeconds: 2, PeakMiB: 50}
		}
		return p
	}
	slower := mk(6, 1000, 90)
	slower.Offered = 4
	probed := mk(3, 5000, 300)
	probed.ProxyExport, probed.DNSExport = histLatency{N: 5000, P50: 600, P99: 1190}, histLatency{N: 5000, P50: 40, P99: 95}
	points := []point{mk(3, 1000, 147), probed, mk(6, 1000, 250), slower}
	table := scaleReport(points)
	for _, want := range []string{"[3 × 1000](scale/3x1000.md)", "[6 × 1000](scale/6x1000.md)", "| **147** |",
		"[6 × 1000 at 4/s](scale/6x1000-at-4.md)", "| 1190; – | 95; – |", "| –; – | –; – |", "| write | 3 × 1000 | 3 × 5000 | 6 × 1000 | 6 × 1000 at 4/s |",
		"| PUT serviceimports | 2.00 | 2.00 | 2.00 | 2.00 |", "| serviceimports | 1000; 1367 | 5000; 6836 | 1000; 1367 | 1000; 1367 |",
		"(" + latencyChart + ")", "(" + writesChart + ")"} {
		if !strings.Contains(table, want) {
			t.Errorf("table has no %q:\n%s", want, table)
		}
	}
	charts := scaleCharts(points)
	for file, names := range map[string][]string{
		latencyChart: {"3 members, p99", "3 members, p50", "6 members, p99", "6 members, p50", "6 members at 4/s, p99",
			"3 members, kube-proxy p99", "3 members, CoreDNS p99"},
		writesChart: {"1000 services", "5000 services", "1000 services at 4/s"},
	} {
		var b bytes.Buffer
		if err := charts[file].WriteSVG(&b); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if !strings.Contains(b.String(), ">"+n+"<") {
				t.Errorf("%s has no series %q", file, n)
			}
		}
		if strings.Contains(b.String(), ">6 members, kube-proxy p99<") {
			t.Errorf("%s has a kube-proxy line for points that did not measure it", file)
		}
	}
}

func TestQuantileCell(t *testing.T) {
	h := func(counts ...float64) proc.Histogram {
		return proc.Histogram{Bounds: []float64{0.0001, 0.0004, 0.25, 0.5, math.Inf(1)}, Counts: counts}
	}
	for _, tc := range []struct {
		h    proc.Histogram
		q    float64
		want string
	}{
		{h(0, 0, 0, 0, 0), 0.5, "–"},
		{h(0, 0, 0, 10, 10), 0.5, "375 [250–500]"},
		{h(0, 10, 10, 10, 10), 0.99, "0.40 [0.1–0.4]"},
		{h(0, 0, 0, 0, 3), 0.99, "> 500"},
	} {
		if got := quantile(tc.h, tc.q); got != tc.want {
			t.Errorf("quantile(%v, %g) = %q, want %q", tc.h.Counts, tc.q, got, tc.want)
		}
	}
}
