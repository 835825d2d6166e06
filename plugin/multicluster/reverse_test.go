package multicluster

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"

	"vksfleet.dev/fleet/plugin/zone"
)

func TestReversePrefix(t *testing.T) {
	for _, tt := range []struct {
		zone string
		want string // "" when the zone is no range
	}{
		{"in-addr.arpa.", "0.0.0.0/0"},
		{"10.in-addr.arpa.", "10.0.0.0/8"},
		{"113.0.203.in-addr.arpa.", "203.0.113.0/24"},
		{"5.0.1.10.in-addr.arpa.", "10.1.0.5/32"},
		{"ip6.arpa.", "::/0"},
		{"d.f.ip6.arpa.", "fd00::/8"},
		{"0.1.0.0.2.ip6.arpa.", "2001::/20"},
		{strings.Repeat("1.", 32) + "ip6.arpa.", "1111:1111:1111:1111:1111:1111:1111:1111/128"},
		{"010.in-addr.arpa.", ""},
		{"256.in-addr.arpa.", ""},
		{"5.4.3.2.1.in-addr.arpa.", ""},
		{"0/25.2.0.192.in-addr.arpa.", ""}, // RFC 2317
		{"x.in-addr.arpa.", ""},
		{"10..in-addr.arpa.", ""},
		{"xin-addr.arpa.", ""},
		{"df.ip6.arpa.", ""},
		{"g.ip6.arpa.", ""},
		{strings.Repeat("1.", 33) + "ip6.arpa.", ""},
		{"clusterset.local.", ""},
	} {
		got, ok := reversePrefix(tt.zone)
		if want, err := netip.ParsePrefix(tt.want); ok != (err == nil) || ok && got != want {
			t.Errorf("reversePrefix(%q) = %v, %v; want %q", tt.zone, got, ok, tt.want)
		}
	}
}

// TestPTRRangesOfCIDRs checks that the zones CoreDNS makes of a CIDR in a stanza cover exactly that CIDR, on
// octet and nibble boundaries or not.
func TestPTRRangesOfCIDRs(t *testing.T) {
	for _, cidr := range []string{"10.0.0.0/8", "10.0.0.0/9", "203.0.113.0/24", "203.0.113.8/29", "fd00::/8", "2001:db8::/33"} {
		p := netip.MustParsePrefix(cidr)
		ranges := ptrRanges(plugin.Host(cidr).NormalizeExact())
		covers := func(a netip.Addr) bool {
			return slices.ContainsFunc(ranges, func(r netip.Prefix) bool { return r.Contains(a) })
		}
		first, last := p.Addr(), lastAddr(p)
		if !covers(first) || !covers(last) || covers(first.Prev()) || covers(last.Next()) {
			t.Errorf("%s: ranges %v cover %s %v, %s %v, and outside %v %v", cidr, ranges, first, covers(first), last,
				covers(last), covers(first.Prev()), covers(last.Next()))
		}
	}
}

// lastAddr returns the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// TestPTRForTheZonesListed is review finding #17 from the Corefile to the answer: an address in an export gets a
// PTR record only in the reverse zones the stanza lists, and the whole trees in-addr.arpa and ip6.arpa stand for
// the private ranges alone, so a public address gets none unless the operator lists its range. Forward answers
// hold every address whatever the reverse zones.
func TestPTRForTheZonesListed(t *testing.T) {
	addresses := []string{"10.1.0.5", "10.2.0.5", "192.168.0.5", "100.64.0.5", "203.0.113.7", "198.51.100.7",
		"fd00:10:1::5", "2001:db8::7"}
	for _, tt := range []struct {
		zones string // the stanza's zones
		ptr   []string
	}{
		{"clusterset.local in-addr.arpa ip6.arpa", []string{"10.1.0.5", "10.2.0.5", "192.168.0.5", "fd00:10:1::5"}},
		{"clusterset.local in-addr.arpa ip6.arpa 203.0.113.0/24 2001:db8::/32",
			[]string{"10.1.0.5", "10.2.0.5", "192.168.0.5", "203.0.113.7", "fd00:10:1::5", "2001:db8::7"}},
		{"clusterset.local 10.1.0.0/16 100.64.0.0/10", []string{"10.1.0.5", "100.64.0.5"}},
		{"clusterset.local 113.0.203.in-addr.arpa", []string{"203.0.113.7"}},
		{"clusterset.local", nil},
	} {
		t.Run(tt.zones, func(t *testing.T) {
			cfg, err := parse(caddy.NewTestController("dns", "multicluster "+tt.zones))
			if err != nil {
				t.Fatal(err)
			}
			m := newPlugin(cfg, nil)
			m.synced = func() bool { return true }
			m.Next = nextHandler()
			m.index.SetNamespaces([]string{"ns"})
			var eps []zone.Endpoint
			for i, a := range addresses {
				eps = append(eps, zone.Endpoint{Cluster: "east", Hostname: fmt.Sprintf("db-%d", i), Ready: true,
					Addresses: []netip.Addr{netip.MustParseAddr(a)}})
			}
			m.index.Apply(zone.Change{Key: zone.Key("ns", "db"), Service: &zone.Service{Namespace: "ns", Name: "db",
				Type: zone.Headless, Endpoints: eps}})
			var forward []string
			for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
				_, msg := serve(t, m, "db.ns.svc.clusterset.local.", qtype)
				forward = append(forward, rdata(msg.Answer)...)
			}
			if want := slices.Sorted(slices.Values(addresses)); !slices.Equal(slices.Sorted(slices.Values(forward)), want) {
				t.Errorf("forward answers %v, want %v", forward, want)
			}
			var got []string
			for i, a := range addresses {
				rev, _ := dns.ReverseAddr(a)
				rcode, msg := serve(t, m, rev, dns.TypePTR)
				switch {
				case msg == nil && rcode == nextRcode:
				case msg != nil && len(msg.Answer) == 1 && msg.Answer[0].(*dns.PTR).Ptr == fmt.Sprintf("db-%d.east.db.ns.svc.clusterset.local.", i):
					got = append(got, a)
				default:
					t.Errorf("PTR %s: rcode %s, reply %v; want an answer or the question passed on", a, dns.RcodeToString[rcode], msg)
				}
			}
			if !slices.Equal(got, tt.ptr) {
				t.Errorf("PTR answered for %v, want %v", got, tt.ptr)
			}
		})
	}
}
