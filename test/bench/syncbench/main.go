// Command syncbench measures how fast the mcs-controller propagates state through a local clusterset of three
// members and a broker, with one controller per member run in this process by test/ctrlharness: ServiceExports
// created in cluster-a until cluster-b imports them, pods becoming ready in cluster-a until cluster-b's imported
// slices say so, and a restart of every controller until all are idle again, with the writes it made. Latencies
// are measured, not asserted. The result is a Markdown table. `make bench-sync` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"vksfleet.dev/fleet/test/clusterset"
	"vksfleet.dev/fleet/test/ctrlharness"
)

// namespace holds every object of the benchmark, in all three members, so that every member imports everything.
const namespace = "bench"

// sourceManagedBy marks the benchmark's own EndpointSlices: any manager but the kcm endpointslice controller's,
// which leaves them alone because their Services have no selector.
const sourceManagedBy = "syncbench.vksfleet.dev"

// readyService is the service of the readiness measurement, backed by a Deployment through the real endpointslice
// controller.
const readyService = "ready"

type config struct {
	services, endpoints, replicas int
	rate                          float64
	qps                           float32
	burst, workers                int
}

func main() {
	out := flag.String("out", "test/bench/results/sync.md", "where to write the results table")
	services := flag.Int("services", 1000, "exported services in cluster-a")
	endpoints := flag.Int("endpoints", 4, "ready endpoints per exported service")
	rate := flag.Float64("rate", 8, "ServiceExports created per second; the default stays below what 4 API servers on 2 cores absorb, so latency is not queueing")
	replicas := flag.Int("replicas", 50, "pods of the readiness Deployment, made ready one at a time")
	// 200/400 are cmd/controller's --qps/--burst defaults: the benchmark measures the controller as deployed, not
	// with the clusterset's unthrottled test clients.
	qps := flag.Float64("qps", 200, "controller client QPS to each API server")
	burst := flag.Int("burst", 400, "controller client burst to each API server")
	workers := flag.Int("workers", 0, "reconcile workers per controller; 0 is the controller's default")
	flag.Parse()
	cfg := config{services: *services, endpoints: *endpoints, replicas: *replicas, rate: *rate,
		qps: float32(*qps), burst: *burst, workers: *workers}
	if cfg.services < 1 || cfg.endpoints < 1 || cfg.replicas < 1 || cfg.rate <= 0 {
		log.Fatal("-services, -endpoints, -replicas and -rate must be positive")
	}
	ctrl.SetLogger(logr.Discard())
	if err := run(cfg, *out); err != nil {
		log.Fatal(err)
	}
}

// bench is the running clusterset, its controllers and the watch on cluster-b.
type bench struct {
	cfg   config
	cs    *clusterset.ClusterSet
	a, b  *clusterset.Cluster
	ctrls []*ctrlharness.Controller
	seen  *watcher
}

func run(cfg config, out string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Other work on the machine skews every figure: measure it before starting anything, to report it.
	idle := startCPU()
	time.Sleep(2 * time.Second)
	before := idle.stop()
	log.Print("starting 3 members and a broker")
	cs, err := clusterset.Start(ctx, clusterset.Options{Members: clusterset.DefaultMembers})
	if err != nil {
		return err
	}
	defer func() {
		if err := cs.Stop(); err != nil {
			log.Print("stopping the clusterset: ", err)
		}
	}()
	bn := &bench{cfg: cfg, cs: cs, a: cs.Member("cluster-a"), b: cs.Member("cluster-b")}
	for _, m := range cs.Members {
		c := ctrlharness.New(m, cs.Broker, ctrlharness.Options{Workers: cfg.workers, QPS: cfg.qps, Burst: cfg.burst})
		c.Start()
		bn.ctrls = append(bn.ctrls, c)
	}
	defer func() {
		for _, c := range bn.ctrls {
			if err := c.Stop(); err != nil {
				log.Printf("%s controller: %v", c.Name, err)
			}
		}
	}()
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
	if bn.seen, err = watch(ctx, bn.b, cfg.endpoints); err != nil {
		return err
	}

	res := results{cfg: cfg, before: before}
	if err := bn.exports(ctx, &res); err != nil {
		return fmt.Errorf("export propagation: %w", err)
	}
	if err := bn.readiness(ctx, &res); err != nil {
		return fmt.Errorf("readiness propagation: %w", err)
	}
	if err := bn.restart(ctx, &res); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	table := res.report()
	fmt.Print(table)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, []byte(table), 0o644)
}

// results are the measurements of one run.
type results struct {
	cfg    config
	before cpuUse // of the machine before the benchmark started anything

	exportLatency []time.Duration                // per service, ServiceExport Create to complete import in B
	exportCreate  []time.Duration                // per service, the Create call itself
	idleCreate    []time.Duration                // Create calls of objects no controller watches, before the export phase
	exportSpan    time.Duration                  // first ServiceExport Create to the last service complete in B
	exportRate    float64                        // ServiceExports actually created per second
	exportWrites  map[string]float64             // writes of all controllers by "METHOD resource", Lease renewals excepted
	exportTimings map[string]ctrlharness.Timings // per controller, over the export phase
	exportCPU     cpuUse

	readyLatency []time.Duration
	readyCPU     cpuUse

	restartTook       time.Duration
	restartEach       map[string]time.Duration
	restartReconciles map[string]float64
	restartWrites     map[string]float64 // "METHOD resource" of every controller's restart writes
	restartLogged     []string           // the same writes as the harness recorded them, with paths
	restartCPU        cpuUse
}
