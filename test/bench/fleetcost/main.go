// Command fleetcost measures what the local clusterset costs on this machine, the way `make up` and `make demo`
// run it: how long the default fleet (3 members x 2 kubelet nodes + broker, our product installed from the
// manifests) takes to be usable and to stop, the memory of every node's own processes (kubelet, containerd,
// kube-proxy) and of the pods on it (its cgroup), the memory of our controller and CoreDNS pods, and how long a
// whole `bin/demo` takes. Each figure is the median of -runs runs, with the range, written as Markdown to -out.
// `make bench-fleet` runs it; it needs `make build images` done.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/framework"
)

func main() {
	runs := flag.Int("runs", 3, "runs of each measurement")
	out := flag.String("out", "test/bench/results/fleet.md", "results file (Markdown)")
	demo := flag.String("demo", "bin/demo", "the demo program (make build)")
	flag.Parse()
	// The clusterset's clients log nothing worth keeping here.
	ctrl.SetLogger(logr.Discard())
	if err := run(*runs, *out, *demo); err != nil {
		log.Fatal(err)
	}
}

// sample is one run's figures, by name: seconds or MiB.
type sample map[string]float64

func run(runs int, out, demoBin string) error {
	var samples []sample
	var traffic []string
	var dnsMode string
	for i := range runs {
		s, mode, err := measureFleet()
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		start := time.Now()
		b, err := exec.Command(demoBin).CombinedOutput()
		if err != nil {
			return fmt.Errorf("run %d: bin/demo: %v\n%s", i+1, err, tail(string(b), 30))
		}
		traffic, dnsMode = append(traffic, demoTraffic(string(b))), mode
		s["make demo (fleet start, both stories, stop), s"] = time.Since(start).Seconds()
		log.Printf("run %d: %v", i+1, s)
		samples = append(samples, s)
	}
	text := report(samples, dnsMode)
	for i, t := range traffic {
		text += fmt.Sprintf("\n## The demo's traffic, run %d\n\nAs bin/demo printed it: requests per phase and client, and its measurements.\n\n```\n%s\n```\n", i+1, t)
	}
	return os.WriteFile(out, []byte(text), 0o644)
}

// demoTraffic is the demo's closing report: its table of requests per phase and the measurements under it.
func demoTraffic(out string) string {
	const start, end = "==> Traffic from cluster-a", "Both stories told"
	if i := strings.Index(out, start); i >= 0 {
		out = out[i:]
	}
	if i := strings.Index(out, end); i >= 0 {
		out = out[:i]
	}
	return strings.TrimSpace(out)
}

// measureFleet starts the default fleet, reads its figures and stops it; it says how the fleet's DNS ran.
func measureFleet() (sample, string, error) {
	ctx := context.Background()
	s := sample{}
	start := time.Now()
	f, err := framework.Start(ctx, framework.Options{ClusterSet: clusterset.Options{Members: clusterset.MemberNames(3), Nodes: 2}})
	if err != nil {
		return nil, "", err
	}
	s["fleet usable (make up), s"] = time.Since(start).Seconds()
	err = f.Usage(ctx, func(name string, mib float64) { s[name] = max(s[name], mib) })
	start = time.Now()
	if stopErr := f.Stop(); err == nil {
		err = stopErr
	}
	s["fleet stopped (make down), s"] = time.Since(start).Seconds()
	if err != nil {
		return nil, "", err
	}
	if left := dataplane.Leftovers(); len(left) > 0 {
		return nil, "", fmt.Errorf("the stopped fleet left %s", strings.Join(left, ", "))
	}
	return s, f.DNSModeText(), nil
}

// report renders the samples: a row per figure, its median and range.
func report(samples []sample, dnsMode string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# The local clusterset's cost (`make bench-fleet`)\n\n")
	fmt.Fprintf(&b, "Written by test/bench/fleetcost on %s, %d runs on a %s machine; the default fleet: 3 members x 2 kubelet nodes\n"+
		"+ broker, our controller (2 replicas) and CoreDNS (2 replicas) per member installed from the manifests, %s. Memory\n"+
		"is the largest of the fleet's nodes or pods, read once the fleet is usable: resident set size for processes,\n"+
		"anonymous memory (`total_rss` of the memory cgroup) for pods, those of a node together.\n\n", time.Now().UTC().Format("2006-01-02"), len(samples), strconv.Itoa(runtime.NumCPU())+"-core", dnsMode)
	fmt.Fprintf(&b, "| figure | median | range |\n|---|---|---|\n")
	var names []string
	for n := range samples[0] {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		var vs []float64
		for _, s := range samples {
			vs = append(vs, s[n])
		}
		slices.Sort(vs)
		fmt.Fprintf(&b, "| %s | %.1f | %.1f-%.1f |\n", n, vs[len(vs)/2], vs[0], vs[len(vs)-1])
	}
	return b.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
