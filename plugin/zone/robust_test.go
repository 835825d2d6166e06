package zone

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// TestHostileNamesAreNotBuilt feeds the index the values users and other clusters can write into a service's
// names: none may stop the build, no record is left to fail packing, and the endpoint's addresses still answer
// the service's name. The first case is the review's payload (finding #1): a cluster id whose "\." packs as a
// dot inside a 64-octet label, which panicked in appendRR.
func TestHostileNamesAreNotBuilt(t *testing.T) {
	tests := []struct {
		name              string
		cluster, hostname string
		port              Port
	}{
		{"escaped dot in the cluster id", strings.Repeat("a", 52) + "." + strings.Repeat("b", 60) + "\\", "db-0", Port{Name: "sql", Protocol: "TCP", Port: 5432}},
		{"escaped dot in the hostname", "east", "db-0\\", Port{Name: "sql", Protocol: "TCP", Port: 5432}},
		{"escaped octet in the cluster id", "east\\065", "db-0", Port{Name: "sql", Protocol: "TCP", Port: 5432}},
		{"space in the hostname", "east", "db 0", Port{Name: "sql", Protocol: "TCP", Port: 5432}},
		{"64-octet hostname", "east", strings.Repeat("h", 64), Port{Name: "sql", Protocol: "TCP", Port: 5432}},
		{"escaped dot in the port name", "east", "db-0", Port{Name: "sql\\", Protocol: "TCP", Port: 5432}},
		{"escaped dot in the protocol", "east", "db-0", Port{Name: "sql", Protocol: "TCP\\", Port: 5432}},
		{"empty cluster label", "east.", "db-0", Port{Name: "sql", Protocol: "TCP", Port: 5432}},
	}
	for _, tt := range tests {
		ix := New(Options{Zone: "clusterset.local.", TTL: 5})
		ix.SetNamespaces([]string{"ns"})
		ports := []Port{tt.port}
		skipped, why := ix.Apply(Change{Key: Key("ns", "web"), Service: &Service{Namespace: "ns", Name: "web", Type: Headless, Ports: ports,
			Endpoints: []Endpoint{{Cluster: tt.cluster, Hostname: tt.hostname, Ready: true, Ports: ports,
				Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}}}})
		if skipped != 0 {
			t.Errorf("%s: %d records did not pack (%v): the names should have been refused before", tt.name, skipped, why)
		}
		r, _ := ix.Snapshot().Lookup("web.ns.svc.clusterset.local.", dns.TypeA)
		if got := rrStrings(r.Answer); len(got) != 1 || !strings.HasSuffix(got[0], "10.0.0.1") {
			t.Errorf("%s: the service's name answers %v, want the endpoint's address", tt.name, got)
		}
		for rrs := range ix.Snapshot().Transfer(0) {
			for _, rr := range rrs {
				if !validName(rr.Header().Name) {
					t.Errorf("%s: the zone holds the name %q", tt.name, rr.Header().Name)
				}
				if srv, ok := rr.(*dns.SRV); ok && !validName(srv.Target) {
					t.Errorf("%s: the zone holds the SRV target %q", tt.name, srv.Target)
				}
			}
		}
	}
}

// TestUnpackableRecordIsSkipped checks that a record that does not pack is left out and counted, and that the
// other records of its name are served: appendRR used to panic there, and the whole CoreDNS process with it.
func TestUnpackableRecordIsSkipped(t *testing.T) {
	b := newBuilder(5, nil)
	b.base = "web.ns.svc.clusterset.local."
	b.srv("", "x."+strings.Repeat("b", 62)+"\\.y."+b.base, 80) // "b…b\.y" packs as one label of 64 octets
	b.srv("", "ok."+b.base, 81)
	b.address("", netip.MustParseAddr("10.0.0.1"))
	e, _ := b.compile()
	if b.skipped != 1 || b.why == nil || !strings.Contains(b.why.Error(), "packing") {
		t.Fatalf("skipped %d (%v), want 1 record that does not pack", b.skipped, b.why)
	}
	n, ok := e.find("")
	if !ok {
		t.Fatal("no node for the service's name")
	}
	if n.n != [3]uint32{1, 0, 1} {
		t.Errorf("records per type %v, want 1 A, 0 AAAA, 1 SRV", n.n)
	}
	rrs := (Records{wire: n.wire, n: int(n.n[0] + n.n[1] + n.n[2])}).RRs("web.ns.svc.clusterset.local.")
	if got := rrStrings(rrs); len(got) != 2 || !strings.Contains(got[1], " 81 ") {
		t.Errorf("records %v, want the A record and the SRV record for port 81", got)
	}
	if _, err := appendRR(nil, &dns.SRV{Hdr: dns.RR_Header{Rrtype: dns.TypeSRV, Class: dns.ClassINET}, Target: "x." + strings.Repeat("b", 64) + "."}, true); err == nil {
		t.Error("appendRR packed a 64-octet label")
	}
}
