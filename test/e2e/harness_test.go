package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"vksfleet.dev/fleet/controller"
	"vksfleet.dev/fleet/controller/names"
	"vksfleet.dev/fleet/test/clusterset"
)

// leaseGrace is short so that the lease test withdraws endpoints within seconds, yet longer than a restart of
// every controller, so that restarts change nothing.
const leaseGrace = 6 * time.Second

// Clusters ids: cluster-b has a dotted id, as KEP-2149 allows.
var clusterIDs = map[string]string{"cluster-b": "b.east"}

// Members of the clusterset proper, which use the broker API server, and of a second clusterset in which
// member-broker is both a member and the broker.
var (
	mainMembers = []string{"cluster-a", "cluster-b", "cluster-c"}
	pairMembers = []string{"member-broker", "member-other"}
	cs          *clusterset.ClusterSet
	members     map[string]*member // the clusterset proper
	all         map[string]*member // every member of both clustersets
)

// member is one member cluster and its in-process controller.
type member struct {
	*clusterset.Cluster
	broker *rest.Config // the broker this member's controller uses
	writes writeCounter
	// partitioned cuts the controller off from the broker: requests fail and open responses stop.
	partitioned atomic.Bool

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
	cs, err = clusterset.Start(ctx, clusterset.Options{Members: append(mainMembers, pairMembers...), ClusterIDs: clusterIDs})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the clusterset:", err)
		return 1
	}
	defer func() {
		if err := cs.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the clusterset:", err)
		}
	}()
	members, all = map[string]*member{}, map[string]*member{}
	for _, name := range mainMembers {
		all[name] = &member{Cluster: cs.Member(name), broker: cs.Broker.Config}
		members[name] = all[name]
	}
	for _, name := range pairMembers {
		all[name] = &member{Cluster: cs.Member(name), broker: cs.Member(pairMembers[0]).Config}
	}
	for _, mb := range all {
		mb.start()
	}
	defer func() {
		for _, mb := range all {
			mb.stop()
		}
	}()
	if err := waitForLeases(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// waitForLeases waits until every controller holds its broker Lease, which it takes once its broker cache synced.
func waitForLeases(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for _, m := range all {
		key := client.ObjectKey{Namespace: names.BrokerNamespace(m.ID), Name: names.LeaseName}
		for {
			err := m.brokerClient().Get(ctx, key, &coordinationv1.Lease{})
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s's controller holds no broker Lease: %w", m.Name, err)
			case <-tick.C:
			}
		}
	}
	return nil
}

// brokerClient reaches the member's broker.
func (m *member) brokerClient() client.Client {
	if m.broker == cs.Broker.Config {
		return cs.Broker.Client
	}
	return all[pairMembers[0]].Client
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
		Local: m.writes.wrap(m.Config, nil), Broker: m.writes.wrap(m.broker, &m.partitioned),
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

// writeCounter records the write requests a controller makes to any API server, except Lease renewals: those are
// the heartbeat, periodic by design.
type writeCounter struct {
	mu  sync.Mutex
	log []string
}

// wrap returns cfg with its requests counted and, while *partitioned (if given) is true, failing.
func (w *writeCounter) wrap(cfg *rest.Config, partitioned *atomic.Bool) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cut := func() bool { return partitioned != nil && partitioned.Load() }
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if cut() {
				return nil, errPartitioned
			}
			if req.Method != http.MethodGet && !strings.Contains(req.URL.Path, "/leases") {
				w.mu.Lock()
				w.log = append(w.log, req.Method+" "+req.URL.Path)
				w.mu.Unlock()
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

var errPartitioned = errors.New("e2e: partitioned from the broker")

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

// reset forgets and returns the writes recorded so far.
func (w *writeCounter) reset() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	log := w.log
	w.log = nil
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
