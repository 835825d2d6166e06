package dnsconformance

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/util/wait"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/plugin/mcstest"
)

// row is one question of SPEC section 4 and its expected reply.
type row struct {
	spec   string // the SPEC row or rule it checks
	name   string
	qtype  uint16
	rcode  string
	answer []string // the answer records' data, in any order; none means an empty answer
}

// rows returns every row twice: as written, in lower case, and with the name in mixed case, as a resolver
// using 0x20 asks it. Both get the same answer, owned by the name exactly as asked.
func rows() []row {
	lower := specRows()
	out := slices.Clone(lower)
	for _, r := range lower {
		r.spec += ", mixed case"
		r.name = mixedCase(r.name)
		out = append(out, r)
	}
	return out
}

// mixedCase puts every other letter of name in upper case.
func mixedCase(name string) string {
	b := []byte(name)
	upper := true
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			if upper {
				b[i] = c - 'a' + 'A'
			}
			upper = !upper
		}
	}
	return string(b)
}

// specRows returns the rows of SPEC section 4, with every name in lower case.
func specRows() []row {
	const nx, ok = "NXDOMAIN", "NOERROR"
	return []row{
		{spec: "dns-version TXT", name: "dns-version." + zone, qtype: dns.TypeTXT, rcode: ok, answer: []string{strconv.Quote(names.DNSSchemaVersion)}},
		{spec: "ClusterSetIP A", name: web, qtype: dns.TypeA, rcode: ok, answer: []string{webIPv4}},
		{spec: "ClusterSetIP AAAA", name: web, qtype: dns.TypeAAAA, rcode: ok, answer: []string{webIPv6}},
		{spec: "ClusterSetIP named port SRV", name: "_http._tcp." + web, qtype: dns.TypeSRV, rcode: ok,
			answer: []string{"0 100 80 " + web}},
		{spec: "ClusterSetIP named port SRV, udp", name: "_dns._udp." + web, qtype: dns.TypeSRV, rcode: ok,
			answer: []string{"0 100 53 " + web}},
		{spec: "bare-name SRV: one record per port number", name: web, qtype: dns.TypeSRV, rcode: ok,
			answer: []string{"0 100 80 " + web, "0 100 53 " + web}},
		{spec: "headless A: ready endpoints of all clusters", name: db, qtype: dns.TypeA, rcode: ok,
			answer: []string{"10.1.0.5", "10.2.0.7"}},
		{spec: "headless AAAA: the same set", name: db, qtype: dns.TypeAAAA, rcode: ok, answer: []string{"fd01::5", "fd02::7"}},
		{spec: "headless without a ready endpoint: NXDOMAIN", name: down, qtype: dns.TypeA, rcode: nx},
		{spec: "headless without a ready endpoint: NXDOMAIN", name: down, qtype: dns.TypeSRV, rcode: nx},
		{spec: "per-endpoint A, two-label cluster id", name: db0, qtype: dns.TypeA, rcode: ok, answer: []string{"10.1.0.5"}},
		{spec: "per-endpoint AAAA, two-label cluster id", name: db0, qtype: dns.TypeAAAA, rcode: ok, answer: []string{"fd01::5"}},
		{spec: "per-endpoint A, name derived from the address", name: dbB4, qtype: dns.TypeA, rcode: ok, answer: []string{"10.2.0.7"}},
		{spec: "per-endpoint AAAA, name derived from the address", name: dbB6, qtype: dns.TypeAAAA, rcode: ok,
			answer: []string{"fd02::7"}},
		{spec: "per-endpoint name of a not-ready endpoint", name: "db-1.east.prod." + db, qtype: dns.TypeA, rcode: nx},
		{spec: "headless named port SRV: ready endpoint x port", name: "_sql._tcp." + db, qtype: dns.TypeSRV, rcode: ok,
			answer: []string{"0 100 5432 " + db0, "0 100 5432 " + dbB4, "0 100 5432 " + dbB6}},
		{spec: "headless bare-name SRV", name: db, qtype: dns.TypeSRV, rcode: ok,
			answer: []string{"0 100 5432 " + db0, "0 100 5432 " + dbB4, "0 100 5432 " + dbB6}},
		{spec: "<clusterid>.<svc>.<ns> must not exist", name: "east.prod." + db, qtype: dns.TypeA, rcode: nx},
		{spec: "<clusterid>.<svc>.<ns> must not exist", name: "east.prod." + db, qtype: dns.TypeSRV, rcode: nx},
		{spec: "<clusterid>.<svc>.<ns> must not exist", name: "cluster-b." + db, qtype: dns.TypeAAAA, rcode: nx},
		{spec: "<clusterid>.<svc>.<ns> must not exist", name: "prod." + db, qtype: dns.TypeA, rcode: nx},
		{spec: "apex NS", name: zone, qtype: dns.TypeNS, rcode: ok, answer: []string{"ns.dns." + zone}},
		{spec: "NODATA: an existing name, a type it lacks", name: web, qtype: dns.TypeTXT, rcode: ok},
		{spec: "NODATA: an existing name, a type it lacks", name: "_http._tcp." + web, qtype: dns.TypeA, rcode: ok},
		{spec: "NODATA: an existing name, a type it lacks", name: dbB4, qtype: dns.TypeAAAA, rcode: ok},
		{spec: "NODATA: an existing name, a type it lacks", name: "dns-version." + zone, qtype: dns.TypeA, rcode: ok},
		{spec: "NXDOMAIN: a name that does not exist", name: "nope." + ns + ".svc." + zone, qtype: dns.TypeA, rcode: nx},
		{spec: "NXDOMAIN: a port that does not exist", name: "_nope._tcp." + web, qtype: dns.TypeSRV, rcode: nx},
		{spec: "namespace absent in this cluster", name: "web.absent.svc." + zone, qtype: dns.TypeA, rcode: nx},
		{spec: "namespace absent in this cluster", name: "absent.svc." + zone, qtype: dns.TypeA, rcode: nx},
		{spec: "pod in place of svc", name: "web." + ns + ".pod." + zone, qtype: dns.TypeA, rcode: nx},
		{spec: "PTR of a clusterset IP", name: "10.0.250.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: ok, answer: []string{web}},
		{spec: "PTR of a clusterset IPv6", name: reverse(webIPv6), qtype: dns.TypePTR, rcode: ok, answer: []string{web}},
		{spec: "PTR of a headless endpoint", name: "5.0.1.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: ok, answer: []string{db0}},
		{spec: "PTR of a headless endpoint", name: reverse("fd02::7"), qtype: dns.TypePTR, rcode: ok, answer: []string{dbB6}},
	}
}

func reverse(ip string) string {
	r, err := dns.ReverseAddr(ip)
	if err != nil {
		panic(err)
	}
	return r
}

func TestSpecRows(t *testing.T) {
	for _, r := range rows() {
		for _, a := range askers() {
			t.Run(fmt.Sprintf("%s/%s_%s/%s", r.spec, r.name, dns.TypeToString[r.qtype], a.name), func(t *testing.T) {
				t.Parallel()
				check(t, r, a.ask(t, r.name, r.qtype))
			})
		}
	}
}

func check(t *testing.T, r row, got reply) {
	t.Helper()
	if got.rcode != r.rcode {
		t.Errorf("rcode %s, want %s", got.rcode, r.rcode)
	}
	if !got.aa || got.tc {
		t.Errorf("flags aa=%v tc=%v, want an authoritative, complete reply", got.aa, got.tc)
	}
	gotData, want := rdata(got.answer), slices.Clone(r.answer)
	slices.Sort(gotData)
	slices.Sort(want)
	if !slices.Equal(gotData, want) {
		t.Errorf("answer %q, want %q", gotData, want)
	}
	for _, rr := range got.answer {
		if h := rr.Header(); h.Name != r.name || h.Rrtype != r.qtype || h.Ttl != 5 {
			t.Errorf("answer record %q: want owner %s byte for byte, type %s, TTL 5", rr, r.name, dns.TypeToString[r.qtype])
		}
	}
	if len(got.answer) == 0 {
		if len(got.authority) != 1 || got.authority[0].Header().Rrtype != dns.TypeSOA || got.authority[0].Header().Name != zone {
			t.Errorf("authority %v, want the zone's SOA", got.authority)
		}
	}
}

// TestApexSOA checks the SOA, and that its serial moves when the zone's data changes.
func TestApexSOA(t *testing.T) {
	serial := func(t *testing.T, a asker) uint32 {
		got := a.ask(t, zone, dns.TypeSOA)
		if got.rcode != "NOERROR" || len(got.answer) != 1 {
			t.Fatalf("apex SOA: %s %v", got.rcode, got.answer)
		}
		soa, ok := got.answer[0].(*dns.SOA)
		if !ok || soa.Hdr.Name != zone || soa.Ns != "ns.dns."+zone || soa.Minttl != 5 {
			t.Fatalf("apex SOA = %v", got.answer[0])
		}
		return soa.Serial
	}
	before := map[string]uint32{}
	for _, a := range askers() {
		before[a.name] = serial(t, a)
	}
	ctx := context.Background()
	if err := env.member.Client.Create(ctx, mcstest.Import(ns, "serial", mcsv1beta1.ClusterSetIP, []string{"10.250.9.9"})); err != nil {
		t.Fatal(err)
	}
	for _, a := range askers() {
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return serial(t, a) > before[a.name], nil
		})
		if err != nil {
			t.Errorf("%s: the SOA serial stayed at %d after a change", a.name, before[a.name])
		}
	}
}

