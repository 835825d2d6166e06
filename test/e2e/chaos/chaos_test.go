// Package chaos runs the clusterset under faults injected at random while its users keep using it, and counts
// what they lose. Two members, each with one node, on a highly available broker (3 etcd members, 2 API servers,
// HAProxy); each member runs its 2 controller and 2 CoreDNS replicas in pods, installed from the manifests.
//
// What runs throughout:
//   - stable services: web-a exported by cluster-a alone, web-b by cluster-b alone; nothing changes them;
//   - a request loop per member, from a pod, to the other member's stable service by its clusterset name (each
//     request resolves the name and goes through kube-proxy), every 100 ms;
//   - a DNS loop per member, from a pod, asking its DNS Service (kube-proxy picks a CoreDNS replica) for both
//     stable names in turn, one question every 100 ms, without retrying;
//   - export churn: each member exports and withdraws Services churn-<member>-<n> at random, every 2 s;
//   - endpoint churn: each member rewrites the endpoints of its exported Service ep-<member> every 2 s.
//
// Every CHAOS_EVERY (default 5 s) for CHAOS_DURATION (default 2 minutes; `make chaos`: 10 minutes), one fault
// of a kind drawn at random (faults.go), with a seed that is printed and replays the draw (CHAOS_SEED). A fault
// holds its target until it is undone, and a target takes one fault at a time: the broker's etcd and API servers
// are replicated to survive one member's loss, not two. Then the faults and the churn stop, and the clusterset
// must converge: every member imports exactly what is exported, with the exporting clusters in each import's
// status, and both loops succeed again.
//
// What is asserted, in both forms: no stable service's import ever disappears; no stable name answers NXDOMAIN or
// SERVFAIL; no request or lookup fails except those a CoreDNS fault of the same member explains (a lookup sent to
// a CoreDNS replica as it is killed, or while it is frozen and until its readiness probe takes it out of its
// Service; see tolerated; in the standalone DNS mode, the fleet's, such a lookup comes back from the cluster's DNS
// as SERVFAIL); the clusterset converges within convergeBound. The figures (faults by kind,
// losses, longest gap, "Reconciler error" lines by cause, time to converge, writes per fault) are logged, and
// with CHAOS_RESULTS written there as Markdown (`make chaos`).
package chaos

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

const (
	ns = "chaos"
	// loopEvery is both loops' interval.
	loopEvery = 100 * time.Millisecond
	// churnEvery is how often each member changes an export and an endpoint set.
	churnEvery = 2 * time.Second
	// convergeBound is how long the clusterset may take to converge once the last fault is undone: a controller
	// that lost its leader Lease waits out its 15 s, and a backed-off reconcile retries within a minute.
	convergeBound = 3 * time.Minute
	timeout       = 2 * time.Minute
)

// config is a run's parameters, from the environment.
type config struct {
	duration, every time.Duration
	seed            uint64
	results         string
}

func readConfig(t *testing.T) config {
	c := config{duration: 2 * time.Minute, every: 5 * time.Second, seed: uint64(time.Now().UnixNano()), results: os.Getenv("CHAOS_RESULTS")}
	for name, d := range map[string]*time.Duration{"CHAOS_DURATION": &c.duration, "CHAOS_EVERY": &c.every} {
		if v := os.Getenv(name); v != "" {
			var err error
			if *d, err = time.ParseDuration(v); err != nil || *d <= 0 {
				t.Fatalf("%s=%q: want a positive duration", name, v)
			}
		}
	}
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		var err error
		if c.seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED=%q: want a number", v)
		}
	}
	return c
}

func TestChaos(t *testing.T) {
	if err := dataplane.CheckHost(); err != nil {
		t.Skip(err)
	}
	ctrl.SetLogger(logr.Discard())
	cfg := readConfig(t)
	t.Logf("chaos: %s, a fault every %s, seed %d (CHAOS_SEED=%d replays the draw)", cfg.duration, cfg.every, cfg.seed, cfg.seed)
	start := time.Now()
	f, _ := framework.StartTest(t, 2, 1, func(o *framework.Options) { o.ClusterSet.HABroker = true })
	t.Logf("fleet of 2 members x 1 node on an HA broker up in %s", time.Since(start).Round(100*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	r := newRun(t, f, cfg)
	r.setUp(ctx)
	w := r.watch(ctx)
	churnCtx, stopChurn := context.WithCancel(ctx)
	churned := r.churn(churnCtx)
	chaosStart := time.Now()
	r.inject(ctx)
	lastFault := time.Now()
	stopChurn()
	churned.Wait()
	converged := r.converge(ctx, lastFault)
	w.stop()
	r.report(w, chaosStart, lastFault, converged)
}

// newRun prepares a run on the fleet.
func newRun(t *testing.T, f *framework.Fleet, cfg config) *run {
	return &run{t: t, f: f, cfg: cfg, a: f.Member("cluster-a"), b: f.Member("cluster-b"), loops: map[string]*workload.Loop{}}
}

// setUp creates the namespace, the stable services and their exports, the churned services, and the loops, and
// waits until both loops succeed.
func (r *run) setUp(ctx context.Context) {
	t := r.t
	for _, m := range r.f.Members {
		if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		if err := workload.Deploy(ctx, m.Client, ns, stableName(m), m.Name, 1, false); err != nil {
			t.Fatal(err)
		}
		if err := r.export(ctx, m, stableName(m)); err != nil {
			t.Fatal(err)
		}
		if err := r.createChurned(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range r.f.Members {
		if err := m.WaitAvailable(ctx, ns, stableName(m), 1, timeout); err != nil {
			t.Fatal(err)
		}
	}
	r.waitImported(ctx)
	for _, m := range r.f.Members {
		other := r.other(m)
		req := workload.LoopPod("requests", ns, fmt.Sprintf("%s.%s.svc.clusterset.local:%d", stableName(other), ns, workload.EchoPort), loopEvery, 2*time.Hour)
		names := []string{stableFQDN(r.a), stableFQDN(r.b)}
		lookups := workload.DNSLoopPod("lookups", ns, netip.AddrPortFrom(m.DNSServiceIP, 53).String(), names, loopEvery, 2*time.Hour)
		for _, p := range []*corev1.Pod{req, lookups} {
			l, err := workload.StartLoop(ctx, m.Kube, p, timeout)
			if err != nil {
				t.Fatal(err)
			}
			r.loops[m.Name+"/"+p.Name] = l
		}
	}
	r.waitLoopsSucceed(ctx, time.Now())
}

// stableName is the stable service the member exports.
func stableName(m *framework.Member) string { return "web-" + m.Name[len(m.Name)-1:] }

// stableFQDN is its clusterset name, absolute.
func stableFQDN(m *framework.Member) string {
	return fmt.Sprintf("%s.%s.svc.clusterset.local.", stableName(m), ns)
}

// other is the other member.
func (r *run) other(m *framework.Member) *framework.Member {
	if m == r.a {
		return r.b
	}
	return r.a
}
