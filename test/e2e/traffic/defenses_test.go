package traffic

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

// The scenarios of issue 38 where the member-loss defenses themselves are what could fail: each keeps a client of
// cluster-a calling a service and counts its failures, while the defense is starved, blocked, restarted or cut
// from the broker.

const (
	// freezeFor is how long the elected controller is frozen 400 ms of every 500 ms.
	freezeFor = 20 * time.Second
	// holdFor is how long a scenario's fault holds once it has taken effect.
	holdFor = 15 * time.Second
)

// testFrozenLeader: cluster-a's elected controller frozen 400 ms of every 500 ms for 20 s (SIGSTOP, SIGCONT: a
// starved or stalled process), while a client on cluster-a's other node calls a service that cluster-b and
// cluster-c export. Its probe rounds run late; a late round counts neither way, so nobody is judged lost and no
// request fails.
func (e *env) testFrozenLeader(t *testing.T) {
	ctx := context.Background()
	e.deployExported(t, "frozen", false, e.b, e.c)
	e.waitImportedEndpoints(t, e.a, "frozen", map[string]int{"cluster-b": 2, "cluster-c": 2})
	leader := e.leaderPod(t)
	loop, from := e.clientLoop(t, "frozen", leader.Spec.NodeName, "cluster-b", "cluster-c")

	frozenAt := time.Now().UnixMilli()
	end := time.Now().Add(freezeFor)
	cycles := 0
	for time.Now().Before(end) {
		resume, err := e.a.PausePod(ctx, leader)
		if err != nil {
			t.Fatalf("freezing the elected controller %s: %v", leader.Name, err)
		}
		// The fault's own rhythm, not a wait for anything: frozen 400 ms, running 100 ms.
		time.Sleep(400 * time.Millisecond)
		resume()
		time.Sleep(100 * time.Millisecond)
		cycles++
	}
	e.checkNoFailure(t, loop, from, frozenAt, fmt.Sprintf("cluster-a's elected controller %s frozen 400 ms of every 500 ms, %d times", leader.Name, cycles))
	e.checkNotJudged(t, e.a, "frozen", e.b.ID, e.c.ID)
}

// testNetworkPolicy: a default-deny NetworkPolicy in cluster-b's exporting namespace lets in only cluster-a's
// client, as production namespaces do. The local clusterset's CNI enforces no NetworkPolicy, so the fabric drops
// what this one denies: every packet to the exported pods from any other pod address of the clusterset. The
// importers' probes go to cluster-b's own controller and DNS pods, which the policy does not cover: cluster-b is
// not judged unreachable, its endpoints stay ready in cluster-a's import, and the client's requests all answer.
func (e *env) testNetworkPolicy(t *testing.T) {
	ctx := context.Background()
	e.deployExported(t, "guarded", false, e.b)
	e.waitImportedEndpoints(t, e.a, "guarded", map[string]int{"cluster-b": 2})
	loop, from := e.clientLoop(t, "guarded", "", "cluster-b")
	client := &corev1.Pod{}
	if err := e.a.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: loop.Name}, client); err != nil {
		t.Fatal(err)
	}
	clientIP, err := netip.ParseAddr(client.Status.PodIP)
	if err != nil {
		t.Fatalf("the client pod's address %q: %v", client.Status.PodIP, err)
	}

	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default-deny-but-the-client"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(clientIP, clientIP.BitLen()).String()},
			}}}},
		},
	}
	if err := e.b.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	var guarded []netip.Prefix
	for _, ip := range e.podIPs(t, e.b, "app=guarded") {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			t.Fatal(err)
		}
		guarded = append(guarded, netip.PrefixFrom(a, a.BitLen()))
	}
	var denied []netip.Prefix
	for _, m := range e.f.Members {
		for _, p := range m.PodCIDRs {
			denied = append(denied, without(p, clientIP)...)
		}
	}
	const fault = "network-policy"
	if err := dataplane.Drop(fault, guarded, denied, 100); err != nil {
		t.Fatal(err)
	}
	deniedAt := time.Now().UnixMilli()
	defer func() {
		if err := dataplane.Remove(fault); err != nil {
			t.Error(err)
		}
		if err := e.b.Client.Delete(ctx, policy); err != nil {
			t.Error(err)
		}
	}()
	// The policy bites: cluster-a's other client pod, not allowed, gets no answer.
	out, _, code, err := workload.Kubectl(ctx, e.kubectl, e.a.KubeconfigPath, e.a.Name, "exec", "-n", ns, "client", "--",
		"sh", "-c", fmt.Sprintf("echo x | nc -w 2 %s %d", names.ServiceDNSName(ns, "guarded"), workload.EchoPort))
	if err != nil || code == 0 || strings.Contains(out, "cluster=") {
		t.Fatalf("a client the policy denies reached the guarded service: exit %d %v, %q", code, err, out)
	}
	e.hold(t, holdFor, func() error { return e.judged(e.a, "guarded", map[string]int{"cluster-b": 2}) })
	e.checkNoFailure(t, loop, from, deniedAt, fmt.Sprintf("cluster-b's guarded namespace behind a default-deny NetworkPolicy for %s", holdFor))
}

