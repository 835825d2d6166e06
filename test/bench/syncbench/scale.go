package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"vksfleet.dev/fleet/test/bench/chart"
	"vksfleet.dev/fleet/test/env/proc"
)

// point is one run's figures in the scale table, kept as JSON beside it so that points run at different times
// make one table.
type point struct {
	Members, Services, Endpoints int
	Date                         string
	Offered                      float64 // ServiceExports created per second, asked (-rate)
	Rate                         float64 // ServiceExports created per second, achieved
	MachineBusyBefore            float64 // cores busy with other work just before the run
	MachineBusyExport            float64 // cores busy during the export phase

	Export       map[string]latency // by importing member
	ExportLast   latency            // each service, to the last member to complete it
	ExportPooled latency            // every importing member's latencies together
	Ready        map[string]latency
	ReadyLast    latency
	// From an endpoint change in cluster-a to cluster-b's kube-proxy rules and CoreDNS answers, by phase, from their
	// histograms; zero in points kept before they were measured.
	ProxyExport, ProxyReady, DNSExport, DNSReady histLatency

	// WritesPerServiceMember are the export phase's controller writes per service per member, by "METHOD resource".
	WritesPerServiceMember map[string]float64
	Controllers            map[string]controllerUse // by member
	Broker                 map[string]objects       // by resource
	RestartSeconds         float64
	RestartWrites          float64
}

// latency is a distribution's summary, in milliseconds.
type latency struct{ P50, P99, Max float64 }

// histLatency is a histogram's summary over a phase: its observations and quantiles in milliseconds, zero without
// observations.
type histLatency struct{ N, P50, P99 float64 }

func summarizeHist(h proc.Histogram) histLatency {
	if h.Count() == 0 {
		return histLatency{}
	}
	p50, _, _ := h.Quantile(0.5)
	p99, _, _ := h.Quantile(0.99)
	return histLatency{N: h.Count(), P50: 1000 * p50, P99: 1000 * p99}
}

func summarize(ds []time.Duration) latency {
	f := func(p float64) float64 { return float64(percentile(ds, p)) / float64(time.Millisecond) }
	return latency{P50: f(50), P99: f(99), Max: f(100)}
}

// controllerUse is what one member's controller process used.
type controllerUse struct {
	ExportCPUSeconds  float64 // over the export phase
	RSSMiB, PeakMiB   float64 // after the readiness phase, and the peak until then
	RestartCPUSeconds float64 // of the restarted process until converged
	RestartRSSMiB     float64 // of the restarted process, converged
}

// point summarizes the run.
func (r results) point() point {
	c := r.cfg
	p := point{
		Members: c.members, Services: c.services, Endpoints: c.endpoints, Date: time.Now().UTC().Format("2006-01-02"),
		Offered: c.rate, Rate: r.exportRate, MachineBusyBefore: r.before.machineBusy, MachineBusyExport: r.exportCPU.machineBusy,
		Export: map[string]latency{}, ExportLast: summarize(r.exportLast),
		Ready: map[string]latency{}, ReadyLast: summarize(r.readyLast),
		WritesPerServiceMember: map[string]float64{}, Controllers: map[string]controllerUse{}, Broker: r.broker,
		RestartSeconds: r.restartTook.Seconds(), RestartWrites: sum(r.restartWrites),
		ProxyExport: summarizeHist(r.exportSeen[proxyProgrammed]), ProxyReady: summarizeHist(r.readySeen[proxyProgrammed]),
		DNSExport: summarizeHist(r.exportSeen[dnsAnswered]), DNSReady: summarizeHist(r.readySeen[dnsAnswered]),
	}
	var pooled []time.Duration
	for _, m := range r.members[1:] {
		p.Export[m] = summarize(r.exportLatency[m])
		p.Ready[m] = summarize(r.readyLatency[m])
		pooled = append(pooled, r.exportLatency[m]...)
	}
	p.ExportPooled = summarize(pooled)
	for k, v := range r.exportWrites {
		p.WritesPerServiceMember[k] = v / float64(c.services*c.members)
	}
	for _, m := range r.members {
		p.Controllers[m] = controllerUse{
			ExportCPUSeconds: r.exportCPU.controllers[m], RSSMiB: mib(r.memory[m].RSS), PeakMiB: mib(r.memory[m].Peak),
			RestartCPUSeconds: r.restartCPU.controllers[m], RestartRSSMiB: mib(r.restartMemory[m].RSS),
		}
	}
	return p
}

