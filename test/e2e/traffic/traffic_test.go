// Package traffic proves with requests that the clusterset works: clients in pods of one member reach services
// exported from others by their clusterset.local names, through the ClusterSetIP and kube-proxy, over TCP and UDP,
// and headless names connect to the pods of every exporting cluster. Every request goes from a pod, through the
// member's DNS and kube-proxy, to a pod, and the reply names the pod that answered.
package traffic

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/nodeimages"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

const (
	ns      = "traffic"
	timeout = 90 * time.Second
)

// env is the running fleet the subtests share.
type env struct {
	f       *framework.Fleet
	kubectl string
	a, b, c *framework.Member
}

func TestTraffic(t *testing.T) {
	if err := dataplane.CheckHost(); err != nil {
		t.Skip(err)
	}
	start := time.Now()
	f, _ := framework.StartTest(t, 3, 2)
	assets, err := clusterset.AssetsDir("")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Logf("fleet with 3 members x 2 nodes built and up in %s", time.Since(start).Round(100*time.Millisecond))
	e := &env{f: f, kubectl: filepath.Join(assets, "kubectl"),
		a: f.Member("cluster-a"), b: f.Member("cluster-b"), c: f.Member("cluster-c")}
	for _, m := range f.Members {
		if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.a.Client.Create(ctx, workload.ClientPod("client", ns)); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, e.a, "app=client", 1)

	t.Run("exported from B only, reached from A over TCP and UDP", e.testOneRemote)
	t.Run("exported from B and C, both answer A", e.testSpread)
	t.Run("a member's forged record changes no import and drops no request", e.testForgedRecord)
	t.Run("the elected controller's node cut from the other members: a sole exporter's service drops no request", e.testLeaderNodeCut)
	t.Run("the elected controller frozen 400 ms of every 500 ms: no request fails", e.testFrozenLeader)
	t.Run("a default-deny NetworkPolicy in the exporting namespace: no member judged unreachable", e.testNetworkPolicy)
	t.Run("a member cut while the elected controller restarts and the leader moves: no request to the cut member", e.testCutThroughRestart)
	t.Run("the broker down while every controller of a member restarts: imports intact", e.testBrokerDownRestart)
	t.Run("not exported: NXDOMAIN and no route", e.testNotExported)
	t.Run("headless StatefulSet across B and C", e.testHeadless)
	t.Run("kubectl expose on 80 in B and 8080 in C: both ports answer", e.testExposedPorts)
	t.Run("locality: PreferSameZone tiers, drain and member loss", e.testLocality)
	t.Run("locality: headless answers the closest cluster tier", e.testHeadlessLocality)

	// Every process of this fleet names a member's folder (its kubeconfig's). Its programs run in pods, from the
	// images; the folder of its binaries (framework.Build) is shared with other suites' fleets, which may run
	// processes from it meanwhile.
	var dirs []string
	for _, c := range f.ClusterSet.All() {
		dirs = append(dirs, filepath.Dir(c.KubeconfigPath))
	}
	if err := f.Stop(); err != nil {
		t.Errorf("stopping the fleet: %v", err)
	}
	if left := dataplane.Leftovers(); len(left) > 0 {
		t.Errorf("the stopped fleet left behind: %v", left)
	}
	if procs := processesUnder(dirs...); len(procs) > 0 {
		t.Errorf("the stopped fleet left processes: %v", procs)
	}
}