// testCutThroughRestart: cluster-b's nodes cut from every other member while a client of cluster-a calls a
// service that cluster-b and cluster-c export. Once cluster-a has moved the traffic to cluster-c, its elected
// controller is deleted: the other replica takes over and a new pod starts. Neither starts from nothing: the new
// leader resumes the verdict on cluster-b, and no request goes to cluster-b until the cut heals. That is counted
// where it would show, in the fabric: the client's SYNs to cluster-b's pods, none (and some once healed, which
// proves the count sees them). A request that fails otherwise did not go to cluster-b: on this 2-core machine,
// with another suite running, a new controller pod's start and the new leader's first reconciles of every
// service can starve the client's loop, its node's kube-proxy or its DNS past the loop's 1 s timeout. Those are
// reported, with the SYNs the client sent to cluster-c beside the requests cluster-c answered (about equal when
// the failed ones never crossed the fabric), and fail the test past 1% of the requests.
func (e *env) testCutThroughRestart(t *testing.T) {
	ctx := context.Background()
	e.deployExported(t, "moved", false, e.b, e.c)
	e.waitImportedEndpoints(t, e.a, "moved", map[string]int{"cluster-b": 2, "cluster-c": 2})
	loop, _ := e.clientLoop(t, "moved", "", "cluster-b", "cluster-c")

	if err := e.f.Fault(ctx, framework.Fault{Kind: framework.CutDataPlane, Member: e.b.Name}); err != nil {
		t.Fatal(err)
	}
	healed := false
	defer func() {
		if !healed {
			if err := e.f.Fault(ctx, framework.Fault{Kind: framework.Heal}); err != nil {
				t.Error(err)
			}
		}
	}()
	cutAt := time.Now().UnixMilli()
	// The requests sent before cluster-a withdrew cluster-b's endpoints fail: what member loss measures. Then
	// two seconds of requests all answered by cluster-c.
	var withdrawn int64
	poll.T(t, timeout, "cluster-a's requests all answered by cluster-c", func() error {
		reqs := loop.Requests(cutAt, 0)
		last := -1
		for i, r := range reqs {
			if !r.OK || r.Cluster != "cluster-c" {
				last = i
			}
		}
		if last+1 < len(reqs) && reqs[len(reqs)-1].StartMs-reqs[last+1].StartMs >= 2000 {
			withdrawn = reqs[last+1].StartMs
			return nil
		}
		return fmt.Errorf("%d requests since the cut, the last not answered by cluster-c is #%d", len(reqs), last+1)
	})
	t.Logf("cluster-b withdrawn %d ms after the cut", withdrawn-cutAt)

	clientPod, err := e.a.Kube.CoreV1().Pods(ns).Get(ctx, "moved-client", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clientIP, err := netip.ParseAddr(clientPod.Status.PodIP)
	if err != nil {
		t.Fatalf("the client pod's address: %v", err)
	}
	from := []netip.Prefix{netip.PrefixFrom(clientIP, clientIP.BitLen())}
	counts := map[string][]netip.Prefix{"to-cut-member": e.b.PodCIDRs, "to-other-member": e.c.PodCIDRs}
	for name, to := range counts {
		if err := dataplane.CountSYNs(name, from, to, workload.EchoPort); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = dataplane.StopCount(name) }()
	}
	countedAt := time.Now().UnixMilli()
	leader := e.leaderPod(t)
	deletedAt := time.Now().UnixMilli()
	if err := e.a.Kube.CoreV1().Pods(leader.Namespace).Delete(ctx, leader.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var next corev1.Pod
	poll.T(t, timeout, "another replica of cluster-a's controller elected", func() error {
		p, err := e.a.LeaderPod(ctx)
		if err != nil {
			return err
		}
		if p.Name == leader.Name {
			return fmt.Errorf("%s still holds the Lease", p.Name)
		}
		next = p
		return nil
	})
	movedAt := time.Now()
	e.waitControllers(t, e.a, leader.Name)
	poll.T(t, holdFor+timeout, "the new leader in charge for "+holdFor.String(), func() error {
		if d := time.Since(movedAt); d < holdFor {
			return fmt.Errorf("for %s", d.Round(time.Second))
		}
		return nil
	})
	toB, err := dataplane.SYNs("to-cut-member")
	if err != nil {
		t.Fatal(err)
	}
	toC, err := dataplane.SYNs("to-other-member")
	if err != nil {
		t.Fatal(err)
	}
	// Read after the counts, so that every request the counts saw is among them.
	reqs := loop.Requests(withdrawn, 0)
	failures := failedSince(reqs, deletedAt)
	by := answeredBy(reqs)
	t.Logf("cluster-b cut, cluster-a's elected controller %s deleted and %s elected %d ms later: %d requests, %d failed, answered by %v; "+
		"SYNs from the client since just before the deletion: %d to cluster-b, %d to cluster-c (which answered %d requests)",
		leader.Name, next.Name, movedAt.UnixMilli()-deletedAt, len(reqs), len(failures), by, toB, toC, answeredBy(loop.Requests(countedAt, 0))["cluster-c"])
	if toB > 0 || by["cluster-b"] > 0 {
		t.Errorf("after cluster-b's withdrawal, through the restart and the move, the client sent %d SYNs to cluster-b; answered by %v", toB, by)
	}
	if len(failures) > 0 {
		t.Logf("requests that failed, none sent to cluster-b: %v", failures)
	}
	if 100*len(failures) > len(reqs) {
		t.Errorf("%d of %d requests failed, more than 1%%: %v", len(failures), len(reqs), failures)
	}

	if err := e.f.Fault(ctx, framework.Fault{Kind: framework.Heal}); err != nil {
		t.Fatal(err)
	}
	healed = true
	healedAt := time.Now().UnixMilli()
	poll.T(t, timeout, "cluster-b answers again after the heal", func() error {
		if by := answeredBy(loop.Requests(healedAt, 0)); by["cluster-b"] == 0 {
			return fmt.Errorf("answered by %v", by)
		}
		return nil
	})
	if n, err := dataplane.SYNs("to-cut-member"); err != nil || n <= toB {
		t.Errorf("the count of the client's SYNs to cluster-b did not see its requests once healed: %d, %v", n, err)
	}
}

// testBrokerDownRestart: the broker unreachable from every member while both of cluster-a's controller replicas
// are deleted and started again. The new processes start without the broker and keep cluster-a's imports as they
// are: the ClusterSetIP and both exporters' endpoints stay, and a client calling the service through them drops
// no request, before and after the broker comes back.
func (e *env) testBrokerDownRestart(t *testing.T) {
	ctx := context.Background()
	e.deployExported(t, "kept", false, e.b, e.c)
	want := map[string]int{"cluster-b": 2, "cluster-c": 2}
	e.waitImportedEndpoints(t, e.a, "kept", want)
	vip := e.waitImportIP(t, e.a, "kept")
	loop, from := e.clientLoop(t, "kept", "", "cluster-b", "cluster-c")
	cutAt := time.Now().UnixMilli()

	var rejoins []func() error
	rejoin := func() {
		for _, r := range rejoins {
			if err := r(); err != nil {
				t.Error(err)
			}
		}
		rejoins = nil
	}
	defer rejoin()
	for _, m := range e.f.Members {
		r, err := m.CutFromBroker()
		if err != nil {
			t.Fatal(err)
		}
		rejoins = append(rejoins, r)
	}
	old, err := e.a.ControllerPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var oldNames []string
	for _, p := range old {
		oldNames = append(oldNames, p.Name)
		if err := e.a.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll.T(t, timeout, "cluster-a's controller replicas started again, without the broker", func() error {
		pods, err := e.a.ControllerPods(ctx)
		if err != nil {
			return err
		}
		running := 0
		for _, p := range pods {
			if !slices.Contains(oldNames, p.Name) && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running < 2 {
			return fmt.Errorf("%d new replicas running", running)
		}
		return nil
	})
	e.hold(t, holdFor, func() error {
		if got := e.importIP(e.a, "kept"); got != vip {
			return fmt.Errorf("the ClusterSetIP is %q, was %s", got, vip)
		}
		return e.judged(e.a, "kept", want)
	})
	rejoin()
	e.waitControllers(t, e.a)
	e.hold(t, 5*time.Second, func() error { return e.judged(e.a, "kept", want) })
	e.checkNoFailure(t, loop, from, cutAt, fmt.Sprintf("the broker unreachable while cluster-a's controllers %v restarted, held %s", oldNames, holdFor))
}

// clientLoop starts a client pod in cluster-a, off node avoid when given, calling app every 50 ms, and waits
// until each of the clusters has answered it; from is the time of the first request after that.
func (e *env) clientLoop(t *testing.T, app, avoid string, clusters ...string) (loop *workload.Loop, from int64) {
	t.Helper()
	pod := workload.LoopPod(app+"-client", ns,
		fmt.Sprintf("%s:%d", names.ServiceDNSName(ns, app), workload.EchoPort), 50*time.Millisecond, 10*time.Minute)
	if avoid != "" {
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpNotIn, Values: []string{avoid}}},
			}}},
		}}
	}
	loop = e.startLoop(t, pod)
	poll.T(t, timeout, "the client's requests answered by "+strings.Join(clusters, " and "), func() error {
		reqs := loop.Requests(0, 0)
		by := answeredBy(reqs)
		for _, c := range clusters {
			if by[c] < 5 {
				return fmt.Errorf("answered by %v", by)
			}
		}
		from = reqs[len(reqs)-1].StartMs + 1
		return nil
	})
	return loop, from
}

