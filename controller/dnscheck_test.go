package controller

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/imports"
)

// tcpOnly is the name the test server answers over TCP only: over UDP its answer is truncated and empty.
const tcpOnly = "big.ns.svc.clusterset.local."

// startDNS serves fixed records over UDP and TCP on one loopback port and returns its address. A name it has no
// record of is NXDOMAIN; a type it has none of is answered empty.
func startDNS(t *testing.T) string {
	t.Helper()
	var rrs []dns.RR
	for _, s := range []string{
		"web.ns.svc.clusterset.local. 5 IN A 10.0.0.1",
		"web.ns.svc.clusterset.local. 5 IN AAAA fd00::1",
		tcpOnly + " 5 IN A 10.0.0.2",
		"wrong.ns.svc.clusterset.local. 5 IN A 10.9.9.9",
		"v6only.ns.svc.clusterset.local. 5 IN AAAA fd00::6",
	} {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		rrs = append(rrs, rr)
	}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		q, known := req.Question[0], false
		for _, rr := range rrs {
			if strings.EqualFold(rr.Header().Name, q.Name) {
				known = true
				if rr.Header().Rrtype == q.Qtype {
					m.Answer = append(m.Answer, rr)
				}
			}
		}
		switch {
		case !known:
			m.Rcode = dns.RcodeNameError
		case q.Name == tcpOnly && w.LocalAddr().Network() == "udp":
			m.Truncated, m.Answer = true, nil
		}
		_ = w.WriteMsg(m)
	})
	// The UDP port's TCP twin may be taken by another process: another pair is tried, a bounded number of times.
	var pc net.PacketConn
	var l net.Listener
	for try := 0; l == nil; try++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if l, err = net.Listen("tcp", pc.LocalAddr().String()); err != nil {
			pc.Close()
			if try == 10 {
				t.Fatal(err)
			}
		}
	}
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: l, Handler: handler}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return pc.LocalAddr().String()
}

// deadAddress is a loopback address where nothing listens.
func deadAddress(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	return pc.LocalAddr().String()
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestDNSProbeFailed(t *testing.T) {
	live, dead := startDNS(t), deadAddress(t)
	name := func(svc string) string { return svc + ".ns.svc.clusterset.local." }
	cases := []struct {
		name   string
		addr   string
		checks []imports.DNSCheck
		want   string // a prefix of the answer; "" for none
	}{
		{"A answered", live, []imports.DNSCheck{{Name: name("web"), Want: addrs("10.0.0.1")}}, ""},
		{"A and AAAA answered", live, []imports.DNSCheck{{Name: name("web"), Want: addrs("10.0.0.1")},
			{Name: name("web"), IPv6: true, Want: addrs("fd00::1")}}, ""},
		{"any address, headless", live, []imports.DNSCheck{{Name: name("web")}}, ""},
		{"truncated over UDP, answered over TCP", live, []imports.DNSCheck{{Name: tcpOnly, Want: addrs("10.0.0.2")}}, ""},
		{"NXDOMAIN", live, []imports.DNSCheck{{Name: name("gone")}}, name("gone") + " A: NXDOMAIN"},
		{"a wrong address", live, []imports.DNSCheck{{Name: name("wrong"), Want: addrs("10.0.0.9")}},
			name("wrong") + " A: answered [10.9.9.9], want [10.0.0.9]"},
		{"no address of the family yet", live, []imports.DNSCheck{{Name: name("v6only")}}, name("v6only") + " A: no address yet"},
		{"the first failing check", live, []imports.DNSCheck{{Name: name("web"), Want: addrs("10.0.0.1")},
			{Name: name("web"), IPv6: true, Want: addrs("fd00::9")}}, name("web") + " AAAA: answered [fd00::1], want [fd00::9]"},
		{"no server listening", dead, []imports.DNSCheck{{Name: name("web")}}, name("web") + " A: no answer from " + dead},
	}
	for _, c := range cases {
		got := newDNSProbe(c.addr).failed(context.Background(), c.checks)
		if (c.want == "") != (got == "") || !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: failed = %q, want %q", c.name, got, c.want)
		}
	}
}

// A server that did not answer is not asked again for silentPause: a silent server costs one timeout per pause.
func TestDNSProbeSilentServer(t *testing.T) {
	silent, err := net.ListenPacket("udp", "127.0.0.1:0") // reads nothing: every question times out
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	p := newDNSProbe(silent.LocalAddr().String())
	checks := []imports.DNSCheck{{Name: "web.ns.svc.clusterset.local."}}
	start := time.Now()
	first := p.failed(context.Background(), checks)
	asked := time.Since(start)
	start = time.Now()
	second := p.failed(context.Background(), checks)
	if !strings.Contains(first, "no answer") || second != first || asked < dnsTimeout || time.Since(start) > dnsTimeout/10 {
		t.Errorf("first %q after %v, second %q after %v: want the second at once, with the first's reason",
			first, asked, second, time.Since(start))
	}
}

