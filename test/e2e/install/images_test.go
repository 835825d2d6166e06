package install

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/build/deploy/corefile"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
)

const (
	// Our images' names; build.sh tags them with the tree's version (build/images/version.sh).
	coreDNSName    = "ghcr.io/vksfleet/coredns"
	controllerName = "ghcr.io/vksfleet/mcs-controller"
	// The size budgets, compressed as a registry stores and serves the images.
	coreDNSBudgetMB    = 25
	controllerBudgetMB = 30
	timeout            = 2 * time.Minute
)

// engine is the private Docker engine of build/docker.sh.
type engine struct {
	host    string // DOCKER_HOST
	pidfile string
}

// startEngine starts the private engine unless it runs already; if this test started it, the test stops it at
// the end and checks that no engine process is left.
func startEngine(t *testing.T) *engine {
	t.Helper()
	state := filepath.Join(root, ".cache", "docker")
	e := &engine{host: "unix://" + filepath.Join(state, "docker.sock"), pidfile: filepath.Join(state, "dockerd.pid")}
	out, err := exec.Command("bash", filepath.Join(root, "build", "docker.sh"), "start").CombinedOutput()
	if err != nil {
		t.Fatalf("build/docker.sh start: %v\n%s", err, out)
	}
	status := strings.TrimSpace(string(out))
	t.Logf("docker engine: %s", status)
	if status != "started" {
		return e
	}
	b, err := os.ReadFile(e.pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("bash", filepath.Join(root, "build", "docker.sh"), "stop").CombinedOutput(); err != nil {
			t.Errorf("build/docker.sh stop: %v\n%s", err, out)
		}
		// dockerd waits for its containerd and containers before it exits: once it is gone, nothing of it runs.
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("dockerd %d still runs after build/docker.sh stop", pid)
		}
		if out, _ := exec.Command("pgrep", "-f", filepath.Join(state, "exec")).Output(); len(out) > 0 {
			t.Errorf("engine processes left: %s", out)
		}
	})
	return e
}

// docker runs the docker.io client against the engine.
func (e *engine) docker(args ...string) (string, error) {
	cmd := exec.Command("/usr/bin/docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+e.host)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// run starts a container in the background on the host's network; it is removed at the end of the test, its log
// shown if the test failed.
func (e *engine) run(t *testing.T, name string, args ...string) {
	t.Helper()
	name = fmt.Sprintf("fleet-install-%d-%s", os.Getpid(), name)
	_, _ = e.docker("rm", "-f", name)
	if _, err := e.docker(append([]string{"run", "-d", "--name", name, "--network", "host"}, args...)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := e.docker("logs", "--tail", "40", name)
			t.Logf("%s's log ends with:\n%s", name, logs)
		}
		if _, err := e.docker("rm", "-f", name); err != nil {
			t.Error(err)
		}
	})
}

var sizeRe = regexp.MustCompile(`(?m)^images: (\S+)  ([0-9.]+) MB, ([0-9.]+) MB compressed$`)

