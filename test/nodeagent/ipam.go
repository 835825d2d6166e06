package nodeagent

import (
	"fmt"
	"net/netip"
	"sync"
)

// ipam hands out pod addresses from the node's pod CIDRs: one offset per pod, used in every family, so a pod's
// IPv4 and IPv6 addresses end alike. Offsets go round-robin, so a freed address is reused as late as possible and
// a stale conntrack entry or DNS answer rarely meets a new pod.
type ipam struct {
	mu    sync.Mutex
	cidrs []netip.Prefix
	used  map[int]bool
	last  int
}

// first and last usable offsets: .0 is the network, .1 is kept free for a gateway by convention, .255 broadcast.
const (
	firstOffset = 2
	lastOffset  = 254
)

func newIPAM(cidrs []netip.Prefix) *ipam {
	return &ipam{cidrs: cidrs, used: map[int]bool{}, last: firstOffset - 1}
}

// allocate reserves the next free offset and returns its address in each CIDR, in CIDR order.
func (a *ipam) allocate() (int, []netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	span := lastOffset - firstOffset + 1
	for i := 1; i <= span; i++ {
		off := firstOffset + (a.last-firstOffset+i)%span
		if a.used[off] {
			continue
		}
		a.used[off], a.last = true, off
		return off, a.addrs(off), nil
	}
	return 0, nil, fmt.Errorf("nodeagent: all %d pod addresses of %v are in use", span, a.cidrs)
}

// release frees an offset.
func (a *ipam) release(off int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.used, off)
}

func (a *ipam) addrs(off int) []netip.Addr {
	out := make([]netip.Addr, len(a.cidrs))
	for i, p := range a.cidrs {
		b := p.Masked().Addr().AsSlice()
		b[len(b)-1] = byte(off)
		out[i], _ = netip.AddrFromSlice(b)
	}
	return out
}
