package zone

import (
	"fmt"
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

// everyAddress are reverse ranges that hold every address: every address the zone answers has PTR records.
var everyAddress = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// fixture returns an index with one namespace "ns" and a service of each kind; every address has PTR records.
func fixture(t testing.TB) *Index {
	t.Helper()
	now := time.Unix(1_700_000_000, 0)
	ix := New(Options{Zone: "ClusterSet.Local", TTL: 5, NameServers: addrs("10.0.0.53"), Now: func() time.Time { return now },
		Reverse: everyAddress})
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
		// The same names in mixed case, as a resolver using 0x20 asks them.
		mZone = "ClUsTeRsEt.LoCaL."
		mWeb  = "wEb.Ns.sVc." + mZone
		mDb   = "dB.nS.SvC." + mZone
		mDb0  = "Db-0.EaSt.PrOd." + mDb
		mDb7  = "10-2-0-7.ClUsTeR-B." + mDb
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
		// Mixed case: the owners are the name as asked, byte for byte; the names in the data stay lower case.
		{"Dns-Version." + mZone, dns.TypeTXT, ok, []string{`Dns-Version.ClUsTeRsEt.LoCaL. 5 IN TXT "1.0.0"`}},
		{mZone, dns.TypeNS, ok, []string{mZone + " 5 IN NS ns.dns.clusterset.local."}},
		{"Ns.DnS." + mZone, dns.TypeA, ok, []string{"Ns.DnS." + mZone + " 5 IN A 10.0.0.53"}},
		{mWeb, dns.TypeA, ok, []string{mWeb + " 5 IN A 10.96.0.10"}},
		{mWeb, dns.TypeAAAA, ok, []string{mWeb + " 5 IN AAAA fd00::a"}},
		{mWeb, dns.TypeSRV, ok, []string{
			mWeb + " 5 IN SRV 0 100 53 " + web, mWeb + " 5 IN SRV 0 100 80 " + web, mWeb + " 5 IN SRV 0 100 9000 " + web}},
		{"_HtTp._TcP." + mWeb, dns.TypeSRV, ok, []string{"_HtTp._TcP." + mWeb + " 5 IN SRV 0 100 80 " + web}},
		{mDb, dns.TypeA, ok, []string{mDb + " 5 IN A 10.1.0.5", mDb + " 5 IN A 10.2.0.7"}},
		{mDb, dns.TypeSRV, ok, []string{mDb + " 5 IN SRV 0 100 5432 " + dbV6, mDb + " 5 IN SRV 0 100 5432 " + db7,
			mDb + " 5 IN SRV 0 100 5432 " + db0}},
		{"_SqL._tCp." + mDb, dns.TypeSRV, ok, []string{"_SqL._tCp." + mDb + " 5 IN SRV 0 100 5432 " + dbV6,
			"_SqL._tCp." + mDb + " 5 IN SRV 0 100 5432 " + db7, "_SqL._tCp." + mDb + " 5 IN SRV 0 100 5432 " + db0}},
		{mDb0, dns.TypeA, ok, []string{mDb0 + " 5 IN A 10.1.0.5"}},
		{mDb0, dns.TypeAAAA, ok, []string{mDb0 + " 5 IN AAAA fd01::5"}},
		{mDb7, dns.TypeA, ok, []string{mDb7 + " 5 IN A 10.2.0.7"}},
		{mWeb, dns.TypeTXT, ok, nil},
		{mDb7, dns.TypeAAAA, ok, nil},
		{mZone, dns.TypeA, ok, nil},
		{"NoPe.Ns.SvC." + mZone, dns.TypeA, nx, nil},
		{"EaSt.PrOd." + mDb, dns.TypeA, nx, nil},
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
		if len(r.Answer) == 0 && (len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA || r.Ns[0].Header().Name != zone) {
			t.Errorf("%s: no answer and authority %v, want the SOA owned by the apex in lower case", name, r.Ns)
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
	// In mixed case, the apex records are owned by the name as asked; the glue's owner is another name, kept.
	const mZone = "ClUsTeRsEt.LoCaL."
	for _, qtype := range []uint16{dns.TypeSOA, dns.TypeNS, dns.TypeANY} {
		r, _ = s.Lookup(mZone, qtype)
		if len(r.Answer) == 0 {
			t.Errorf("%s %s: no answer", mZone, dns.TypeToString[qtype])
		}
		for _, rr := range r.Answer {
			if rr.Header().Name != mZone {
				t.Errorf("%s %s: answer %v, want it owned by %s", mZone, dns.TypeToString[qtype], rr, mZone)
			}
		}
	}
	r, _ = s.Lookup(mZone, dns.TypeNS)
	if got := rrStrings(r.Extra); !slices.Equal(got, []string{"ns.dns.clusterset.local. 5 IN A 10.0.0.53"}) {
		t.Errorf("NS extra in mixed case = %v", got)
	}
}

func TestLookupPTR(t *testing.T) {
	s := fixture(t).Snapshot()
	rev, _ := dns.ReverseAddr("fd00::a")
	mRev := strings.ToUpper(rev)
	tests := map[string][]string{
		"10.0.96.10.in-addr.arpa.": {"10.0.96.10.in-addr.arpa. 5 IN PTR web.ns.svc.clusterset.local."},
		"5.0.1.10.IN-ADDR.ARPA.":   {"5.0.1.10.IN-ADDR.ARPA. 5 IN PTR db-0.east.prod.db.ns.svc.clusterset.local."},
		"5.0.1.10.In-AdDr.ArPa.":   {"5.0.1.10.In-AdDr.ArPa. 5 IN PTR db-0.east.prod.db.ns.svc.clusterset.local."},
		rev:                        {rev + " 5 IN PTR web.ns.svc.clusterset.local."},
		mRev:                       {mRev + " 5 IN PTR web.ns.svc.clusterset.local."},
		"8.0.2.10.in-addr.arpa.":   nil, // not ready
		"8.0.2.10.IN-ADDR.ARPA.":   nil,
		"1.0.0.10.in-addr.arpa.":   nil,
	}
	for q, want := range tests {
		if got := rrStrings(s.LookupPTR(q)); !slices.Equal(got, want) {
			t.Errorf("PTR %s = %v, want %v", q, got, want)
		}
	}
}

// TestPTROnlyInReverseRanges checks that only the addresses of the reverse ranges have PTR records, in queries,
// transfers and the index's size alike, while every address still answers the forward names; and that without
// ranges no address has one (review finding #17: a public address in an export got a PTR record in every member).
func TestPTROnlyInReverseRanges(t *testing.T) {
	private := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	all := []string{"10.1.0.5", "203.0.113.7", "fd00::5", "2001:db8::7"}
	for _, tt := range []struct {
		name    string
		reverse []netip.Prefix
		ptr     []string // the addresses with a PTR record
	}{
		{"private ranges", private, []string{"10.1.0.5", "fd00::5"}},
		{"a public range listed too", append(private, netip.MustParsePrefix("203.0.113.0/24")),
			[]string{"10.1.0.5", "203.0.113.7", "fd00::5"}},
		{"no range", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ix := New(Options{Zone: "clusterset.local.", TTL: 5, Reverse: tt.reverse})
			ix.SetNamespaces([]string{"ns"})
			var eps []Endpoint
			for i, a := range all {
				eps = append(eps, Endpoint{Cluster: "east", Hostname: fmt.Sprintf("db-%d", i), Addresses: addrs(a), Ready: true})
			}
			ix.Apply(Change{Key: Key("ns", "db"), Service: &Service{Namespace: "ns", Name: "db", Type: Headless, Endpoints: eps}})
			s := ix.Snapshot()
			if r, _ := s.Lookup("db.ns.svc.clusterset.local.", dns.TypeANY); len(r.Answer) != len(all) {
				t.Errorf("forward answer %v, want every address", r.Answer)
			}
			var got []string
			for _, a := range all {
				rev, _ := dns.ReverseAddr(a)
				if len(s.LookupPTR(rev)) > 0 {
					got = append(got, a)
				}
			}
			if !slices.Equal(got, tt.ptr) {
				t.Errorf("PTR records for %v, want %v", got, tt.ptr)
			}
			var transferred []string
			for _, apex := range []string{"in-addr.arpa.", "ip6.arpa."} {
				for _, rr := range collect(s.TransferReverse(apex, 0)) {
					if p, ok := rr.(*dns.PTR); ok {
						transferred = append(transferred, p.Hdr.Name)
					}
				}
			}
			if len(transferred) != len(tt.ptr) {
				t.Errorf("reverse transfers hold %v, want the PTRs of %v", transferred, tt.ptr)
			}
			if _, _, n := s.Sizes(); n != len(tt.ptr) {
				t.Errorf("%d addresses with PTR records, want %d", n, len(tt.ptr))
			}
			// The service goes, and its PTR records with it.
			ix.Apply(Change{Key: Key("ns", "db")})
			if _, _, n := ix.Snapshot().Sizes(); n != 0 {
				t.Errorf("%d addresses with PTR records after the service went", n)
			}
		})
	}
}

// TestReverseAddr checks that a reverse name parses back to the address dns.ReverseAddr wrote it for, and that
// anything else is no address.
func TestReverseAddr(t *testing.T) {
	for _, ip := range []string{"10.0.96.10", "0.0.0.0", "255.255.255.255", "fd00::a", "2001:db8::ff:1", "::"} {
		rev, err := dns.ReverseAddr(ip)
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := reverseAddr(rev); !ok || a != netip.MustParseAddr(ip) {
			t.Errorf("reverseAddr(%s) = %v, %v; want %s", rev, a, ok, ip)
		}
	}
	v6, _ := dns.ReverseAddr("fd00::a")
	for _, name := range []string{"1.0.96.10.in-addr.arpa", "96.10.in-addr.arpa.", "01.0.96.10.in-addr.arpa.", "256.0.96.10.in-addr.arpa.",
		"x.0.96.10.in-addr.arpa.", "1.1.0.96.10.in-addr.arpa.", "10.0.96.10.example.", strings.Replace(v6, "a", "g", 1),
		strings.Replace(v6, "a.", "aa", 1), "0." + v6} {
		if a, ok := reverseAddr(name); ok {
			t.Errorf("reverseAddr(%s) = %v, want no address", name, a)
		}
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

// TestLongClusterIDs checks a cluster id of 100 characters in two labels, as KEP-2149 allows, in names at the
// 253-octet limit: an endpoint's name of 253 octets answers and is a PTR and SRV target; one octet longer, the
// endpoint has no name, PTR or SRV record of its own, yet its address still answers the service's name.
func TestLongClusterIDs(t *testing.T) {
	const zone = "clusterset.local."
	id := strings.Repeat("a", 63) + "." + strings.Repeat("b", 36)
	svc := strings.Repeat("s", 63)
	fits, over := strings.Repeat("h", 62), strings.Repeat("h", 63)
	base := svc + ".conf.svc." + zone
	fitsName, overName, derived := fits+"."+id+"."+base, over+"."+id+"."+base, "10-0-0-3."+id+"."+base
	if len(id) != 100 || len(fitsName)-1 != 253 || len(overName)-1 != 254 {
		t.Fatalf("fixture: id of %d characters, names of %d and %d octets", len(id), len(fitsName)-1, len(overName)-1)
	}
	ix := New(Options{Zone: zone, TTL: 5, Reverse: everyAddress})
	ix.SetNamespaces([]string{"conf"})
	http := []Port{{Name: "http", Protocol: "TCP", Port: 80}}
	ix.Apply(Change{Key: Key("conf", svc), Service: &Service{Namespace: "conf", Name: svc, Type: Headless, Ports: http,
		Endpoints: []Endpoint{
			{Cluster: id, Hostname: fits, Addresses: addrs("10.0.0.1"), Ready: true, Ports: http},
			{Cluster: id, Hostname: over, Addresses: addrs("10.0.0.2"), Ready: true, Ports: http},
			{Cluster: id, Addresses: addrs("10.0.0.3"), Ready: true, Ports: http},
		}}})
	s := ix.Snapshot()
	tests := []struct {
		qname string
		qtype uint16
		rcode int
		want  []string
	}{
		{fitsName, dns.TypeA, dns.RcodeSuccess, []string{fitsName + " 5 IN A 10.0.0.1"}},
		{derived, dns.TypeA, dns.RcodeSuccess, []string{derived + " 5 IN A 10.0.0.3"}},
		{overName, dns.TypeA, dns.RcodeNameError, nil},
		{base, dns.TypeA, dns.RcodeSuccess, []string{base + " 5 IN A 10.0.0.1", base + " 5 IN A 10.0.0.2", base + " 5 IN A 10.0.0.3"}},
		{base, dns.TypeSRV, dns.RcodeSuccess, []string{base + " 5 IN SRV 0 100 80 " + derived, base + " 5 IN SRV 0 100 80 " + fitsName}},
		{"_http._tcp." + base, dns.TypeSRV, dns.RcodeSuccess, []string{"_http._tcp." + base + " 5 IN SRV 0 100 80 " + derived,
			"_http._tcp." + base + " 5 IN SRV 0 100 80 " + fitsName}},
		{id + "." + base, dns.TypeA, dns.RcodeNameError, nil}, // <clusterid>.<svc>.<ns> must not exist
		{strings.Repeat("b", 36) + "." + base, dns.TypeA, dns.RcodeNameError, nil},
		{fits + "." + strings.Repeat("b", 36) + "." + base, dns.TypeA, dns.RcodeNameError, nil},
	}
	for _, tt := range tests {
		r, _ := s.Lookup(tt.qname, tt.qtype)
		if got := rrStrings(r.Answer); r.Rcode != tt.rcode || !slices.Equal(got, tt.want) {
			t.Errorf("%.40s... %s: %s %v, want %s %v", tt.qname, dns.TypeToString[tt.qtype], dns.RcodeToString[r.Rcode], got,
				dns.RcodeToString[tt.rcode], tt.want)
		}
	}
	for ip, want := range map[string][]string{"10.0.0.1": {fitsName}, "10.0.0.2": nil, "10.0.0.3": {derived}} {
		rev, _ := dns.ReverseAddr(ip)
		var got []string
		for _, rr := range s.LookupPTR(rev) {
			got = append(got, rr.(*dns.PTR).Ptr)
		}
		if !slices.Equal(got, want) {
			t.Errorf("PTR %s = %v, want %v", ip, got, want)
		}
	}
}

// TestAnswerAllocations checks that a precompiled answer builds nothing: a question in lower case allocates
// nothing, one in mixed case only its name in lower case.
func TestAnswerAllocations(t *testing.T) {
	s := fixture(t).Snapshot()
	tests := []struct {
		qname  string
		qtype  uint16
		allocs float64
	}{
		{"web.ns.svc.clusterset.local.", dns.TypeA, 0},
		{"db-0.east.prod.db.ns.svc.clusterset.local.", dns.TypeA, 0},
		{"db.ns.svc.clusterset.local.", dns.TypeSRV, 0},
		{"nope.ns.svc.clusterset.local.", dns.TypeA, 0},
		{"clusterset.local.", dns.TypeNS, 0},
		{"wEb.Ns.SvC.cLuStErSeT.lOcAl.", dns.TypeA, 1},
		{"dB.nS.sVc.ClUsTeRsEt.LoCaL.", dns.TypeSRV, 1},
		{"NoPe.Ns.SvC.cLuStErSeT.lOcAl.", dns.TypeA, 1},
	}
	for _, tt := range tests {
		if n := testing.AllocsPerRun(100, func() {
			var a Answer
			s.Answer(tt.qname, tt.qtype, &a)
		}); n != tt.allocs {
			t.Errorf("%s %s allocates %v times, want %v", tt.qname, dns.TypeToString[tt.qtype], n, tt.allocs)
		}
	}
}

// TestSharedWire checks that the records of a port name and of a single-stack endpoint's name are stored once,
// inside the service name's records. (A dual-stack endpoint's A and AAAA records are not contiguous there.)
func TestSharedWire(t *testing.T) {
	s := fixture(t).Snapshot()
	e, _ := s.services.get(Key("ns", "db"))
	root, _ := e.find("")
	for _, prefix := range []string{"_sql._tcp", "10-2-0-7.cluster-b"} {
		n, ok := e.find(prefix)
		if !ok || len(n.wire) == 0 {
			t.Fatalf("%s: no records", prefix)
		}
		if !sharesBytes(root.wire, n.wire) {
			t.Errorf("%s: records stored apart from the service name's", prefix)
		}
	}
}

func sharesBytes(outer, inner []byte) bool {
	for i := range outer {
		if &outer[i] == &inner[0] {
			return true
		}
	}
	return false
}

// BenchmarkAnswer asks each question in lower case and in mixed case, which also pays for lower-casing the name.
func BenchmarkAnswer(b *testing.B) {
	s := fixture(b).Snapshot()
	for _, bb := range []struct {
		name, qname string
		qtype       uint16
	}{
		{"ClusterSetIP_A/lower", "web.ns.svc.clusterset.local.", dns.TypeA},
		{"ClusterSetIP_A/mixed", "wEb.Ns.sVc.ClUsTeRsEt.LoCaL.", dns.TypeA},
		{"endpoint_A/lower", "db-0.east.prod.db.ns.svc.clusterset.local.", dns.TypeA},
		{"endpoint_A/mixed", "Db-0.EaSt.PrOd.dB.nS.sVc.ClUsTeRsEt.LoCaL.", dns.TypeA},
		{"headless_SRV/lower", "db.ns.svc.clusterset.local.", dns.TypeSRV},
		{"headless_SRV/mixed", "dB.nS.sVc.ClUsTeRsEt.LoCaL.", dns.TypeSRV},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var a Answer
				s.Answer(bb.qname, bb.qtype, &a)
			}
		})
	}
}
