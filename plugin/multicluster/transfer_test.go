package multicluster

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/plugin/transfer"
	"github.com/miekg/dns"
)

// drain reads a transfer's channel to its end.
func drain(ch <-chan []dns.RR) []dns.RR {
	var out []dns.RR
	for rrs := range ch {
		out = append(out, rrs...)
	}
	return out
}

// owners returns "owner type" of each record.
func owners(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		out = append(out, rr.Header().Name+" "+dns.TypeToString[rr.Header().Rrtype])
	}
	return out
}

func TestTransferer(t *testing.T) {
	m, synced := testPlugin(t, fall.F{Zones: []string{"."}})
	for _, z := range []string{"clusterset.local.", "in-addr.arpa."} {
		if _, err := m.Transfer(z, 0); err == nil || errors.Is(err, transfer.ErrNotAuthoritative) {
			t.Errorf("%s before sync, even with fallthrough: error %v, want a failure of this plugin's", z, err)
		}
	}
	synced.Store(true)
	for _, z := range []string{"cluster.local.", "svc.clusterset.local.", "local.", "10.in-addr.arpa.", "arpa.", "."} {
		if _, err := m.Transfer(z, 0); !errors.Is(err, transfer.ErrNotAuthoritative) {
			t.Errorf("%s: error %v, want ErrNotAuthoritative", z, err)
		}
	}
	serial := m.index.Snapshot().Serial()
	for _, tt := range []struct {
		zone   string
		serial uint32
		want   []string
	}{
		{"ClusterSet.Local.", 0, []string{"clusterset.local. SOA", "clusterset.local. NS", "dns-version.clusterset.local. TXT",
			"db.ns.svc.clusterset.local. A", "db-0.east.prod.db.ns.svc.clusterset.local. A", "web.ns.svc.clusterset.local. A",
			"web.ns.svc.clusterset.local. SRV", "_http._tcp.web.ns.svc.clusterset.local. SRV", "clusterset.local. SOA"}},
		{"clusterset.local.", serial - 1, []string{"clusterset.local. SOA", "clusterset.local. NS", "dns-version.clusterset.local. TXT",
			"db.ns.svc.clusterset.local. A", "db-0.east.prod.db.ns.svc.clusterset.local. A", "web.ns.svc.clusterset.local. A",
			"web.ns.svc.clusterset.local. SRV", "_http._tcp.web.ns.svc.clusterset.local. SRV", "clusterset.local. SOA"}},
		{"clusterset.local.", serial, []string{"clusterset.local. SOA"}},
		{"in-addr.arpa.", 0, []string{"in-addr.arpa. SOA", "in-addr.arpa. NS", "5.0.1.10.in-addr.arpa. PTR",
			"10.0.96.10.in-addr.arpa. PTR", "in-addr.arpa. SOA"}},
		{"ip6.arpa.", 0, []string{"ip6.arpa. SOA", "ip6.arpa. NS", "ip6.arpa. SOA"}},
	} {
		ch, err := m.Transfer(tt.zone, tt.serial)
		if err != nil {
			t.Errorf("%s from %d: %v", tt.zone, tt.serial, err)
			continue
		}
		if got := owners(drain(ch)); !slices.Equal(got, tt.want) {
			t.Errorf("%s from %d:\n%q\nwant\n%q", tt.zone, tt.serial, got, tt.want)
		}
	}
}

// msgWriter keeps every message written, as a TCP client of an AXFR sees them.
type msgWriter struct {
	test.ResponseWriter
	msgs []*dns.Msg
}

func (w *msgWriter) WriteMsg(m *dns.Msg) error {
	w.msgs = append(w.msgs, m)
	return nil
}

