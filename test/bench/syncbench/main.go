// Command syncbench measures how fast the mcs-controller propagates state through a local clusterset of three
// members and a broker, with one controller per member run in this process by test/ctrlharness: ServiceExports
// created in cluster-a until cluster-b imports them, pods becoming ready in cluster-a until cluster-b's imported
// slices say so, and a restart of every controller until all are idle again, with the writes it made. Latencies
// are measured, not asserted. The result is a Markdown table. `make bench-sync` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/intstr"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/test/clusterset"
	"vksfleet.dev/fleet/test/ctrlharness"
	"vksfleet.dev/fleet/test/poll"
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

// exports loads the selector-less Services and their EndpointSlices, then creates the ServiceExports at the
// configured rate and waits until cluster-b has seen every import complete.
func (bn *bench) exports(ctx context.Context, res *results) error {
	n := bn.cfg.services
	log.Printf("loading %d Services and EndpointSlices (%d endpoints each) into cluster-a", n, bn.cfg.endpoints)
	start := time.Now()
	err := paced(ctx, n, 0, 8, func(i int) error {
		if err := bn.a.Client.Create(ctx, bn.sourceService(i)); err != nil {
			return err
		}
		return bn.a.Client.Create(ctx, bn.sourceSlice(i))
	})
	if err != nil {
		return err
	}
	log.Printf("loaded in %s; waiting for the controllers to be idle", time.Since(start).Round(time.Millisecond))
	if err := bn.waitIdle(ctx, 2*time.Minute); err != nil {
		return err
	}

	// A baseline for the Create calls below: the same call on an otherwise idle clusterset, with an object no
	// controller watches.
	for i := range 20 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("baseline-%d", i)}}
		start := time.Now()
		if err := bn.a.Client.Create(ctx, cm); err != nil {
			return err
		}
		res.idleCreate = append(res.idleCreate, time.Since(start))
	}

	created := make([]time.Time, n)
	res.exportCreate = make([]time.Duration, n)
	writesBefore, err := bn.writes()
	if err != nil {
		return err
	}
	timingsBefore, err := bn.timings()
	if err != nil {
		return err
	}
	cpu := startCPU()
	log.Printf("creating %d ServiceExports at %g/s", n, bn.cfg.rate)
	// Enough concurrent creators that a slow Create never holds back the schedule.
	err = paced(ctx, n, bn.cfg.rate, 64, func(i int) error {
		se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: serviceName(i)}}
		bn.seen.expect(serviceName(i))
		created[i] = time.Now()
		err := bn.a.Client.Create(ctx, se)
		res.exportCreate[i] = time.Since(created[i])
		return err
	})
	if err != nil {
		return err
	}
	first, last := slices.MinFunc(created, time.Time.Compare), slices.MaxFunc(created, time.Time.Compare)
	if n > 1 {
		res.exportRate = float64(n-1) / last.Sub(first).Seconds()
	}
	log.Printf("created in %s; waiting for cluster-b to see every import", last.Sub(first).Round(time.Millisecond))
	err = bn.seen.waitFor(ctx, 10*time.Minute, func() error {
		if done := len(bn.seen.complete); done < n {
			return fmt.Errorf("%d of %d services complete in cluster-b", done, n)
		}
		return nil
	})
	if err != nil {
		return err
	}
	res.exportCPU = cpu.stop()
	bn.seen.mu.Lock()
	var lastSeen time.Time
	for i := range n {
		at := bn.seen.complete[serviceName(i)]
		res.exportLatency = append(res.exportLatency, at.Sub(created[i]))
		if at.After(lastSeen) {
			lastSeen = at
		}
	}
	bn.seen.mu.Unlock()
	res.exportSpan = lastSeen.Sub(first)
	writesAfter, err := bn.writes()
	if err != nil {
		return err
	}
	res.exportWrites = diff(writesAfter, writesBefore)
	timingsAfter, err := bn.timings()
	if err != nil {
		return err
	}
	res.exportTimings = map[string]ctrlharness.Timings{}
	for name, after := range timingsAfter {
		before := timingsBefore[name]
		res.exportTimings[name] = ctrlharness.Timings{
			Reconciles:       after.Reconciles - before.Reconciles,
			ReconcileSeconds: after.ReconcileSeconds - before.ReconcileSeconds,
			Dequeued:         after.Dequeued - before.Dequeued,
			QueueSeconds:     after.QueueSeconds - before.QueueSeconds,
			Workers:          after.Workers,
		}
	}
	log.Printf("export: p50 %s p99 %s, all in %s", percentile(res.exportLatency, 50), percentile(res.exportLatency, 99), res.exportSpan)
	return nil
}

