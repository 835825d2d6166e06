package multicluster

import (
	"net/netip"
	"strconv"
	"strings"
)

// privateRanges are the addresses the whole reverse trees in-addr.arpa and ip6.arpa stand for: the private ones
// (RFC 1918, RFC 4193; netip.Addr.IsPrivate's), where pod and service CIDRs are.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("fc00::/7"),
}

// ptrRanges returns the address ranges whose addresses get PTR records: those of the reverse zones the stanza
// lists, as the kubernetes plugin answers PTRs only in its own zones. Any member, and any namespace user through
// an exported EndpointSlice, can put any address in the zone, so the whole trees in-addr.arpa and ip6.arpa, which
// the shipped Corefile lists, cover only the private ranges: an address outside them, a public one above all, has a
// PTR record only when the operator lists a zone of its own (such as 203.0.113.0/24 or 113.0.203.in-addr.arpa),
// rather than spoofing reverse DNS in every member (review finding #17). A zone that is no range holds no
// address's name, and adds none.
func ptrRanges(zones []string) []netip.Prefix {
	var out []netip.Prefix
	for _, z := range zones {
		p, ok := reversePrefix(z)
		switch {
		case !ok:
		case p.Bits() == 0:
			for _, r := range privateRanges {
				if r.Addr().Is4() == p.Addr().Is4() {
					out = append(out, r)
				}
			}
		default:
			out = append(out, p)
		}
	}
	return out
}

// reversePrefix returns the address range of a reverse zone, fully qualified: the whole octets of an in-addr.arpa
// zone, the whole nibbles of an ip6.arpa zone, in the one form dns.ReverseAddr writes them (CoreDNS turns a zone
// given as a CIDR into such zones). It reports false for any other name.
func reversePrefix(zone string) (netip.Prefix, bool) {
	if rest, ok := strings.CutSuffix(zone, "in-addr.arpa."); ok {
		labels, ok := reverseLabels(rest, 4)
		if !ok {
			return netip.Prefix{}, false
		}
		var b [4]byte
		for i, l := range labels {
			v, err := strconv.ParseUint(l, 10, 8)
			if err != nil || strconv.FormatUint(v, 10) != l {
				return netip.Prefix{}, false
			}
			b[len(labels)-1-i] = byte(v)
		}
		return netip.PrefixFrom(netip.AddrFrom4(b), 8*len(labels)), true
	}
	if rest, ok := strings.CutSuffix(zone, "ip6.arpa."); ok {
		labels, ok := reverseLabels(rest, 32)
		if !ok {
			return netip.Prefix{}, false
		}
		var b [16]byte
		for i, l := range labels {
			v, err := strconv.ParseUint(l, 16, 4)
			if err != nil || len(l) != 1 {
				return netip.Prefix{}, false
			}
			// The first label is the last nibble of the range.
			n := len(labels) - 1 - i
			b[n/2] |= byte(v) << (4 * (1 - n%2))
		}
		return netip.PrefixFrom(netip.AddrFrom16(b), 4*len(labels)), true
	}
	return netip.Prefix{}, false
}

// reverseLabels splits what precedes in-addr.arpa or ip6.arpa into labels: none, or at most limit ending in a dot.
func reverseLabels(rest string, limit int) ([]string, bool) {
	if rest == "" {
		return nil, true
	}
	labels, ok := strings.CutSuffix(rest, ".")
	if !ok {
		return nil, false
	}
	out := strings.Split(labels, ".")
	return out, len(out) <= limit
}
