// Package takeover measures, with requests from a pod through DNS and kube-proxy, what a member loses when one of
// its two controller replicas or two CoreDNS replicas goes: the elected controller of the importing member
// (cluster-a) or of the exporting one (cluster-b), and one of cluster-a's CoreDNS pods, each deleted as a rolling
// update deletes it (SIGTERM and its grace period), and its processes killed with SIGKILL, as a crash kills them
// (the kubelet restarts the container).
//
// cluster-b exports web; a pod of cluster-a asks web.takeover.svc.clusterset.local every 50 ms, resolving the name
// for each request. Right after each controller goes, cluster-b exports one more Service: the change needs both
// controllers and nothing else (no pod has to start), so the time until cluster-a imports it measures the takeover
// as users see it. Every phase counts the requests that failed, the time until another replica holds the leader
// Lease, and the time until the new export is imported. The controllers' phases assert that no request fails;
// what a CoreDNS pod taken away loses is measured. TAKEOVER_RUNS repeats the phases (default 1); with
// TAKEOVER_RESULTS set, the figures are written there as a Markdown table (`make bench-takeover`).
//
// This is the suite of DNS mode replace (our CoreDNS in place of kube-dns, where a CoreDNS pod's loss is the
// cluster's DNS's), which the others run in standalone mode, join's default.
package takeover

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

const (
	ns      = "takeover"
	timeout = 2 * time.Minute
	// takeoverBound is how long a crashed leader may hold the change back: controller-runtime's leader Lease lasts
	// 15 s and is retried every 2 s, and the new leader's caches sync before it reconciles.
	takeoverBound = 30 * time.Second
	// gracefulBound is the same for a leader that releases its Lease as it stops.
	gracefulBound = 10 * time.Second
	// replicas is how many controller and CoreDNS replicas the manifests run in each member.
	replicas = 2
)

// env is the running fleet and the request loop.
type env struct {
	f    *framework.Fleet
	a, b *framework.Member
	loop *workload.Loop
	rows []string
	// exports counts the Services cluster-b exported after web, one per controller taken away.
	exports int
}

