package clusterset

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"vksfleet.dev/fleet/test/dataplane"
	"vksfleet.dev/fleet/test/poll"
	"vksfleet.dev/fleet/test/proc"
)

// TestNodes runs one member with two nodes of the data plane and checks that its node agents behave as kubelets
// do where tests and demos depend on it: scheduling, pod addresses and DNS settings, the downward API, probes,
// restarts, Jobs, graceful deletion, exec and logs through the API server.
func TestNodes(t *testing.T) {
	if err := dataplane.CheckHost(); err != nil {
		t.Skip(err)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "vksfleet.dev/fleet/test/cmd/nodeagent", "vksfleet.dev/fleet/test/cmd/serve")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the node agent: %v\n%s", err, out)
	}
	cs, err := Start(context.Background(), Options{
		Members: []string{"cluster-a"}, NoBroker: true, Nodes: 2, NodeAgent: filepath.Join(bin, "nodeagent"),
		Regions: map[string]string{"cluster-a": "north"}, Log: proc.TestLog(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Stop() })
	c := cs.Member("cluster-a")
	assets, err := AssetsDir("")
	if err != nil {
		t.Fatal(err)
	}
	k := &kubectl{t: t, bin: filepath.Join(assets, "kubectl"), kubeconfig: c.KubeconfigPath, context: c.Name}

	t.Run("nodes are Ready with zones, a region and InternalIPs", func(t *testing.T) { testNodeObjects(t, c) })
	t.Run("pods get addresses, hostname, resolv.conf and downward API env", func(t *testing.T) { testPodIdentity(t, c, k) })
	t.Run("a missing binary fails the container clearly", func(t *testing.T) { testMissingBinary(t, c) })
	t.Run("readiness follows exec, tcpSocket and httpGet probes", func(t *testing.T) { testProbes(t, c, filepath.Join(bin, "serve")) })
	t.Run("restarts, previous logs and Jobs", func(t *testing.T) { testRestarts(t, c, k) })
	t.Run("exec streams stdin and exit codes over WebSocket and SPDY", func(t *testing.T) { testExec(t, c, k) })
	t.Run("deletion stops processes and removes the pod network", func(t *testing.T) { testDeletion(t, c) })
}

// kubectl runs the pinned kubectl against the member.
type kubectl struct {
	t                        *testing.T
	bin, kubeconfig, context string
}

func (k *kubectl) run(env []string, stdin string, args ...string) (string, int) {
	k.t.Helper()
	cmd := exec.Command(k.bin, append([]string{"--kubeconfig", k.kubeconfig, "--context", k.context}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		k.t.Fatalf("kubectl %v: %v", args, err)
	}
	return string(out), 0
}

func (k *kubectl) ok(args ...string) string {
	k.t.Helper()
	out, code := k.run(nil, "", args...)
	if code != 0 {
		k.t.Fatalf("kubectl %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

const podTimeout = 60 * time.Second

// pod is a one-container pod running a shell script.
func pod(name, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](2),
			Containers:                    []corev1.Container{{Name: "main", Image: "none", Command: []string{"sh", "-c", script}}},
		},
	}
}

func create(t *testing.T, c *Cluster, p *corev1.Pod) {
	t.Helper()
	if _, err := c.Kube.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitPod polls the pod until cond holds.
func waitPod(t *testing.T, c *Cluster, name, what string, cond func(*corev1.Pod) error) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	poll.T(t, podTimeout, name+": "+what, func() error {
		var err error
		if p, err = c.Kube.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			return err
		}
		return cond(p)
	})
	return p
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func isReady(want bool) func(*corev1.Pod) error {
	return func(p *corev1.Pod) error {
		if ready(p) != want {
			return fmt.Errorf("phase %s, Ready %v", p.Status.Phase, ready(p))
		}
		return nil
	}
}

func testNodeObjects(t *testing.T, c *Cluster) {
	nodes, err := c.Kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 2 {
		t.Fatalf("%d nodes, want 2", len(nodes.Items))
	}
	zones := map[string]bool{}
	for _, n := range nodes.Items {
		if !nodeReady(&n) || len(n.Spec.Taints) > 0 {
			t.Errorf("node %s: Ready %v, taints %v", n.Name, nodeReady(&n), n.Spec.Taints)
		}
		zones[n.Labels[corev1.LabelTopologyZone]] = true
		if r := n.Labels[corev1.LabelTopologyRegion]; r != "north" {
			t.Errorf("node %s region %q, want north", n.Name, r)
		}
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				t.Errorf("node %s has address %v: only InternalIPs, so that the API server reaches the agent", n.Name, a)
			}
		}
		if len(n.Spec.PodCIDRs) != 2 {
			t.Errorf("node %s pod CIDRs %v, want one per family", n.Name, n.Spec.PodCIDRs)
		}
	}
	if len(zones) != 2 || zones[""] {
		t.Errorf("zones %v: want a distinct zone per node", zones)
	}
}

