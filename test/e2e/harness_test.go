package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"vksfleet.dev/fleet/controller"
	"vksfleet.dev/fleet/test/clusterset"
)

// leaseGrace is short so that the lease test withdraws endpoints within seconds, yet longer than a restart of
// every controller, so that restarts change nothing.
const leaseGrace = 6 * time.Second

// Clusters ids: cluster-b has a dotted id, as KEP-2149 allows.
var clusterIDs = map[string]string{"cluster-b": "b.east"}

var (
	cs      *clusterset.ClusterSet
	members map[string]*member
)

// member is one member cluster and its in-process controller.
type member struct {
	*clusterset.Cluster
	writes writeCounter

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	var err error
	cs, err = clusterset.Start(ctx, clusterset.Options{ClusterIDs: clusterIDs})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the clusterset:", err)
		return 1
	}
	defer func() {
		if err := cs.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the clusterset:", err)
		}
	}()
	members = map[string]*member{}
	for _, c := range cs.Members {
		mb := &member{Cluster: c}
		members[c.Name] = mb
		mb.start()
	}
	defer func() {
		for _, mb := range members {
			mb.stop()
		}
	}()
	return m.Run()
}

// start runs the member's controller in the background.
func (m *member) start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel, m.done = cancel, make(chan error, 1)
	log := logr.Discard()
	if os.Getenv("E2E_LOG") != "" {
		log = funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, m.Name, prefix, args) }, funcr.Options{})
	}
	opts := controller.Options{
		Local: m.writes.wrap(m.Config), Broker: m.writes.wrap(cs.Broker.Config),
		LeaseGrace: leaseGrace, Logger: &log,
	}
	go func() { m.done <- controller.Run(ctx, opts) }()
}

// stop stops the member's controller and waits for it to return.
func (m *member) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cancel == nil {
		return
	}
	m.cancel()
	if err := <-m.done; err != nil {
		fmt.Fprintln(os.Stderr, m.Name, "controller:", err)
	}
	m.cancel = nil
}

// writeCounter counts the write requests a controller makes to any API server, except Lease renewals: those are
// the heartbeat, periodic by design.
type writeCounter struct {
	n atomic.Int64
	mu   sync.Mutex
	log  []string
}

func (w *writeCounter) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet && !strings.Contains(req.URL.Path, "/leases") {
				w.n.Add(1)
				w.mu.Lock()
				w.log = append(w.log, req.Method+" "+req.URL.Path)
				w.mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	}
	return cfg
}

// reset zeroes the count and returns the writes counted so far.
func (w *writeCounter) reset() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	log := w.log
	w.log = nil
	w.n.Store(0)
	return log
}

func (w *writeCounter) writes() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.log...)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// idle says whether the member's controller has nothing queued or in progress, and how many reconciles it has
// made since the process started, from its controller-runtime metrics.
func (m *member) idle() (bool, float64, error) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return false, 0, err
	}
	name := controller.ControllerName(m.ID)
	var reconciles, depth, active float64
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range metric.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["controller"] != name {
				continue
			}
			switch f.GetName() {
			case "controller_runtime_reconcile_total":
				reconciles += metric.GetCounter().GetValue()
			case "workqueue_depth":
				depth += metric.GetGauge().GetValue()
			case "controller_runtime_active_workers":
				active += metric.GetGauge().GetValue()
			}
		}
	}
	return depth == 0 && active == 0, reconciles, nil
}

// eventually polls check every 100 ms until it returns nil, failing the test with its last error at the deadline.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("%s: not true after %v: %v", what, timeout, err)
		case <-tick.C:
		}
	}
}