func TestTakeover(t *testing.T) {
	if err := dataplane.CheckHost(); err != nil {
		t.Skip(err)
	}
	ctrl.SetLogger(logr.Discard())
	runs := framework.Runs(t, "TAKEOVER_RUNS")
	start := time.Now()
	f, _ := framework.StartTest(t, 2, 1, func(o *framework.Options) { o.DNS = install.DNSReplace })
	t.Logf("fleet with 2 members x 1 node up in %s", time.Since(start).Round(100*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := &env{f: f, a: f.Member("cluster-a"), b: f.Member("cluster-b")}
	for _, m := range f.Members {
		if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := workload.Deploy(ctx, e.b.Client, ns, "web", e.b.Name, 2, false); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Client.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	pod := workload.LoopPod("web-client", ns, fmt.Sprintf("%s:%d", names.ServiceDNSName(ns, "web"), workload.EchoPort), 50*time.Millisecond, 30*time.Minute)
	loop, err := workload.StartLoop(ctx, e.a.Kube, pod, timeout)
	if err != nil {
		t.Fatal(err)
	}
	e.loop = loop
	e.waitServed(t)

	for run := range runs {
		for _, crash := range []bool{false, true} {
			e.controllerGoes(t, run, e.a, crash)
			e.controllerGoes(t, run, e.b, crash)
			e.dnsGoes(t, run, crash)
		}
	}
	e.writeResults(t, runs)
}

// how names the way a pod goes.
func how(crash bool) string {
	if crash {
		return "killed (SIGKILL)"
	}
	return "deleted (SIGTERM, grace period)"
}

// takeAway deletes a pod of m as a rolling update does, or kills its processes as a crash does. (A pod deleted
// with a grace period of 0 is no crash: the kubelet still sends SIGTERM first, and a controller hands its Lease
// over.)
func takeAway(t *testing.T, m *framework.Member, p corev1.Pod, crash bool) {
	t.Helper()
	var err error
	if crash {
		err = m.KillPod(context.Background(), p)
	} else {
		err = m.Kube.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// controllerGoes takes m's elected controller away and has cluster-b export one more Service at once: another
// replica takes the Lease over, the export reaches cluster-a, and no request fails.
func (e *env) controllerGoes(t *testing.T, run int, m *framework.Member, crash bool) {
	ctx := context.Background()
	// The holder is the pod's name, "_", and a UUID of the process: a container the kubelet restarts in the same
	// pod holds the Lease as a new holder.
	holder := ptr.Deref(e.leader(t, m).Spec.HolderIdentity, "")
	pod, err := m.LeaderPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	takeAway(t, m, pod, crash)
	svc := e.exportOneMore(t)
	var took time.Duration
	poll.T(t, timeout, fmt.Sprintf("another replica of %s's controller leads", m.Name), func() error {
		l := e.leader(t, m)
		if h := ptr.Deref(l.Spec.HolderIdentity, ""); h == holder || h == "" || l.Spec.AcquireTime == nil {
			return fmt.Errorf("held by %q", h)
		}
		took = max(0, l.Spec.AcquireTime.Sub(gone))
		return nil
	})
	imported := e.waitImported(t, svc).Sub(gone)
	e.waitReplaced(t, m, pod, crash)
	if err := m.WaitAvailable(ctx, framework.ControllerLeaderLease.Namespace, "mcs-controller", replicas, timeout); err != nil {
		t.Fatal(err)
	}
	what := fmt.Sprintf("%s's elected controller %s", m.Name, how(crash))
	failed := e.failedSince(t, gone)
	t.Logf("run %d: %s: new leader after %s, cluster-b's new export imported by cluster-a after %s, %d failed requests",
		run+1, what, took.Round(10*time.Millisecond), imported.Round(10*time.Millisecond), len(failed))
	if len(failed) > 0 {
		t.Errorf("%s: %d requests failed: %v", what, len(failed), failed)
	}
	bound := gracefulBound
	if crash {
		bound = takeoverBound
	}
	if imported > bound {
		t.Errorf("%s: the new export took %s to be imported, over %s", what, imported.Round(10*time.Millisecond), bound)
	}
	e.rows = append(e.rows, fmt.Sprintf("| %s | %d | %.1f s | %.1f s | %d |", what, run+1, took.Seconds(), imported.Seconds(), len(failed)))
}

// dnsGoes takes one of cluster-a's two CoreDNS pods away while the loop resolves web for every request. What it
// loses is measured, not asserted: a query the pod had, or was sent before its address left kube-proxy's rules,
// waits for the client's resolver to time out, longer than the loop's second per request.
func (e *env) dnsGoes(t *testing.T, run int, crash bool) {
	ctx := context.Background()
	pods, err := e.a.DNSPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) < replicas {
		t.Fatalf("cluster-a has %d CoreDNS pods, want %d", len(pods), replicas)
	}
	gone := time.Now()
	takeAway(t, e.a, pods[0], crash)
	e.waitReplaced(t, e.a, pods[0], crash)
	ours := e.f.DNSDeployment()
	if err := e.a.WaitAvailable(ctx, ours.Namespace, ours.Name, replicas, timeout); err != nil {
		t.Fatal(err)
	}
	e.waitServed(t)
	what := fmt.Sprintf("one of cluster-a's two CoreDNS pods %s", how(crash))
	failed := e.failedSince(t, gone)
	t.Logf("run %d: %s: %d failed requests %v", run+1, what, len(failed), failed)
	e.rows = append(e.rows, fmt.Sprintf("| %s | %d | | | %d |", what, run+1, len(failed)))
}

// waitReplaced waits until the pod taken away is gone for good, so that a phase's failures are its own: deleted,
// until it no longer exists (a CoreDNS pod serves on for its lameduck period); killed, until the kubelet has
// restarted its containers and it is ready again.
func (e *env) waitReplaced(t *testing.T, m *framework.Member, p corev1.Pod, crash bool) {
	t.Helper()
	restarts := func(p *corev1.Pod) (n int32) {
		for _, st := range p.Status.ContainerStatuses {
			n += st.RestartCount
		}
		return n
	}
	before := restarts(&p)
	poll.T(t, timeout, fmt.Sprintf("%s's pod %s replaced", m.Name, p.Name), func() error {
		now, err := m.Kube.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) && !crash:
			return nil
		case err != nil:
			return err
		case !crash:
			return fmt.Errorf("still there")
		case restarts(now) == before || !workload.PodReady(now):
			return fmt.Errorf("%d restarts, ready %v", restarts(now), workload.PodReady(now))
		}
		return nil
	})
}

// leader reads m's controller leader Lease.
func (e *env) leader(t *testing.T, m *framework.Member) *coordinationv1.Lease {
	t.Helper()
	l, err := m.Kube.CoordinationV1().Leases(framework.ControllerLeaderLease.Namespace).Get(context.Background(), framework.ControllerLeaderLease.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// exportOneMore creates a Service in cluster-b and its ServiceExport, and returns the Service's name.
func (e *env) exportOneMore(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	e.exports++
	name := fmt.Sprintf("probe-%d", e.exports)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: workload.EchoPort}}},
	}
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	for _, o := range []client.Object{svc, se} {
		if err := e.b.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return name
}

// waitImported waits until cluster-a has a ServiceImport of name with a ClusterSetIP, and says when it saw it, to
// within poll.Interval.
func (e *env) waitImported(t *testing.T, name string) time.Time {
	t.Helper()
	poll.T(t, timeout, fmt.Sprintf("cluster-a imports %s", name), func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := e.a.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, si); err != nil {
			return err
		}
		if len(si.Spec.IPs) == 0 {
			return fmt.Errorf("no ClusterSetIP yet")
		}
		return nil
	})
	return time.Now()
}