// testOneRemote: a client pod in A reaches a service exported only from B by its clusterset.local name, over TCP
// and UDP, through A's ClusterSetIP; the reply names one of B's pods.
func (e *env) testOneRemote(t *testing.T) {
	ctx := context.Background()
	e.deployExported(t, "one", false, e.b)
	name := names.ServiceDNSName(ns, "one")
	vip := e.waitImportIP(t, e.a, "one")
	// Each of A's CoreDNS replicas indexes the import from its own watch, a moment after the controller's cache
	// has it: the name resolves within that moment, whichever replica kube-proxy picks.
	poll.T(t, timeout, "nslookup "+name+" in a pod of A answers the ClusterSetIP "+vip, func() error {
		if out := e.execOK(t, e.a, "client", "nslookup", name); !strings.Contains(out, "Address: "+vip) {
			return fmt.Errorf("nslookup answered:\n%s", out)
		}
		return nil
	})
	bPods := e.podNames(t, e.b, "app=one")
	for _, proto := range []string{"tcp", "udp"} {
		flag := ""
		if proto == "udp" {
			flag = "-u "
		}
		var reply string
		// The first request may race kube-proxy's first sync of the new VIP; a request that fails is retried
		// until the deadline, and the reply must then name a pod of B.
		poll.T(t, timeout, proto+" reply from B", func() error {
			out, stderr, code, err := workload.Kubectl(ctx, e.kubectl, e.a.KubeconfigPath, e.a.Name, "exec", "-n", ns, "client", "--",
				"sh", "-c", fmt.Sprintf("echo hello | nc %s-w 2 %s %d", flag, name, workload.EchoPort))
			if err != nil || code != 0 || !strings.Contains(out, "echo=hello") {
				return fmt.Errorf("nc: code %d %v: %q %q", code, err, out, stderr)
			}
			reply = out
			return nil
		})
		if !strings.Contains(reply, "cluster=cluster-b") || !slices.ContainsFunc(bPods, func(p string) bool { return strings.Contains(reply, "pod="+p) }) {
			t.Errorf("%s reply %q does not name a pod of cluster-b %v", proto, reply, bPods)
		}
	}
	// The packets went through A's ClusterSetIP: nc to the VIP itself answers too.
	out := e.execOK(t, e.a, "client", "sh", "-c", fmt.Sprintf("echo hi | nc -w 2 %s %d", vip, workload.EchoPort))
	if !strings.Contains(out, "cluster=cluster-b") {
		t.Errorf("nc to the ClusterSetIP %s answered %q, want cluster-b", vip, out)
	}
	// HTTP from curl, as a user would test it.
	out = e.execOK(t, e.a, "client", "curl", "-sS", "-m", "3", fmt.Sprintf("http://%s:%d/", name, workload.ServicePort))
	if !strings.HasPrefix(out, "cluster=cluster-b ") {
		t.Errorf("curl answered %q, want cluster-b", out)
	}
}

// testSpread: exported from B and C, over 100 requests from A reach both clusters, with no failure.
func (e *env) testSpread(t *testing.T) {
	e.deployExported(t, "spread", false, e.b, e.c)
	e.waitImportIP(t, e.a, "spread")
	e.waitImportedEndpoints(t, e.a, "spread", map[string]int{"cluster-b": 2, "cluster-c": 2})
	target := fmt.Sprintf("%s:%d", names.ServiceDNSName(ns, "spread"), workload.EchoPort)
	loop := func(n string) []workload.Request {
		out := e.execOK(t, e.a, "client", nodeimages.ServeBin, "loop", "-target", target, "-count", n, "-interval", "5ms")
		return workload.ParseLoop(out)
	}
	// kube-proxy programs a new VIP and its endpoints within its sync period after the controller writes them:
	// until then a request may be refused. Once one request has been answered by each cluster, none may fail.
	poll.T(t, timeout, "kube-proxy sends requests to both clusters", func() error {
		if by := answeredBy(loop("10")); by["cluster-b"] == 0 || by["cluster-c"] == 0 {
			return fmt.Errorf("answered by %v", by)
		}
		return nil
	})
	reqs := loop("120")
	by := answeredBy(reqs)
	if len(reqs) != 120 || sum(by) != 120 {
		t.Fatalf("%d requests reported, %d answered, failures: %v", len(reqs), sum(by), workload.Failures(reqs))
	}
	if by["cluster-b"] < 20 || by["cluster-c"] < 20 {
		t.Errorf("120 requests answered by %v: want both clusters to take a fair share (at least 20 each)", by)
	}
	t.Logf("120 requests from cluster-a: answered by %v", answeredBy(reqs))
}