// TestLargeHeadless checks that the 300 endpoints of one headless service are truncated (TC) over UDP and
// complete over TCP.
func TestLargeHeadless(t *testing.T) {
	for _, a := range askers() {
		t.Run(a.name, func(t *testing.T) {
			got := a.ask(t, big, dns.TypeA)
			if got.rcode != "NOERROR" {
				t.Fatalf("rcode %s", got.rcode)
			}
			if strings.HasSuffix(a.name, "/udp") {
				if !got.tc || len(got.answer) >= bigCount {
					t.Errorf("over UDP: tc=%v with %d answers, want a truncated reply", got.tc, len(got.answer))
				}
				return
			}
			seen := map[string]bool{}
			for _, d := range rdata(got.answer) {
				seen[d] = true
			}
			if got.tc || len(got.answer) != bigCount || len(seen) != bigCount {
				t.Errorf("over TCP: tc=%v with %d answers (%d distinct), want all %d", got.tc, len(got.answer), len(seen), bigCount)
			}
		})
	}
}

// TestClusterLocalUnchanged checks that the kubernetes plugin in the same server block still answers
// cluster.local, including the PTR of a ClusterIP, which multicluster must not shadow.
func TestClusterLocalUnchanged(t *testing.T) {
	local := "local.default.svc.cluster.local."
	for _, a := range askers() {
		t.Run(a.name, func(t *testing.T) {
			got := a.ask(t, local, dns.TypeA)
			if got.rcode != "NOERROR" || !slices.Equal(rdata(got.answer), []string{env.clusterIP}) {
				t.Errorf("%s A: %s %v, want %s", local, got.rcode, got.answer, env.clusterIP)
			}
			got = a.ask(t, reverse(env.clusterIP), dns.TypePTR)
			if got.rcode != "NOERROR" || !slices.Equal(rdata(got.answer), []string{local}) {
				t.Errorf("PTR %s: %s %v, want %s", env.clusterIP, got.rcode, got.answer, local)
			}
		})
	}
}

// TestDigVersion is the acceptance check, verbatim.
func TestDigVersion(t *testing.T) {
	got := dig(t, names.DNSVersionName, dns.TypeTXT)
	if !slices.Equal(rdata(got.answer), []string{strconv.Quote(names.DNSSchemaVersion)}) {
		t.Errorf("dns-version TXT = %v", got.answer)
	}
}
