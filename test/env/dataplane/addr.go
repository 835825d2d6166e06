// Package dataplane builds the network of the local clusterset's data plane on this machine, out of Linux network
// namespaces and veth links, and takes it down again:
//
//	host ── vksf0 ═══ host ─ [vksf-fabric] ─ m<i>n<j> ═══ eth0 ─ [vksf-<member>-<j>] ─ vp… ═══ eth0 ─ [vksf-pod-…]
//
// The fabric namespace is the router of a flat pod network: it routes every node's address and pod CIDR to that
// node, and the node addresses of the host link to the host, where the API servers and CoreDNS listen. The host
// routes the fleet's node and pod ranges into the fabric and holds an unreachable route for every Service range,
// so that no packet for a fleet address ever takes the host's default route. Nothing is forwarded by the host
// itself: forwarding is switched on only inside the namespaces this package creates.
//
// Only one data plane runs on a machine at a time (its addresses are fixed): Acquire takes a machine-wide lock.
package dataplane

import (
	"fmt"
	"net/netip"
)

// Prefix starts the name of every network namespace and host link this package creates; Sweep removes them all.
const Prefix = "vksf"

// FabricNS is the router namespace.
const FabricNS = Prefix + "-fabric"

// HostLink is the host's end of the link to the fabric.
const HostLink = Prefix + "0"

// fabricHostLink is the fabric's end of the link to the host.
const fabricHostLink = "host"

// Host addresses: where the host, and so the API servers and DNS servers of the fleet, are reached from the
// nodes and pods.
var (
	HostV4   = netip.MustParseAddr("10.254.0.1")
	HostV6   = netip.MustParseAddr("fd00:254::1")
	fabricV4 = netip.MustParseAddr("10.254.0.2")
	fabricV6 = netip.MustParseAddr("fd00:254::2")
	// nodeRanges hold every node address.
	nodeRanges = []netip.Prefix{netip.MustParsePrefix("10.254.0.0/16"), netip.MustParsePrefix("fd00:254::/32")}
	// gatewayV6 is the link-local next hop that every router end of a link answers for; IPv4 next hops are the
	// router's own address, reached on-link.
	gatewayV6 = netip.MustParseAddr("fe80::1")
)

// maxMembers and maxNodes bound the address plan below.
const (
	maxMembers = 100
	maxNodes   = 200
)

// NodeAddrs returns the IPv4 and IPv6 address of node j (0-based) of member i (0-based).
func NodeAddrs(member, node int) (netip.Addr, netip.Addr, error) {
	if member < 0 || member >= maxMembers || node < 0 || node >= maxNodes {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("dataplane: node %d of member %d is outside the address plan (%d members, %d nodes each)", node, member, maxMembers, maxNodes)
	}
	v4 := netip.AddrFrom4([4]byte{10, 254, byte(member + 1), byte(node + 1)})
	v6 := netip.MustParseAddr(fmt.Sprintf("fd00:254:%x::%x", member+1, node+1))
	return v4, v6, nil
}

// NodePodCIDRs splits a member's pod CIDRs (an IPv4 /16 and an IPv6 /64) into node j's share: the j-th /24 and
// the j-th /80.
func NodePodCIDRs(memberCIDRs []netip.Prefix, node int) ([]netip.Prefix, error) {
	if node < 0 || node >= 256 {
		return nil, fmt.Errorf("dataplane: node index %d out of range", node)
	}
	out := make([]netip.Prefix, 0, len(memberCIDRs))
	for _, p := range memberCIDRs {
		b := p.Masked().Addr().AsSlice()
		var bits int
		switch {
		case p.Addr().Is4() && p.Bits() == 16:
			b[2], bits = byte(node), 24
		case p.Addr().Is6() && p.Bits() == 64:
			b[9], bits = byte(node), 80
		default:
			return nil, fmt.Errorf("dataplane: member pod CIDR %s is neither an IPv4 /16 nor an IPv6 /64", p)
		}
		a, _ := netip.AddrFromSlice(b)
		out = append(out, netip.PrefixFrom(a, bits))
	}
	return out, nil
}

// NodeNS is the network namespace of a node.
func NodeNS(node string) string { return Prefix + "-" + node }

// fabricLink is the fabric's end of the link to node j of member i; interface names have at most 15 bytes.
func fabricLink(member, node int) string { return fmt.Sprintf("m%dn%d", member, node) }