// name names the point's files: "<members>x<services>", and "-at-<rate>" when it ran at another rate than the
// default (points kept before the rate was recorded ran at the default).
func (p point) name() string {
	name := fmt.Sprintf("%dx%d", p.Members, p.Services)
	if p.Offered != 0 && p.Offered != defaultRate {
		name += fmt.Sprintf("-at-%g", p.Offered)
	}
	return name
}

// offered is the rate the point was asked to run at.
func (p point) offered() float64 { return cmp.Or(p.Offered, defaultRate) }

// at is how the point's table column and chart line say the rate it was asked to run at: nothing for the default.
func (p point) at() string {
	if p.offered() == defaultRate {
		return ""
	}
	return fmt.Sprintf(" at %g/s", p.offered())
}

func (p point) save(path string) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(path, append(b, '\n'))
}

// loadPoints reads every point kept in dir, smallest first.
func loadPoints(dir string) ([]point, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var points []point
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var p point
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		points = append(points, p)
	}
	slices.SortFunc(points, func(a, b point) int {
		return cmp.Or(cmp.Compare(a.Members, b.Members), cmp.Compare(a.Services, b.Services), cmp.Compare(b.offered(), a.offered()))
	})
	return points, nil
}

// sweepFlags are the flags a sweep does not pass on to its points.
var sweepFlags = map[string]bool{"sweep": true, "render": true, "members": true, "services": true, "out": true,
	"point-json": true, "bin": true}

// runSweep runs every members × services point in a process of its own (this program again), each keeping its
// figures in the scale folder beside out, then writes the scale table of every point kept there to out, and the
// charts beside it. A point that fails stops the sweep; those done are kept.
func runSweep(out, members, services string, rate float64, render bool, bin string) error {
	dir := filepath.Join(filepath.Dir(out), "scale")
	if !render {
		ms, err := ints(members)
		if err != nil {
			return fmt.Errorf("-members: %w", err)
		}
		ss, err := ints(services)
		if err != nil {
			return fmt.Errorf("-services: %w", err)
		}
		// One build for every point: the sweep holds it (framework.Build) while its points run.
		if bin == "" {
			var err error
			if bin, err = buildBinaries(); err != nil {
				return err
			}
		}
		self, err := os.Executable()
		if err != nil {
			return err
		}
		var pass []string
		flag.Visit(func(f *flag.Flag) {
			if !sweepFlags[f.Name] {
				pass = append(pass, "-"+f.Name+"="+f.Value.String())
			}
		})
		type size struct{ members, services int }
		var grid []size
		for _, m := range ms {
			for _, s := range ss {
				grid = append(grid, size{m, s})
			}
		}
		slices.SortStableFunc(grid, func(a, b size) int { return cmp.Compare(a.members*a.services, b.members*b.services) })
		for _, g := range grid {
			name := point{Members: g.members, Services: g.services, Offered: rate}.name()
			args := append(slices.Clone(pass), "-members="+strconv.Itoa(g.members), "-services="+strconv.Itoa(g.services),
				"-bin="+bin, "-out="+filepath.Join(dir, name+".md"), "-point-json="+filepath.Join(dir, name+".json"))
			log.Printf("point %s: %s %s", name, self, strings.Join(args, " "))
			start := time.Now()
			cmd := exec.Command(self, args...)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("point %s: %w", name, err)
			}
			log.Printf("point %s done in %s", name, time.Since(start).Round(time.Second))
		}
	}
	points, err := loadPoints(dir)
	if err != nil {
		return err
	}
	if len(points) == 0 {
		return fmt.Errorf("no point kept in %s", dir)
	}
	table := scaleReport(points)
	fmt.Print(table)
	if err := writeFile(out, []byte(table)); err != nil {
		return err
	}
	for file, c := range scaleCharts(points) {
		if err := chart.WriteFile(filepath.Join(filepath.Dir(out), file), c); err != nil {
			return err
		}
	}
	return nil
}

// ints parses a comma-separated list of positive numbers.
func ints(list string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a list of positive numbers", list)
		}
		out = append(out, n)
	}
	return out, nil
}

// Chart files, beside the scale table.
const (
	latencyChart = "scale-latency.svg"
	writesChart  = "scale-writes.svg"
)