// TestImages builds both images with build/images/build.sh (what `make images` runs), then runs them against the
// local clusterset as a member runs them: one mcs-controller container per member, whose probes answer and whose
// export of cluster-a's services reaches the broker and cluster-b; and a CoreDNS container for cluster-b, on port
// 53 as user 65532 with only CAP_NET_BIND_SERVICE, answering clusterset.local and cluster.local.
func TestImages(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: the image test runs a private Docker engine (build/docker.sh), which needs root; CI runs as root")
	}
	e := startEngine(t)
	start := time.Now()
	cmd := exec.Command("bash", filepath.Join(root, "build", "images", "build.sh"))
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+e.host)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("build/images/build.sh: %v\n%s", err, out)
	}
	t.Logf("images built in %v:\n%s", time.Since(start).Round(time.Second), out)
	budgets := map[string]float64{coreDNSName: coreDNSBudgetMB, controllerName: controllerBudgetMB}
	refs := map[string]string{} // the images build.sh built, by name
	for _, m := range sizeRe.FindAllStringSubmatch(string(out), -1) {
		name := m[1][:max(strings.LastIndex(m[1], ":"), 0)]
		packed, _ := strconv.ParseFloat(m[3], 64)
		if budget, ok := budgets[name]; ok && packed >= budget {
			t.Errorf("%s is %v MB compressed, over its %v MB budget", m[1], packed, budget)
		}
		delete(budgets, name)
		refs[name] = m[1]
	}
	if len(budgets) > 0 {
		t.Fatalf("build.sh printed no size for %v", budgets)
	}
	coreDNSImage, controllerImage := refs[coreDNSName], refs[controllerName]
	user, err := e.docker("image", "inspect", "-f", "{{.Config.User}} {{index .Config.Labels \"org.opencontainers.image.revision\"}}", coreDNSImage)
	if err != nil || !strings.HasPrefix(user, "65532:65532 ") || len(user) < len("65532:65532 ")+40 {
		t.Errorf("coredns image: user and revision %q (%v), want 65532:65532 and a git commit", user, err)
	}

	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	a, b := cs.Member("cluster-a"), cs.Member("cluster-b")
	brokerConfig := readable(t, cs.Broker, dir)
	hc := httpClient
	for _, m := range []*clusterset.Cluster{a, b} {
		port, err := clusterset.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		e.run(t, "controller-"+m.Name, "--user", "65532:65532", "--read-only", "--cap-drop", "ALL",
			"--security-opt", "no-new-privileges",
			"-v", readable(t, m, dir)+":/etc/mcs/kubeconfig:ro", "-v", brokerConfig+":/etc/mcs/broker:ro",
			controllerImage, "--kubeconfig=/etc/mcs/kubeconfig", "--broker-kubeconfig=/etc/mcs/broker",
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", port), "--metrics-bind-address=0")
		for _, probe := range []string{"healthz", "readyz"} {
			url := fmt.Sprintf("http://127.0.0.1:%d/%s", port, probe)
			poll.T(t, timeout, m.Name+"'s controller container answering "+url, func() error { return httpOK(hc, url) })
		}
	}
	t.Logf("both controller containers answer /healthz and /readyz")

	// cluster-a runs and exports backend (a ClusterSetIP service) and db (headless); cluster-b imports them.
	ctx := context.Background()
	const ns = "images"
	for _, m := range []*clusterset.Cluster{a, b} {
		if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, svc := range []struct {
		name     string
		headless bool
	}{{"backend", false}, {"db", true}} {
		labels := map[string]string{"app": svc.name}
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc.name}, Spec: corev1.ServiceSpec{
			Selector: labels, Ports: []corev1.ServicePort{{Name: "tcp", Port: 80}},
		}}
		if svc.headless {
			s.Spec.ClusterIP = corev1.ClusterIPNone
		}
		if err := a.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", svc.name, i), Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
			if err := a.Client.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Client.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc.name}}); err != nil {
			t.Fatal(err)
		}
	}
	record := types.NamespacedName{Namespace: names.BrokerNamespace(a.ID), Name: names.RecordName(ns, "backend")}
	poll.T(t, timeout, "cluster-a's export record "+record.String()+" on the broker", func() error {
		return cs.Broker.Records.Get(ctx, record, &mcsv1beta1.ServiceImport{})
	})
	var vip string
	poll.T(t, timeout, "cluster-b's ServiceImport of backend with a ClusterSetIP", func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := b.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "backend"}, si); err != nil {
			return err
		}
		if len(si.Spec.IPs) == 0 {
			return fmt.Errorf("no IPs yet")
		}
		vip = si.Spec.IPs[0]
		return nil
	})
	var dbIPs []string
	poll.T(t, timeout, "cluster-a's db pods running", func() error {
		dbIPs = nil
		for i := range 2 {
			pod := &corev1.Pod{}
			if err := a.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("db-%d", i)}, pod); err != nil {
				return err
			}
			if pod.Status.PodIP == "" {
				return fmt.Errorf("%s has no IP yet", pod.Name)
			}
			dbIPs = append(dbIPs, pod.Status.PodIP)
		}
		return nil
	})

	// Our CoreDNS for cluster-b, on port 53 of a loopback address of its own.
	addr := freeLoopback53(t)
	readyPort, err := clusterset.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "Corefile")
	s := corefile.Server{
		Port: 53, Bind: []string{addr}, Stock: corefile.Stock{Ready: true}, ReadyAddr: fmt.Sprintf("127.0.0.1:%d", readyPort),
		Kubeconfig: "/etc/coredns/kubeconfig", Context: "cluster-b",
		Kubernetes: &corefile.Kubernetes{Reverse: true}, Multicluster: &corefile.Multicluster{Reverse: true},
	}
	if err := os.WriteFile(conf, []byte(s.Render()), 0o644); err != nil {
		t.Fatal(err)
	}
	// Without no-new-privileges: Docker 20.10 gives a non-root process no permitted capabilities, and under
	// no-new-privileges the kernel grants a file capability only within them, so port 53 would be refused.
	e.run(t, "coredns", "--user", "65532:65532", "--read-only", "--cap-drop", "ALL", "--cap-add", "NET_BIND_SERVICE",
		"-v", conf+":/etc/coredns/Corefile:ro", "-v", readable(t, b, dir)+":/etc/coredns/kubeconfig:ro",
		coreDNSImage, "-conf", "/etc/coredns/Corefile")
	poll.T(t, timeout, "the CoreDNS container ready", func() error { return httpOK(hc, "http://"+s.ReadyAddr+"/ready") })
	server := addr + ":53"
	kubernetesIP := ""
	svc := &corev1.Service{}
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "kubernetes"}, svc); err != nil {
		t.Fatal(err)
	}
	kubernetesIP = svc.Spec.ClusterIP
	for _, q := range []struct {
		name, qtype string
		want        []string
	}{
		{names.ServiceDNSName(ns, "backend"), "A", []string{vip}},
		{names.ServiceDNSName(ns, "db"), "A", dbIPs},
		{names.DNSVersionName, "TXT", []string{strconv.Quote(names.DNSSchemaVersion)}},
		{"kubernetes.default.svc.cluster.local", "A", []string{kubernetesIP}},
	} {
		poll.T(t, timeout, "the CoreDNS container answering "+q.name, func() error { return wantAnswers(server, q.name, q.qtype, q.want...) })
		t.Logf("dig @%s %s %s: %v", server, q.name, q.qtype, q.want)
	}
}

var httpClient = &http.Client{Timeout: time.Second}

func httpOK(hc *http.Client, url string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// freeLoopback53 returns a loopback address, other than 127.0.0.1, whose port 53 is free over UDP and TCP.
func freeLoopback53(t *testing.T) string {
	t.Helper()
	for range 20 {
		addr := fmt.Sprintf("127.%d.%d.%d", 100+rand.IntN(100), rand.IntN(256), 1+rand.IntN(254))
		l, err := net.Listen("tcp", addr+":53")
		if err != nil {
			continue
		}
		p, err := net.ListenPacket("udp", addr+":53")
		l.Close()
		if err != nil {
			continue
		}
		p.Close()
		return addr
	}
	t.Fatal("no loopback address with a free port 53")
	return ""
}
