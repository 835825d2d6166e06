package multicluster

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"

	"vksfleet.dev/fleet/plugin/zone"
)

// nextRcode is what the next plugin returns in these tests; it never writes, so "passed on" is visible as a
// missing reply with this rcode.
const nextRcode = dns.RcodeNotImplemented

func nextHandler() plugin.Handler { return test.NextHandler(nextRcode, nil) }

func testPlugin(t testing.TB, f fall.F) (*MultiCluster, *atomic.Bool) {
	t.Helper()
	m := newPlugin(&config{zone: "clusterset.local.", reverse: []string{"in-addr.arpa.", "ip6.arpa."}, ttl: 5, fall: f}, nil)
	var synced atomic.Bool
	m.synced = synced.Load
	m.Next = nextHandler()
	m.index.SetNamespaces([]string{"ns"})
	m.index.Apply(
		zone.Change{Key: zone.Key("ns", "web"), Service: &zone.Service{Namespace: "ns", Name: "web",
			IPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")}, Ports: []zone.Port{{Name: "http", Protocol: "TCP", Port: 80}}}},
		zone.Change{Key: zone.Key("ns", "db"), Service: &zone.Service{Namespace: "ns", Name: "db", Type: zone.Headless,
			Endpoints: []zone.Endpoint{{Cluster: "east.prod", Hostname: "db-0", Ready: true,
				Addresses: []netip.Addr{netip.MustParseAddr("10.1.0.5")}}}}},
	)
	return m, &synced
}

func serve(t testing.TB, m *MultiCluster, name string, qtype uint16) (int, *dns.Msg) {
	t.Helper()
	req := new(dns.Msg)
	req.SetQuestion(name, qtype)
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	rcode, _ := m.ServeDNS(context.Background(), rec, req)
	return rcode, rec.Msg
}

func TestServeDNS(t *testing.T) {
	m, synced := testPlugin(t, fall.F{})
	if m.Ready() {
		t.Fatal("ready before the source synced")
	}
	if rcode, msg := serve(t, m, "web.ns.svc.clusterset.local.", dns.TypeA); rcode != dns.RcodeServerFailure || msg != nil {
		t.Errorf("before sync: rcode %d, reply %v; want SERVFAIL from the server", rcode, msg)
	}
	synced.Store(true)
	if !m.Ready() {
		t.Fatal("not ready after the source synced")
	}
	tests := []struct {
		name   string
		qtype  uint16
		rcode  int
		answer int
		passed bool // passed on to the next plugin
	}{
		{"web.ns.svc.clusterset.local.", dns.TypeA, dns.RcodeSuccess, 1, false},
		{"WEB.ns.svc.clusterset.local.", dns.TypeA, dns.RcodeSuccess, 1, false},
		{"_http._tcp.web.ns.svc.clusterset.local.", dns.TypeSRV, dns.RcodeSuccess, 1, false},
		{"_HtTp._TcP.wEb.Ns.SvC.ClUsTeRsEt.LoCaL.", dns.TypeSRV, dns.RcodeSuccess, 1, false},
		{"Db-0.EaSt.PrOd.dB.nS.sVc.ClUsTeRsEt.LoCaL.", dns.TypeA, dns.RcodeSuccess, 1, false},
		{"wEb.Ns.SvC.ClUsTeRsEt.LoCaL.", dns.TypeAAAA, dns.RcodeSuccess, 0, false},
		{"NoPe.Ns.SvC.ClUsTeRsEt.LoCaL.", dns.TypeA, dns.RcodeNameError, 0, false},
		{"5.0.1.10.In-AdDr.ArPa.", dns.TypePTR, dns.RcodeSuccess, 1, false},
		{"web.ns.svc.clusterset.local.", dns.TypeAAAA, dns.RcodeSuccess, 0, false},
		{"db-0.east.prod.db.ns.svc.clusterset.local.", dns.TypeA, dns.RcodeSuccess, 1, false},
		{"east.prod.db.ns.svc.clusterset.local.", dns.TypeA, dns.RcodeNameError, 0, false},
		{"web.other.svc.clusterset.local.", dns.TypeA, dns.RcodeNameError, 0, false},
		{"web.ns.svc.cluster.local.", dns.TypeA, nextRcode, 0, true},
		{"10.0.96.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, 1, false},
		{"5.0.1.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, 1, false},
		{"1.0.96.10.in-addr.arpa.", dns.TypePTR, nextRcode, 0, true}, // e.g. a cluster.local ClusterIP
		{"10.0.96.10.in-addr.arpa.", dns.TypeA, nextRcode, 0, true},
	}
	for _, tt := range tests {
		rcode, msg := serve(t, m, tt.name, tt.qtype)
		if rcode != tt.rcode {
			t.Errorf("%s %s: rcode %s, want %s", tt.name, dns.TypeToString[tt.qtype], dns.RcodeToString[rcode], dns.RcodeToString[tt.rcode])
		}
		if tt.passed != (msg == nil) {
			t.Errorf("%s %s: passed on = %v, want %v", tt.name, dns.TypeToString[tt.qtype], msg == nil, tt.passed)
			continue
		}
		if msg == nil {
			continue
		}
		if !msg.Authoritative || msg.Rcode != tt.rcode || len(msg.Answer) != tt.answer {
			t.Errorf("%s %s: aa %v rcode %d answer %v", tt.name, dns.TypeToString[tt.qtype], msg.Authoritative, msg.Rcode, msg.Answer)
		}
		// Owners are the question's name byte for byte, as stock CoreDNS answers; the SOA is owned by the apex.
		for _, rr := range msg.Answer {
			if rr.Header().Name != tt.name {
				t.Errorf("%s %s: answer %v, want it owned by the name as asked", tt.name, dns.TypeToString[tt.qtype], rr)
			}
		}
		if len(msg.Answer) == 0 && (len(msg.Ns) != 1 || msg.Ns[0].Header().Rrtype != dns.TypeSOA ||
			msg.Ns[0].Header().Name != "clusterset.local.") {
			t.Errorf("%s %s: authority %v, want the SOA", tt.name, dns.TypeToString[tt.qtype], msg.Ns)
		}
	}
}

func TestServeDNSFallthrough(t *testing.T) {
	m, synced := testPlugin(t, fall.F{Zones: []string{"clusterset.local."}})
	if rcode, msg := serve(t, m, "web.ns.svc.clusterset.local.", dns.TypeA); rcode != nextRcode || msg != nil {
		t.Errorf("before sync with fallthrough: rcode %d reply %v, want it passed on", rcode, msg)
	}
	synced.Store(true)
	if rcode, msg := serve(t, m, "nope.ns.svc.clusterset.local.", dns.TypeA); rcode != nextRcode || msg != nil {
		t.Errorf("NXDOMAIN with fallthrough: rcode %d reply %v, want it passed on", rcode, msg)
	}
	if rcode, _ := serve(t, m, "web.ns.svc.clusterset.local.", dns.TypeA); rcode != dns.RcodeSuccess {
		t.Errorf("existing name with fallthrough: rcode %d", rcode)
	}
}

// TestRepliesDoNotShareSlices checks that a later plugin reordering a reply cannot change the index.
func TestRepliesDoNotShareSlices(t *testing.T) {
	m, synced := testPlugin(t, fall.F{})
	synced.Store(true)
	_, msg := serve(t, m, "web.ns.svc.clusterset.local.", dns.TypeA)
	msg.Answer[0] = nil
	if _, msg := serve(t, m, "web.ns.svc.clusterset.local.", dns.TypeA); msg.Answer[0] == nil {
		t.Fatal("a reply's answer slice is the index's")
	}
}

func TestServeDNSNoQuestion(t *testing.T) {
	m, synced := testPlugin(t, fall.F{})
	synced.Store(true)
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	if rcode, _ := m.ServeDNS(context.Background(), rec, new(dns.Msg)); rcode != nextRcode {
		t.Errorf("no question: rcode %d, want it passed on", rcode)
	}
}

// BenchmarkServeDNS asks each question in lower case and in mixed case, whose answer owners are rewritten.
func BenchmarkServeDNS(b *testing.B) {
	m, synced := testPlugin(b, fall.F{})
	synced.Store(true)
	for _, bb := range []struct {
		name, qname string
		qtype       uint16
	}{
		{"endpoint_A/lower", "db-0.east.prod.db.ns.svc.clusterset.local.", dns.TypeA},
		{"endpoint_A/mixed", "Db-0.EaSt.PrOd.dB.nS.sVc.ClUsTeRsEt.LoCaL.", dns.TypeA},
		{"PTR/lower", "5.0.1.10.in-addr.arpa.", dns.TypePTR},
		{"PTR/mixed", "5.0.1.10.In-AdDr.ArPa.", dns.TypePTR},
	} {
		b.Run(bb.name, func(b *testing.B) {
			req := new(dns.Msg)
			req.SetQuestion(bb.qname, bb.qtype)
			w := &test.ResponseWriter{}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = m.ServeDNS(context.Background(), w, req)
			}
		})
	}
}
