package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
)

// PodNS is the network namespace of the pod with the given UID.
func PodNS(uid string) string { return Prefix + "-pod-" + uid }

// podLink is the node's end of the link to a pod: interface names have at most 15 bytes, so it takes the first
// twelve characters of the UID, which are unique among one node's pods in practice.
func podLink(uid string) string {
	if len(uid) > 12 {
		uid = uid[:12]
	}
	return "vp" + uid
}

// AddPod gives a pod a network: its own namespace linked to the node's, with one address per family, a default
// route to the node and a route back from the node. It runs inside the node's network namespace, where the node
// agent runs; nodeV4 is the node's IPv4 address, the pod's on-link next hop.
func AddPod(uid string, addrs []netip.Addr, nodeV4 netip.Addr) (string, error) {
	ns, link := PodNS(uid), podLink(uid)
	if err := Run("ip", "netns", "add", ns); err != nil {
		return "", err
	}
	cmds := [][]string{
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "link", "set", link, "up"},
		{"ip", "addr", "add", gatewayV6.String() + "/64", "dev", link, "nodad"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
	}
	for _, a := range addrs {
		if a.Is4() {
			cmds = append(cmds,
				[]string{"ip", "-n", ns, "addr", "add", a.String() + "/32", "dev", "eth0"},
				[]string{"ip", "-n", ns, "route", "add", "default", "via", nodeV4.String(), "dev", "eth0", "onlink"},
			)
		} else {
			cmds = append(cmds,
				[]string{"ip", "-n", ns, "addr", "add", a.String() + "/128", "dev", "eth0", "nodad"},
				[]string{"ip", "-n", ns, "route", "add", "default", "via", gatewayV6.String(), "dev", "eth0"},
			)
		}
		cmds = append(cmds, []string{"ip", "route", "add", a.String(), "dev", link})
	}
	if err := RunAll(cmds...); err != nil {
		return "", errors.Join(fmt.Errorf("dataplane: pod network for %s: %w", uid, err), Run("ip", "netns", "del", ns))
	}
	return ns, nil
}

// DelPod removes a pod's namespace, and with it the link and the node's routes to the pod. Deleting a namespace
// that is already gone is not an error.
func DelPod(uid string) error {
	ns := PodNS(uid)
	for _, have := range Namespaces() {
		if have == ns {
			return Run("ip", "netns", "del", ns)
		}
	}
	return nil
}
