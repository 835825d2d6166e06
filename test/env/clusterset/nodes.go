package clusterset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/proc"
)

// Node is one node of a member with a data plane: a network namespace running kube-proxy, containerd and the
// kubelet.
type Node struct {
	// Name is the Node's name.
	Name string
	// Zone and Region are the Node's topology labels.
	Zone, Region string
	// NS is the node's network namespace.
	NS string
	// Addrs are the node's addresses (IPv4, IPv6).
	Addrs []netip.Addr
	// PodCIDRs are the node's share of the member's pod CIDRs.
	PodCIDRs []netip.Prefix
	// ReadyAfter is how long the node took to be Ready from the start of its containerd, as Start
	// saw it (to within 100 ms and the time the other nodes took to start).
	ReadyAfter time.Duration

	proxy, containerd, kubelet *proc.Process
	started                    time.Time
	runtimeSocket              string // containerd's
}

// kubeletPort is where every kubelet serves exec and logs; nodes have addresses of their own.
const kubeletPort = 10250

// proxyHealthPort is kube-proxy's healthz port; it answers 200 once the first sync is done.
const proxyHealthPort = 10256

// startNodes creates the member's nodes in the data plane, each with containerd, a kubelet and kube-proxy, and waits until every Node is Ready and every kube-proxy has programmed its rules.
func (c *Cluster) startNodes(ctx context.Context, spec clusterSpec, assets string) error {
	for j := range spec.nodes {
		n := &Node{Name: fmt.Sprintf("%s-node-%d", c.Name, j), Zone: fmt.Sprintf("%s-zone-%d", c.Name, j), Region: c.Region}
		dn, err := spec.plane.AddNode(spec.index, j, n.Name, c.PodCIDRs)
		if err != nil {
			return err
		}
		n.NS, n.Addrs, n.PodCIDRs = dn.NS, dn.Addrs, dn.PodCIDRs
		c.Nodes = append(c.Nodes, n)
		n.started = time.Now()
		if err := c.startKubeletNode(ctx, spec, assets, n); err != nil {
			return err
		}
		n.proxy, err = n.start(spec.log, "kube-proxy", filepath.Join(assets, "kube-proxy"), c.proxyArgs(n.Name)...)
		if err != nil {
			return err
		}
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	for _, n := range c.Nodes {
		if err := n.proxy.WaitHTTP(ctx, hc, fmt.Sprintf("http://%s:%d/healthz", n.Addrs[0], proxyHealthPort), 2*time.Minute); err != nil {
			return fmt.Errorf("kube-proxy of %s: %w", n.Name, err)
		}
	}
	// A kubelet registers its Node itself, without pod CIDRs and topology labels, which come now that every
	// kube-proxy serves (nodePatch says why).
	return poll.Until(ctx, 100*time.Millisecond, 2*time.Minute, func() error {
		var notReady []string
		for _, n := range c.Nodes {
			if n.ReadyAfter > 0 {
				continue
			}
			node, err := c.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(node.Spec.PodCIDRs) == 0 || node.Labels[corev1.LabelTopologyZone] != n.Zone || node.Labels[corev1.LabelTopologyRegion] != n.Region {
				if err := c.completeNode(ctx, n); err != nil {
					return err
				}
			}
			if nodeReady(node) {
				n.ReadyAfter = time.Since(n.started)
			} else {
				notReady = append(notReady, n.Name)
			}
		}
		if len(notReady) > 0 {
			return fmt.Errorf("nodes not Ready yet: %s", strings.Join(notReady, ", "))
		}
		return nil
	})
}

// start runs bin in the node's network namespace, and only there: `nsenter --net` keeps the host's mount
// namespace, where the cgroup hierarchies are and where a kubelet's volume mounts must be for containerd to see
// them (`ip netns exec` would give each process a mount namespace of its own, with an empty /sys/fs/cgroup).
func (n *Node) start(log io.Writer, name, bin string, args ...string) (*proc.Process, error) {
	return proc.Start(log, n.Name+"/"+name, "nsenter", append([]string{"--net=/run/netns/" + n.NS, "--", bin}, args...)...)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// stopNodes stops the kube-proxies, then the kubelets and containerds, whose pods drainKubeletNodes stopped.
func (c *Cluster) stopNodes() error {
	for _, n := range c.Nodes {
		if n.proxy != nil {
			n.proxy.Stop()
		}
	}
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, n.stopKubeletNode(context.Background()))
	}
	return errors.Join(errs...)
}

// Usage returns what the node's processes use, by name: kubelet, containerd and kube-proxy. Pods' processes are
// not counted.
func (n *Node) Usage() (map[string]proc.Usage, error) {
	usage := map[string]proc.Usage{}
	for name, p := range map[string]*proc.Process{"kube-proxy": n.proxy, "kubelet": n.kubelet, "containerd": n.containerd} {
		if p == nil {
			continue
		}
		u, err := p.Usage()
		if err != nil {
			return nil, fmt.Errorf("%s of %s: %w", name, n.Name, err)
		}
		usage[name] = u
	}
	return usage, nil
}

// dnsServiceIP is the address the cluster DNS Service of a member gets: the tenth of its IPv4 Service range, as
// kubeadm does.
func dnsServiceIP(serviceCIDRs []netip.Prefix) netip.Addr {
	b := serviceCIDRs[0].Masked().Addr().As4()
	b[3] = 10
	return netip.AddrFrom4(b)
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}
