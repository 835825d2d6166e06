package clusterset

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/nodeimages"
	"vksfleet.dev/fleet/test/env/poll"
)

// A node runs Debian's containerd 1.6 and the kubelet built from the pinned Kubernetes
// (build/tools.sh) in the node's network namespace (Node.start). Why each setting is as it is:
// docs/local-clusterset.md, "How it is built" (Nodes).

// kubeletCheck says what a kubelet node needs that is missing, before anything starts.
func kubeletCheck(opts Options, assets string) error {
	if _, err := os.Stat(filepath.Join(assets, "kubelet")); err != nil {
		return fmt.Errorf("clusterset: kubelet not found in %s: run `make tools` first", assets)
	}
	for _, tool := range []string{"containerd", "ctr", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("clusterset: %s not found on PATH: run `make tools` (it installs containerd and runc)", tool)
		}
	}
	for _, plugin := range []string{"ptp", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, plugin)); err != nil {
			return fmt.Errorf("clusterset: CNI plugin %s not found in %s: run `make tools` (containernetworking-plugins)", plugin, cniBinDir)
		}
	}
	if len(opts.Images) == 0 {
		return errors.New("clusterset: Options.Images (nodeimages.Build) is required with Nodes: nodes pull nothing")
	}
	return cgroupCheck(dataplane.CgroupFS)
}

// cgroupHierarchies are the cgroup v1 controllers the kubelet and runc use for pods.
var cgroupHierarchies = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "devices"}

// cgroupCheck says which cgroup hierarchy the kubelet needs is missing under root, where they are mounted.
func cgroupCheck(root string) error {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return fmt.Errorf("clusterset: %s is a cgroup v2 hierarchy; the local clusterset's kubelets support only the "+
			"cgroup v1 hierarchies this project's machines have", root)
	}
	var missing []string
	for _, h := range cgroupHierarchies {
		if _, err := os.Stat(filepath.Join(root, h, "cgroup.procs")); err != nil {
			missing = append(missing, h)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("clusterset: the kubelet needs the cgroup v1 hierarchies %s mounted under %s; missing: %s",
			strings.Join(cgroupHierarchies, ", "), root, strings.Join(missing, ", "))
	}
	return nil
}

// cniBinDir is where Debian's containernetworking-plugins installs the plugins.
const cniBinDir = "/usr/lib/cni"

// kubeletPKI are a member's files for the kubelets' side of authentication: the CA the kubelets trust for
// clients, and the certificate it signs for the API server (system:masters), which it presents to kubelets for
// exec and logs.
type kubeletPKI struct {
	caFile, certFile, keyFile string
}

// configureKubeletAuth writes the API server's kubelet client certificate and sets the API server's flags for
// real kubelets: the Node authorizer and NodeRestriction, which accept kubelets' certificates CN=system:node:<node>,
// O=system:nodes. The API server does not verify the kubelets' self-signed serving certificates.
func (c *Cluster) configureKubeletAuth(api *envtest.APIServer) error {
	dir := filepath.Join(c.dir, "kubelet-pki")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	ca, caKey, err := newCA("kubelet-client-ca")
	if err != nil {
		return err
	}
	cert, key, err := newCert(certSpec{cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}}, ca, caKey)
	if err != nil {
		return err
	}
	c.kubeletPKI = kubeletPKI{
		caFile: filepath.Join(dir, "ca.crt"), certFile: filepath.Join(dir, "client.crt"), keyFile: filepath.Join(dir, "client.key"),
	}
	for path, cert := range map[string]*x509.Certificate{c.kubeletPKI.caFile: ca, c.kubeletPKI.certFile: cert} {
		if err := writeCert(path, cert); err != nil {
			return err
		}
	}
	if err := writeKey(c.kubeletPKI.keyFile, key); err != nil {
		return err
	}
	args := api.Configure()
	args.Set("authorization-mode", "Node,RBAC")
	args.Set("enable-admission-plugins", "NodeRestriction")
	args.Set("kubelet-client-certificate", c.kubeletPKI.certFile)
	args.Set("kubelet-client-key", c.kubeletPKI.keyFile)
	args.Set("kubelet-preferred-address-types", "InternalIP")
	return nil
}

