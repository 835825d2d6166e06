package multicluster

import (
	"context"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// FuzzServeDNS sends the plugin any message the server can unpack, as its wire format: it must not panic, it
// must return an rcode a plugin may return (and the same one it wrote), and whatever it writes, in wire format
// to the server's own writer or as a dns.Msg to a plugin in front, over UDP or TCP, must be a well-formed reply
// to the question whose answers are owned by the name as asked, and that unpacks.
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
		{"clusterset.local.", dns.TypeAXFR},
		{"clusterset.local.", dns.TypeIXFR},
	} {
		req := new(dns.Msg)
		req.SetQuestion(seed.name, seed.qtype)
		f.Add(pack(f, req))
		req.SetEdns0(512, true)
		f.Add(pack(f, req))
	}
	// Messages a server may be sent besides: no question, two, another opcode, an EDNS option, a reply.
	none := new(dns.Msg)
	f.Add(pack(f, none))
	two := new(dns.Msg)
	two.SetQuestion("web.ns.svc.clusterset.local.", dns.TypeA)
	two.Question = append(two.Question, two.Question[0])
	f.Add(pack(f, two))
	notify := new(dns.Msg)
	notify.SetNotify("clusterset.local.")
	f.Add(pack(f, notify))
	cookie := new(dns.Msg)
	cookie.SetQuestion("web.ns.svc.clusterset.local.", dns.TypeA)
	cookie.SetEdns0(4096, false)
	cookie.IsEdns0().Option = append(cookie.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
	f.Add(pack(f, cookie))
	reply := new(dns.Msg)
	reply.SetQuestion("db.ns.svc.clusterset.local.", dns.TypeSRV)
	reply.Response, reply.Rcode = true, dns.RcodeNameError
	f.Add(pack(f, reply))

	m, synced := testPlugin(f, fall.F{})
	synced.Store(true)
	f.Fuzz(func(t *testing.T, wire []byte) {
		req := new(dns.Msg)
		if req.Unpack(wire) != nil {
			return // the server answers FORMERR itself, and never passes such a message on
		}
		for _, v := range []struct{ tcp, wrapped bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
			conn := &wireWriter{ResponseWriter: test.ResponseWriter{TCP: v.tcp}}
			var w dns.ResponseWriter = request.NewScrubWriter(req, conn)
			if v.wrapped {
				w = wrapper{w}
			}
			rcode, _ := passOn(passOn(m)).ServeDNS(context.Background(), w, req.Copy())
			switch rcode {
			case dns.RcodeSuccess, dns.RcodeNameError, dns.RcodeServerFailure, dns.RcodeRefused, nextRcode:
			default:
				t.Fatalf("%v: rcode %d", req.Question, rcode)
			}
			got, _ := conn.reply(t) // fails the test if a reply written in wire format does not unpack
			if got == nil {
				if rcode == dns.RcodeSuccess || rcode == dns.RcodeNameError {
					t.Fatalf("%v: rcode %s and no reply", req.Question, dns.RcodeToString[rcode])
				}
				continue
			}
			if got.Id != req.Id || !got.Response || got.Rcode != rcode || len(got.Question) != 1 || got.Question[0] != req.Question[0] {
				t.Fatalf("rcode %d, reply does not match the request:\n%v\nrequest:\n%v", rcode, got, req)
			}
			for _, rr := range got.Answer {
				if rr.Header().Name != req.Question[0].Name {
					t.Fatalf("%v: answer %v is not owned by the name as asked", req.Question, rr)
				}
			}
			if _, err := got.Pack(); err != nil {
				t.Fatalf("%v: reply does not pack: %v", req.Question, err)
			}
		}
	})
}

// pack returns a seed message in wire format.
func pack(tb testing.TB, m *dns.Msg) []byte {
	tb.Helper()
	b, err := m.Pack()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