// waitServed waits until the loop's last 10 requests were answered.
func (e *env) waitServed(t *testing.T) {
	t.Helper()
	from := time.Now().UnixMilli()
	poll.T(t, timeout, "the last 10 requests answered", func() error {
		if err := e.loop.Err(); err != nil {
			return err
		}
		reqs := e.loop.Requests(from, 0)
		if len(reqs) < 10 {
			return fmt.Errorf("%d requests so far", len(reqs))
		}
		if failed := workload.Failures(reqs[len(reqs)-10:]); len(failed) > 0 {
			return fmt.Errorf("failed: %v", failed)
		}
		return nil
	})
}

// failedSince returns the loop's failed requests since from, once every request until now is reported.
func (e *env) failedSince(t *testing.T, from time.Time) []string {
	t.Helper()
	reqs, err := e.loop.Settled(context.Background(), from.UnixMilli(), time.Now().UnixMilli(), timeout)
	if err != nil {
		t.Fatal(err)
	}
	return workload.Failures(reqs)
}

// writeResults writes the figures as a Markdown table where TAKEOVER_RESULTS says.
func (e *env) writeResults(t *testing.T, runs int) {
	path := os.Getenv("TAKEOVER_RESULTS")
	if path == "" {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Controller and CoreDNS replicas lost (`make bench-takeover`)\n\nWritten by test/e2e/takeover on %s: %d run(s); "+
		"2 members x 1 node, 2 controller and 2 CoreDNS replicas each as the manifests run them, %s; a request every 50 ms "+
		"from a pod of cluster-a to web.%s.svc.clusterset.local (exported by cluster-b), its name resolved for each "+
		"request, 1 s per request; cluster-b exports one more Service right after each controller goes.\n\n"+
		"| replica lost | run | new leader after | new export imported after | failed requests |\n|---|---|---|---|---|\n",
		time.Now().UTC().Format(time.RFC3339), runs, e.f.DNSModeText(), ns)
	for _, r := range e.rows {
		b.WriteString(r + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
}
