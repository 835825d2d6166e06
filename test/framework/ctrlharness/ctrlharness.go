// Package ctrlharness runs mcs-controllers against a local clusterset, for tests and benchmarks. It is where every
// controller outside of pods starts (launch.go): in this process (InProcess) or as a process of the controller
// binary (StartProcess), which the fleet, the suites and the benchmarks call. On top of that, Controller is one
// restartable controller per member, in this process or as a process of its own, with a record of the writes it
// makes, an idle check from controller-runtime's metrics, a wait for its broker Lease, and a switch that cuts it
// off from the broker.
package ctrlharness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/controller"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/proc"
)

// Options configure every run of a Controller.
type Options struct {
	// LeaseGrace is controller.Options.LeaseGrace; zero is the controller's default.
	LeaseGrace time.Duration
	// Workers is controller.Options.Workers; zero is the controller's default.
	Workers int
	// QPS and Burst, when positive, replace the client rate limits of the clusterset's configurations, which are
	// set high for test clients, so that a benchmark can run the controller with the limits it is deployed with.
	QPS   float32
	Burst int
	// Logger is the controller's logger; nil discards its logs.
	Logger *logr.Logger
	// Binary, when set, is an mcs-controller binary (cmd/controller) that Start runs as a child process instead
	// of running the controller in this process, so that its CPU time and memory are its own (Usage). Idle,
	// Timings and WritesByResource then read the process's metrics endpoint; Partition and the Writes log need
	// the controller in this process and do nothing.
	Binary string
	// Log receives the process's output with Binary; nil discards it.
	Log io.Writer
}

// Controller is the mcs-controller of one member cluster, run in this process. It embeds the member, so that
// callers reach the member's clients and id through it.
type Controller struct {
	*clusterset.Cluster
	// Broker is the cluster this controller uses as its broker: the clusterset's broker, or a member.
	Broker *clusterset.Cluster
	// Writes records the controller's writes to any API server, Lease renewals excepted.
	Writes Writes

	opts        Options
	partitioned atomic.Bool
	// failCreates is how many of the next Lease creations on the broker fail, as on a broker still starting.
	failCreates atomic.Int32

	mu  sync.Mutex
	run *Run // in this process, while it runs
	// With Binary: the running process and where it serves its metrics, the error that kept the last one from
	// starting, and the last metrics of every earlier process, whose totals the next ones carry on.
	proc       *proc.Process
	metricsURL string
	startErr   error
	carried    [][]*dto.MetricFamily
}

// New returns the controller of member, using broker as its broker; it does not start it.
func New(member, broker *clusterset.Cluster, opts Options) *Controller {
	return &Controller{Cluster: member, Broker: broker, opts: opts}
}

// Start runs the controller in the background; it does nothing if the controller is running. With Binary, it
// returns once the process serves its metrics; a process that does not is stopped, and Stop returns why.
func (c *Controller) Start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run != nil || c.proc != nil {
		return
	}
	if c.opts.Binary != "" {
		c.proc, c.metricsURL, c.startErr = c.startProcess()
		return
	}
	log := logr.Discard()
	if c.opts.Logger != nil {
		log = *c.opts.Logger
	}
	c.run = InProcess(controller.Options{
		Local: c.wrap(c.Config, false), Broker: c.wrap(c.Broker.Config, true),
		LeaseGrace: c.opts.LeaseGrace, Workers: c.opts.Workers, Logger: &log,
	})
}

// Stop stops the controller and waits for it to return. The error is the one controller.Run returned, which may
// have happened long before, at start; stopping a stopped controller returns nil.
func (c *Controller) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opts.Binary != "" {
		return c.stopProcess()
	}
	if c.run == nil {
		return nil
	}
	err := c.run.Stop()
	c.run = nil
	return err
}

// Partition cuts the controller off from its broker while cut is true: its requests fail and its open watches
// end, as when the network between the member and the broker fails. The member's own API server stays reachable.
func (c *Controller) Partition(cut bool) { c.partitioned.Store(cut) }

// FailLeaseCreates makes the controller's next n Lease creations on the broker fail before they reach it, as
// they do on a broker that was just restarted and does not answer yet.
func (c *Controller) FailLeaseCreates(n int32) { c.failCreates.Store(n) }

