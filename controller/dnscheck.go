package controller

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"vksfleet.dev/fleet/controller/imports"
)

// DNSZone is the zone whose answers an import's Ready condition waits for (Options.DNSAddress).
const DNSZone = "clusterset.local"

// dnsTimeout bounds one question: a server on the cluster network answers in milliseconds.
const dnsTimeout = time.Second

// silentPause is how long the probe asks nothing after the server failed to answer: a silent server costs the
// reconcile workers one timeout per pause, not one per waiting import.
const silentPause = 5 * time.Second

// dnsProbe asks this member's DNS server the questions an import's Ready condition waits for, so that Ready
// means the name resolves here and users need not poll DNS themselves.
type dnsProbe struct {
	addr     string // host:port
	udp, tcp *dns.Client

	mu     sync.Mutex
	silent time.Time // until then, the server is taken as silent without asking
	why    string    // what the last unanswered question got
}

func newDNSProbe(addr string) *dnsProbe {
	return &dnsProbe{addr: addr, udp: &dns.Client{Net: "udp", Timeout: dnsTimeout}, tcp: &dns.Client{Net: "tcp", Timeout: dnsTimeout}}
}

// failed says why the server does not answer the first check as expected, or returns "" when it answers all.
// After a question goes unanswered, every call answers that at once for silentPause.
func (p *dnsProbe) failed(ctx context.Context, checks []imports.DNSCheck) string {
	p.mu.Lock()
	silent, why := time.Now().Before(p.silent), p.why
	p.mu.Unlock()
	if silent {
		return why
	}
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
			why := fmt.Sprintf("%s: no answer from %s: %v", q, p.addr, err)
			p.mu.Lock()
			p.silent, p.why = time.Now().Add(silentPause), why
			p.mu.Unlock()
			return why
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
