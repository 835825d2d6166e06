package multicluster

import (
	"net"
	"net/netip"
)

// nameServerAddrs returns the addresses the server listens on, or else the machine's, without loopback ones:
// they are the addresses of ns.dns.<zone>, as the kubernetes plugin does for cluster.local.
func nameServerAddrs(listen []string) []netip.Addr {
	var hosts []string
	for _, h := range listen {
		if h != "" {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		ifaces, err := net.InterfaceAddrs()
		if err != nil {
			return nil
		}
		for _, a := range ifaces {
			hosts = append(hosts, a.String())
		}
	}
	var out []netip.Addr
	for _, h := range hosts {
		a, err := netip.ParseAddr(h)
		if p, perr := netip.ParsePrefix(h); perr == nil {
			a, err = p.Addr(), nil
		}
		if err == nil && !a.IsLoopback() && !a.IsLinkLocalUnicast() && !a.IsUnspecified() {
			out = append(out, a.Unmap())
		}
	}
	return out
}
