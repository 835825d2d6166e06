// Command syncbench measures how fast the mcs-controller propagates state through a local clusterset of N
// members and a broker, with one controller process per member (cmd/controller, started by test/framework/ctrlharness):
// ServiceExports created in cluster-a until every other member imports them, pods becoming ready in cluster-a
// until every other member's imported slices say so, and a restart of every controller until all are idle
// again, with the writes it made, each controller's CPU time and memory, and what the broker holds. In cluster-b,
// a real kube-proxy and our CoreDNS consume the imports, and their own histograms say how long each endpoint
// change took from cluster-a to their rules and answers (probes.go). Latencies are measured, not asserted. One run is one point, N members × S services, reported as a Markdown table;
// -sweep runs each point of a grid in a process of its own and draws the scale table and its charts.
// `make bench-sync` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/framework"
	"vksfleet.dev/fleet/test/framework/ctrlharness"
)

// namespace holds every object of the benchmark, in all members, so that every member imports everything.
const namespace = "bench"

// sourceManagedBy marks the benchmark's own EndpointSlices: any manager but the kcm endpointslice controller's,
// which leaves them alone because their Services have no selector.
const sourceManagedBy = "syncbench.vksfleet.dev"

// readyService is the service of the readiness measurement, backed by a Deployment through the real endpointslice
// controller.
const readyService = "ready"

type config struct {
	members, services, endpoints, replicas int
	rate                                   float64
	qps                                    float32
	burst, workers                         int
	bin                                    string // the folder of the mcs-controller and coredns binaries
}

// defaultRate is -rate's default, ServiceExports created per second. A scale point run at another rate is kept
// beside the default's, with the rate in its name.
const defaultRate = 8

func main() {
	out := flag.String("out", "", "where to write the results table; default test/bench/results/sync.md, with -sweep scale.md")
	members := flag.String("members", "3", "member clusters; with -sweep a comma-separated list")
	services := flag.String("services", "1000", "exported services in cluster-a; with -sweep a comma-separated list")
	sweep := flag.Bool("sweep", false, "run every -members × -services point in a process of its own, keep each point's figures "+
		"beside -out (scale/<members>x<services>.json and .md, -at-<rate> added unless -rate is the default) and write the scale table of every point kept there, with its charts")
	render := flag.Bool("render", false, "with -sweep: run nothing, only write the scale table and charts of the points kept")
	pointJSON := flag.String("point-json", "", "also write the run's figures as JSON here, for -sweep")
	endpoints := flag.Int("endpoints", 4, "ready endpoints per exported service")
	rate := flag.Float64("rate", defaultRate, "ServiceExports created per second; the default stays below what 4 API servers on 2 cores absorb, so latency is not queueing")
	replicas := flag.Int("replicas", 50, "pods of the readiness Deployment, made ready one at a time")
	// 200/400 are cmd/controller's --qps/--burst defaults: the benchmark measures the controller as deployed, not
	// with the clusterset's unthrottled test clients.
	qps := flag.Float64("qps", 200, "controller client QPS to each API server")
	burst := flag.Int("burst", 400, "controller client burst to each API server")
	workers := flag.Int("workers", 0, "reconcile workers per controller; 0 is the controller's default")
	bin := flag.String("bin", "", "the folder of the controller and coredns binaries; default: built from this tree")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	var err error
	if *sweep {
		if *out == "" {
			*out = "test/bench/results/scale.md"
		}
		err = runSweep(*out, *members, *services, *rate, *render, *bin)
	} else {
		if *out == "" {
			*out = "test/bench/results/sync.md"
		}
		cfg := config{endpoints: *endpoints, replicas: *replicas, rate: *rate, qps: float32(*qps), burst: *burst,
			workers: *workers, bin: *bin}
		if cfg.members, err = strconv.Atoi(*members); err != nil || cfg.members < 2 {
			log.Fatalf("-members %q: want one number, 2 or more (a list needs -sweep)", *members)
		}
		if cfg.services, err = strconv.Atoi(*services); err != nil || cfg.services < 1 {
			log.Fatalf("-services %q: want one positive number (a list needs -sweep)", *services)
		}
		if cfg.endpoints < 1 || cfg.replicas < 1 || cfg.rate <= 0 {
			log.Fatal("-endpoints, -replicas and -rate must be positive")
		}
		err = run(cfg, *out, *pointJSON)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// bench is the running clusterset, its controllers and the watches on every member but cluster-a.
type bench struct {
	cfg    config
	cs     *clusterset.ClusterSet
	a      *clusterset.Cluster
	others []*clusterset.Cluster // the members that import cluster-a's exports, in clusterset order
	ctrls  []*ctrlharness.Controller
	seen   []*watcher // one per member of others, in the same order
	probes *probes    // in cluster-b
}

func run(cfg config, out, pointJSON string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "syncbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if cfg.bin == "" {
		if cfg.bin, err = buildBinaries(); err != nil {
			return err
		}
	}
	// Other work on the machine skews every figure: measure it before starting anything, to report it.
	idle := startCPU(nil)
	time.Sleep(2 * time.Second)
	before := idle.stop()
	names := clusterset.MemberNames(cfg.members)
	log.Printf("starting %d members and a broker", cfg.members)
	// Only cluster-a's Deployment needs pods and the endpointslice controller: every other slice is written by
	// the benchmark or the mcs-controllers.
	cs, err := clusterset.Start(ctx, clusterset.Options{Members: names, NoControllerManager: names[1:]})
	if err != nil {
		return err
	}
	defer func() {
		if err := cs.Stop(); err != nil {
			log.Print("stopping the clusterset: ", err)
		}
	}()
	bn := &bench{cfg: cfg, cs: cs, a: cs.Members[0], others: cs.Members[1:]}
	for _, m := range cs.Members {
		bn.ctrls = append(bn.ctrls, ctrlharness.New(m, cs.Broker, ctrlharness.Options{
			Workers: cfg.workers, QPS: cfg.qps, Burst: cfg.burst, Binary: filepath.Join(cfg.bin, "controller")}))
	}
	defer func() {
		for _, c := range bn.ctrls {
			if err := c.Stop(); err != nil {
				log.Printf("%s controller: %v", c.Name, err)
			}
		}
	}()
	if err := bn.startControllers(); err != nil {
		return err
	}
	leaseCtx, leaseCancel := context.WithTimeout(ctx, 2*time.Minute)
	defer leaseCancel()
	for _, c := range bn.ctrls {
		if err := c.WaitForBrokerLease(leaseCtx); err != nil {
			return err
		}
	}
	for _, m := range cs.Members {
		if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
			return err
		}
	}
	for _, m := range bn.others {
		w, err := watch(ctx, m, cfg.endpoints)
		if err != nil {
			return err
		}
		bn.seen = append(bn.seen, w)
	}
	log.Printf("starting kube-proxy and CoreDNS in %s", bn.others[0].Name)
	if bn.probes, err = startProbes(ctx, bn.others[0], cfg.bin, dir); err != nil {
		return err
	}
	defer func() {
		if err := bn.probes.stop(); err != nil {
			log.Print("stopping kube-proxy and CoreDNS: ", err)
		}
	}()

	res := results{cfg: cfg, members: names, before: before, minSync: bn.probes.proxy.MinSyncPeriod}
	if err := bn.exports(ctx, &res); err != nil {
		return fmt.Errorf("export propagation: %w", err)
	}
	if err := bn.readiness(ctx, &res); err != nil {
		return fmt.Errorf("readiness propagation: %w", err)
	}
	if res.memory, err = bn.usage(); err != nil {
		return err
	}
	if res.broker, err = brokerObjects(ctx, cs.Broker.Client); err != nil {
		return fmt.Errorf("counting broker objects: %w", err)
	}
	if err := bn.restart(ctx, &res); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	table := res.report()
	fmt.Print(table)
	if err := writeFile(out, []byte(table)); err != nil {
		return err
	}
	if pointJSON == "" {
		return nil
	}
	return res.point().save(pointJSON)
}

