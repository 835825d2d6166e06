package zone

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// fixture returns an index with one namespace "ns" and a service of each kind.
func fixture(t testing.TB) *Index {
	t.Helper()
	now := time.Unix(1_700_000_000, 0)
	ix := New(Options{Zone: "ClusterSet.Local", TTL: 5, NameServers: addrs("10.0.0.53"), Now: func() time.Time { return now }})
	ix.SetNamespaces([]string{"ns", "empty-ns"})
	sql := []Port{{Name: "sql", Protocol: "TCP", Port: 5432}}
	ix.Apply(
		Change{Key: Key("ns", "web"), Service: &Service{Namespace: "ns", Name: "web", Type: ClusterSetIP,
			IPs: addrs("10.96.0.10", "fd00::a"),
			Ports: []Port{{Name: "http", Protocol: "TCP", Port: 80}, {Name: "dns", Protocol: "UDP", Port: 53},
				{Name: "dns-tcp", Protocol: "TCP", Port: 53}, {Protocol: "TCP", Port: 9000}}}},
		Change{Key: Key("ns", "v4"), Service: &Service{Namespace: "ns", Name: "v4", Type: ClusterSetIP,
			IPs: addrs("10.96.0.11")}},
		Change{Key: Key("ns", "db"), Service: &Service{Namespace: "ns", Name: "db", Type: Headless, Ports: sql,
			Endpoints: []Endpoint{
				{Cluster: "east.prod", Hostname: "db-0", Addresses: addrs("10.1.0.5"), Ready: true, Ports: sql},
				{Cluster: "east.prod", Hostname: "db-0", Addresses: addrs("fd01::5"), Ready: true, Ports: sql},
				{Cluster: "cluster-b", Addresses: addrs("10.2.0.7"), Ready: true, Ports: sql},
				{Cluster: "cluster-b", Addresses: addrs("fd02::"), Ready: true, Ports: sql},
				{Cluster: "cluster-b", Addresses: addrs("10.2.0.8"), Ready: false, Ports: sql},
			}}},
		Change{Key: Key("ns", "down"), Service: &Service{Namespace: "ns", Name: "down", Type: Headless, Ports: sql,
			Endpoints: []Endpoint{{Cluster: "cluster-b", Addresses: addrs("10.2.0.9"), Ready: false}}}},
		Change{Key: Key("gone", "web"), Service: &Service{Namespace: "gone", Name: "web", Type: ClusterSetIP,
			IPs: addrs("10.96.0.12")}},
	)
	return ix
}

func rrStrings(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		out = append(out, strings.ReplaceAll(rr.String(), "\t", " "))
	}
	slices.Sort(out)
	return out
}

