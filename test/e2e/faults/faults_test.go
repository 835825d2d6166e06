// Package faults proves with traffic between pods of different members that each fault of the local clusterset
// (framework.Fault, which `make fault` causes in the fleet of `make up`) does what it says. A serve pod in cluster-b is
// reached at its pod address, with no Service, DNS or controller on the way, by a request loop in a pod of
// cluster-a and one in cluster-c, one TCP request every 50 ms each; every phase counts their answers and failures:
//
//   - cut-data-plane cluster-b from cluster-a: a's requests fail, c's are answered; heal: a's are answered again;
//   - cut-data-plane cluster-b from every member: both fail; heal;
//   - stop-control-plane cluster-b: b's API server does not answer and its broker Lease is not renewed, while a's
//     requests are all answered; start-control-plane: the API server answers and the Lease is renewed again;
//     b's nodes and serve pod stay Ready throughout;
//   - lossy cluster-b: the share of UDP echoes lost from a matches the loss set on both ways;
//   - faults left in place when the fleet stops leave nothing behind.
package faults

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/nodeimages"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

const (
	ns      = "faults"
	timeout = 2 * time.Minute
	// leaseGrace is what framework.StartTest gives the controllers: they renew their Lease every third of it.
	leaseGrace = 5 * time.Second
)

// env is the running fleet and the two request loops towards cluster-b's serve pod.
type env struct {
	f       *framework.Fleet
	a, b, c *framework.Member
	kubectl string
	target  string // the serve pod's address and TCP/UDP echo port
	la, lc  *workload.Loop
}

