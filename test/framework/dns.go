package framework

import (
	"context"
	"os/exec"
	"strings"
	"time"

	"github.com/miekg/dns"

	"vksfleet.dev/fleet/plugin/mcstest"
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
	return mcstest.Addresses(r.Answer), r.Rcode, nil
}

// Dig runs dig against server (host:port, or a host for port 53) with args, such as a name, a type and +short, and
// returns its output: every suite that asks as a user would, with dig, asks here.
func Dig(ctx context.Context, server string, args ...string) ([]byte, error) {
	host, port, ok := strings.Cut(server, ":")
	if !ok {
		port = "53"
	}
	return exec.CommandContext(ctx, "dig", append([]string{"@" + host, "-p", port}, args...)...).CombinedOutput()
}
