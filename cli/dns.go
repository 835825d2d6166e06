package cli

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/types"

	"vksfleet.dev/fleet/mcs/names"
)

// clustersetZone is the clusterset's DNS zone (names.DNSZone) fully qualified, as questions name it.
const clustersetZone = names.DNSZone + "."

// dnsTimeout bounds one query: a DNS server that does not answer within it counts as not answering.
const dnsTimeout = 2 * time.Second

// A query is a DNS question, keyed in Member.DNSAnswers as "name type".
type query struct {
	name  string
	qtype uint16
}

func (q query) key() string { return q.name + " " + dns.TypeToString[q.qtype] }

// versionQ asks for dns-version TXT: any server serving the zone answers it, with or without services;
// versionQuery is its key.
var (
	versionQ     = query{names.DNSVersionName + ".", dns.TypeTXT}
	versionQuery = versionQ.key()
)

// serviceQueries are the A and AAAA questions for a service's clusterset name.
func serviceQueries(svc types.NamespacedName) []query {
	name := strings.ToLower(names.ServiceDNSName(svc.Namespace, svc.Name) + ".")
	return []query{{name, dns.TypeA}, {name, dns.TypeAAAA}}
}

// clusterIDQuery is the A question for `<clusterid>.<svc>.<ns>.svc.clusterset.local`, which must not exist.
func clusterIDQuery(svc types.NamespacedName, clusterID string) query {
	return query{strings.ToLower(clusterID + "." + names.ServiceDNSName(svc.Namespace, svc.Name) + "."), dns.TypeA}
}

// A resolver asks one member's DNS server the questions, and returns an answer for each, by key; an error when
// it could not ask at all.
type resolver func(ctx context.Context, qs []query) (map[string]DNSAnswer, error)

// addressResolver asks the DNS server at addr directly, every question concurrently.
func addressResolver(addr string) resolver {
	return func(ctx context.Context, qs []query) (map[string]DNSAnswer, error) {
		out := make(map[string]DNSAnswer, len(qs))
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, q := range qs {
			wg.Go(func() {
				a := ask(ctx, addr, q)
				mu.Lock()
				out[q.key()] = a
				mu.Unlock()
			})
		}
		wg.Wait()
		return out, nil
	}
}

// probeDNS asks every reachable member's DNS dns-version and the names of the services, concurrently, storing the
// answers in the snapshot: each service's name, also where its namespace is absent (which must answer NXDOMAIN),
// and the name at each exporter's cluster id (which must not exist). resolverOf returns nil for a member whose DNS cannot be asked; it then gets no answers.
func probeDNS(ctx context.Context, s *Snapshot, services []types.NamespacedName, resolverOf func(*Member) resolver) {
	qs := []query{versionQ}
	for _, svc := range services {
		qs = append(qs, serviceQueries(svc)...)
		for _, e := range s.exports(svc) {
			qs = append(qs, clusterIDQuery(svc, e.Cluster))
		}
	}
	var wg sync.WaitGroup
	for i := range s.Members {
		m := &s.Members[i]
		if !m.reachable() {
			continue
		}
		if r := resolverOf(m); r != nil {
			wg.Go(func() {
				answers, err := r(ctx, qs)
				m.DNSAnswers = answers
				if err != nil {
					m.DNSError = err.Error()
				}
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
		a.add(rr)
	}
	return a
}

// add records an answer's value: an address, or a TXT's strings joined; other types are not looked at.
func (a *DNSAnswer) add(rr dns.RR) {
	switch rr := rr.(type) {
	case *dns.A:
		a.Records = append(a.Records, rr.A.String())
	case *dns.AAAA:
		a.Records = append(a.Records, rr.AAAA.String())
	case *dns.TXT:
		a.Records = append(a.Records, strings.Join(rr.Txt, ""))
	}
}