func serviceName(i int) string { return fmt.Sprintf("svc-%04d", i) }

// sourceService is a selector-less Service: its endpoints are the benchmark's own slice, so that 1,000 services
// cost no pods and no endpointslice controller work.
func (bn *bench) sourceService(i int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: serviceName(i)},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
		}},
	}
}

func (bn *bench) sourceSlice(i int) *discoveryv1.EndpointSlice {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: serviceName(i) + "-src",
			Labels: map[string]string{
				discoveryv1.LabelServiceName: serviceName(i),
				discoveryv1.LabelManagedBy:   sourceManagedBy,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for e := range bn.cfg.endpoints {
		k := i*bn.cfg.endpoints + e // a distinct address per endpoint, outside every member's pod range
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 200+k/62500, k/250%250, k%250+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		})
	}
	return slice
}

// readiness exports a Deployment whose pods start not ready, waits until cluster-b imports all of them, then makes
// them ready one at a time, each time waiting until cluster-b's imported slices show that pod's address ready.
func (bn *bench) readiness(ctx context.Context, res *results) error {
	r := bn.cfg.replicas
	log.Printf("readiness: a Deployment of %d pods that start not ready", r)
	sel := map[string]string{"app": readyService}
	objs := []client.Object{
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: readyService},
			Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
			}},
		},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: readyService},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(r)),
				Selector: &metav1.LabelSelector{MatchLabels: sel},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: sel, Annotations: map[string]string{clusterset.NotReadyAnnotation: "true"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{
						Name: "app", Image: "registry.k8s.io/pause:3.10",
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					}}},
				},
			},
		},
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: readyService}},
	}
	for _, o := range objs {
		if err := bn.a.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	var pods []corev1.Pod
	err := poll.Until(ctx, 100*time.Millisecond, 5*time.Minute, func() error {
		list := &corev1.PodList{}
		if err := bn.a.Client.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels(sel)); err != nil {
			return err
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				pods = append(pods, p)
			}
		}
		if len(pods) != r {
			return fmt.Errorf("%d of %d pods running in cluster-a", len(pods), r)
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = bn.seen.waitFor(ctx, 5*time.Minute, func() error {
		if got := bn.seen.addresses(readyService); got != r || !bn.seen.imports[readyService] {
			return fmt.Errorf("cluster-b imports %d of %d endpoints", got, r)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	cpu := startCPU()
	for _, p := range pods {
		ip := p.Status.PodIP
		// The clock starts before SetPodReady's Get and status update, which stand in for the kubelet's.
		start := time.Now()
		if err := bn.a.SetPodReady(ctx, namespace, p.Name, true); err != nil {
			return err
		}
		var at time.Time
		err := bn.seen.waitFor(ctx, time.Minute, func() error {
			var ok bool
			if at, ok = bn.seen.readyAt[readyService][ip]; !ok {
				return fmt.Errorf("pod %s (%s) is not ready in cluster-b", p.Name, ip)
			}
			return nil
		})
		if err != nil {
			return err
		}
		res.readyLatency = append(res.readyLatency, at.Sub(start))
	}
	res.readyCPU = cpu.stop()
	log.Printf("readiness: p50 %s p99 %s", percentile(res.readyLatency, 50), percentile(res.readyLatency, 99))
	return nil
}

// restart waits until the clusterset is quiet, stops every controller, starts them all again and measures until
// each has reconciled every service and is idle, recording the writes they made meanwhile.
func (bn *bench) restart(ctx context.Context, res *results) error {
	if err := bn.waitIdle(ctx, 2*time.Minute); err != nil {
		return err
	}
	services := float64(bn.cfg.services + 1) // and the readiness service
	before, err := bn.writes()
	if err != nil {
		return err
	}
	for _, c := range bn.ctrls {
		c.Writes.Reset()
	}
	log.Print("restarting every controller")
	reconciles := map[string]float64{}
	for _, c := range bn.ctrls {
		if err := c.Stop(); err != nil {
			return fmt.Errorf("%s controller: %w", c.Name, err)
		}
		_, n, err := c.Idle()
		if err != nil {
			return err
		}
		reconciles[c.Name] = n
	}
	cpu := startCPU()
	start := time.Now()
	for _, c := range bn.ctrls {
		c.Start()
	}
	res.restartEach, res.restartReconciles = map[string]time.Duration{}, map[string]float64{}
	tick := time.NewTicker(20 * time.Millisecond) // the convergence time is read at this resolution
	defer tick.Stop()
	deadline := time.After(5 * time.Minute)
	for len(res.restartEach) < len(bn.ctrls) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("controllers not converged after 5 minutes: %v converged", res.restartEach)
		case <-tick.C:
		}
		for _, c := range bn.ctrls {
			if _, done := res.restartEach[c.Name]; done {
				continue
			}
			idle, n, err := c.Idle()
			if err != nil {
				return err
			}
			// Every service is a key of every controller, since each member imports them all: idle after that
			// many reconciles means the startup queue has drained.
			if idle && n-reconciles[c.Name] >= services {
				res.restartEach[c.Name] = time.Since(start)
				res.restartReconciles[c.Name] = n - reconciles[c.Name]
			}
		}
	}
	res.restartTook = time.Since(start)
	res.restartCPU = cpu.stop()
	after, err := bn.writes()
	if err != nil {
		return err
	}
	res.restartWrites = diff(after, before)
	for _, c := range bn.ctrls {
		for _, w := range c.Writes.List() {
			res.restartLogged = append(res.restartLogged, c.Name+": "+w)
		}
	}
	log.Printf("restart: converged in %s, %d writes", res.restartTook, len(res.restartLogged))
	return nil
}

// waitIdle waits until every controller is idle at three polls in a row, so that a short gap between two bursts
// of work does not count as quiet.
func (bn *bench) waitIdle(ctx context.Context, timeout time.Duration) error {
	quiet := 0
	return poll.Until(ctx, 100*time.Millisecond, timeout, func() error {
		for _, c := range bn.ctrls {
			idle, _, err := c.Idle()
			if err != nil {
				return err
			}
			if !idle {
				quiet = 0
				return fmt.Errorf("%s's controller is busy", c.Name)
			}
		}
		if quiet++; quiet < 3 {
			return errors.New("idle only just now")
		}
		return nil
	})
}

// writes sums every controller's writes by "METHOD resource", Lease renewals excepted.
func (bn *bench) writes() (map[string]float64, error) {
	total := map[string]float64{}
	for _, c := range bn.ctrls {
		w, err := c.WritesByResource()
		if err != nil {
			return nil, err
		}
		for k, v := range w {
			total[k] += v
		}
	}
	return total, nil
}

// timings reads every controller's Timings, by member name.
func (bn *bench) timings() (map[string]ctrlharness.Timings, error) {
	all := map[string]ctrlharness.Timings{}
	for _, c := range bn.ctrls {
		t, err := c.Timings()
		if err != nil {
			return nil, err
		}
		all[c.Name] = t
	}
	return all, nil
}

func diff(after, before map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if v -= before[k]; v != 0 {
			d[k] = v
		}
	}
	return d
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// paced calls fn(0..n-1) from at most workers goroutines, starting one call every 1/rate seconds, or as fast as
// the workers go when rate is 0. It stops starting calls at the first error and returns it.
func paced(ctx context.Context, n int, rate float64, workers int, fn func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	slots := make(chan struct{}, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		if rate > 0 {
			// Scheduled from the start rather than from the previous call, so that lateness does not accumulate.
			if d := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
				}
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := fn(i); err != nil {
				cancel(fmt.Errorf("item %d: %w", i, err))
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// watcher follows cluster-b's ServiceImports and imported EndpointSlices in the benchmark namespace and records,
// in its event handlers, when each service's import became complete and when each endpoint became ready.
type watcher struct {
	want int // ready endpoints that make an import complete

	mu       sync.Mutex
	imports  map[string]bool                                  // service → ServiceImport present
	slices   map[string]map[string]*discoveryv1.EndpointSlice // service → slice name → slice
	expected map[string]bool                                  // services whose completion is being timed
	complete map[string]time.Time                             // service → when its import was first complete
	readyAt  map[string]map[string]time.Time                  // service → address → when first seen ready
	changed  chan struct{}                                    // closed and replaced at every event
}

// watch starts the watcher on c; it returns once the watcher's caches have synced.
func watch(ctx context.Context, c *clusterset.Cluster, want int) (*watcher, error) {
	imported, err := labels.NewRequirement(mcsv1beta1.LabelServiceName, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	ca, err := cache.New(c.Config, cache.Options{
		Scheme:            clusterset.Scheme,
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&discoveryv1.EndpointSlice{}: {Label: labels.NewSelector().Add(*imported)},
		},
	})
	if err != nil {
		return nil, err
	}
	w := &watcher{
		want: want, imports: map[string]bool{}, slices: map[string]map[string]*discoveryv1.EndpointSlice{},
		expected: map[string]bool{}, complete: map[string]time.Time{}, readyAt: map[string]map[string]time.Time{},
		changed: make(chan struct{}),
	}
	for obj, h := range map[client.Object]func(obj any, deleted bool){
		&mcsv1beta1.ServiceImport{}:  w.onImport,
		&discoveryv1.EndpointSlice{}: w.onSlice,
	} {
		inf, err := ca.GetInformer(ctx, obj)
		if err != nil {
			return nil, err
		}
		_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { h(obj, false) },
			UpdateFunc: func(_, obj any) { h(obj, false) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				h(obj, true)
			},
		})
		if err != nil {
			return nil, err
		}
	}
	go func() {
		if err := ca.Start(ctx); err != nil {
			log.Print("cluster-b watch: ", err)
		}
	}()
	if !ca.WaitForCacheSync(ctx) {
		return nil, errors.New("cluster-b watch did not sync")
	}
	return w, nil
}

func (w *watcher) onImport(obj any, deleted bool) {
	now := time.Now()
	si, ok := obj.(*mcsv1beta1.ServiceImport)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.imports[si.Name] = !deleted
	w.update(si.Name, now)
}

func (w *watcher) onSlice(obj any, deleted bool) {
	now := time.Now()
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	svc := s.Labels[mcsv1beta1.LabelServiceName]
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.slices[svc] == nil {
		w.slices[svc] = map[string]*discoveryv1.EndpointSlice{}
	}
	if deleted {
		delete(w.slices[svc], s.Name)
	} else {
		w.slices[svc][s.Name] = s
	}
	w.update(svc, now)
}

// update records what the event at now changed for svc and wakes the waiters; w.mu is held.
func (w *watcher) update(svc string, now time.Time) {
	ready := w.ready(svc)
	since := w.readyAt[svc]
	if since == nil {
		since = map[string]time.Time{}
		w.readyAt[svc] = since
	}
	for addr := range ready {
		if _, ok := since[addr]; !ok {
			since[addr] = now
		}
	}
	for addr := range since {
		if !ready[addr] {
			delete(since, addr)
		}
	}
	if _, done := w.complete[svc]; !done && w.expected[svc] && w.imports[svc] && len(ready) >= w.want {
		w.complete[svc] = now
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// ready returns the addresses of svc's ready endpoints; w.mu is held.
func (w *watcher) ready(svc string) map[string]bool {
	ready := map[string]bool{}
	for _, s := range w.slices[svc] {
		for _, ep := range s.Endpoints {
			if ptr.Deref(ep.Conditions.Ready, false) {
				for _, a := range ep.Addresses {
					ready[a] = true
				}
			}
		}
	}
	return ready
}

// addresses counts svc's endpoint addresses, ready or not; w.mu is held.
func (w *watcher) addresses(svc string) int {
	seen := map[string]bool{}
	for _, s := range w.slices[svc] {
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				seen[a] = true
			}
		}
	}
	return len(seen)
}

// expect starts timing svc: only services expected before their ServiceExport exists count as complete, so that
// a completion is never recorded before its start.
func (w *watcher) expect(svc string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expected[svc] = true
}

// waitFor calls check with w.mu held at every change of what the watcher saw, until it returns nil; it fails with
// check's last error after timeout.
func (w *watcher) waitFor(ctx context.Context, timeout time.Duration, check func() error) error {
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		err := check()
		changed := w.changed
		w.mu.Unlock()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("not done after %v: %w", timeout, err)
		case <-changed:
		}
	}
}

// cpuUse is the CPU time the machine and this process (the controllers and the watch) used over a phase.
type cpuUse struct {
	wall                 time.Duration
	machineBusy, ownBusy float64 // cores' worth, averaged over wall
}

type cpuMeter struct {
	start               time.Time
	machine, total, own float64
}

func startCPU() cpuMeter {
	m := cpuMeter{start: time.Now()}
	m.machine, m.total = machineCPU()
	m.own = ownCPU()
	return m
}

func (m cpuMeter) stop() cpuUse {
	busy, total := machineCPU()
	u := cpuUse{wall: time.Since(m.start)}
	if total > m.total {
		u.machineBusy = (busy - m.machine) / (total - m.total) * float64(runtime.NumCPU())
	}
	u.ownBusy = (ownCPU() - m.own) / u.wall.Seconds()
	return u
}

// machineCPU reads the busy and total jiffies of all cores from /proc/stat; zeros where it is unreadable.
func machineCPU() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

// ownCPU reads this process's user and system CPU seconds from /proc/self/stat; zero where it is unreadable.
func ownCPU() float64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// Fields after the command, which is parenthesised and may contain spaces: utime and stime are the 12th and
	// 13th, in clock ticks of (on Linux, always) 100 Hz.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// percentile returns the nearest-rank p-th percentile.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 0, 64)
}