// TestTransferPlugin runs the stock transfer plugin, built from its directive, in front of this one.
func TestTransferPlugin(t *testing.T) {
	m, synced := testPlugin(t, fall.F{})
	chain := func(directive string) plugin.Handler {
		t.Helper()
		c := caddy.NewTestController("dns", directive)
		setup, err := caddy.DirectiveAction("dns", "transfer")
		if err != nil {
			t.Fatal(err)
		}
		if err := setup(c); err != nil {
			t.Fatalf("%s: %v", directive, err)
		}
		plugins := dnsserver.GetConfig(c).Plugin
		h := plugins[len(plugins)-1](m)
		// The plugin finds its Transferers among the server's handlers at startup (see the e2e test).
		h.(*transfer.Transfer).Transferers = []transfer.Transferer{m}
		return h
	}
	open := chain("transfer clusterset.local {\n to *\n}")
	closed := chain("transfer clusterset.local {\n to 192.0.2.1\n}")
	xfr := func(h plugin.Handler, tcp bool, qtype uint16, serial uint32) (int, []*dns.Msg, error) {
		t.Helper()
		req := new(dns.Msg)
		if qtype == dns.TypeIXFR {
			req.SetIxfr("clusterset.local.", serial, "ns.", "hostmaster.")
		} else {
			req.SetAxfr("clusterset.local.")
		}
		w := &msgWriter{ResponseWriter: test.ResponseWriter{TCP: tcp}}
		rcode, err := h.ServeDNS(context.Background(), w, req)
		return rcode, w.msgs, err
	}

	if rcode, msgs, err := xfr(open, true, dns.TypeAXFR, 0); rcode != dns.RcodeServerFailure || err == nil || len(msgs) != 0 {
		t.Errorf("before sync: rcode %s, error %v, %d messages; want SERVFAIL and nothing sent", dns.RcodeToString[rcode], err, len(msgs))
	}
	synced.Store(true)
	serial := m.index.Snapshot().Serial()
	rcode, msgs, err := xfr(open, true, dns.TypeAXFR, 0)
	var rrs []dns.RR
	for _, msg := range msgs {
		rrs = append(rrs, msg.Answer...)
	}
	if rcode != dns.RcodeSuccess || err != nil || len(rrs) != 9 {
		t.Fatalf("AXFR: rcode %s, error %v, records %v", dns.RcodeToString[rcode], err, rrs)
	}
	for _, i := range []int{0, len(rrs) - 1} {
		if soa, ok := rrs[i].(*dns.SOA); !ok || soa.Serial != serial {
			t.Errorf("AXFR record %d: %v, want the SOA at serial %d", i, rrs[i], serial)
		}
	}
	if _, msgs, _ := xfr(open, true, dns.TypeIXFR, serial); len(msgs) != 1 || len(msgs[0].Answer) != 1 {
		t.Errorf("IXFR from the current serial: %v, want the SOA alone", msgs)
	}
	if _, msgs, _ := xfr(open, true, dns.TypeIXFR, serial-5); len(msgs) != 1 || len(msgs[0].Answer) != 9 {
		t.Errorf("IXFR from an old serial: %v, want the whole zone", msgs)
	}
	for name, h := range map[string]plugin.Handler{"over UDP": open, "not allowed": closed, "no transfer plugin": m} {
		tcp := name != "over UDP"
		rcode, msgs, _ := xfr(h, tcp, dns.TypeAXFR, 0)
		if len(msgs) == 1 {
			rcode = msgs[0].Rcode // the transfer plugin writes REFUSED itself to a client not allowed
		}
		if rcode != dns.RcodeRefused || len(msgs) > 1 || (len(msgs) == 1 && len(msgs[0].Answer) != 0) {
			t.Errorf("%s: rcode %s, messages %v; want REFUSED", name, dns.RcodeToString[rcode], msgs)
		}
	}
	if rcode, _, _ := xfr(m, true, dns.TypeIXFR, serial); rcode != dns.RcodeRefused {
		t.Errorf("IXFR with no transfer plugin: rcode %s, want REFUSED", dns.RcodeToString[rcode])
	}
}