func testPodIdentity(t *testing.T, c *Cluster, k *kubectl) {
	p := pod("who", `echo "ip=$IP ips=$IPS name=$NAME ns=$NS host=$(hostname)"; cat /etc/resolv.conf; exec sleep 600`)
	p.Spec.Hostname, p.Spec.Subdomain = "who-0", "whos"
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	p.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "IP", ValueFrom: field("status.podIP")}, {Name: "IPS", ValueFrom: field("status.podIPs")},
		{Name: "NAME", ValueFrom: field("metadata.name")}, {Name: "NS", ValueFrom: field("metadata.namespace")},
	}
	create(t, c, p)
	p = waitPod(t, c, "who", "Running and Ready", isReady(true))
	if len(p.Status.PodIPs) != 2 || p.Spec.NodeName == "" {
		t.Fatalf("pod IPs %v on node %q: want one address per family on a scheduled node", p.Status.PodIPs, p.Spec.NodeName)
	}
	var node *Node
	for _, n := range c.Nodes {
		if n.Name == p.Spec.NodeName {
			node = n
		}
	}
	for i, ip := range p.Status.PodIPs {
		if !node.PodCIDRs[i].Contains(mustAddr(t, ip.IP)) {
			t.Errorf("pod IP %s outside its node's pod CIDR %s", ip.IP, node.PodCIDRs[i])
		}
	}
	want := fmt.Sprintf("ip=%s ips=%s,%s name=who ns=default host=who-0", p.Status.PodIP, p.Status.PodIPs[0].IP, p.Status.PodIPs[1].IP)
	var logs string
	poll.T(t, podTimeout, "logs", func() error {
		if logs = k.ok("logs", "who"); !strings.Contains(logs, "options ndots:5") {
			return fmt.Errorf("logs so far: %q", logs)
		}
		return nil
	})
	for _, line := range []string{want, "search default.svc.cluster.local svc.cluster.local cluster.local", "nameserver " + c.DNSServiceIP.String()} {
		if !strings.Contains(logs, line+"\n") {
			t.Errorf("kubectl logs who:\n%s\nlacks the line %q", logs, line)
		}
	}
	if hosts := k.ok("exec", "who", "--", "cat", "/etc/hosts"); !strings.Contains(hosts, p.Status.PodIP+"\twho-0.whos.default.svc.cluster.local who-0") {
		t.Errorf("/etc/hosts in the pod:\n%s\nlacks the pod's FQDN", hosts)
	}
}

func testMissingBinary(t *testing.T, c *Cluster) {
	p := pod("missing", "")
	p.Spec.Containers[0].Command = []string{"no-such-binary-here"}
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	create(t, c, p)
	p = waitPod(t, c, "missing", "Failed", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodFailed {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	term := p.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.Reason != "StartError" || !strings.Contains(term.Message, "no-such-binary-here") || !strings.Contains(term.Message, "not found") {
		t.Errorf("container state %+v: want Terminated, reason StartError, naming the missing binary", p.Status.ContainerStatuses[0].State)
	}
}

func testProbes(t *testing.T, c *Cluster, serve string) {
	marker := filepath.Join(t.TempDir(), "ready")
	execPod := pod("probe-exec", "exec sleep 600")
	execPod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
		Exec: &corev1.ExecAction{Command: []string{"test", "-e", marker}}}}
	create(t, c, execPod)
	// The pod runs, and stays unready while the probe fails.
	waitPod(t, c, "probe-exec", "Running, not Ready", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodRunning || ready(p) {
			return fmt.Errorf("phase %s, Ready %v", p.Status.Phase, ready(p))
		}
		return nil
	})
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, "probe-exec", "Ready once the exec probe passes", isReady(true))
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, "probe-exec", "not Ready once the exec probe fails", isReady(false))

	// tcpSocket: the port opens three seconds after start.
	tcpPod := pod("probe-tcp", "sleep 3; exec socat TCP-LISTEN:7100,fork,reuseaddr EXEC:cat")
	tcpPod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
		TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(7100)}}}
	httpPod := pod("probe-http", "exec "+serve+" -tcp= -udp= -http=:7200")
	httpPod.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "web", ContainerPort: 7200}}
	httpPod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
		HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("web")}}}
	create(t, c, tcpPod)
	create(t, c, httpPod)
	p := waitPod(t, c, "probe-tcp", "Ready once its port accepts", isReady(true))
	if started := p.Status.StartTime.Time; time.Since(started) < 3*time.Second {
		t.Errorf("probe-tcp became Ready %s after start, before its port opened", time.Since(started))
	}
	waitPod(t, c, "probe-http", "Ready once its HTTP check answers", isReady(true))
}

