package zone

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// collect runs a transfer to its end and returns its records in order.
func collect(seq func(func([]dns.RR) bool)) []dns.RR {
	var out []dns.RR
	for rrs := range seq {
		out = append(out, rrs...)
	}
	return out
}

// checkSOAs checks that rrs starts and ends with the SOA of apex at serial, and holds no other SOA.
func checkSOAs(t *testing.T, rrs []dns.RR, apex string, serial uint32) {
	t.Helper()
	for i, rr := range rrs {
		soa, ok := rr.(*dns.SOA)
		ends := i == 0 || i == len(rrs)-1
		if ok != ends {
			t.Errorf("record %d of %d is %v: want an SOA first and last only", i, len(rrs), rr)
		}
		if ok && (soa.Hdr.Name != apex || soa.Serial != serial || soa.Ns != "ns.dns.clusterset.local.") {
			t.Errorf("SOA %v, want owner %s, serial %d", soa, apex, serial)
		}
	}
}

// TestTransfer checks a transfer of the fixture record by record, and IXFR from each kind of serial.
func TestTransfer(t *testing.T) {
	const (
		zone = "clusterset.local."
		web  = "web.ns.svc." + zone
		db   = "db.ns.svc." + zone
		db0  = "db-0.east.prod." + db
		db7  = "10-2-0-7.cluster-b." + db
		dbV6 = "fd02--0.cluster-b." + db
	)
	s := fixture(t).Snapshot()
	serial := s.Serial()
	soa := fmt.Sprintf("%s 5 IN SOA ns.dns.%s hostmaster.%s %d 7200 1800 86400 5", zone, zone, zone, serial)
	full := []string{
		soa,
		zone + " 5 IN NS ns.dns." + zone,
		"ns.dns." + zone + " 5 IN A 10.0.0.53",
		"dns-version." + zone + ` 5 IN TXT "1.0.0"`,
		// Headless: the service's name answers the ready endpoints, each endpoint's name with its cluster id
		// (two labels for east.prod, the address for a nameless endpoint); not-ready 10.2.0.8 is nowhere.
		db + " 5 IN A 10.1.0.5", db + " 5 IN A 10.2.0.7", db + " 5 IN AAAA fd01::5", db + " 5 IN AAAA fd02::",
		db + " 5 IN SRV 0 100 5432 " + db0, db + " 5 IN SRV 0 100 5432 " + db7, db + " 5 IN SRV 0 100 5432 " + dbV6,
		db7 + " 5 IN A 10.2.0.7",
		"_sql._tcp." + db + " 5 IN SRV 0 100 5432 " + db0, "_sql._tcp." + db + " 5 IN SRV 0 100 5432 " + db7,
		"_sql._tcp." + db + " 5 IN SRV 0 100 5432 " + dbV6,
		db0 + " 5 IN A 10.1.0.5", db0 + " 5 IN AAAA fd01::5",
		dbV6 + " 5 IN AAAA fd02::",
		// down has no ready endpoint (NXDOMAIN); web.gone is in a namespace this cluster lacks.
		"v4.ns.svc." + zone + " 5 IN A 10.96.0.11",
		web + " 5 IN A 10.96.0.10", web + " 5 IN AAAA fd00::a",
		web + " 5 IN SRV 0 100 80 " + web, web + " 5 IN SRV 0 100 53 " + web, web + " 5 IN SRV 0 100 9000 " + web,
		"_dns-tcp._tcp." + web + " 5 IN SRV 0 100 53 " + web,
		"_dns._udp." + web + " 5 IN SRV 0 100 53 " + web,
		"_http._tcp." + web + " 5 IN SRV 0 100 80 " + web,
		soa,
	}
	for _, tt := range []struct {
		name   string
		serial uint32
		want   []string
	}{
		{"AXFR", 0, full},
		{"IXFR from an older serial: full", serial - 1, full},
		{"IXFR from long ago: full", serial - 1<<31 + 1, full},
		{"IXFR from the current serial: the SOA alone", serial, []string{soa}},
		{"IXFR from a newer serial: the SOA alone", serial + 10, []string{soa}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := collect(s.Transfer(tt.serial))
			checkSOAs(t, got, zone, serial)
			if want := slices.Sorted(slices.Values(tt.want)); !slices.Equal(rrStrings(got), want) {
				t.Errorf("transfer\n%s\nwant\n%s", strings.Join(rrStrings(got), "\n"), strings.Join(want, "\n"))
			}
		})
	}

	// The order is stable: by namespace and name, then by owner name below the service, as built.
	var order []string
	for _, rr := range collect(s.Transfer(0)) {
		if n := rr.Header().Name; len(order) == 0 || order[len(order)-1] != n {
			order = append(order, n)
		}
	}
	wantOrder := []string{zone, "ns.dns." + zone, "dns-version." + zone, db, db7, "_sql._tcp." + db, db0, dbV6,
		"v4.ns.svc." + zone, web, "_dns-tcp._tcp." + web, "_dns._udp." + web, "_http._tcp." + web, zone}
	if !slices.Equal(order, wantOrder) {
		t.Errorf("owners in order\n%s\nwant\n%s", strings.Join(order, "\n"), strings.Join(wantOrder, "\n"))
	}
}