// testNotExported: a service that is not exported has no clusterset.local name and cannot be reached from another
// member, not even at its own ClusterIP.
func (e *env) testNotExported(t *testing.T) {
	ctx := context.Background()
	if err := workload.Deploy(ctx, e.b.Client, ns, "private", "cluster-b", 1, false); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, e.b, "app=private", 1)
	svc := &corev1.Service{}
	if err := e.b.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "private"}, svc); err != nil {
		t.Fatal(err)
	}
	// B's own pods reach it: the service works where it lives.
	if err := e.b.Client.Create(ctx, workload.ClientPod("client", ns)); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, e.b, "app=client", 1)
	poll.T(t, timeout, "private answers inside cluster-b", func() error {
		out, _, code, err := workload.Kubectl(ctx, e.kubectl, e.b.KubeconfigPath, e.b.Name, "exec", "-n", ns, "client", "--",
			"sh", "-c", fmt.Sprintf("echo x | nc -w 2 private.%s.svc.cluster.local %d", ns, workload.EchoPort))
		if err != nil || code != 0 || !strings.Contains(out, "cluster=cluster-b") {
			return fmt.Errorf("code %d %v %q", code, err, out)
		}
		return nil
	})
	name := names.ServiceDNSName(ns, "private")
	out, _, code, err := workload.Kubectl(ctx, e.kubectl, e.a.KubeconfigPath, e.a.Name, "exec", "-n", ns, "client", "--", "nslookup", name)
	if err != nil || code == 0 || !strings.Contains(out, "NXDOMAIN") {
		t.Errorf("nslookup %s in A: exit %d %v, output %q; want NXDOMAIN and a non-zero exit", name, code, err, out)
	}
	if err := e.a.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "private"}, &mcsv1beta1.ServiceImport{}); !apierrors.IsNotFound(err) {
		t.Errorf("cluster-a has a ServiceImport for the unexported service: %v", err)
	}
	out, _, code, _ = workload.Kubectl(ctx, e.kubectl, e.a.KubeconfigPath, e.a.Name, "exec", "-n", ns, "client", "--",
		"sh", "-c", fmt.Sprintf("echo x | nc -w 2 %s %d", svc.Spec.ClusterIP, workload.EchoPort))
	if code == 0 || strings.Contains(out, "cluster=") {
		t.Errorf("a pod of A reached cluster-b's ClusterIP %s of an unexported service: exit %d, %q", svc.Spec.ClusterIP, code, out)
	}
}

// testHeadless: a headless StatefulSet exported from B and C; the service name returns every ready pod of both
// clusters, and each pod's <host>.<clusterid> name resolves and connects inside a pod of A.
func (e *env) testHeadless(t *testing.T) {
	e.deployExported(t, "db", true, e.b, e.c)
	e.waitImportedEndpoints(t, e.a, "db", map[string]int{"cluster-b": 2, "cluster-c": 2})
	name := names.ServiceDNSName(ns, "db")
	var want []string
	for _, m := range []*framework.Member{e.b, e.c} {
		want = append(want, e.podIPs(t, m, "app=db")...)
	}
	slices.Sort(want)
	poll.T(t, timeout, "the headless name answers every ready pod", func() error {
		out := e.execOK(t, e.a, "client", "dig", "+short", name, "A")
		got := strings.Fields(out)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("dig %s in a pod of A: %v, want %v", name, got, want)
		}
		return nil
	})
	for _, m := range []*framework.Member{e.b, e.c} {
		for _, host := range []string{"db-0", "db-1"} {
			fqdn := fmt.Sprintf("%s.%s.%s", host, m.ID, name)
			out := e.execOK(t, e.a, "client", "sh", "-c", fmt.Sprintf("echo ping | nc -w 2 %s %d", fqdn, workload.EchoPort))
			if want := fmt.Sprintf("cluster=%s pod=%s echo=ping", m.Name, host); strings.TrimSpace(out) != want {
				t.Errorf("nc %s from a pod of A answered %q, want %q", fqdn, out, want)
			}
		}
	}
}