func testRestarts(t *testing.T, c *Cluster, k *kubectl) {
	create(t, c, pod("crash", `echo "run $(date +%s%N)"; exit 3`))
	p := waitPod(t, c, "crash", "restarted twice", func(p *corev1.Pod) error {
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].RestartCount < 2 {
			return fmt.Errorf("container statuses %+v", p.Status.ContainerStatuses)
		}
		return nil
	})
	last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated
	if last == nil || last.ExitCode != 3 {
		t.Errorf("last termination %+v, want exit code 3", p.Status.ContainerStatuses[0].LastTerminationState)
	}
	if prev := k.ok("logs", "crash", "--previous"); !strings.HasPrefix(prev, "run ") {
		t.Errorf("kubectl logs --previous: %q, want the previous run's line", prev)
	}

	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: "default"},
		Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](2), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyOnFailure,
			Containers:    []corev1.Container{{Name: "once", Image: "none", Command: []string{"sh", "-c", "echo done"}}},
		}}},
	}
	if _, err := c.Kube.BatchV1().Jobs("default").Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.T(t, podTimeout, "the Job completes", func() error {
		j, err := c.Kube.BatchV1().Jobs("default").Get(context.Background(), "once", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if j.Status.Succeeded != 1 {
			return fmt.Errorf("job status %+v", j.Status)
		}
		return nil
	})
	// A finished pod keeps its logs but gives its network back.
	pods, err := c.Kube.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=once"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the Job's pods: %v %v", pods, err)
	}
	poll.T(t, podTimeout, "the finished pod's network namespace is removed", func() error {
		if slices.Contains(dataplane.Namespaces(), dataplane.PodNS(string(pods.Items[0].UID))) {
			return fmt.Errorf("still there")
		}
		return nil
	})
	if out := k.ok("logs", "job/once"); out != "done\n" {
		t.Errorf("kubectl logs job/once: %q, want %q", out, "done\n")
	}
}

func testExec(t *testing.T, c *Cluster, k *kubectl) {
	create(t, c, pod("sh", "exec sleep 600"))
	waitPod(t, c, "sh", "Ready", isReady(true))
	for transport, env := range map[string][]string{
		"WebSocket": nil,
		"SPDY":      {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"},
	} {
		out, code := k.run(env, "hello from stdin\n", "exec", "-i", "sh", "--", "sh", "-c", "cat; hostname; exit 7")
		if code != 7 || out != "hello from stdin\nsh\ncommand terminated with exit code 7\n" {
			t.Errorf("%s: kubectl exec -i: exit %d, output %q; want the input echoed, the pod's hostname and exit code 7", transport, code, out)
		}
	}
	if out, code := k.run(nil, "", "exec", "sh", "--", "no-such-command"); code != 127 {
		t.Errorf("exec of a missing command: exit %d (%q), want 127", code, out)
	}
}

func testDeletion(t *testing.T, c *Cluster) {
	ctx := context.Background()
	// One pod leaves at SIGTERM; the other ignores it and is killed when its 2 s grace period ends.
	create(t, c, pod("polite", "trap 'exit 0' TERM; while true; do sleep 0.1; done"))
	create(t, c, pod("stubborn", "trap '' TERM; while true; do sleep 0.1; done"))
	var uids []string
	for _, name := range []string{"polite", "stubborn"} {
		p := waitPod(t, c, name, "Ready", isReady(true))
		uids = append(uids, string(p.UID))
	}
	took := map[string]time.Duration{}
	for _, name := range []string{"polite", "stubborn"} {
		start := time.Now()
		if err := c.Kube.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		poll.T(t, podTimeout, name+" is gone", func() error {
			_, err := c.Kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there (%v)", err)
		})
		took[name] = time.Since(start)
	}
	if took["polite"] > 1500*time.Millisecond || took["stubborn"] < 2*time.Second {
		t.Errorf("deletion took %v: want the polite pod gone at SIGTERM and the stubborn one only after its 2 s grace", took)
	}
	for _, uid := range uids {
		if slices.Contains(dataplane.Namespaces(), dataplane.PodNS(uid)) {
			t.Errorf("pod %s's network namespace is still there", uid)
		}
	}
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
