package clusterset

import (
	"fmt"
	"net/netip"
	"sync"
)

// Every member is dual-stack and owns distinct ranges, derived from its index i (0-based):
//
//	pods      10.(i+1).0.0/16      fd00:10:(i+1)::/64
//	services  10.(i+128).0.0/16    fd00:20:(i+1)::/108
//
// The broker serves services from 10.250.0.0/16 and fd00:20:ff::/108 and runs no pods.

func podCIDRs(index int) []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix(fmt.Sprintf("10.%d.0.0/16", index+1)),
		netip.MustParsePrefix(fmt.Sprintf("fd00:10:%x::/64", index+1)),
	}
}

func serviceCIDRs(index int) []netip.Prefix {
	if index >= maxMembers {
		return []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16"), netip.MustParsePrefix("fd00:20:ff::/108")}
	}
	return []netip.Prefix{
		netip.MustParsePrefix(fmt.Sprintf("10.%d.0.0/16", index+128)),
		netip.MustParsePrefix(fmt.Sprintf("fd00:20:%x::/108", index+1)),
	}
}

// ipAllocator hands out pod addresses, one of each family per pod, never the same twice in a cluster's life.
type ipAllocator struct {
	mu    sync.Mutex
	cidrs []netip.Prefix
	next  uint32
}

func newIPAllocator(cidrs []netip.Prefix) *ipAllocator {
	return &ipAllocator{cidrs: cidrs, next: 10}
}

// allocate returns one address from each CIDR, in CIDR order.
func (a *ipAllocator) allocate() ([]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.next >= 1<<16-1 {
		return nil, fmt.Errorf("pod CIDR %s exhausted", a.cidrs[0])
	}
	n := a.next
	a.next++
	ips := make([]string, 0, len(a.cidrs))
	for _, p := range a.cidrs {
		b := p.Addr().AsSlice()
		b[len(b)-2] |= byte(n >> 8)
		b[len(b)-1] |= byte(n)
		addr, _ := netip.AddrFromSlice(b)
		ips = append(ips, addr.String())
	}
	return ips, nil
}