// takeLeaseFailure says whether this Lease creation is one to fail, counting it.
func (c *Controller) takeLeaseFailure() bool {
	for {
		n := c.failCreates.Load()
		if n <= 0 {
			return false
		}
		if c.failCreates.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// WaitForBrokerLease waits until the controller holds its broker Lease, which it takes once its broker cache
// synced, or until ctx ends.
func (c *Controller) WaitForBrokerLease(ctx context.Context) error {
	key := client.ObjectKey{Namespace: names.BrokerNamespace(c.ID), Name: names.LeaseName}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.Broker.Records.Get(ctx, key, &coordinationv1.Lease{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s's controller holds no broker Lease: %w", c.Name, err)
		case <-tick.C:
		}
	}
}

// Idle says whether the controller has nothing queued or in progress, and how many reconciles it has made since
// the process started, from its controller-runtime metrics. The count survives restarts: callers compare counts to
// tell that a restarted controller has reconciled.
func (c *Controller) Idle() (idle bool, reconciles float64, err error) {
	var depth, active float64
	err = c.gather(func(family string, labels map[string]string, m *dto.Metric) {
		if labels["controller"] != controller.ControllerName(c.ID) {
			return
		}
		switch family {
		case "controller_runtime_reconcile_total":
			reconciles += m.GetCounter().GetValue()
		case "workqueue_depth":
			depth += m.GetGauge().GetValue()
		case "controller_runtime_active_workers":
			active += m.GetGauge().GetValue()
		}
	})
	return depth == 0 && active == 0, reconciles, err
}

// Timings are totals from a controller's controller-runtime metrics since the process started; like Idle's count
// they survive restarts, so callers subtract an earlier reading.
type Timings struct {
	// Reconciles is how many reconciles ended, ReconcileSeconds how long they took altogether.
	Reconciles, ReconcileSeconds float64
	// Dequeued is how many keys workers took from the workqueue, QueueSeconds how long they had waited there.
	Dequeued, QueueSeconds float64
	// Workers is how many reconciles the controller runs at once: a gauge, not a total.
	Workers float64
}

// Timings reads the controller's Timings, which tell a controller that is slow to reconcile from one whose keys
// wait for a worker.
func (c *Controller) Timings() (Timings, error) {
	var t Timings
	err := c.gather(func(family string, labels map[string]string, m *dto.Metric) {
		if labels["controller"] != controller.ControllerName(c.ID) {
			return
		}
		h := m.GetHistogram()
		switch family {
		case "controller_runtime_reconcile_time_seconds":
			t.Reconciles += float64(h.GetSampleCount())
			t.ReconcileSeconds += h.GetSampleSum()
		case "workqueue_queue_duration_seconds":
			t.Dequeued += float64(h.GetSampleCount())
			t.QueueSeconds += h.GetSampleSum()
		case "controller_runtime_max_concurrent_reconciles":
			t.Workers = m.GetGauge().GetValue()
		}
	})
	return t, err
}

// WritesByResource returns the controller's write requests since the process started, Lease renewals excepted,
// keyed "METHOD resource", from the controller's own mcs_controller_api_writes_total. Like Idle's count it
// survives restarts: callers subtract an earlier reading.
func (c *Controller) WritesByResource() (map[string]float64, error) {
	writes := map[string]float64{}
	err := c.gather(func(family string, labels map[string]string, m *dto.Metric) {
		if family == "mcs_controller_api_writes_total" && labels["cluster_id"] == c.ID && labels["resource"] != "leases" && labels["resource"] != "memberleases" {
			writes[labels["verb"]+" "+labels["resource"]] += m.GetCounter().GetValue()
		}
	})
	return writes, err
}

// gather calls fn for every sample of the controller's metrics: controller-runtime's registry, where the
// controller registers them in this process, or with Binary the running process's metrics and the totals
// (counters and histograms) of the earlier ones.
func (c *Controller) gather(fn func(family string, labels map[string]string, m *dto.Metric)) error {
	families, err := c.families()
	if err != nil {
		return err
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			fn(f.GetName(), labels, m)
		}
	}
	return nil
}

// wrap returns cfg with the controller's rate limits, its writes recorded and, for the broker, the partition.
func (c *Controller) wrap(cfg *rest.Config, toBroker bool) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if c.opts.QPS > 0 {
		cfg.QPS = c.opts.QPS
	}
	if c.opts.Burst > 0 {
		cfg.Burst = c.opts.Burst
	}
	cut := func() bool { return toBroker && c.partitioned.Load() }
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if cut() {
				return nil, errPartitioned
			}
			if toBroker && req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/memberleases") && c.takeLeaseFailure() {
				return nil, errLeaseCreate
			}
			// Access reviews (the broker scope's poll) are POSTs that store nothing. Leases of either layout are
			// renewals.
			if req.Method != http.MethodGet && !strings.Contains(req.URL.Path, "/leases") && !strings.Contains(req.URL.Path, "/memberleases") &&
				!strings.HasSuffix(req.URL.Path, "reviews") {
				c.Writes.add(req.Method + " " + req.URL.Path)
			}
			resp, err := rt.RoundTrip(req)
			if resp != nil {
				resp.Body = &cutBody{ReadCloser: resp.Body, cut: cut}
			}
			return resp, err
		})
	}
	return cfg
}

var (
	errPartitioned = errors.New("ctrlharness: partitioned from the broker")
	errLeaseCreate = errors.New("ctrlharness: Lease creation failed on purpose")
)

// cutBody fails reads while the connection is cut, which ends open watches.
type cutBody struct {
	io.ReadCloser
	cut func() bool
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.cut() {
		return 0, errPartitioned
	}
	return b.ReadCloser.Read(p)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Writes records write requests as "METHOD path", except Lease renewals and access reviews: those are the
// heartbeat and the broker scope's poll, periodic by design, while any other write of an idle or restarted controller is a sign of non-idempotent reconciles.
type Writes struct {
	mu  sync.Mutex
	log []string
}

func (w *Writes) add(write string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log = append(w.log, write)
}

// Reset forgets and returns the writes recorded so far.
func (w *Writes) Reset() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	log := w.log
	w.log = nil
	return log
}

// List returns the writes recorded so far.
func (w *Writes) List() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.log...)
}