func scaleReport(points []point) string {
	var b strings.Builder
	b.WriteString("# Scale: mcs-controller propagation against members and services\n\n")
	b.WriteString("Generated by `make bench-sync SCALE=1` (test/bench/syncbench -sweep): each point is one run of the sync " +
		"benchmark, N members × S services of " + strconv.Itoa(points[0].Endpoints) + " endpoints each, in a process of its own, " +
		"on a machine whose cores every API server, etcd and controller of the run share; the point's own report, " +
		"linked in the first column, says how it measures. Export latency is from the ServiceExport Create in cluster-a " +
		"to the import being complete (ServiceImport and every endpoint ready) in each other member; endpoint change, " +
		"from a pod's readiness in cluster-a to its endpoint ready in each other member. Controller CPU and memory are " +
		"each member's mcs-controller process's own (/proc). Broker objects are those the controllers wrote, after the " +
		"readiness phase. kube-proxy and CoreDNS p99 are from their own histograms in cluster-b, from the source slice's " +
		"last-change-trigger-time to the rules programmed and to the answers, in the export phase; then the readiness " +
		"phase (\"–\": not measured at that point).\n\n")
	fmt.Fprintf(&b, "![export → import latency against services](%s)\n![writes per service per member against members](%s)\n\n",
		latencyChart, writesChart)
	b.WriteString("| members × services | export p50 ms, per member | export p99 ms, per member | export p99 ms, last member | " +
		"endpoint change p99 ms, last member | kube-proxy p99 ms: export; readiness | CoreDNS p99 ms: export; readiness | writes per service per member | controller CPU s in the export phase: " +
		"cluster-a; others' mean | controller peak RSS MiB: cluster-a; others' max | broker objects; MiB | restart s; writes | " +
		"exports/s; cores busy before, during | date |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, p := range points {
		var p50, p99 []float64
		for _, l := range p.Export {
			p50, p99 = append(p50, l.P50), append(p99, l.P99)
		}
		a := p.Controllers["cluster-a"]
		var cpu, peak float64
		for m, u := range p.Controllers {
			if m != "cluster-a" {
				cpu += u.ExportCPUSeconds / float64(len(p.Controllers)-1)
				peak = max(peak, u.PeakMiB)
			}
		}
		var objs objects
		for _, o := range p.Broker {
			objs.Count += o.Count
			objs.Bytes += o.Bytes
		}
		fmt.Fprintf(&b, "| [%d × %d%s](scale/%s.md) | %s | %s | **%.0f** | %.0f | %s; %s | %s; %s | **%.2f** | %.1f; %.1f | %.0f; %.0f | %d; %.1f | %.2f; %.0f | %.1f; %.2f, %.2f | %s |\n",
			p.Members, p.Services, p.at(), p.name(), spread(p50), spread(p99), p.ExportLast.P99, p.ReadyLast.P99,
			p.ProxyExport.p99(), p.ProxyReady.p99(), p.DNSExport.p99(), p.DNSReady.p99(), sum(p.WritesPerServiceMember), a.ExportCPUSeconds, cpu, a.PeakMiB, peak, objs.Count, float64(objs.Bytes)/(1<<20),
			p.RestartSeconds, p.RestartWrites, p.Rate, p.MachineBusyBefore, p.MachineBusyExport, p.Date)
	}

	b.WriteString("\nController writes per service per member in the export phase, by request:\n\n")
	byPoint(&b, "write", points, func(p point) []string { return slices.Collect(maps.Keys(p.WritesPerServiceMember)) },
		func(p point, k string) string { return fmt.Sprintf("%.2f", p.WritesPerServiceMember[k]) })
	b.WriteString("\nBroker objects by resource (objects; KiB of JSON as served, managedFields included):\n\n")
	byPoint(&b, "resource", points, func(p point) []string { return slices.Collect(maps.Keys(p.Broker)) },
		func(p point, k string) string {
			return fmt.Sprintf("%d; %.0f", p.Broker[k].Count, float64(p.Broker[k].Bytes)/1024)
		})
	return b.String()
}

// p99 is the p99 in milliseconds, "–" when nothing was observed.
func (h histLatency) p99() string {
	if h.N == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", h.P99)
}

