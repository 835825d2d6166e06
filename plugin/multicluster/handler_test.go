package multicluster

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	_ "github.com/coredns/coredns/plugin/cache" // the plugins of TestChainWithPluginsInFront
	_ "github.com/coredns/coredns/plugin/loadbalance"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/fall"
	_ "github.com/coredns/coredns/plugin/rewrite"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"
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

// wireWriter stands for the server's connection: it keeps the last reply, written in wire format or as a message.
type wireWriter struct {
	test.ResponseWriter
	wire []byte
	msg  *dns.Msg
}

func (w *wireWriter) Write(b []byte) (int, error) {
	w.wire, w.msg = append(w.wire[:0], b...), nil
	return len(b), nil
}

func (w *wireWriter) WriteMsg(m *dns.Msg) error {
	w.wire, w.msg = nil, m
	return nil
}

// reply returns the last reply as a message, and whether it was written in wire format.
func (w *wireWriter) reply(t testing.TB) (*dns.Msg, bool) {
	t.Helper()
	if w.msg != nil {
		return w.msg, false
	}
	if w.wire == nil {
		return nil, false
	}
	m := new(dns.Msg)
	if err := m.Unpack(w.wire); err != nil {
		t.Fatalf("the reply in wire format does not unpack: %v", err)
	}
	return m, true
}

// wrapper is any plugin's writer in front of this plugin: it hides the server's ScrubWriter.
type wrapper struct{ dns.ResponseWriter }

// passOn is a plugin in front that passes every question on, as errors and kubernetes do for clusterset.local:
// plugin.NextOrFailure wraps the writer the next plugin gets.
func passOn(next plugin.Handler) plugin.Handler {
	return plugin.HandlerFunc(func(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
		return plugin.NextOrFailure("front", next, ctx, w, r)
	})
}

// ask sends one question as the server does with errors and kubernetes in front: a ScrubWriter over the
// connection, passed on twice; optionally wrapped by a plugin in front that reads replies.
func ask(t testing.TB, h plugin.Handler, req *dns.Msg, tcp, wrapped bool) (*dns.Msg, bool) {
	t.Helper()
	conn := &wireWriter{ResponseWriter: test.ResponseWriter{TCP: tcp}}
	var w dns.ResponseWriter = request.NewScrubWriter(req, conn)
	if wrapped {
		w = wrapper{w}
	}
	_, _ = passOn(passOn(h)).ServeDNS(context.Background(), w, req)
	return conn.reply(t)
}

// TestWireReplyMatchesMsg checks that a reply written in wire format is the reply the dns.Msg path gives,
// through the server's ScrubWriter, for every kind of answer, in mixed case, with and without EDNS, over UDP and
// TCP; and that a wrapped writer always gets a dns.Msg.
func TestWireReplyMatchesMsg(t *testing.T) {
	m, synced := testPlugin(t, fall.F{})
	synced.Store(true)
	questions := []struct {
		name  string
		qtype uint16
	}{
		{"web.ns.svc.clusterset.local.", dns.TypeA},
		{"WeB.nS.sVc.ClUsTeRsEt.LoCaL.", dns.TypeA},
		{"_http._tcp.web.ns.svc.clusterset.local.", dns.TypeSRV},
		{"_HtTp._TcP.wEb.Ns.SvC.ClUsTeRsEt.LoCaL.", dns.TypeSRV},
		{"web.ns.svc.clusterset.local.", dns.TypeSRV},
		{"web.ns.svc.clusterset.local.", dns.TypeAAAA},
		{"db.ns.svc.clusterset.local.", dns.TypeA},
		{"Db-0.EaSt.PrOd.dB.nS.sVc.ClUsTeRsEt.LoCaL.", dns.TypeA},
		{"db.ns.svc.clusterset.local.", dns.TypeANY},
		{"nope.ns.svc.clusterset.local.", dns.TypeA},
		{"NoPe.Ns.SvC.ClUsTeRsEt.LoCaL.", dns.TypeA},
		{"east.prod.db.ns.svc.clusterset.local.", dns.TypeA},
		{"clusterset.local.", dns.TypeSOA},
		{"ClUsTeRsEt.LoCaL.", dns.TypeNS},
		{"clusterset.local.", dns.TypeANY},
		{"dns-version.clusterset.local.", dns.TypeTXT},
		{"a\\.b.ns.svc.clusterset.local.", dns.TypeA},
	}
	for _, q := range questions {
		for _, v := range []struct {
			name   string
			tcp    bool
			edns   uint16
			do, cd bool
		}{
			{name: "udp"}, {name: "udp+edns", edns: 1232}, {name: "udp+edns+do+cd", edns: 4096, do: true, cd: true}, {name: "tcp", tcp: true},
		} {
			req := new(dns.Msg)
			req.SetQuestion(q.name, q.qtype)
			req.Id, req.CheckingDisabled = 4242, v.cd
			if v.edns > 0 {
				req.SetEdns0(v.edns, v.do)
			}
			what := q.name + " " + dns.TypeToString[q.qtype] + " " + v.name
			want, viaWire := ask(t, m, req.Copy(), v.tcp, true)
			if viaWire || want == nil {
				t.Fatalf("%s: a wrapped writer got wire format (%v) or nothing", what, viaWire)
			}
			got, viaWire := ask(t, m, req.Copy(), v.tcp, false)
			if !viaWire {
				t.Errorf("%s: the server's own writer got a dns.Msg", what)
				continue
			}
			if got.String() != want.String() {
				t.Errorf("%s: wire reply\n%v\nwant\n%v", what, got, want)
			}
		}
	}
}

