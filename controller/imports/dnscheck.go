package imports

import (
	"net/netip"
	"slices"

	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/names"
)

// DNSCheck is one question this member's DNS must answer as expected before the import is Ready, so that Ready
// means "resolves here" and users need not poll DNS themselves.
type DNSCheck struct {
	// Name is the fully qualified <svc>.<ns>.svc.clusterset.local. name (names.ServiceDNSName and a final dot).
	Name string
	// IPv6 asks AAAA rather than A.
	IPv6 bool
	// Want are the exact addresses of a ClusterSetIP import's family. Empty means any non-empty answer: a
	// headless import answers only the member's closest tier of ready endpoints, which the DNS decides.
	Want []netip.Addr
}

// DNSChecks are the questions that show si resolves in this member's DNS, in the clusterset zone (names.DNSZone),
// given its imported slices: each ClusterSetIP family answers exactly the import's IPs of that family; a
// headless import answers some address in each family that has a ready endpoint. A headless import with no ready
// endpoint has no question: its name is NXDOMAIN by the DNS specification until an endpoint is ready.
func DNSChecks(si *mcsv1beta1.ServiceImport, imported []discoveryv1.EndpointSlice) []DNSCheck {
	name := names.ServiceDNSName(si.Namespace, si.Name) + "."
	var checks []DNSCheck
	if si.Spec.Type == mcsv1beta1.ClusterSetIP {
		var v4, v6 []netip.Addr
		for _, s := range si.Spec.IPs {
			a, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			if a.Is4() {
				v4 = append(v4, a)
			} else {
				v6 = append(v6, a)
			}
		}
		if len(v4) > 0 {
			checks = append(checks, DNSCheck{Name: name, Want: v4})
		}
		if len(v6) > 0 {
			checks = append(checks, DNSCheck{Name: name, IPv6: true, Want: v6})
		}
		return checks
	}
	for _, family := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
		if hasReady(imported, family) {
			checks = append(checks, DNSCheck{Name: name, IPv6: family == discoveryv1.AddressTypeIPv6})
		}
	}
	return checks
}

// Satisfied says whether got, the addresses of a NOERROR answer, is what c expects.
func (c DNSCheck) Satisfied(got []netip.Addr) bool {
	if len(c.Want) == 0 {
		return len(got) > 0
	}
	a, b := slices.Clone(got), slices.Clone(c.Want)
	slices.SortFunc(a, netip.Addr.Compare)
	slices.SortFunc(b, netip.Addr.Compare)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func hasReady(imported []discoveryv1.EndpointSlice, family discoveryv1.AddressType) bool {
	for _, s := range imported {
		if s.AddressType != family {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				return true
			}
		}
	}
	return false
}