func (r results) report() string {
	c := r.cfg
	var b strings.Builder
	fmt.Fprintf(&b, "# Sync benchmark: mcs-controller propagation on a local clusterset\n\n")
	fmt.Fprintf(&b, "Generated by `make bench-sync` on %s, on a machine with %d cores shared by every process below; "+
		"other work kept %.2f cores busy just before the benchmark started.\n\n",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), r.before.machineBusy)
	fmt.Fprintf(&b, "- Clusterset: 3 members (cluster-a, -b, -c: etcd, kube-apiserver, kube-controller-manager each) and a broker "+
		"(etcd, kube-apiserver), all local; one mcs-controller per member, in the benchmark's process "+
		"(test/ctrlharness), %s workers, client limits %g QPS / %d burst per API server (cmd/controller's defaults).\n",
		workers(c.workers), c.qps, c.burst)
	fmt.Fprintf(&b, "- Export: %d selector-less Services in cluster-a, each with one EndpointSlice of %d ready endpoints that the "+
		"benchmark writes itself (labelled `kubernetes.io/service-name` and `endpointslice.kubernetes.io/managed-by: %s`, "+
		"so the kcm endpointslice controller leaves them alone), which bounds the API server load to the controllers' own; "+
		"then their ServiceExports, created at %g/s (achieved %.1f/s). Latency: from just before the ServiceExport Create "+
		"in cluster-a to the moment an informer in cluster-b has seen both the ServiceImport and imported EndpointSlices "+
		"(`multicluster.kubernetes.io/service-name=<svc>`) with all %d endpoints ready.\n",
		c.services, c.endpoints, sourceManagedBy, c.rate, r.exportRate, c.endpoints)
	fmt.Fprintf(&b, "- Readiness: an exported Deployment of %d pods in cluster-a, started Running but not ready; once cluster-b "+
		"imports all of them, they are made ready one at a time (the pod's Ready condition, as the kubelet sets it). "+
		"Latency: from just before the pod status update to the moment cluster-b's informer sees that pod's address "+
		"ready in an imported slice; the path includes kube-controller-manager's endpointslice controller in cluster-a.\n",
		c.replicas)
	fmt.Fprintf(&b, "- Restart: with everything converged and idle, all three controllers are stopped and started again. "+
		"Converged: each controller has reconciled at least once per service (%d) and its workqueue is empty with no "+
		"reconcile in progress, from controller-runtime's metrics, polled every 20 ms.\n\n", c.services+1)

	fmt.Fprintf(&b, "| propagation | n | p50 ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|\n")
	row := func(name string, ds []time.Duration) {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", name, len(ds), ms(percentile(ds, 50)),
			ms(percentile(ds, 90)), ms(percentile(ds, 99)), ms(percentile(ds, 100)))
	}
	row("ServiceExport created in A → ServiceImport and all endpoints in B", r.exportLatency)
	row("pod ready in A → its endpoint ready in B", r.readyLatency)
	row("(ServiceExport Create call in A, client-side, during the export phase)", r.exportCreate)
	row("(ConfigMap Create call in A, client-side, on the idle clusterset)", r.idleCreate)

	fmt.Fprintf(&b, "\n| convergence | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| export: first ServiceExport created → last service complete in B | %.1f s for %d services (%.1f services/s) |\n",
		r.exportSpan.Seconds(), c.services, r.throughput())
	tenth := max(len(r.exportLatency)/10, 1)
	fmt.Fprintf(&b, "| export: median latency of the first and of the last tenth of services created | %s ms, %s ms |\n",
		ms(percentile(r.exportLatency[:tenth], 50)), ms(percentile(r.exportLatency[len(r.exportLatency)-tenth:], 50)))
	writes := sum(r.exportWrites)
	fmt.Fprintf(&b, "| export: controller writes to all API servers, Lease renewals excepted | %.0f (%.1f per service, %.0f/s)%s |\n",
		writes, writes/float64(c.services), writes/r.exportSpan.Seconds(), byResource(r.exportWrites))
	var total ctrlharness.Timings
	busiest := ""
	for _, name := range slices.Sorted(maps.Keys(r.exportTimings)) {
		t := r.exportTimings[name]
		total.ReconcileSeconds += t.ReconcileSeconds
		total.QueueSeconds += t.QueueSeconds
		total.Dequeued += t.Dequeued
		if busiest == "" || t.ReconcileSeconds > r.exportTimings[busiest].ReconcileSeconds {
			busiest = name
		}
		fmt.Fprintf(&b, "| export, %s's controller: reconciles; mean reconcile time; mean wait in the workqueue; "+
			"workers busy on average | %.0f; %.0f ms; %.0f ms; %.1f of %.0f |\n", name, t.Reconciles,
			1000*t.ReconcileSeconds/t.Reconciles, 1000*t.QueueSeconds/t.Dequeued, r.busyWorkers(t), t.Workers)
	}
	var each []string
	for _, name := range slices.Sorted(maps.Keys(r.restartEach)) {
		each = append(each, fmt.Sprintf("%s %.2f s after %.0f reconciles", name, r.restartEach[name].Seconds(), r.restartReconciles[name]))
	}
	fmt.Fprintf(&b, "| restart of 3 controllers → all converged | **%.2f s** (%s) |\n", r.restartTook.Seconds(), strings.Join(each, "; "))
	fmt.Fprintf(&b, "| writes made by the restart, Lease renewals excepted | **%d**%s |\n", len(r.restartLogged), byResource(r.restartWrites))

	fmt.Fprintf(&b, "\n| CPU, in cores' worth (of %d) | machine | benchmark process (controllers, watch) |\n|---|---:|---:|\n", runtime.NumCPU())
	for _, p := range []struct {
		name string
		u    cpuUse
	}{{"export phase", r.exportCPU}, {"readiness phase", r.readyCPU}, {"restart", r.restartCPU}} {
		fmt.Fprintf(&b, "| %s (%.1f s) | %.2f | %.2f |\n", p.name, p.u.wall.Seconds(), p.u.machineBusy, p.u.ownBusy)
	}
	if len(r.restartLogged) > 0 {
		fmt.Fprintf(&b, "\nRestart writes:\n\n")
		for _, w := range r.restartLogged {
			fmt.Fprintf(&b, "- `%s`\n", w)
		}
	}
	var over []string
	if p := percentile(r.exportLatency, 99); p > time.Second {
		over = append(over, fmt.Sprintf("export p99 %s ms", ms(p)))
	}
	if p := percentile(r.readyLatency, 99); p > time.Second {
		over = append(over, fmt.Sprintf("readiness p99 %s ms", ms(p)))
	}
	if r.restartTook > 30*time.Second {
		over = append(over, fmt.Sprintf("restart %.1f s", r.restartTook.Seconds()))
	}
	if len(over) > 0 {
		fmt.Fprintf(&b, "\n## What bounds the figures over target\n\n")
		fmt.Fprintf(&b, "Over target (p99 1 s, restart 30 s): %s. Measured in this run:\n\n", strings.Join(over, ", "))
		fmt.Fprintf(&b, "- Arrival and completion: ServiceExports were created at %.1f/s; cluster-b completed %.1f services/s "+
			"over the whole phase.", r.exportRate, r.throughput())
		if r.throughput() < 0.9*r.exportRate {
			fmt.Fprintf(&b, " Work arrived faster than it completed, so a backlog built up: the median latency grew from %s ms "+
				"for the first tenth of services to %s ms for the last, and keys waited %.0f ms on average in the workqueues.",
				ms(percentile(r.exportLatency[:tenth], 50)), ms(percentile(r.exportLatency[len(r.exportLatency)-tenth:], 50)),
				1000*total.QueueSeconds/total.Dequeued)
		}
		if t := r.exportTimings[busiest]; r.busyWorkers(t) >= 0.9*t.Workers {
			fmt.Fprintf(&b, "\n- Workers: %s's controller kept %.1f of its %.0f "+
				"workers busy on average, each reconcile taking %.0f ms, and its keys waited %.0f ms in its workqueue: its "+
				"workers were saturated.", busiest, r.busyWorkers(t), t.Workers, 1000*t.ReconcileSeconds/t.Reconciles,
				1000*t.QueueSeconds/t.Dequeued)
		}
		fmt.Fprintf(&b, "\n- Writes: every service costs %.1f controller writes across the four API servers, which absorbed "+
			"%.0f writes/s from the controllers, %.1f services/s' worth; a ServiceExport Create took p50 %s ms / p99 %s ms "+
			"against p50 %s ms on the idle clusterset.\n", writes/float64(c.services), writes/r.exportSpan.Seconds(),
			r.throughput(), ms(percentile(r.exportCreate, 50)),
			ms(percentile(r.exportCreate, 99)), ms(percentile(r.idleCreate, 50)))
		fmt.Fprintf(&b, "- CPU: the machine was %.2f of %d cores busy during the export phase, the controllers' process %.2f "+
			"of them; the rest went to the four kube-apiservers, their etcds, the kube-controller-managers and anything "+
			"else on the machine.", r.exportCPU.machineBusy, runtime.NumCPU(), r.exportCPU.ownBusy)
		if r.exportCPU.ownBusy < r.exportCPU.machineBusy/4 {
			b.WriteString(" A reconcile is a few API calls in sequence: with the controllers this light, its time is " +
				"the API servers' latency, not the controller's own work.")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// busyWorkers is how many of a controller's workers were reconciling on average over the export phase.
func (r results) busyWorkers(t ctrlharness.Timings) float64 {
	return t.ReconcileSeconds / r.exportSpan.Seconds()
}

// throughput is how many services per second completed in cluster-b over the export phase.
func (r results) throughput() float64 { return float64(r.cfg.services) / r.exportSpan.Seconds() }

func workers(n int) string {
	if n == 0 {
		return "the controller's default number of"
	}
	return strconv.Itoa(n)
}

// byResource lists writes as " (METHOD resource n, ...)", empty when there are none.
func byResource(w map[string]float64) string {
	if len(w) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(w)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, w[k]))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