// TestWireTruncates checks that a reply larger than the client's buffer is truncated in wire format as the
// ScrubWriter truncates a dns.Msg, and that a query whose EDNS record carries an option takes the dns.Msg path.
func TestWireTruncates(t *testing.T) {
	m, synced := testPlugin(t, fall.F{})
	synced.Store(true)
	m.index.Apply(zone.Change{Key: zone.Key("ns", "hl"), Service: headlessService(100)})
	for _, v := range []struct {
		name      string
		qtype     uint16
		tcp       bool
		edns      uint16
		truncated bool
	}{
		{"A over UDP", dns.TypeA, false, 0, true},
		{"SRV over UDP", dns.TypeSRV, false, 0, true},
		{"SRV over UDP with EDNS 1232", dns.TypeSRV, false, 1232, true},
		{"A over UDP with EDNS 4096", dns.TypeA, false, 4096, false},
		{"SRV over TCP", dns.TypeSRV, true, 0, false},
	} {
		req := new(dns.Msg)
		req.SetQuestion("hl.ns.svc.clusterset.local.", v.qtype)
		if v.edns > 0 {
			req.SetEdns0(v.edns, false)
		}
		want, _ := ask(t, m, req.Copy(), v.tcp, true)
		got, viaWire := ask(t, m, req.Copy(), v.tcp, false)
		if !viaWire || got.Truncated != v.truncated || (!v.truncated && len(got.Answer) != 100) {
			t.Errorf("%s: wire %v, truncated %v with %d answers; want wire format, truncated %v", v.name, viaWire, got.Truncated, len(got.Answer), v.truncated)
		}
		if got.String() != want.String() {
			t.Errorf("%s: wire reply\n%v\nwant\n%v", v.name, got, want)
		}
	}
	req := new(dns.Msg)
	req.SetQuestion("web.ns.svc.clusterset.local.", dns.TypeA)
	req.SetEdns0(1232, false)
	req.IsEdns0().Option = append(req.IsEdns0().Option, &dns.EDNS0_NSID{Code: dns.EDNS0NSID})
	if _, viaWire := ask(t, m, req, false, false); viaWire {
		t.Error("an EDNS option: wire format, want the dns.Msg path")
	}
}