// startKubeletNode starts containerd, loads the images into it and starts the kubelet, in node n's namespace.
func (c *Cluster) startKubeletNode(ctx context.Context, spec clusterSpec, assets string, n *Node) error {
	run, data := dataplane.NodeRunDir(n.Name), dataplane.NodeDataDir(n.Name)
	for _, d := range []string{run, data} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := makeCgroupRoot(dataplane.NodeCgroupRoot(n.Name)); err != nil {
		return err
	}
	// The node's end of every new pod link (ptp) gets a link-local address that duplicate address detection
	// keeps tentative for about a second after the pod starts (seen with ip -6 addr), the likely reason why a
	// pod's first IPv6 request once timed out in test/e2e/kubeletnodes. No pod link of the node holds a duplicate.
	if err := dataplane.Run("ip", "netns", "exec", n.NS, "sysctl", "-q", "-w", "net.ipv6.conf.default.accept_dad=0"); err != nil {
		return err
	}
	n.runtimeSocket = filepath.Join(run, "containerd.sock")
	files := map[string]string{
		filepath.Join(run, "containerd.toml"):       containerdConfig(run, data, n.runtimeSocket),
		filepath.Join(data, "cni", "pods.conflist"): cniConfig(filepath.Join(data, "ipam"), n.PodCIDRs),
		// The node's own resolver, which pods with dnsPolicy Default get: the cluster's DNS server among them, which
		// forwards there what is outside its zones. The host link, where nothing serves DNS, refuses at once: no
		// query leaves the machine, and the cluster DNS does not forward to itself (a loop its loop plugin stops
		// it for).
		filepath.Join(data, "resolv.conf"): "nameserver " + dataplane.HostV4.String() + "\n",
	}
	kubeconfig, err := c.nodeKubeconfig(n.Name)
	if err != nil {
		return err
	}
	files[filepath.Join(data, "kubeconfig")] = string(kubeconfig)
	files[filepath.Join(data, "kubelet.yaml")], err = kubeletConfig(c, n, data)
	if err != nil {
		return err
	}
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
	}
	n.containerd, err = n.start(spec.log, "containerd", "containerd", "--config", filepath.Join(run, "containerd.toml"))
	if err != nil {
		return err
	}
	err = n.containerd.Wait(ctx, time.Minute, "serving "+n.runtimeSocket, func() error {
		return exec.CommandContext(ctx, "ctr", "-a", n.runtimeSocket, "version").Run()
	})
	if err != nil {
		return err
	}
	if err := nodeimages.Import(ctx, n.runtimeSocket, spec.images...); err != nil {
		return err
	}
	n.kubelet, err = n.start(spec.log, "kubelet", filepath.Join(assets, "kubelet"),
		"--config="+filepath.Join(data, "kubelet.yaml"),
		"--kubeconfig="+filepath.Join(data, "kubeconfig"),
		"--root-dir="+filepath.Join(data, "kubelet"),
		// The default, /var/lib/kubelet/pki, is the host's: a second kubelet would serve the first one's certificate.
		"--cert-dir="+filepath.Join(data, "pki"),
		"--hostname-override="+n.Name,
		"--node-ip="+joinAddrs(n.Addrs),
		"--v=1",
	)
	return err
}

// nodeKubeconfig returns a kubeconfig with the node's client certificate, CN=system:node:<node>, O=system:nodes,
// signed by the API server's client CA: no bootstrap token or CSR is needed.
func (c *Cluster) nodeKubeconfig(node string) ([]byte, error) {
	u, err := c.env.AddUser(envtest.User{Name: "system:node:" + node, Groups: []string{"system:nodes"}}, c.Config)
	if err != nil {
		return nil, err
	}
	return u.KubeConfig()
}

// makeCgroupRoot creates the kubelet's cgroupRoot in every cgroup v1 hierarchy, where the kubelet wants it to
// exist; cpuset needs its CPUs and memory nodes copied from its parent before a task may join.
func makeCgroupRoot(root string) error {
	hierarchies, err := filepath.Glob(filepath.Join(dataplane.CgroupFS, "*"))
	if err != nil {
		return err
	}
	for _, h := range hierarchies {
		if filepath.Base(h) == "unified" {
			continue // runc creates what it needs in the cgroup2 mount beside the v1 ones
		}
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if filepath.Base(h) != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// containerdConfig is a node's containerd configuration: its own socket, root, state and runc root, so that
// several run on one host.
func containerdConfig(run, data, socket string) string {
	return fmt.Sprintf(`version = 2
root = %[2]q
state = %[3]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = %[4]q
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %[5]q
    # Inside the node's namespace: the kubelet there proxies exec and logs streams to it.
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    # Pods' namespaces under the state folder, not in the host's /run/netns.
    netns_mounts_under_state_dir = true
    # Root here lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj to the kubelet's -998 for sandboxes, and
    # every sandbox fails unless containerd clamps the value to its own.
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = %[6]q
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = %[7]q
      conf_dir = %[8]q
  [plugins."io.containerd.internal.v1.opt"]
    path = %[9]q
`, run, filepath.Join(data, "containerd"), filepath.Join(run, "containerd"), socket, nodeimages.Pause,
		filepath.Join(run, "runc"), cniBinDir, filepath.Join(data, "cni"), filepath.Join(data, "opt"))
}

// cniConfig gives pods one address per family from the node's pod CIDRs (ptp: a veth and a host route per pod in
// the node's namespace, which the fabric already routes the node's pod CIDRs to), with host-local's state in the
// node's folder: its default folder is shared by every node on the host.
func cniConfig(ipamDir string, podCIDRs []netip.Prefix) string {
	var ranges [][]map[string]string
	var routes []map[string]string
	for _, p := range podCIDRs {
		ranges = append(ranges, []map[string]string{{"subnet": p.String()}})
		dst := "0.0.0.0/0"
		if p.Addr().Is6() {
			dst = "::/0"
		}
		routes = append(routes, map[string]string{"dst": dst})
	}
	b, _ := json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       dataplane.CNINetwork,
		"plugins": []any{map[string]any{
			"type": "ptp", "ipMasq": false, "mtu": 1500,
			"ipam": map[string]any{"type": "host-local", "dataDir": ipamDir, "ranges": ranges, "routes": routes},
		}},
	}, "", "  ")
	return string(b)
}