func TestLookup(t *testing.T) {
	const (
		nx     = dns.RcodeNameError
		ok     = dns.RcodeSuccess
		zone   = "clusterset.local."
		web    = "web.ns.svc." + zone
		db     = "db.ns.svc." + zone
		db0    = "db-0.east.prod.db.ns.svc." + zone
		db7    = "10-2-0-7.cluster-b.db.ns.svc." + zone
		dbV6   = "fd02--0.cluster-b.db.ns.svc." + zone
		nodata = "NODATA"
	)
	tests := []struct {
		qname string
		qtype uint16
		rcode int
		want  []string // answer records; nil with rcode ok means NODATA
	}{
		{"dns-version." + zone, dns.TypeTXT, ok, []string{`dns-version.clusterset.local. 5 IN TXT "1.0.0"`}},
		{"dns-version." + zone, dns.TypeA, ok, nil},
		{zone, dns.TypeNS, ok, []string{"clusterset.local. 5 IN NS ns.dns.clusterset.local."}},
		{zone, dns.TypeA, ok, nil},
		{"ns.dns." + zone, dns.TypeA, ok, []string{"ns.dns.clusterset.local. 5 IN A 10.0.0.53"}},
		{"ns.dns." + zone, dns.TypeAAAA, ok, nil},
		{"svc." + zone, dns.TypeA, ok, nil},
		{"ns.svc." + zone, dns.TypeA, ok, nil},
		{"absent.svc." + zone, dns.TypeA, nx, nil},
		{"web.ns.pod." + zone, dns.TypeA, nx, nil},
		{"pod." + zone, dns.TypeA, nx, nil},
		{web, dns.TypeA, ok, []string{web + " 5 IN A 10.96.0.10"}},
		{"WeB.Ns.SvC.ClusterSet.LOCAL.", dns.TypeA, ok, []string{web + " 5 IN A 10.96.0.10"}},
		{web, dns.TypeAAAA, ok, []string{web + " 5 IN AAAA fd00::a"}},
		{web, dns.TypeTXT, ok, nil},
		{web, dns.TypeSRV, ok, []string{
			web + " 5 IN SRV 0 100 53 " + web, web + " 5 IN SRV 0 100 80 " + web, web + " 5 IN SRV 0 100 9000 " + web}},
		{"_http._tcp." + web, dns.TypeSRV, ok, []string{"_http._tcp." + web + " 5 IN SRV 0 100 80 " + web}},
		{"_dns._udp." + web, dns.TypeSRV, ok, []string{"_dns._udp." + web + " 5 IN SRV 0 100 53 " + web}},
		{"_dns._tcp." + web, dns.TypeSRV, nx, nil},
		{"_tcp." + web, dns.TypeSRV, ok, nil},
		{"_http._tcp." + web, dns.TypeA, ok, nil},
		{"v4.ns.svc." + zone, dns.TypeAAAA, ok, nil},
		{"web.gone.svc." + zone, dns.TypeA, nx, nil},
		{"nope.ns.svc." + zone, dns.TypeA, nx, nil},
		{db, dns.TypeA, ok, []string{db + " 5 IN A 10.1.0.5", db + " 5 IN A 10.2.0.7"}},
		{db, dns.TypeAAAA, ok, []string{db + " 5 IN AAAA fd01::5", db + " 5 IN AAAA fd02::"}},
		{db, dns.TypeSRV, ok, []string{db + " 5 IN SRV 0 100 5432 " + dbV6, db + " 5 IN SRV 0 100 5432 " + db7,
			db + " 5 IN SRV 0 100 5432 " + db0}},
		{"_sql._tcp." + db, dns.TypeSRV, ok, []string{"_sql._tcp." + db + " 5 IN SRV 0 100 5432 " + dbV6,
			"_sql._tcp." + db + " 5 IN SRV 0 100 5432 " + db7, "_sql._tcp." + db + " 5 IN SRV 0 100 5432 " + db0}},
		{db0, dns.TypeA, ok, []string{db0 + " 5 IN A 10.1.0.5"}},
		{db0, dns.TypeAAAA, ok, []string{db0 + " 5 IN AAAA fd01::5"}},
		{db7, dns.TypeA, ok, []string{db7 + " 5 IN A 10.2.0.7"}},
		{db7, dns.TypeAAAA, ok, nil},
		{"10-2-0-8.cluster-b.db.ns.svc." + zone, dns.TypeA, nx, nil}, // not ready
		{"east.prod.db.ns.svc." + zone, dns.TypeA, nx, nil},          // <clusterid>.<svc>.<ns> must not exist
		{"prod.db.ns.svc." + zone, dns.TypeA, nx, nil},
		{"cluster-b.db.ns.svc." + zone, dns.TypeSRV, nx, nil},
		{"db-0.prod.db.ns.svc." + zone, dns.TypeA, nx, nil},
		{"down.ns.svc." + zone, dns.TypeA, nx, nil}, // headless without a ready endpoint
		{"down.ns.svc." + zone, dns.TypeSRV, nx, nil},
	}
	s := fixture(t).Snapshot()
	for _, tt := range tests {
		r, in := s.Lookup(tt.qname, tt.qtype)
		name := tt.qname + " " + dns.TypeToString[tt.qtype]
		if !in {
			t.Errorf("%s: outside the zone", name)
			continue
		}
		if r.Rcode != tt.rcode {
			t.Errorf("%s: rcode %s, want %s", name, dns.RcodeToString[r.Rcode], dns.RcodeToString[tt.rcode])
		}
		slices.Sort(tt.want)
		if got := rrStrings(r.Answer); !slices.Equal(got, tt.want) {
			t.Errorf("%s: answer\n%s\nwant\n%s", name, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
		if len(r.Answer) == 0 && (len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA) {
			t.Errorf("%s: no answer and authority %v, want the SOA", name, r.Ns)
		}
	}
	if _, in := s.Lookup("web.ns.svc.cluster.local.", dns.TypeA); in {
		t.Error("cluster.local is reported inside clusterset.local")
	}
}

func TestLookupApexSOAAndNSGlue(t *testing.T) {
	s := fixture(t).Snapshot()
	r, _ := s.Lookup("clusterset.local.", dns.TypeSOA)
	soa, ok := r.Answer[0].(*dns.SOA)
	if len(r.Answer) != 1 || !ok || soa.Ns != "ns.dns.clusterset.local." || soa.Serial != s.Serial() {
		t.Fatalf("apex SOA = %v", r.Answer)
	}
	r, _ = s.Lookup("clusterset.local.", dns.TypeNS)
	if got := rrStrings(r.Extra); !slices.Equal(got, []string{"ns.dns.clusterset.local. 5 IN A 10.0.0.53"}) {
		t.Errorf("NS extra = %v", got)
	}
}

func TestLookupPTR(t *testing.T) {
	s := fixture(t).Snapshot()
	tests := map[string][]string{
		"10.0.96.10.in-addr.arpa.": {"10.0.96.10.in-addr.arpa. 5 IN PTR web.ns.svc.clusterset.local."},
		"5.0.1.10.IN-ADDR.ARPA.":   {"5.0.1.10.in-addr.arpa. 5 IN PTR db-0.east.prod.db.ns.svc.clusterset.local."},
		"8.0.2.10.in-addr.arpa.":   nil, // not ready
		"1.0.0.10.in-addr.arpa.":   nil,
	}
	for q, want := range tests {
		if got := rrStrings(s.LookupPTR(q)); !slices.Equal(got, want) {
			t.Errorf("PTR %s = %v, want %v", q, got, want)
		}
	}
	rev, _ := dns.ReverseAddr("fd00::a")
	if got := s.LookupPTR(rev); len(got) != 1 || got[0].(*dns.PTR).Ptr != "web.ns.svc.clusterset.local." {
		t.Errorf("PTR %s = %v", rev, got)
	}
}

func TestApplyIsIncrementalAndMovesSerial(t *testing.T) {
	ix := fixture(t)
	before := ix.Snapshot()
	services, names, reverse := before.Sizes()
	if services != 5 || names == 0 || reverse == 0 {
		t.Fatalf("sizes = %d %d %d", services, names, reverse)
	}
	// A second service with the same VIP shares its PTR name; changing one keeps the other's record.
	ix.Apply(Change{Key: Key("ns", "alias"), Service: &Service{Namespace: "ns", Name: "alias", IPs: addrs("10.96.0.10")}})
	if got := rrStrings(ix.Snapshot().LookupPTR("10.0.96.10.in-addr.arpa.")); !slices.Equal(got, []string{
		"10.0.96.10.in-addr.arpa. 5 IN PTR alias.ns.svc.clusterset.local.",
		"10.0.96.10.in-addr.arpa. 5 IN PTR web.ns.svc.clusterset.local.",
	}) {
		t.Errorf("PTR shared by two services = %v, want both, in key order", got)
	}
	ix.Apply(Change{Key: Key("ns", "web"), Service: &Service{Namespace: "ns", Name: "web", IPs: addrs("10.96.0.20")}})
	after := ix.Snapshot()
	if after.Serial() <= before.Serial() {
		t.Errorf("serial %d did not move past %d", after.Serial(), before.Serial())
	}
	if r, _ := before.Lookup("web.ns.svc.clusterset.local.", dns.TypeA); rrStrings(r.Answer)[0] !=
		"web.ns.svc.clusterset.local. 5 IN A 10.96.0.10" {
		t.Errorf("the old snapshot changed: %v", r.Answer)
	}
	if r, _ := after.Lookup("web.ns.svc.clusterset.local.", dns.TypeA); rrStrings(r.Answer)[0] !=
		"web.ns.svc.clusterset.local. 5 IN A 10.96.0.20" {
		t.Errorf("the stale VIP is still answered: %v", r.Answer)
	}
	if got := rrStrings(after.LookupPTR("10.0.96.10.in-addr.arpa.")); !slices.Equal(got,
		[]string{"10.0.96.10.in-addr.arpa. 5 IN PTR alias.ns.svc.clusterset.local."}) {
		t.Errorf("shared PTR = %v", got)
	}
	ix.Apply(Change{Key: Key("ns", "web")}, Change{Key: Key("ns", "alias")})
	gone := ix.Snapshot()
	if r, _ := gone.Lookup("web.ns.svc.clusterset.local.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Errorf("deleted service answers %v", r.Answer)
	}
	if got := gone.LookupPTR("10.0.96.10.in-addr.arpa."); got != nil {
		t.Errorf("PTR of deleted services = %v", got)
	}
	if s, _, _ := gone.Sizes(); s != services-1 {
		t.Errorf("services = %d, want %d", s, services-1)
	}
	ix.SetNamespaces(nil)
	if r, _ := ix.Snapshot().Lookup("db.ns.svc.clusterset.local.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Error("a namespace removed locally still answers")
	}
}

func TestLongNamesAreLeftOut(t *testing.T) {
	ix := New(Options{Zone: "clusterset.local."})
	long := strings.Repeat("h", 63)
	ix.SetNamespaces([]string{long})
	ix.Apply(Change{Key: Key(long, "db"), Service: &Service{Namespace: long, Name: "db", Type: Headless, Endpoints: []Endpoint{
		{Cluster: long + "." + long, Hostname: long, Addresses: addrs("10.0.0.1"), Ready: true},
		{Cluster: "c", Hostname: "ok", Addresses: addrs("10.0.0.2"), Ready: true},
	}}})
	base := "db." + long + ".svc.clusterset.local."
	r, _ := ix.Snapshot().Lookup(base, dns.TypeA)
	if got := rrStrings(r.Answer); !slices.Equal(got, []string{base + " 0 IN A 10.0.0.2"}) {
		t.Errorf("answer = %v", got)
	}
}

func TestLookupAllocations(t *testing.T) {
	s := fixture(t).Snapshot()
	for _, q := range []string{"web.ns.svc.clusterset.local.", "db-0.east.prod.db.ns.svc.clusterset.local.",
		"nope.ns.svc.clusterset.local."} {
		if n := testing.AllocsPerRun(100, func() { s.Lookup(q, dns.TypeA) }); n != 0 {
			t.Errorf("Lookup(%s) allocates %v times", q, n)
		}
	}
}

func BenchmarkLookup(b *testing.B) {
	s := fixture(b).Snapshot()
	for b.Loop() {
		s.Lookup("db-0.east.prod.db.ns.svc.clusterset.local.", dns.TypeA)
	}
}