// checkNoFailure waits for the loop's requests to go on past now and fails the test for any request since from
// that failed, saying when each began from faultAt (Unix ms), when the fault took effect.
func (e *env) checkNoFailure(t *testing.T, loop *workload.Loop, from, faultAt int64, what string) {
	t.Helper()
	now := time.Now().UnixMilli()
	poll.T(t, timeout, "requests reported after the scenario", func() error {
		if n := len(loop.Requests(now, 0)); n < 20 {
			return fmt.Errorf("%d so far", n)
		}
		return nil
	})
	reqs := loop.Requests(from, 0)
	failures := failedSince(reqs, faultAt)
	t.Logf("%s: %d requests, %d failed, answered by %v", what, len(reqs), len(failures), answeredBy(reqs))
	if len(failures) > 0 {
		t.Errorf("requests failed: %s", strings.Join(failures, ", "))
	}
}

// failedSince describes the failed requests of reqs: "#seq reason +Nms (took M ms) -> address", N from at (Unix
// ms).
func failedSince(reqs []workload.Request, at int64) []string {
	var out []string
	for _, r := range reqs {
		if !r.OK {
			out = append(out, fmt.Sprintf("#%d %s %+dms (took %.0f ms) -> %s", r.Seq, r.Reason, r.StartMs-at, r.LatencyMs, cmp.Or(r.Addr, "?")))
		}
	}
	return out
}