// startControllers starts every controller at once: each returns once its process serves its metrics.
func (bn *bench) startControllers() error {
	var wg sync.WaitGroup
	for _, c := range bn.ctrls {
		wg.Go(c.Start)
	}
	wg.Wait()
	// A controller that did not start has no process to read, and says why when stopped.
	for _, c := range bn.ctrls {
		if _, err := c.Usage(); err != nil {
			return errors.Join(err, c.Stop())
		}
	}
	return nil
}

// buildBinaries returns the folder of this tree's controller and coredns (framework.Build), built unless the
// cache has them.
func buildBinaries() (string, error) {
	log.Print("building the mcs-controller and CoreDNS, unless the cache has them")
	return framework.Build()
}

func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// results are the measurements of one run.
type results struct {
	cfg     config
	members []string // in clusterset order, cluster-a first
	before  cpuUse   // of the machine before the benchmark started anything

	exportLatency map[string][]time.Duration     // per importing member, per service: ServiceExport Create to complete import there
	exportLast    []time.Duration                // per service, to complete import in the last member
	exportCreate  []time.Duration                // per service, the Create call itself
	idleCreate    []time.Duration                // Create calls of objects no controller watches, before the export phase
	exportSpan    time.Duration                  // first ServiceExport Create to the last service complete everywhere
	exportRate    float64                        // ServiceExports actually created per second
	exportWrites  map[string]float64             // writes of all controllers by "METHOD resource", Lease renewals excepted
	exportTimings map[string]ctrlharness.Timings // per controller, over the export phase
	exportCPU     cpuUse

	readyLatency map[string][]time.Duration // per importing member, per pod
	readyLast    []time.Duration            // per pod, to ready in the last member
	readyCPU     cpuUse

	// What kube-proxy and CoreDNS in cluster-b observed over each phase, and kube-proxy's minimum sync period.
	exportSeen, readySeen snapshot
	minSync               time.Duration

	memory map[string]memory  // per member's controller, after the readiness phase
	broker map[string]objects // by resource, after the readiness phase

	restartTook       time.Duration
	restartEach       map[string]time.Duration
	restartReconciles map[string]float64
	restartWrites     map[string]float64 // "METHOD resource" of every controller's restart writes
	restartCPU        cpuUse
	restartMemory     map[string]memory // per member's restarted controller, once converged
}

// memory is a controller process's resident set: now and its peak, in bytes.
type memory struct{ RSS, Peak int64 }