// kubeletConfig is a node's KubeletConfiguration. JSON is YAML: it is written with encoding/json.
func kubeletConfig(c *Cluster, n *Node, data string) (string, error) {
	b, err := json.MarshalIndent(map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		// 1.35 and later refuse cgroup v1 unless told otherwise; these machines have only v1 hierarchies.
		"failCgroupV1":             false,
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               dataplane.NodeCgroupRoot(n.Name),
		"cgroupsPerQOS":            true,
		"enforceNodeAllocatable":   []string{"pods"},
		"containerRuntimeEndpoint": "unix://" + n.runtimeSocket,
		"address":                  n.Addrs[0].String(),
		"port":                     kubeletPort,
		"healthzBindAddress":       "127.0.0.1",
		"healthzPort":              10248,
		"readOnlyPort":             0,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": c.kubeletPKI.caFile},
		},
		"authorization": map[string]any{"mode": "Webhook"},
		"clusterDNS":    []string{c.DNSServiceIP.String()},
		"clusterDomain": "cluster.local",
		// The host's resolv.conf is not the node's business.
		"resolvConf": filepath.Join(data, "resolv.conf"),
		// The default, /var/log/pods, is shared by every kubelet on the host.
		"podLogsDir": filepath.Join(data, "pods"),
		// A ConfigMap's change reaches the volumes that mount it at the pod's next sync: every 10 s here instead of
		// every minute, so that a test that changes a Corefile (test/e2e/install's DNS paths) waits seconds per
		// change, not a minute. What we install waits for every replica to load its Corefile, whatever the period.
		"syncFrequency":       "10s",
		"failSwapOn":          false,
		"serializeImagePulls": false,
		// No image can be pulled again: never collect one. Evict only when the disk is really full.
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard": map[string]string{
			"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
		},
	}, "", "  ")
	return string(b), err
}

// drainKubeletNodes deletes every pod and waits until the kubelets have stopped them and confirmed, so that
// sandboxes, shims, cgroups and pod networks go the way they came. The controllers and the scheduler must be
// stopped already, so that nothing replaces the pods.
func (c *Cluster) drainKubeletNodes(ctx context.Context) error {
	pods := c.Kube.CoreV1().Pods(metav1.NamespaceAll)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	grace := int64(1)
	for _, p := range list.Items {
		err := c.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return poll.Until(ctx, poll.Interval, time.Minute, func() error {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d pods not yet stopped by their kubelets, such as %s/%s", len(list.Items), list.Items[0].Namespace, list.Items[0].Name)
		}
		return nil
	})
}

// stopKubeletNode stops the kubelet, removes the containers it leaves (exited sandboxes, and any task still
// running when draining failed) and stops containerd. Sweep removes the node's folders, mounts and cgroups.
func (n *Node) stopKubeletNode(ctx context.Context) error {
	if n.kubelet != nil {
		n.kubelet.Stop()
	}
	if n.containerd == nil {
		return nil
	}
	var errs []error
	ctr := func(args ...string) ([]string, error) {
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"-a", n.runtimeSocket, "-n", "k8s.io"}, args...)...).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("ctr %s on %s: %v: %s", strings.Join(args, " "), n.Name, err, out)
		}
		return strings.Fields(string(out)), nil
	}
	tasks, err := ctr("tasks", "ls", "-q")
	errs = append(errs, err)
	for _, id := range tasks {
		_, err := ctr("tasks", "rm", "-f", id)
		errs = append(errs, err)
	}
	containers, err := ctr("containers", "ls", "-q")
	errs = append(errs, err)
	for _, id := range containers {
		_, err := ctr("containers", "rm", id)
		errs = append(errs, err)
	}
	if len(tasks) > 0 {
		errs = append(errs, fmt.Errorf("node %s: %d containers still ran after draining, removed by force", n.Name, len(tasks)))
	}
	n.containerd.Stop()
	// Whatever is left now, Sweep would have to kill: the teardown was not clean.
	if left := dataplane.NodeProcesses(n.Name); len(left) > 0 {
		errs = append(errs, fmt.Errorf("node %s: processes %v outlived its containerd", n.Name, left))
	}
	return errors.Join(errs...)
}