// testExposedPorts: B and C expose the same pods with plain `kubectl expose`, B on port 80 and C on 8080, so each
// Service has one unnamed port. The union names them (tcp-80, tcp-8080) into a valid derived Service, and from A
// the ClusterSetIP answers on both ports: 80 from B's pods, 8080 from C's, every request of a bounded loop.
func (e *env) testExposedPorts(t *testing.T) {
	ctx := context.Background()
	const app = "exposed"
	for _, m := range []*framework.Member{e.b, e.c} {
		if err := workload.Deploy(ctx, m.Client, ns, app, m.Name, 2, false); err != nil {
			t.Fatal(err)
		}
		// The user's own Service: `kubectl expose`, one unnamed port.
		if err := m.Client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app}}); err != nil {
			t.Fatal(err)
		}
		port := map[string]string{e.b.Name: "80", e.c.Name: "8080"}[m.Name]
		poll.T(t, timeout, "kubectl expose in "+m.Name, func() error {
			out, stderr, code, err := workload.Kubectl(ctx, e.kubectl, m.KubeconfigPath, m.Name, "expose", "-n", ns, "deployment", app,
				"--port="+port, fmt.Sprintf("--target-port=%d", workload.HTTPPort))
			if err != nil || code != 0 {
				return fmt.Errorf("exit %d %v: %s %s", code, err, out, stderr)
			}
			return nil
		})
		if err := m.Client.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
		e.waitReady(t, m, "app="+app, 2)
	}
	e.waitImportIP(t, e.a, app)
	poll.T(t, timeout, "the import's ports", func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := e.a.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: app}, si); err != nil {
			return err
		}
		var got []string
		for _, p := range si.Spec.Ports {
			got = append(got, fmt.Sprintf("%s/%d", p.Name, p.Port))
		}
		if want := []string{"tcp-80/80", "tcp-8080/8080"}; !slices.Equal(got, want) {
			return fmt.Errorf("ports %v, want %v", got, want)
		}
		return nil
	})
	e.waitImportedEndpoints(t, e.a, app, map[string]int{"cluster-b": 2, "cluster-c": 2})
	name := names.ServiceDNSName(ns, app)
	for port, from := range map[int]string{80: "cluster-b", 8080: "cluster-c"} {
		url := fmt.Sprintf("http://%s:%d/", name, port)
		// The first request may race kube-proxy's sync of the port; then every request of the loop must answer.
		poll.T(t, timeout, url+" answers", func() error {
			out, stderr, code, err := workload.Kubectl(ctx, e.kubectl, e.a.KubeconfigPath, e.a.Name, "exec", "-n", ns, "client", "--",
				"curl", "-sS", "-m", "2", url)
			if err != nil || code != 0 || !strings.HasPrefix(out, "cluster=") {
				return fmt.Errorf("curl: exit %d %v: %q %q", code, err, out, stderr)
			}
			return nil
		})
		const n = 20
		out := e.execOK(t, e.a, "client", "sh", "-c", fmt.Sprintf(
			`i=0; while [ $i -lt %d ]; do curl -sS -m 2 %s || echo FAILED; echo; i=$((i+1)); done`, n, url))
		ok, failed, wrong := 0, 0, 0
		for line := range strings.SplitSeq(out, "\n") {
			switch {
			case strings.HasPrefix(line, "cluster="+from+" "):
				ok++
			case strings.Contains(line, "FAILED"):
				failed++
			case strings.HasPrefix(line, "cluster="):
				wrong++
			}
		}
		t.Logf("port %d: %d of %d requests answered by %s, %d failed, %d answered by another cluster", port, ok, n, from, failed, wrong)
		if ok != n {
			t.Errorf("port %d: %d of %d requests answered by %s (%d failed, %d elsewhere):\n%s", port, ok, n, from, failed, wrong, out)
		}
	}
}

