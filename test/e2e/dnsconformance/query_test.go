package dnsconformance

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"vksfleet.dev/fleet/test/framework"
)

// reply is what a client saw, whichever client asked.
type reply struct {
	rcode     string // NOERROR, NXDOMAIN, ...
	aa, tc    bool
	answer    []dns.RR
	authority []dns.RR
}

// asker asks one question over one transport.
type asker struct {
	name string
	ask  func(t *testing.T, name string, qtype uint16) reply
}

// askers are dig and miekg/dns, each over UDP and TCP. dig over UDP gets +ignore so that a truncated reply is
// reported as such instead of being retried over TCP.
func askers() []asker {
	return []asker{
		{"dig/udp", func(t *testing.T, name string, qtype uint16) reply { return dig(t, name, qtype, "+ignore") }},
		{"dig/tcp", func(t *testing.T, name string, qtype uint16) reply { return dig(t, name, qtype, "+tcp") }},
		{"miekg/udp", func(t *testing.T, name string, qtype uint16) reply { return exchange(t, "udp", name, qtype) }},
		{"miekg/tcp", func(t *testing.T, name string, qtype uint16) reply { return exchange(t, "tcp", name, qtype) }},
	}
}

// dig runs `dig @127.0.0.1 -p PORT name TYPE +noall +answer +authority +comments` and parses its output.
func dig(t *testing.T, name string, qtype uint16, extra ...string) reply {
	t.Helper()
	args := append([]string{name, dns.TypeToString[qtype], "+noall", "+answer", "+authority", "+comments"}, extra...)
	out := runDig(t, env.port, args...)
	r, err := parseDig(out)
	if err != nil {
		t.Fatalf("dig %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return r
}

// runDig runs `dig @127.0.0.1 -p port +time=5 +tries=1 args...` and returns its output.
func runDig(t *testing.T, port int, args ...string) string {
	t.Helper()
	args = append([]string{"+time=5", "+tries=1"}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := framework.Dig(ctx, "127.0.0.1:"+strconv.Itoa(port), args...)
	if err != nil {
		t.Fatalf("dig %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// parseDig reads the status, the flags and the answer and authority sections of dig's output.
func parseDig(out string) (reply, error) {
	var (
		r       reply
		section *[]dns.RR
	)
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
		case strings.HasPrefix(line, ";; ->>HEADER<<-"):
			_, after, ok := strings.Cut(line, "status: ")
			if !ok {
				return r, fmt.Errorf("no status in %q", line)
			}
			r.rcode, _, _ = strings.Cut(after, ",")
		case strings.HasPrefix(line, ";; flags:"):
			flags, _, _ := strings.Cut(strings.TrimPrefix(line, ";; flags:"), ";")
			for _, f := range strings.Fields(flags) {
				r.aa = r.aa || f == "aa"
				r.tc = r.tc || f == "tc"
			}
		case line == ";; ANSWER SECTION:":
			section = &r.answer
		case line == ";; AUTHORITY SECTION:":
			section = &r.authority
		case strings.HasPrefix(line, ";"):
			if strings.HasPrefix(line, ";; ") && strings.HasSuffix(line, "SECTION:") {
				section = nil
			}
		default:
			if section == nil {
				return r, fmt.Errorf("record outside a section: %q", line)
			}
			rr, err := dns.NewRR(line)
			if err != nil {
				return r, fmt.Errorf("parsing %q: %w", line, err)
			}
			*section = append(*section, rr)
		}
	}
	if r.rcode == "" {
		return r, fmt.Errorf("no header in dig's output")
	}
	return r, sc.Err()
}

// exchange asks with miekg/dns, advertising the same EDNS0 buffer size as dig (1232).
func exchange(t *testing.T, network, name string, qtype uint16) reply {
	t.Helper()
	r, err := exchangeAt(env.port, network, name, qtype)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// exchangeAt is exchange with the server on port, reporting a failure instead of ending the test.
func exchangeAt(port int, network, name string, qtype uint16) (reply, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(1232, false)
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	in, _, err := c.Exchange(m, "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return reply{}, fmt.Errorf("%s %s over %s: %w", name, dns.TypeToString[qtype], network, err)
	}
	if in.Id != m.Id || !in.Response {
		return reply{}, fmt.Errorf("%s %s over %s: not a reply to the query: %v", name, dns.TypeToString[qtype], network, in)
	}
	return reply{rcode: dns.RcodeToString[in.Rcode], aa: in.Authoritative, tc: in.Truncated, answer: in.Answer, authority: in.Ns}, nil
}

// rdata returns the data part of each record, in order.
func rdata(rrs []dns.RR) []string {
	out := make([]string, 0, len(rrs))
	for _, rr := range rrs {
		out = append(out, strings.TrimSpace(strings.TrimPrefix(rr.String(), rr.Header().String())))
	}
	return out
}