func TestReady(t *testing.T) {
	live, dead := startDNS(t), deadAddress(t)
	v4 := []corev1.IPFamily{corev1.IPv4Protocol}
	wanted := func(ips ...string) *mcsv1beta1.ServiceImport {
		return &mcsv1beta1.ServiceImport{ObjectMeta: objMeta("ns", "web"),
			Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPFamilies: v4, IPs: ips}}
	}
	readyAt := func(generation int64) *metav1.Condition {
		return &metav1.Condition{Type: string(mcsv1beta1.ServiceImportConditionReady), Status: metav1.ConditionTrue,
			Reason: string(mcsv1beta1.ServiceImportReasonReady), Message: "checked before", ObservedGeneration: generation}
	}
	headless := &mcsv1beta1.ServiceImport{ObjectMeta: objMeta("ns", "web"),
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless, IPFamilies: v4}}
	const hour = time.Hour
	cases := []struct {
		name    string
		addr    string // "": no DNS to ask
		hold    time.Duration
		want    *mcsv1beta1.ServiceImport
		stored  *metav1.Condition
		status  metav1.ConditionStatus // "": no condition
		msg     string                 // in the condition's message
		requeue time.Duration
		missing string // the exporters' slices not imported yet
	}{
		{"no DNS to ask", "", 0, wanted("10.0.0.9"), nil, metav1.ConditionTrue, imports.Ready(wanted("10.0.0.9"), v4, 3).Message, 0, ""},
		{"not ready anyway: DNS not asked", dead, 0, wanted(), nil, metav1.ConditionFalse, "Waiting for the cluster-set IPs", 0, ""},
		{"DNS answers", live, hour, wanted("10.0.0.1"), nil, metav1.ConditionTrue, imports.ReadyResolvesMessage, 0, ""},
		{"within the hold", live, hour, wanted("10.0.0.9"), nil, "", "", readyRetry, ""},
		{"after the hold", live, 0, wanted("10.0.0.9"), nil, metav1.ConditionFalse, live + " to answer the service: web.ns.svc.clusterset.local. A: answered [10.0.0.1], want [10.0.0.9]", readyRecheck, ""},
		{"stored Ready at this generation: DNS not asked", dead, 0, wanted("10.0.0.9"), readyAt(3), metav1.ConditionTrue, "checked before", 0, ""},
		{"stored Ready at an older generation", dead, 0, wanted("10.0.0.9"), readyAt(2), metav1.ConditionFalse, "DNS server " + dead, readyRecheck, ""},
		{"headless without a ready endpoint: nothing resolves yet", live, 0, headless, nil, metav1.ConditionFalse, "Waiting for a ready endpoint", readyRecheck, ""},
		{"headless without a ready endpoint, no DNS to ask", "", 0, headless, nil, metav1.ConditionTrue, "programmed", 0, ""},
		{"slices missing, within the hold", live, hour, wanted("10.0.0.1"), nil, "", "", readyRetry, "the endpoints of b (0 of 1 EndpointSlices)"},
		{"slices missing after the hold, no DNS", "", 0, wanted("10.0.0.1"), nil, metav1.ConditionFalse, "Waiting for the endpoints of b (0 of 1 EndpointSlices).", readyRecheck, "the endpoints of b (0 of 1 EndpointSlices)"},
		{"slices missing but Ready at this generation", "", 0, wanted("10.0.0.1"), readyAt(3), metav1.ConditionTrue, "checked before", 0, "the endpoints of b (0 of 1 EndpointSlices)"},
	}
	for _, c := range cases {
		r := testReconciler(nil, nil)
		r.readyWaits = newHold(c.hold)
		if c.addr != "" {
			r.dns = newDNSProbe(c.addr)
		}
		si := &mcsv1beta1.ServiceImport{ObjectMeta: objMeta("ns", "web")}
		si.Generation = 3
		if c.stored != nil {
			si.Status.Conditions = []metav1.Condition{*c.stored}
		}
		got, requeue := r.ready(context.Background(), si, c.want, v4, nil, c.missing)
		switch {
		case requeue != c.requeue:
			t.Errorf("%s: requeue %v, want %v", c.name, requeue, c.requeue)
		case c.status == "" && got != nil:
			t.Errorf("%s: condition %+v, want none", c.name, got)
		case c.status != "" && (got == nil || got.Status != c.status || !strings.Contains(got.Message, c.msg) || got.ObservedGeneration != 3):
			t.Errorf("%s: condition %+v, want %s at generation 3 with a message containing %q", c.name, got, c.status, c.msg)
		}
	}
}
