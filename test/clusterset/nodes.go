package clusterset

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"vksfleet.dev/fleet/test/poll"
	"vksfleet.dev/fleet/test/proc"
)

// Node is one node of a member with a data plane: a network namespace running kube-proxy and our node agent.
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

	agent, proxy *proc.Process
}

// kubeletPort is where every node agent serves exec and logs; nodes have addresses of their own.
const kubeletPort = 10250

// proxyHealthPort is kube-proxy's healthz port; it answers 200 once the first sync is done.
const proxyHealthPort = 10256

// startNodes creates the member's nodes in the data plane, each with a node agent and kube-proxy, and waits until
// every Node is Ready and every kube-proxy has programmed its rules.
func (c *Cluster) startNodes(ctx context.Context, spec clusterSpec, assets string) error {
	for j := range spec.nodes {
		n := &Node{Name: fmt.Sprintf("%s-node-%d", c.Name, j), Zone: fmt.Sprintf("%s-zone-%d", c.Name, j), Region: c.Region}
		dn, err := spec.plane.AddNode(spec.index, j, n.Name, c.PodCIDRs)
		if err != nil {
			return err
		}
		n.NS, n.Addrs, n.PodCIDRs = dn.NS, dn.Addrs, dn.PodCIDRs
		c.Nodes = append(c.Nodes, n)
		inNode := []string{"--net=/run/netns/" + n.NS, "--"}
		n.agent, err = proc.Start(spec.log, n.Name+"/nodeagent", "nsenter", append(inNode, spec.nodeAgent,
			"-node-name="+n.Name,
			"-kubeconfig="+c.KubeconfigPath,
			"-addrs="+joinAddrs(n.Addrs),
			"-pod-cidrs="+joinPrefixes(n.PodCIDRs),
			"-cluster-dns="+c.DNSServiceIP.String(),
			"-labels="+corev1.LabelTopologyZone+"="+n.Zone+","+corev1.LabelTopologyRegion+"="+n.Region,
			"-port="+strconv.Itoa(kubeletPort),
			"-state-dir="+filepath.Join(c.dir, n.Name),
		)...)
		if err != nil {
			return err
		}
		n.proxy, err = proc.Start(spec.log, n.Name+"/kube-proxy", "nsenter", append(inNode, filepath.Join(assets, "kube-proxy"),
			"--proxy-mode=nftables",
			"--kubeconfig="+c.KubeconfigPath,
			"--hostname-override="+n.Name,
			"--cluster-cidr="+joinPrefixes(c.PodCIDRs),
			// nf_conntrack_max is not per namespace: kube-proxy exits if it has to write it.
			"--conntrack-max-per-core=0",
			"--healthz-bind-address=0.0.0.0:"+strconv.Itoa(proxyHealthPort),
			"--metrics-bind-address=127.0.0.1:10249",
		)...)
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
	return poll.Until(ctx, 100*time.Millisecond, time.Minute, func() error {
		for _, n := range c.Nodes {
			node, err := c.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !nodeReady(node) {
				return fmt.Errorf("node %s is not Ready", n.Name)
			}
		}
		return nil
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// stopNodes stops the node agents first, so that they stop their pods, then the kube-proxies.
func (c *Cluster) stopNodes() {
	for _, n := range c.Nodes {
		if n.agent != nil {
			n.agent.Stop()
		}
	}
	for _, n := range c.Nodes {
		if n.proxy != nil {
			n.proxy.Stop()
		}
	}
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
