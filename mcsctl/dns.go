package mcsctl

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/types"
)

// clustersetZone is the clusterset's DNS zone, which the multicluster plugin serves (SPEC section 4).
const clustersetZone = "clusterset.local."

// dnsTimeout bounds one query: a DNS server that does not answer within it counts as not answering.
const dnsTimeout = 2 * time.Second

// A query is a DNS question, keyed in Member.DNSAnswers as "name type".
type query struct {
	name  string
	qtype uint16
}

func (q query) key() string { return q.name + " " + dns.TypeToString[q.qtype] }

// versionQuery asks for dns-version TXT: any server serving the zone answers it, with or without services.
var versionQuery = query{"dns-version." + clustersetZone, dns.TypeTXT}.key()

// serviceQueries are the A and AAAA questions for a service's clusterset name.
func serviceQueries(svc types.NamespacedName) []query {
	name := strings.ToLower(svc.Name + "." + svc.Namespace + ".svc." + clustersetZone)
	return []query{{name, dns.TypeA}, {name, dns.TypeAAAA}}
}

// probeDNS asks every reachable member's DNS server dns-version and the names of the services, concurrently,
// storing the answers in the snapshot. A member without a DNS address gets none.
func probeDNS(ctx context.Context, s *Snapshot, services []types.NamespacedName) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range s.Members {
		m := &s.Members[i]
		if !m.reachable() || m.DNS == "" {
			continue
		}
		qs := []query{{"dns-version." + clustersetZone, dns.TypeTXT}}
		for _, svc := range services {
			if m.hasNamespace(svc.Namespace) {
				qs = append(qs, serviceQueries(svc)...)
			}
		}
		m.DNSAnswers = map[string]DNSAnswer{}
		for _, q := range qs {
			wg.Go(func() {
				a := ask(ctx, m.DNS, q)
				mu.Lock()
				m.DNSAnswers[q.key()] = a
				mu.Unlock()
			})
		}
	}
	wg.Wait()
}

// ask sends one question over UDP, and again over TCP when the answer was truncated.
func ask(ctx context.Context, addr string, q query) DNSAnswer {
	msg := new(dns.Msg)
	msg.SetQuestion(q.name, q.qtype)
	c := &dns.Client{Timeout: dnsTimeout}
	resp, _, err := c.ExchangeContext(ctx, msg, addr)
	if err == nil && resp.Truncated {
		c.Net = "tcp"
		resp, _, err = c.ExchangeContext(ctx, msg, addr)
	}
	if err != nil {
		return DNSAnswer{Error: err.Error()}
	}
	a := DNSAnswer{Rcode: dns.RcodeToString[resp.Rcode]}
	for _, rr := range resp.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			a.Records = append(a.Records, rr.A.String())
		case *dns.AAAA:
			a.Records = append(a.Records, rr.AAAA.String())
		case *dns.TXT:
			a.Records = append(a.Records, strings.Join(rr.Txt, ""))
		}
	}
	return a
}