// checkNotJudged fails the test if m's import of app says one of its exporters is unreachable.
func (e *env) checkNotJudged(t *testing.T, m *framework.Member, app string, members ...string) {
	t.Helper()
	si := &mcsv1beta1.ServiceImport{}
	if err := m.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: app}, si); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(si.Status.Conditions, imports.ConditionUnreachable); c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("%s's import of %s: %s=True (%s): %s; want none of %v judged unreachable", m.Name, app, c.Type, c.Reason, c.Message, members)
	}
}

// judged says what is wrong with m's import of app: an exporter judged unreachable, or other ready endpoints per
// source cluster than want.
func (e *env) judged(m *framework.Member, app string, want map[string]int) error {
	ctx := context.Background()
	si := &mcsv1beta1.ServiceImport{}
	if err := m.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: app}, si); err != nil {
		return err
	}
	if c := meta.FindStatusCondition(si.Status.Conditions, imports.ConditionUnreachable); c != nil && c.Status == metav1.ConditionTrue {
		return fmt.Errorf("%s=True (%s): %s", c.Type, c.Reason, c.Message)
	}
	got, err := readyEndpoints(ctx, m, app)
	if err != nil {
		return err
	}
	for c, n := range want {
		if got[c] != n {
			return fmt.Errorf("ready endpoints per cluster %v, want %v", got, want)
		}
	}
	return nil
}