// byPoint writes a table with a column per point and a row per key any point has.
func byPoint(b *strings.Builder, first string, points []point, keys func(point) []string, cell func(point, string) string) {
	all := map[string]bool{}
	fmt.Fprintf(b, "| %s |", first)
	for _, p := range points {
		fmt.Fprintf(b, " %d × %d%s |", p.Members, p.Services, p.at())
		for _, k := range keys(p) {
			all[k] = true
		}
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(points)) + "\n")
	for _, k := range slices.Sorted(maps.Keys(all)) {
		fmt.Fprintf(b, "| %s |", k)
		for _, p := range points {
			fmt.Fprintf(b, " %s |", cell(p, k))
		}
		b.WriteString("\n")
	}
}

// spread is "min–max" of vs, or the one value when they agree to the millisecond.
func spread(vs []float64) string {
	if len(vs) == 0 {
		return "–"
	}
	lo, hi := slices.Min(vs), slices.Max(vs)
	if fmt.Sprintf("%.0f", lo) == fmt.Sprintf("%.0f", hi) {
		return fmt.Sprintf("%.0f", lo)
	}
	return fmt.Sprintf("%.0f–%.0f", lo, hi)
}

// scaleCharts draws the points: export latency against services, lines per member count (and rate, when not the
// default): p99 and p50 to every other member's informer, and p99 to cluster-b's kube-proxy rules and CoreDNS
// answers; and writes per service per member against members, a line per service count (and rate).
func scaleCharts(points []point) map[string]chart.Chart {
	lat := chart.Lines{Title: "Export → import in every other member; → kube-proxy, CoreDNS in cluster-b", X: "exported services",
		Y: "milliseconds", LogY: true}
	writes := chart.Lines{Title: "Controller writes per service per member", X: "members", Y: "writes"}
	type line struct {
		size    int // members or services
		offered float64
	}
	byMembers, byServices := map[line][]point{}, map[line][]point{}
	for _, p := range points {
		byMembers[line{p.Members, p.offered()}] = append(byMembers[line{p.Members, p.offered()}], p)
		byServices[line{p.Services, p.offered()}] = append(byServices[line{p.Services, p.offered()}], p)
	}
	order := func(a, b line) int { return cmp.Or(cmp.Compare(a.size, b.size), cmp.Compare(b.offered, a.offered)) }
	for i, l := range slices.SortedFunc(maps.Keys(byMembers), order) {
		at := byMembers[l][0].at()
		p99 := chart.Series{Name: fmt.Sprintf("%d members%s, p99", l.size, at), Color: i}
		p50 := chart.Series{Name: fmt.Sprintf("%d members%s, p50", l.size, at), Color: i, Style: chart.Dashed}
		proxy := chart.Series{Name: fmt.Sprintf("%d members%s, kube-proxy p99", l.size, at), Color: i, Style: chart.Dotted}
		dns := chart.Series{Name: fmt.Sprintf("%d members%s, CoreDNS p99", l.size, at), Color: i, Style: chart.DashDot}
		for _, p := range byMembers[l] { // sorted by services
			p99.X, p99.Y = append(p99.X, float64(p.Services)), append(p99.Y, p.ExportPooled.P99)
			p50.X, p50.Y = append(p50.X, float64(p.Services)), append(p50.Y, p.ExportPooled.P50)
			// Points kept before the probes were measured have none.
			if p.ProxyExport.N > 0 {
				proxy.X, proxy.Y = append(proxy.X, float64(p.Services)), append(proxy.Y, p.ProxyExport.P99)
			}
			if p.DNSExport.N > 0 {
				dns.X, dns.Y = append(dns.X, float64(p.Services)), append(dns.Y, p.DNSExport.P99)
			}
		}
		lat.Series = append(lat.Series, p99, p50)
		for _, s := range []chart.Series{proxy, dns} {
			if len(s.X) > 0 {
				lat.Series = append(lat.Series, s)
			}
		}
	}
	for i, l := range slices.SortedFunc(maps.Keys(byServices), order) {
		line := chart.Series{Name: fmt.Sprintf("%d services%s", l.size, byServices[l][0].at()), Color: i}
		for _, p := range byServices[l] { // sorted by members
			line.X, line.Y = append(line.X, float64(p.Members)), append(line.Y, sum(p.WritesPerServiceMember))
		}
		writes.Series = append(writes.Series, line)
	}
	return map[string]chart.Chart{latencyChart: lat, writesChart: writes}
}
