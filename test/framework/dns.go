package framework

import (
	"slices"
	"time"

	"github.com/miekg/dns"
)

// Query asks the member's CoreDNS over UDP.
func (m *Member) Query(name string, qtype uint16) (*dns.Msg, error) {
	q := new(dns.Msg).SetQuestion(dns.Fqdn(name), qtype)
	r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(q, m.DNS)
	return r, err
}

// Addresses returns the sorted A/AAAA addresses of the member's answer for name and the answer's rcode, which
// callers judge: to some an NXDOMAIN is a failure, to others the expected absence.
func (m *Member) Addresses(name string, qtype uint16) ([]string, int, error) {
	r, err := m.Query(name, qtype)
	if err != nil {
		return nil, 0, err
	}
	var ips []string
	for _, rr := range r.Answer {
		switch v := rr.(type) {
		case *dns.A:
			ips = append(ips, v.A.String())
		case *dns.AAAA:
			ips = append(ips, v.AAAA.String())
		}
	}
	slices.Sort(ips)
	return ips, r.Rcode, nil
}
