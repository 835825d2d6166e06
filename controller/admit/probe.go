package admit

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// MaxProbeAddresses bounds the probe addresses one member may publish (names.AnnotationProbeAddresses): a
// member runs a few controller replicas, and every other member connects to them every round.
const MaxProbeAddresses = 8

// ProbeAddresses returns, sorted and without repeats, the addresses of a member's controller replicas that its
// broker Lease lists (comma-separated host:port) and this member's probe may connect to: a unicast IP address with
// a port, as an imported endpoint's, so that no member makes every controller connect to a loopback, link-local,
// multicast or unspecified address. Those past MaxProbeAddresses are dropped. Whatever is refused is told in one
// Problem, since a member may write any number of entries.
func ProbeAddresses(value string) ([]string, *Problem) {
	if value == "" {
		return nil, nil
	}
	var addrs []string
	refused, first := 0, ""
	for a := range strings.SplitSeq(value, ",") {
		ap, err := netip.ParseAddrPort(a)
		ip := ap.Addr()
		if err != nil || ip.Zone() != "" || ip.Is4In6() || !ip.IsGlobalUnicast() || ap.Port() == 0 {
			if refused++; refused == 1 {
				first = a
			}
			continue
		}
		addrs = append(addrs, ap.String())
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	var msg []string
	if refused > 0 {
		msg = append(msg, fmt.Sprintf("%d probe addresses are not a unicast IP address and port (%q first)", refused, first))
	}
	if len(addrs) > MaxProbeAddresses {
		msg = append(msg, fmt.Sprintf("%d probe addresses; those past %d are dropped", len(addrs), MaxProbeAddresses))
		addrs = addrs[:MaxProbeAddresses]
	}
	if len(msg) == 0 {
		return addrs, nil
	}
	return addrs, &Problem{ReasonEndpoint, strings.Join(msg, "; ")}
}