// TestChainWithPluginsInFront runs real CoreDNS plugins that read or change replies in front of this one, each
// built from its Corefile directive: with any of them the reply takes the dns.Msg path, so they see it and act.
func TestChainWithPluginsInFront(t *testing.T) {
	m, synced := testPlugin(t, fall.F{})
	synced.Store(true)
	m.index.Apply(zone.Change{Key: zone.Key("ns", "hl"), Service: headlessService(4)})
	chain := func(directive string) plugin.Handler {
		t.Helper()
		c := caddy.NewTestController("dns", directive)
		setup, err := caddy.DirectiveAction("dns", strings.Fields(directive)[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := setup(c); err != nil {
			t.Fatalf("%s: %v", directive, err)
		}
		plugins := dnsserver.GetConfig(c).Plugin
		return plugins[len(plugins)-1](m)
	}
	const hl = "hl.ns.svc.clusterset.local."
	query := func(name string, qtype uint16) *dns.Msg {
		req := new(dns.Msg)
		req.SetQuestion(name, qtype)
		return req
	}

	// loadbalance shuffles the addresses of the same precompiled answer.
	lb := chain("loadbalance")
	orders := map[string]bool{}
	for range 50 {
		reply, viaWire := ask(t, lb, query(hl, dns.TypeA), false, false)
		if viaWire || len(reply.Answer) != 4 {
			t.Fatalf("loadbalance: wire %v, answer %v", viaWire, reply.Answer)
		}
		orders[reply.Answer[0].String()] = true
	}
	if len(orders) < 2 {
		t.Errorf("loadbalance: the first address was always %v", orders)
	}

	// cache stores what it saw: the second question is answered by the cache, with a TTL it counts down.
	c := chain("cache 30 clusterset.local")
	first, viaWire := ask(t, c, query(hl, dns.TypeSRV), false, false)
	if viaWire || len(first.Answer) != 4 {
		t.Fatalf("cache: wire %v, answer %v", viaWire, first.Answer)
	}
	m.index.Apply(zone.Change{Key: zone.Key("ns", "hl"), Service: headlessService(1)})
	if again, _ := ask(t, c, query(hl, dns.TypeSRV), false, false); len(again.Answer) != 4 {
		t.Errorf("cache: the second answer %v was not the cached one", again.Answer)
	}

	// rewrite asks this plugin another name and restores the question the client asked in the reply.
	rw := chain("rewrite name alias.ns.svc.clusterset.local. web.ns.svc.clusterset.local.")
	reply, viaWire := ask(t, rw, query("alias.ns.svc.clusterset.local.", dns.TypeA), false, false)
	if viaWire || len(reply.Answer) != 1 || reply.Question[0].Name != "alias.ns.svc.clusterset.local." {
		t.Errorf("rewrite: wire %v, reply %v", viaWire, reply)
	}
}

// headlessService returns a headless service "hl" of n ready endpoints in one cluster.
func headlessService(n int) *zone.Service {
	s := &zone.Service{Namespace: "ns", Name: "hl", Type: zone.Headless, Ports: []zone.Port{{Name: "http", Protocol: "TCP", Port: 80}}}
	for i := range n {
		s.Endpoints = append(s.Endpoints, zone.Endpoint{Cluster: "c", Hostname: "ep-" + strconv.Itoa(i), Ready: true,
			Addresses: []netip.Addr{netip.AddrFrom4([4]byte{10, 8, 0, byte(i)})}})
	}
	return s
}

// BenchmarkServeDNS asks the benchmark's classes through the server's ScrubWriter, which gets the precompiled
// reply in wire format, and through a wrapped writer, which gets a dns.Msg; each in lower and in upper case.
// The headless service has 12 endpoints, as in bench-dns. The question is passed on once, as errors does: the
// writer plugin.NextOrFailure wraps costs 1 allocation (16 B); the test writer's RemoteAddr, which the server's
// writer returns without allocating, 2 (64 B).
func BenchmarkServeDNS(b *testing.B) {
	m, synced := testPlugin(b, fall.F{})
	synced.Store(true)
	m.index.Apply(zone.Change{Key: zone.Key("ns", "hl"), Service: headlessService(12)})
	for _, bb := range []struct {
		name, qname string
		qtype       uint16
	}{
		{"ClusterSetIP_A", "web.ns.svc.clusterset.local.", dns.TypeA},
		{"ClusterSetIP_SRV", "_http._tcp.web.ns.svc.clusterset.local.", dns.TypeSRV},
		{"headless_A", "hl.ns.svc.clusterset.local.", dns.TypeA},
		{"headless_SRV", "_http._tcp.hl.ns.svc.clusterset.local.", dns.TypeSRV},
		{"endpoint_A", "ep-3.c.hl.ns.svc.clusterset.local.", dns.TypeA},
		{"NXDOMAIN", "missing.ns.svc.clusterset.local.", dns.TypeA},
		{"PTR", "5.0.1.10.in-addr.arpa.", dns.TypePTR},
	} {
		for _, path := range []string{"wire", "msg"} {
			for _, upper := range []bool{false, true} {
				name := bb.qname
				if upper {
					name = strings.ToUpper(name)
				}
				b.Run(bb.name+"/"+path+"/"+map[bool]string{false: "lower", true: "upper"}[upper], func(b *testing.B) {
					req := new(dns.Msg)
					req.SetQuestion(name, bb.qtype)
					var w dns.ResponseWriter = request.NewScrubWriter(req, &test.ResponseWriter{})
					if path == "msg" {
						w = wrapper{w}
					}
					h := passOn(m)
					b.ReportAllocs()
					for b.Loop() {
						_, _ = h.ServeDNS(context.Background(), w, req)
					}
				})
			}
		}
	}
}

// TestNotReadyOnceStopping: from the stop signal on, the server reports not Ready, so that its pod leaves the
// Service's endpoints, and still answers, for the lameduck period.
func TestNotReadyOnceStopping(t *testing.T) {
	m, synced := testPlugin(t, fall.F{})
	synced.Store(true)
	if !m.Ready() {
		t.Fatal("not ready after the source synced")
	}
	t.Cleanup(func() { stopping.Store(false) })
	// What caddy emits on SIGTERM before it runs any shutdown callback.
	caddy.EmitEvent(caddy.ShutdownEvent, "SIGTERM")
	if m.Ready() {
		t.Error("still ready once stopping")
	}
	if rcode, msg := serve(t, m, "web.ns.svc.clusterset.local.", dns.TypeA); rcode != dns.RcodeSuccess || msg == nil || len(msg.Answer) != 1 {
		t.Errorf("once stopping: rcode %d, reply %v; want the answer still", rcode, msg)
	}
}
