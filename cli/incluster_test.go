package cli

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// digOutput is dig's output for digCommand's options: three answered questions, then one that timed out.
const digOutput = `;; Got answer:
;; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 4242
;; flags: qr aa rd; QUERY: 1, ANSWER: 1, AUTHORITY: 0, ADDITIONAL: 1

;; OPT PSEUDOSECTION:
; EDNS: version: 0, flags:; udp: 1232
; COOKIE: 5c1d3a2b00000000 (good)
;; QUESTION SECTION:
;dns-version.clusterset.local.	IN	TXT

;; ANSWER SECTION:
dns-version.clusterset.local. 5	IN	TXT	"1.0.0"

;; Got answer:
;; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 4243
;; flags: qr aa rd; QUERY: 1, ANSWER: 2, AUTHORITY: 0, ADDITIONAL: 1

;; OPT PSEUDOSECTION:
; EDNS: version: 0, flags:; udp: 1232
;; QUESTION SECTION:
;web.demo.svc.clusterset.local.	IN	A

;; ANSWER SECTION:
web.demo.svc.clusterset.local. 5 IN	A	10.128.0.1
web.demo.svc.clusterset.local. 5 IN	A	10.128.0.2

;; Got answer:
;; ->>HEADER<<- opcode: QUERY, status: NXDOMAIN, id: 4244
;; flags: qr aa rd; QUERY: 1, ANSWER: 0, AUTHORITY: 1, ADDITIONAL: 1

;; QUESTION SECTION:
;web.demo.svc.clusterset.local.	IN	AAAA

;; communications error to 10.96.0.10#53: timed out
;; no servers could be reached
`

func TestParseDig(t *testing.T) {
	qs := append([]query{versionQ}, serviceQueries(web)...)
	qs = append(qs, query{"api.demo.svc.clusterset.local.", dns.TypeA})
	got := parseDig(digOutput)
	want := map[string]DNSAnswer{
		qs[0].key(): {Rcode: "NOERROR", Records: []string{"1.0.0"}},
		qs[1].key(): {Rcode: "NOERROR", Records: []string{"10.128.0.1", "10.128.0.2"}},
		qs[2].key(): {Rcode: "NXDOMAIN"},
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %d answers, want %d: %+v", len(got), len(want), got)
	}
	for k, w := range want {
		if g := got[k]; g.Rcode != w.Rcode || !slices.Equal(g.Records, w.Records) || g.Error != "" {
			t.Errorf("%s: %+v, want %+v", k, g, w)
		}
	}
	if e := digErrors(digOutput, errors.New("command terminated with exit code 9")); !strings.Contains(e, "timed out") {
		t.Errorf("digErrors = %q", e)
	}
	if e := digErrors("", errors.New("exec: dig: not found")); !strings.Contains(e, "not found") {
		t.Errorf("digErrors without output = %q", e)
	}
	cmd := digCommand(qs[:2])
	if cmd[0] != "dig" || !slices.Contains(cmd, "+question") || strings.Join(cmd[len(cmd)-4:], " ") != "dns-version.clusterset.local. TXT web.demo.svc.clusterset.local. A" {
		t.Errorf("digCommand = %q", cmd)
	}
}

func TestProbePod(t *testing.T) {
	p := probePod("nicolaka/netshoot")
	c := p.Spec.Containers[0]
	if c.Image != "nicolaka/netshoot" || p.Namespace != probeNamespace || p.Spec.ActiveDeadlineSeconds == nil ||
		*p.Spec.SecurityContext.RunAsNonRoot != true || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("probe pod %+v", p)
	}
}