// deployExported deploys app with two serve pods in each member and exports it there.
func (e *env) deployExported(t *testing.T, app string, headless bool, members ...*framework.Member) {
	t.Helper()
	ctx := context.Background()
	for _, m := range members {
		if err := workload.Deploy(ctx, m.Client, ns, app, m.Name, 2, headless); err != nil {
			t.Fatal(err)
		}
		if err := m.Client.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range members {
		e.waitReady(t, m, "app="+app, 2)
	}
}

// waitReady waits until n pods matching selector are Ready.
func (e *env) waitReady(t *testing.T, m *framework.Member, selector string, n int) {
	t.Helper()
	poll.T(t, timeout, fmt.Sprintf("%d ready pods %s in %s", n, selector, m.Name), func() error {
		pods, err := m.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range pods.Items {
			if workload.PodReady(&p) {
				ready++
			}
		}
		if ready != n {
			return fmt.Errorf("%d of %d ready", ready, len(pods.Items))
		}
		return nil
	})
}

func (e *env) pods(t *testing.T, m *framework.Member, selector string) []corev1.Pod {
	t.Helper()
	pods, err := m.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func (e *env) podNames(t *testing.T, m *framework.Member, selector string) []string {
	var names []string
	for _, p := range e.pods(t, m, selector) {
		names = append(names, p.Name)
	}
	return names
}

func (e *env) podIPs(t *testing.T, m *framework.Member, selector string) []string {
	var ips []string
	for _, p := range e.pods(t, m, selector) {
		ips = append(ips, p.Status.PodIP)
	}
	return ips
}

// waitImportIP waits for m's ServiceImport of svc to have its IPv4 ClusterSetIP, and returns it.
func (e *env) waitImportIP(t *testing.T, m *framework.Member, svc string) string {
	t.Helper()
	var vip string
	poll.T(t, timeout, "ServiceImport "+svc+" in "+m.Name+" has its IPs", func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := m.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: svc}, si); err != nil {
			return err
		}
		if len(si.Spec.IPs) == 0 {
			return fmt.Errorf("no IPs yet")
		}
		vip = si.Spec.IPs[0]
		return nil
	})
	return vip
}

// waitImportedEndpoints waits until m's imported IPv4 slices of svc hold want ready endpoints per source cluster.
func (e *env) waitImportedEndpoints(t *testing.T, m *framework.Member, svc string, want map[string]int) {
	t.Helper()
	poll.T(t, timeout, "imported endpoints of "+svc+" in "+m.Name, func() error {
		got, err := readyEndpoints(context.Background(), m, svc)
		if err != nil {
			return err
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("ready endpoints per cluster %v, want %v", got, want)
		}
		return nil
	})
}

// readyEndpoints counts the ready endpoints of m's imported IPv4 slices of svc per source cluster.
func readyEndpoints(ctx context.Context, m *framework.Member, svc string) (map[string]int, error) {
	slices, err := m.Kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: mcsv1beta1.LabelServiceName + "=" + svc,
	})
	if err != nil {
		return nil, err
	}
	got := map[string]int{}
	for _, s := range slices.Items {
		if s.AddressType != "IPv4" {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				got[s.Labels[mcsv1beta1.LabelSourceCluster]]++
			}
		}
	}
	return got, nil
}

// execOK runs a command in a pod through `kubectl exec` and fails the test unless it exits 0.
func (e *env) execOK(t *testing.T, m *framework.Member, pod string, cmd ...string) string {
	t.Helper()
	out, stderr, code, err := workload.Kubectl(context.Background(), e.kubectl, m.KubeconfigPath, m.Name, append([]string{"exec", "-n", ns, pod, "--"}, cmd...)...)
	if err != nil || code != 0 {
		t.Fatalf("kubectl --context %s exec %s -- %s: exit %d %v\nstdout: %s\nstderr: %s", m.Name, pod, strings.Join(cmd, " "), code, err, out, stderr)
	}
	return out
}

// answeredBy counts the answers of each cluster.
func answeredBy(reqs []workload.Request) map[string]int {
	return workload.AnsweredBy(reqs, workload.ByCluster)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// processesUnder lists the running processes whose command line names a file under one of dirs: what a fleet
// started from its binaries, and pods' processes, which run the fleet's serve.
func processesUnder(dirs ...string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		cmdline := strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
		for _, d := range dirs {
			if strings.Contains(cmdline, d+"/") {
				found = append(found, ent.Name()+": "+cmdline)
			}
		}
	}
	return found
}

// startLoop starts a loop pod in cluster-a and follows its requests until the test ends, when the pod is deleted.
func (e *env) startLoop(t *testing.T, pod *corev1.Pod) *workload.Loop {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	loop, err := workload.StartLoop(ctx, e.a.Kube, pod, timeout)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		_ = e.a.Kube.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	})
	return loop
}