// TestTransferMatchesQueries checks, for indexes of every shape the tests build, that each owner name and type
// a transfer carries answers a query with exactly those records.
func TestTransferMatchesQueries(t *testing.T) {
	preferred := New(Options{Zone: "clusterset.local.", TTL: 5})
	preferred.SetNamespaces([]string{"bench"})
	hl := headless(3, 0)
	hl.Preferred = []string{"cluster-1"}
	preferred.Apply(Change{Key: Key("bench", hl.Name), Service: hl})
	for name, s := range map[string]*Snapshot{
		"fixture": fixture(t).Snapshot(), "big": bigIndex(t, 500).Snapshot(), "preferred": preferred.Snapshot(),
	} {
		t.Run(name, func(t *testing.T) {
			type rrset struct {
				owner string
				qtype uint16
			}
			sets := map[rrset][]dns.RR{}
			for _, rr := range collect(s.Transfer(0)) {
				h := rr.Header()
				sets[rrset{h.Name, h.Rrtype}] = append(sets[rrset{h.Name, h.Rrtype}], rr)
			}
			for k, rrs := range sets {
				r, _ := s.Lookup(k.owner, k.qtype)
				want := rrs
				if k.qtype == dns.TypeSOA {
					want = rrs[:1] // first and last
				}
				if r.Rcode != dns.RcodeSuccess || !slices.Equal(rrStrings(r.Answer), rrStrings(want)) {
					t.Errorf("%s %s: query %v, transfer %v", k.owner, dns.TypeToString[k.qtype], r.Answer, want)
				}
			}
			if name == "preferred" {
				// The service's name answers the preferred cluster's four endpoints; every endpoint name is there.
				if a := sets[rrset{"hl-3.bench.svc.clusterset.local.", dns.TypeA}]; len(a) != 4 {
					t.Errorf("headless A in the transfer: %v, want the 4 of cluster-1", a)
				}
				endpoints := 0
				for k := range sets {
					if k.qtype == dns.TypeA && strings.Count(k.owner, ".") == 7 {
						endpoints++
					}
				}
				if endpoints != 12 {
					t.Errorf("%d per-endpoint names, want 12", endpoints)
				}
			}
		})
	}
}

