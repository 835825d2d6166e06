package multicluster

import (
	"context"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// FuzzServeDNS asks the plugin any name and type: it must not panic, and whatever it writes must be a
// well-formed reply to the question, whose answers are owned by the name as asked, that packs and unpacks.
func FuzzServeDNS(f *testing.F) {
	for _, seed := range []struct {
		name  string
		qtype uint16
	}{
		{"clusterset.local.", dns.TypeSOA},
		{"clusterset.local.", dns.TypeNS},
		{"dns-version.clusterset.local.", dns.TypeTXT},
		{"web.ns.svc.clusterset.local.", dns.TypeA},
		{"_http._tcp.web.ns.svc.clusterset.local.", dns.TypeSRV},
		{"db-0.east.prod.db.ns.svc.clusterset.local.", dns.TypeAAAA},
		{"Db-0.EaSt.PrOd.dB.nS.sVc.ClUsTeRsEt.LoCaL.", dns.TypeA},
		{"east.prod.db.ns.svc.clusterset.local.", dns.TypeANY},
		{"x.y.pod.clusterset.local.", dns.TypeA},
		{"10.0.96.10.in-addr.arpa.", dns.TypePTR},
		{"10.0.96.10.In-AdDr.ArPa.", dns.TypePTR},
		{"a\\.b.ns.svc.clusterset.local.", dns.TypeA},
		{".", dns.TypeA},
		{"svc.clusterset.local.", 65535},
	} {
		f.Add(seed.name, seed.qtype)
	}
	m, synced := testPlugin(f, fall.F{})
	synced.Store(true)
	f.Fuzz(func(t *testing.T, name string, qtype uint16) {
		if _, ok := dns.IsDomainName(name); !ok {
			return // the server never passes such a name on
		}
		req := new(dns.Msg)
		req.SetQuestion(dns.Fqdn(name), qtype)
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		rcode, _ := m.ServeDNS(context.Background(), rec, req)
		if rec.Msg == nil {
			if rcode != nextRcode && rcode != dns.RcodeServerFailure {
				t.Fatalf("%q %d: no reply and rcode %d", name, qtype, rcode)
			}
			return
		}
		if rec.Msg.Id != req.Id || !rec.Msg.Response || len(rec.Msg.Question) != 1 || rec.Msg.Question[0] != req.Question[0] {
			t.Fatalf("%q %d: reply does not match the request: %v", name, qtype, rec.Msg)
		}
		for _, rr := range rec.Msg.Answer {
			if rr.Header().Name != req.Question[0].Name {
				t.Fatalf("%q %d: answer %v is not owned by the name as asked", name, qtype, rr)
			}
		}
		wire, err := rec.Msg.Pack()
		if err != nil {
			t.Fatalf("%q %d: reply does not pack: %v", name, qtype, err)
		}
		if err := new(dns.Msg).Unpack(wire); err != nil {
			t.Fatalf("%q %d: reply does not unpack: %v", name, qtype, err)
		}
	})
}