func TestFaults(t *testing.T) {
	if err := dataplane.CheckHost(); err != nil {
		t.Skip(err)
	}
	// envtest logs through controller-runtime, which otherwise complains that no logger was set.
	ctrl.SetLogger(logr.Discard())
	start := time.Now()
	f, _ := framework.StartTest(t, 3, 2)
	t.Logf("fleet with 3 members x 2 nodes up in %s", time.Since(start).Round(100*time.Millisecond))
	assets, err := clusterset.AssetsDir("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := &env{f: f, a: f.Member("cluster-a"), b: f.Member("cluster-b"), c: f.Member("cluster-c"), kubectl: filepath.Join(assets, "kubectl")}
	for _, m := range f.Members {
		if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := workload.Deploy(ctx, e.b.Client, ns, "serve", "cluster-b", 1, false); err != nil {
		t.Fatal(err)
	}
	serve := e.readyPod(t, e.b, "app=serve")
	for _, ip := range serve.Status.PodIPs {
		if a := net.ParseIP(ip.IP); a != nil && a.To4() != nil {
			e.target = net.JoinHostPort(ip.IP, strconv.Itoa(workload.EchoPort))
		}
	}
	for _, l := range []struct {
		m    *framework.Member
		loop **workload.Loop
	}{{e.a, &e.la}, {e.c, &e.lc}} {
		pod := workload.LoopPod("loop", ns, e.target, 50*time.Millisecond, 15*time.Minute)
		if *l.loop, err = workload.StartLoop(ctx, l.m.Kube, pod, timeout); err != nil {
			t.Fatal(err)
		}
	}
	ra, rc := e.after(t, nowMs(), 10)
	e.expect(t, "before any fault, a to b", ra, true)
	e.expect(t, "before any fault, c to b", rc, true)

	e.testCut(t, "cluster-a")
	e.testCut(t, "")
	nodes, pod := e.readySince(t)
	e.testStopControlPlane(t)
	e.testLossy(t)
	if n, p := e.readySince(t); !slices.EqualFunc(n, nodes, time.Time.Equal) || !p.Equal(pod) {
		t.Errorf("cluster-b's nodes or serve pod changed readiness while its control plane was stopped and started: "+
			"Ready since %v and %v before, %v and %v after", nodes, pod, n, p)
	}

	// Faults in place when the fleet stops go with it.
	for _, flt := range []framework.Fault{
		{Kind: framework.CutDataPlane, Member: "cluster-b"}, {Kind: framework.Lossy, Member: "cluster-c", Peer: "cluster-a"},
		{Kind: framework.StopControlPlane, Member: "cluster-b"},
	} {
		e.fault(t, flt)
	}
	stop := time.Now()
	if err := f.Stop(); err != nil {
		t.Errorf("stopping the fleet with faults in place: %v", err)
	}
	t.Logf("the fleet stopped with faults in place in %s", time.Since(stop).Round(100*time.Millisecond))
	// A shim whose container the stop killed exits, and removes its socket, on its own time, after the fleet's
	// sweep has seen its processes go: what is still there after a few seconds was left behind.
	var left []string
	if err := poll.Until(context.Background(), 100*time.Millisecond, 5*time.Second, func() error {
		if left = dataplane.Leftovers(); len(left) > 0 {
			return fmt.Errorf("%d left", len(left))
		}
		return nil
	}); err != nil {
		t.Errorf("the stopped fleet left behind: %v", left)
	}
}

// testCut cuts cluster-b's data plane from peer ("" for every other member): a's requests fail, and c's too
// unless c is spared; heal brings both back.
func (e *env) testCut(t *testing.T, peer string) {
	what := "cut-data-plane cluster-b from " + peer
	if peer == "" {
		what = "cut-data-plane cluster-b from every member"
	}
	e.fault(t, framework.Fault{Kind: framework.CutDataPlane, Member: "cluster-b", Peer: peer})
	// A request that fails waits for its 1 s timeout: three of them are enough.
	ra, rc := e.after(t, nowMs(), 3)
	e.expect(t, what+": a to b", ra, false)
	e.expect(t, what+": c to b", rc, peer != "")
	e.fault(t, framework.Fault{Kind: framework.Heal})
	healed := nowMs()
	e.recovered(t, what+", healed: a to b", e.la, healed, 10)
	e.recovered(t, what+", healed: c to b", e.lc, healed, 10)
	if names, err := dataplane.Faults(); err != nil || len(names) > 0 {
		t.Errorf("faults left in the fabric once healed: %v %v", names, err)
	}
}

// testStopControlPlane stops cluster-b's control plane: its API server does not answer and its broker Lease is
// not renewed, while a's requests to its pod are all answered; once started again, both answer and renew.
func (e *env) testStopControlPlane(t *testing.T) {
	ctx := context.Background()
	before := time.Now()
	poll.T(t, timeout, "cluster-b renews its Lease", func() error {
		if r := e.leaseRenewed(t); !r.After(before) {
			return fmt.Errorf("last renewed at %s", r)
		}
		return nil
	})
	from := nowMs()
	e.fault(t, framework.Fault{Kind: framework.StopControlPlane, Member: "cluster-b"})
	e.fault(t, framework.Fault{Kind: framework.StopControlPlane, Member: "cluster-b"}) // idempotent
	stopped := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err := e.b.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
	cancel()
	if err == nil {
		t.Errorf("cluster-b's API server answered /readyz with its control plane stopped")
	}
	// Three renewal intervals without a renewal begun since the stop (one in flight then has an older time): an
	// observation of a bounded length, not a wait for something to happen.
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(leaseGrace); time.Now().Before(end); <-tick.C {
		if r := e.leaseRenewed(t); r.After(stopped) {
			t.Fatalf("cluster-b's Lease was renewed at %s, after its control plane stopped at %s", r, stopped)
		}
	}
	during := e.la.Requests(from, nowMs())
	e.expect(t, "stop-control-plane cluster-b: a to b", during, true)
	t.Logf("cluster-b's control plane stopped: its Lease not renewed for %s, %d requests from a all answered",
		time.Since(stopped).Round(100*time.Millisecond), len(during))

	e.fault(t, framework.Fault{Kind: framework.StartControlPlane, Member: "cluster-b"})
	started := time.Now()
	if _, err := e.b.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		t.Errorf("cluster-b's API server, started again: %v", err)
	}
	poll.T(t, timeout, "cluster-b renews its Lease again", func() error {
		if r := e.leaseRenewed(t); !r.After(started) {
			return fmt.Errorf("last renewed at %s", r)
		}
		return nil
	})
	t.Logf("cluster-b's Lease renewed %s after its control plane started", time.Since(started).Round(100*time.Millisecond))
	e.fault(t, framework.Fault{Kind: framework.StartControlPlane, Member: "cluster-b"}) // idempotent
	e.expect(t, "stop and start of cluster-b's control plane: a to b", e.la.Requests(from, nowMs()), true)
}

// testLossy measures the share of UDP echoes from a pod of a to b's pod that are lost, without loss and with
// lossy cluster-b: a request and its reply each cross the loss.
func (e *env) testLossy(t *testing.T) {
	const loss, count = 10, 300
	lost := func() float64 {
		out, stderr, code, err := workload.Kubectl(context.Background(), e.kubectl, e.a.KubeconfigPath, e.a.Name, "exec", "-n", ns, "loop", "--",
			nodeimages.ServeBin, "loop", "-target", e.target, "-proto", "udp", "-count", strconv.Itoa(count), "-interval", "10ms", "-timeout", "250ms")
		reqs := workload.ParseLoop(out)
		if err != nil || len(reqs) != count {
			t.Fatalf("UDP loop from a: exit %d %v, %d requests reported, want %d: %s", code, err, len(reqs), count, stderr)
		}
		failed := 0
		for _, r := range reqs {
			if !r.OK {
				failed++
			}
		}
		return float64(failed) / count
	}
	if base := lost(); base > 0.02 {
		t.Fatalf("%.1f%% of UDP echoes lost with no fault", 100*base)
	}
	e.fault(t, framework.Fault{Kind: framework.Lossy, Member: "cluster-b", Loss: loss})
	got, want := lost(), 1-(1-loss/100.0)*(1-loss/100.0)
	e.fault(t, framework.Fault{Kind: framework.Heal})
	// 300 requests at 19 % give 57 losses, with a standard deviation of about 7.
	if got < want/2 || got > want*1.6 {
		t.Errorf("lossy cluster-b at %d%%: %.1f%% of UDP echoes lost, want about %.1f%%", loss, 100*got, 100*want)
	}
	t.Logf("lossy cluster-b at %d%% each way: %.1f%% of %d UDP echoes from a lost (expected %.1f%%)", loss, 100*got, count, 100*want)
	if names, err := dataplane.Faults(); err != nil || len(names) > 0 {
		t.Errorf("faults left in the fabric once healed: %v %v", names, err)
	}
}

// fault causes a fault, failing the test if it cannot.
func (e *env) fault(t *testing.T, flt framework.Fault) {
	t.Helper()
	start := time.Now()
	if err := e.f.Fault(context.Background(), flt); err != nil {
		t.Fatalf("fault %+v: %v", flt, err)
	}
	t.Logf("fault %+v: done in %s", flt, time.Since(start).Round(time.Millisecond))
}

// after waits until each loop has reported at least n requests started at ms or later, and returns them.
func (e *env) after(t *testing.T, ms int64, n int) (a, c []workload.Request) {
	t.Helper()
	poll.T(t, timeout, fmt.Sprintf("%d requests from each loop", n), func() error {
		for _, l := range []*workload.Loop{e.la, e.lc} {
			if err := l.Err(); err != nil {
				return err
			}
		}
		a, c = e.la.Requests(ms, 0), e.lc.Requests(ms, 0)
		if len(a) < n || len(c) < n {
			return fmt.Errorf("%d from a and %d from c", len(a), len(c))
		}
		return nil
	})
	return a, c
}

// expect fails t unless every request was answered (ok) or every one failed, and there was at least one. Where
// every one should be answered, one in twenty may fail, logged with how long it took: on this shared machine, with
// another suite running, a loop or a serve pod starved of CPU for the loop's 1 s timeout fails a request now and
// then (a read-timeout between two members no fault touched), which says nothing of the fabric; a fault that cut
// the wrong path fails them all. Where none should be, none may be answered.
func (e *env) expect(t *testing.T, what string, reqs []workload.Request, ok bool) {
	t.Helper()
	var answered, failed []string
	for _, r := range reqs {
		if r.OK {
			answered = append(answered, strconv.Itoa(r.Seq))
		} else {
			failed = append(failed, failure(r))
		}
	}
	switch {
	case len(reqs) == 0:
		t.Errorf("%s: no request", what)
	case ok && len(failed) > len(reqs)/20:
		t.Errorf("%s: %d of %d requests failed: %s", what, len(failed), len(reqs), strings.Join(failed, " "))
	case ok && len(failed) > 0:
		t.Logf("%s: %d requests, %d answered; failed, within one in twenty: %s", what, len(reqs), len(answered), strings.Join(failed, " "))
	case !ok && len(answered) > 0:
		t.Errorf("%s: %d of %d requests answered (%s), want none", what, len(answered), len(reqs), strings.Join(answered, " "))
	default:
		t.Logf("%s: %d requests, %d answered", what, len(reqs), len(answered))
	}
}

// recovered waits until n requests in a row since ms (Unix ms) are answered by loop. A request that fails before
// them is logged with how long it took, not counted: on this shared machine a loop starved of CPU for its 1 s
// timeout fails one request now and then, which says nothing of the fabric (see expect).
func (e *env) recovered(t *testing.T, what string, loop *workload.Loop, ms int64, n int) {
	t.Helper()
	var reqs []workload.Request
	poll.T(t, timeout, fmt.Sprintf("%s: %d requests in a row answered", what, n), func() error {
		if err := loop.Err(); err != nil {
			return err
		}
		reqs = loop.Requests(ms, 0)
		run := 0
		for _, r := range reqs {
			run++
			if !r.OK {
				run = 0
			}
		}
		if run < n {
			return fmt.Errorf("%d of %d requests since the heal answered in a row", run, len(reqs))
		}
		return nil
	})
	var failed []string
	for _, r := range reqs {
		if !r.OK {
			failed = append(failed, failure(r))
		}
	}
	t.Logf("%s: %d requests, the last %d answered; failed before: %v", what, len(reqs), n, failed)
}

// failure describes a failed request: "seq:reason after N ms".
func failure(r workload.Request) string {
	return fmt.Sprintf("%d:%s after %.0f ms", r.Seq, r.Reason, r.LatencyMs)
}

// leaseRenewed is when cluster-b last renewed its Lease on the broker.
func (e *env) leaseRenewed(t *testing.T) time.Time {
	t.Helper()
	var l coordinationv1.Lease
	key := client.ObjectKey{Namespace: names.BrokerNamespace(e.b.ID), Name: names.LeaseName}
	if err := e.f.Broker.Records.Get(context.Background(), key, &l); err != nil {
		t.Fatalf("cluster-b's Lease: %v", err)
	}
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

// readyPod waits until one pod matching selector is Ready in m, and returns it.
func (e *env) readyPod(t *testing.T, m *framework.Member, selector string) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	poll.T(t, timeout, selector+" Ready in "+m.Name, func() error {
		pods, err := m.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if workload.PodReady(&p) && p.Status.PodIP != "" {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("%d pods, none Ready", len(pods.Items))
	})
	return pod
}

// readySince is since when cluster-b's nodes and its serve pod have been Ready.
func (e *env) readySince(t *testing.T) (nodes []time.Time, pod time.Time) {
	t.Helper()
	ctx := context.Background()
	for _, n := range e.b.Nodes {
		node, err := e.b.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				nodes = append(nodes, c.LastTransitionTime.Time)
			}
		}
	}
	p := e.readyPod(t, e.b, "app=serve")
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			pod = c.LastTransitionTime.Time
		}
	}
	return nodes, pod
}

func nowMs() int64 { return time.Now().UnixMilli() }