// completeNode gives the node's Node what its kubelet registers it without (nodePatch), once the node's kube-proxy
// serves.
func (c *Cluster) completeNode(ctx context.Context, n *Node) error {
	patch, err := nodePatch(n)
	if err != nil {
		return err
	}
	_, err = c.Kube.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	return err
}

// nodePatch sets the node's pod CIDRs, as kube-controller-manager's node IPAM would (its CNI configuration already uses
// them), and its zone and region labels, as a cloud provider's node controller would.
//
// The labels must come after kube-proxy has started, not with the kubelet's registration (--node-labels): kube-proxy
// 1.36 is sure to learn its zone only from a change it sees. A zone the Node already has reaches its NodeTopologyConfig
// as the informer's initial Add, in a goroutine that races the registration of the proxier as its handler
// (cmd/kube-proxy/app/server.go:628-629, pkg/proxy/config/config.go:473-531). When the Add wins, kube-proxy records the
// zone without telling the proxier, skips every later event as no change, and ignores every zone hint for as long as it
// runs: a PreferSameZone import's ClusterSetIP reaches all its endpoints from that node.
func nodePatch(n *Node) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]string{
			corev1.LabelTopologyZone: n.Zone, corev1.LabelTopologyRegion: n.Region,
		}},
		"spec": map[string]any{"podCIDR": n.PodCIDRs[0].String(), "podCIDRs": prefixStrings(n.PodCIDRs)},
	})
}

// createKubeDNSService creates the cluster DNS Service, kube-system/kube-dns at DNSServiceIP, with kubeadm's
// selector, ports and labels: the address every kubelet gives its pods exists from the start, and a DNS add-on
// applied later (ours, from build/deploy) takes the Service over in place.
func (c *Cluster) createKubeDNSService(ctx context.Context) error {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem, Labels: map[string]string{
			"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS",
		}},
		Spec: corev1.ServiceSpec{
			ClusterIP: c.DNSServiceIP.String(),
			Selector:  map[string]string{"k8s-app": "kube-dns"},
			Ports: []corev1.ServicePort{
				{Name: "dns", Protocol: udp, Port: 53, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Protocol: tcp, Port: 53, TargetPort: intstr.FromInt32(53)},
				{Name: "metrics", Protocol: tcp, Port: 9153, TargetPort: intstr.FromInt32(9153)},
			},
		},
	}
	if err := c.Client.Create(ctx, svc); err != nil {
		return fmt.Errorf("creating the kube-dns Service: %w", err)
	}
	return nil
}

// PodsMemory is the memory the node's pods use: total_rss of the kubelet's kubepods cgroup under the node's
// cgroupRoot, which holds every pod of the node.
func (n *Node) PodsMemory() (int64, error) { return cgroupRSS(n.kubepods()) }

// kubepods is the memory cgroup under which the node's kubelet puts every pod (cgroupsPerQOS).
func (n *Node) kubepods() string {
	return filepath.Join(dataplane.CgroupFS, "memory", dataplane.NodeCgroupRoot(n.Name), "kubepods")
}

// PodMemory is the memory of one pod of the member, by its UID: total_rss of its cgroup, in whichever QoS class
// and node it runs.
func (c *Cluster) PodMemory(uid types.UID) (int64, error) {
	for _, n := range c.Nodes {
		base := n.kubepods()
		for _, dir := range []string{base, filepath.Join(base, "burstable"), filepath.Join(base, "besteffort")} {
			p := filepath.Join(dir, "pod"+string(uid))
			if _, err := os.Stat(p); err == nil {
				return cgroupRSS(p)
			}
		}
	}
	return 0, fmt.Errorf("clusterset: no cgroup for pod %s on %s's nodes", uid, c.Name)
}

// cgroupRSS reads total_rss from a cgroup v1 memory.stat: the anonymous memory of every process in the cgroup
// and its children.
func cgroupRSS(dir string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "total_rss "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("%s/memory.stat has no total_rss", dir)
}
