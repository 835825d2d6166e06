package controller

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"vksfleet.dev/fleet/controller/imports"
)

// DNSZone is the zone whose answers an import's Ready condition waits for (Options.DNSAddress).
const DNSZone = "clusterset.local"

// dnsTimeout bounds one question: a server on the cluster network answers in milliseconds.
const dnsTimeout = time.Second

// dnsProbe asks this member's DNS server the questions an import's Ready condition waits for, so that Ready
// means the name resolves here and users need not poll DNS themselves.
type dnsProbe struct {
	addr     string // host:port
	udp, tcp *dns.Client
}

func newDNSProbe(addr string) *dnsProbe {
	return &dnsProbe{addr: addr, udp: &dns.Client{Net: "udp", Timeout: dnsTimeout}, tcp: &dns.Client{Net: "tcp", Timeout: dnsTimeout}}
}

// failed says why the server does not answer the first check as expected, or returns "" when it answers all.
func (p *dnsProbe) failed(ctx context.Context, checks []imports.DNSCheck) string {
	for _, c := range checks {
		qtype := dns.TypeA
		if c.IPv6 {
			qtype = dns.TypeAAAA
		}
		q := fmt.Sprintf("%s %s", c.Name, dns.TypeToString[qtype])
		m := new(dns.Msg)
		m.SetQuestion(c.Name, qtype)
		in, _, err := p.udp.ExchangeContext(ctx, m, p.addr)
		if err == nil && in.Truncated {
			in, _, err = p.tcp.ExchangeContext(ctx, m, p.addr)
		}
		if err != nil {
			return fmt.Sprintf("%s: no answer from %s: %v", q, p.addr, err)
		}
		if in.Rcode != dns.RcodeSuccess {
			return fmt.Sprintf("%s: %s", q, dns.RcodeToString[in.Rcode])
		}
		var got []netip.Addr
		for _, rr := range in.Answer {
			if !strings.EqualFold(rr.Header().Name, c.Name) {
				continue
			}
			switch a := rr.(type) {
			case *dns.A:
				got = append(got, netip.AddrFrom4([4]byte(a.A.To4())))
			case *dns.AAAA:
				got = append(got, netip.AddrFrom16([16]byte(a.AAAA.To16())))
			}
		}
		if !c.Satisfied(got) {
			if len(c.Want) == 0 {
				return fmt.Sprintf("%s: no address yet", q)
			}
			return fmt.Sprintf("%s: answered %v, want %v", q, got, c.Want)
		}
	}
	return ""
}
