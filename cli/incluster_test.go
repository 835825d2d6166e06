package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"vksfleet.dev/fleet/build/deploy"
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
	for image, wait := range map[string]string{
		"nicolaka/netshoot": "sleep 600",
		// Ours, by default: kubectl-mcs waits, as the image has no sleep.
		defaultProbeImage: "/kubectl-mcs dns-probe wait 10m0s",
	} {
		p := probePod(image)
		c := p.Spec.Containers[0]
		if c.Image != image || p.Namespace != probeNamespace || p.Spec.ActiveDeadlineSeconds == nil ||
			*p.Spec.SecurityContext.RunAsNonRoot != true || *c.SecurityContext.AllowPrivilegeEscalation ||
			c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("probe pod %+v", p)
		}
		if got := strings.Join(c.Command, " "); got != wait {
			t.Errorf("probe pod of %s runs %q, want %q", image, got, wait)
		}
	}
}

// TestDefaultProbeImage: diagnose --in-cluster runs our mcs-controller image by default, the one join installs
// with this plugin (a test binary is built at no version: the bases' tag).
func TestDefaultProbeImage(t *testing.T) {
	want, err := deploy.ControllerImage()
	if err != nil {
		t.Fatal(err)
	}
	if defaultProbeImage != want || !strings.HasPrefix(want, "ghcr.io/vksfleet/mcs-controller:") {
		t.Errorf("default --image %q, want %q", defaultProbeImage, want)
	}
	if f := NewCommand(genericiooptions.NewTestIOStreamsDiscard()).PersistentFlags().Lookup("image"); f == nil || f.DefValue != want {
		t.Errorf("--image flag %+v, want the default %s", f, want)
	}
}

func TestOwnImage(t *testing.T) {
	for image, want := range map[string]bool{
		"ghcr.io/vksfleet/mcs-controller:v0.2.0":                true,
		"ghcr.io/vksfleet/mcs-controller:b35ea41-dirty":         true,
		"registry.example:5000/mirror/mcs-controller":           true,
		"registry.example:5000/mirror/mcs-controller@sha256:ab": true,
		"mcs-controller:dev":                                    true,
		"ghcr.io/vksfleet/coredns:v0.2.0":                       false,
		"nicolaka/netshoot":                                     false,
		"registry.example:5000/not-mcs-controller:v1":           false,
		"vksfleet.dev/client":                                   false,
	} {
		if got := ownImage(image); got != want {
			t.Errorf("ownImage(%q) = %v, want %v", image, got, want)
		}
	}
}

func TestParseQuestions(t *testing.T) {
	qs := append([]query{versionQ}, serviceQueries(web)...)
	// What the pod's exec runs reads back to the same questions, so that the answers' keys match.
	got, err := parseQuestions(probeAskCommand(qs)[3:])
	if err != nil || !slices.Equal(got, qs) {
		t.Errorf("parseQuestions(probeAskCommand) = %v, %v; want %v", got, err, qs)
	}
	if got, err := parseQuestions([]string{"Web.Demo.svc.clusterset.local", "aaaa"}); err != nil ||
		!slices.Equal(got, []query{{"web.demo.svc.clusterset.local.", dns.TypeAAAA}}) {
		t.Errorf("a name not fully qualified, a type in lower case: %v, %v", got, err)
	}
	for _, args := range [][]string{{"web.demo.svc.clusterset.local."}, {"web.demo.svc.clusterset.local.", "NOPE"}} {
		if _, err := parseQuestions(args); err == nil {
			t.Errorf("parseQuestions(%q) accepted", args)
		}
	}
}

// TestProbeAsk runs the probe pod's side against a DNS server and reads its output as podResolver does.
func TestProbeAsk(t *testing.T) {
	mux := dns.NewServeMux()
	mux.HandleFunc(clustersetZone, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		switch {
		case q.Name == versionQ.name && q.Qtype == dns.TypeTXT:
			m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 5}, Txt: []string{"1.0.0"}})
		case q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.IPv4(10, 128, 0, 1)})
		default:
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, Handler: mux, NotifyStartedFunc: func() { close(started) }}
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })

	qs := append([]query{versionQ}, serviceQueries(web)...)
	var out bytes.Buffer
	if err := probeAsk(context.Background(), pc.LocalAddr().String(), probeAskCommand(qs)[3:], &out); err != nil {
		t.Fatal(err)
	}
	var got map[string]DNSAnswer
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	want := map[string]DNSAnswer{
		qs[0].key(): {Rcode: "NOERROR", Records: []string{"1.0.0"}},
		qs[1].key(): {Rcode: "NOERROR", Records: []string{"10.128.0.1"}},
		qs[2].key(): {Rcode: "NXDOMAIN"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("answers %+v, want %+v", got, want)
	}
}

// TestDNSProbeCommand runs the hidden command as the probe pod does: wait ends at its duration or when the pod
// is deleted (the context), and ask needs a resolver configuration.
func TestDNSProbeCommand(t *testing.T) {
	run := func(ctx context.Context, args ...string) error {
		cmd := NewCommand(genericiooptions.NewTestIOStreamsDiscard())
		cmd.SetArgs(args)
		return cmd.ExecuteContext(ctx)
	}
	if err := run(context.Background(), "dns-probe", "wait", "10ms"); err != nil {
		t.Errorf("wait 10ms: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, "dns-probe", "wait", "1h") }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("wait, cancelled: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("wait 1h did not end when its context did")
	}
	if err := run(context.Background(), "dns-probe", "wait", "soon"); err == nil {
		t.Error("wait soon: no error")
	}
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	err := run(context.Background(), "dns-probe", "--resolv-conf", conf, "ask", versionQ.name, "TXT")
	if err == nil || !strings.Contains(err.Error(), conf) {
		t.Errorf("ask without %s: %v", conf, err)
	}
}