// hold checks ok every 200 ms for d, and fails the test at its first error: a state that must last.
func (e *env) hold(t *testing.T, d time.Duration, ok func() error) {
	t.Helper()
	end := time.Now().Add(d)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for ; time.Now().Before(end); <-tick.C {
		if err := ok(); err != nil {
			t.Fatalf("after %s of %s: %v", (d - time.Until(end)).Round(100*time.Millisecond), d, err)
		}
	}
}

// importIP is m's ClusterSetIP of app, or why there is none.
func (e *env) importIP(m *framework.Member, app string) string {
	si := &mcsv1beta1.ServiceImport{}
	if err := m.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: app}, si); err != nil {
		return err.Error()
	}
	return strings.Join(si.Spec.IPs, ",")
}

// leaderPod is cluster-a's elected controller pod.
func (e *env) leaderPod(t *testing.T) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	poll.T(t, timeout, "cluster-a's elected controller", func() error {
		p, err := e.a.LeaderPod(context.Background())
		pod = p
		return err
	})
	return pod
}

// waitControllers waits until two of m's controller replicas, none of them named in gone, are ready.
func (e *env) waitControllers(t *testing.T, m *framework.Member, gone ...string) {
	t.Helper()
	poll.T(t, timeout, m.Name+"'s controller replicas ready", func() error {
		pods, err := m.ControllerPods(context.Background())
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range pods {
			if !slices.Contains(gone, p.Name) && workload.PodReady(&p) {
				ready++
			}
		}
		if ready < 2 {
			return fmt.Errorf("%d of %d ready", ready, len(pods))
		}
		return nil
	})
}

// without is p less the address a: the prefixes that cover the rest of p.
func without(p netip.Prefix, a netip.Addr) []netip.Prefix {
	p = p.Masked()
	if !p.Contains(a) {
		return []netip.Prefix{p}
	}
	var out []netip.Prefix
	for bits := p.Bits() + 1; bits <= a.BitLen(); bits++ {
		// The half of the next longer prefix that does not hold a.
		in := netip.PrefixFrom(a, bits).Masked()
		out = append(out, sibling(in))
	}
	return out
}

// sibling is the other half of the prefix one bit shorter than p.
func sibling(p netip.Prefix) netip.Prefix {
	b := p.Addr().AsSlice()
	i := p.Bits() - 1
	b[i/8] ^= 0x80 >> (i % 8)
	a, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(a, p.Bits())
}

func TestWithout(t *testing.T) {
	for _, tc := range []struct {
		p, a string
		want []string
	}{
		{"10.1.0.0/30", "10.1.0.1", []string{"10.1.0.2/31", "10.1.0.0/32"}},
		{"10.1.0.0/16", "10.2.0.1", []string{"10.1.0.0/16"}},
		{"10.1.0.4/32", "10.1.0.4", nil},
		{"fd00::/126", "fd00::3", []string{"fd00::/127", "fd00::2/128"}},
	} {
		var got []string
		for _, p := range without(netip.MustParsePrefix(tc.p), netip.MustParseAddr(tc.a)) {
			got = append(got, p.String())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("without(%s, %s) = %v, want %v", tc.p, tc.a, got, tc.want)
		}
	}
}