// TestTransferReverse checks the transfers of reverse zones: the PTRs of the addresses below the apex, framed by
// the apex's SOA and NS.
func TestTransferReverse(t *testing.T) {
	const zone = "clusterset.local."
	s := fixture(t).Snapshot()
	serial := s.Serial()
	ptr := func(ip, target string) string { return reverseName(t, ip) + " 5 IN PTR " + target }
	framed := func(apex string, ptrs ...string) []string {
		soa := fmt.Sprintf("%s 5 IN SOA ns.dns.%s hostmaster.%s %d 7200 1800 86400 5", apex, zone, zone, serial)
		return append([]string{soa, apex + " 5 IN NS ns.dns." + zone, soa}, ptrs...)
	}
	v4 := []string{
		ptr("10.1.0.5", "db-0.east.prod.db.ns.svc."+zone), ptr("10.2.0.7", "10-2-0-7.cluster-b.db.ns.svc."+zone),
		ptr("10.96.0.10", "web.ns.svc."+zone), ptr("10.96.0.11", "v4.ns.svc."+zone),
		// As LookupPTR answers it, although web.gone's namespace is absent from this cluster.
		ptr("10.96.0.12", "web.gone.svc."+zone),
	}
	v6 := []string{
		ptr("fd00::a", "web.ns.svc."+zone), ptr("fd01::5", "db-0.east.prod.db.ns.svc."+zone),
		ptr("fd02::", "fd02--0.cluster-b.db.ns.svc."+zone),
	}
	for _, tt := range []struct {
		apex   string
		serial uint32
		want   []string
	}{
		{"in-addr.arpa.", 0, framed("in-addr.arpa.", v4...)},
		{"ip6.arpa.", 0, framed("ip6.arpa.", v6...)},
		{"96.10.in-addr.arpa.", serial - 1, framed("96.10.in-addr.arpa.", v4[2:]...)},
		{"1.10.in-addr.arpa.", 0, framed("1.10.in-addr.arpa.", v4[0])},
		{"11.in-addr.arpa.", 0, framed("11.in-addr.arpa.")},
		{"in-addr.arpa.", serial, framed("in-addr.arpa.")[:1]},
	} {
		t.Run(fmt.Sprintf("%s from %d", tt.apex, tt.serial), func(t *testing.T) {
			got := collect(s.TransferReverse(tt.apex, tt.serial))
			checkSOAs(t, got, tt.apex, serial)
			if want := slices.Sorted(slices.Values(tt.want)); !slices.Equal(rrStrings(got), want) {
				t.Errorf("transfer\n%s\nwant\n%s", strings.Join(rrStrings(got), "\n"), strings.Join(want, "\n"))
			}
			for _, rr := range got {
				if p, ok := rr.(*dns.PTR); ok {
					if q := s.LookupPTR(p.Hdr.Name); len(q) != 1 || q[0].String() != p.String() {
						t.Errorf("%s: query %v, transfer %v", p.Hdr.Name, q, p)
					}
				}
			}
		})
	}
}

func reverseName(t *testing.T, ip string) string {
	t.Helper()
	r, err := dns.ReverseAddr(ip)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestTransferStops checks that a consumer may stop a transfer after any batch (a client that hung up).
func TestTransferStops(t *testing.T) {
	s := bigIndex(t, 300).Snapshot()
	for name, seq := range map[string]func(func([]dns.RR) bool){
		"zone": s.Transfer(0), "reverse": s.TransferReverse("in-addr.arpa.", 0),
	} {
		batches := 0
		for range seq {
			batches++
		}
		if batches < 3 {
			t.Fatalf("%s: %d batches", name, batches)
		}
		for stop := range batches {
			n := 0
			for range seq {
				if n == stop {
					break
				}
				n++
			}
		}
	}
}

// TestTransferIsOneSnapshot checks that a transfer keeps reading the snapshot it started from while the index
// changes: the SOAs at both ends agree and the records are the old ones.
func TestTransferIsOneSnapshot(t *testing.T) {
	ix := fixture(t)
	s := ix.Snapshot()
	seq := s.Transfer(0)
	var got []dns.RR
	first := true
	for rrs := range seq {
		got = append(got, rrs...)
		if first {
			first = false
			ix.Apply(Change{Key: Key("ns", "web"), Service: nil}, Change{Key: Key("ns", "new"), Service: &Service{
				Namespace: "ns", Name: "new", IPs: addrs("10.96.0.99")}})
		}
	}
	checkSOAs(t, got, "clusterset.local.", s.Serial())
	text := strings.Join(rrStrings(got), "\n")
	if !strings.Contains(text, "web.ns.svc.clusterset.local.") || strings.Contains(text, "new.ns.svc") {
		t.Errorf("the transfer did not keep its snapshot:\n%s", text)
	}
	if ix.Snapshot().Serial() == s.Serial() {
		t.Error("the change did not move the serial")
	}
}

// BenchmarkTransfer transfers a zone of 10,000 ClusterSetIP and 2,000 headless services (the DNS benchmark's
// shape): 126,004 records.
func BenchmarkTransfer(b *testing.B) {
	s := bigIndex(b, 10000).Snapshot()
	start := time.Now()
	records := len(collect(s.Transfer(0)))
	b.Logf("%d records in %s", records, time.Since(start))
	for b.Loop() {
		for range s.Transfer(0) {
		}
	}
}
