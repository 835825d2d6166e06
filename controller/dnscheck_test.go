package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/poll"
)

// tcpOnly is the name the test server answers over TCP only: over UDP its answer is truncated and empty.
const tcpOnly = "big.ns.svc.clusterset.local."

// testDNS is a DNS server on loopback, over UDP and TCP on one port, that answers from records a test may change
// and counts the questions it gets for each name. A name it has no record of is NXDOMAIN; a type it has none of
// is answered empty.
type testDNS struct {
	addr  string
	mu    sync.Mutex
	rrs   []dns.RR
	asked map[string]int
}

func startDNS(t *testing.T) *testDNS {
	t.Helper()
	d := &testDNS{asked: map[string]int{}}
	d.set(t, "web.ns.svc.clusterset.local. 5 IN A 10.0.0.1",
		"web.ns.svc.clusterset.local. 5 IN AAAA fd00::1",
		tcpOnly+" 5 IN A 10.0.0.2",
		"wrong.ns.svc.clusterset.local. 5 IN A 10.9.9.9",
		"v6only.ns.svc.clusterset.local. 5 IN AAAA fd00::6")
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		q, known := req.Question[0], false
		d.mu.Lock()
		d.asked[strings.ToLower(q.Name)]++
		for _, rr := range d.rrs {
			if strings.EqualFold(rr.Header().Name, q.Name) {
				known = true
				if rr.Header().Rrtype == q.Qtype {
					m.Answer = append(m.Answer, rr)
				}
			}
		}
		d.mu.Unlock()
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
	d.addr = pc.LocalAddr().String()
	return d
}

// set replaces the records of the names it gives records of.
func (d *testDNS) set(t *testing.T, records ...string) {
	t.Helper()
	var rrs []dns.RR
	for _, s := range records {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		rrs = append(rrs, rr)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rrs = slices.DeleteFunc(d.rrs, func(old dns.RR) bool {
		return slices.ContainsFunc(rrs, func(rr dns.RR) bool { return strings.EqualFold(rr.Header().Name, old.Header().Name) })
	})
	d.rrs = append(d.rrs, rrs...)
}

// questions returns how many questions the server got for name.
func (d *testDNS) questions(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asked[strings.ToLower(name)]
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

func TestDNSProbeAsk(t *testing.T) {
	live, dead := startDNS(t).addr, deadAddress(t)
	name := func(svc string) string { return svc + ".ns.svc.clusterset.local." }
	cases := []struct {
		name   string
		addr   string
		checks []imports.DNSCheck
		want   string // the answer; "" for none
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
		// Without the socket's addresses, whose local port changes at every question.
		{"no server listening", dead, []imports.DNSCheck{{Name: name("web")}},
			name("web") + " A: no answer from " + dead + ": read: connection refused"},
	}
	for _, c := range cases {
		if got := newDNSProbe(c.addr).ask(context.Background(), c.checks); got != c.want {
			t.Errorf("%s: ask = %q, want %q", c.name, got, c.want)
		}
	}
}

// A server that did not answer is not asked again for silentPause: a silent server costs one timeout per pause,
// and each import's answer names its own question.
func TestDNSProbeSilentServer(t *testing.T) {
	silent, err := net.ListenPacket("udp", "127.0.0.1:0") // reads nothing: every question times out
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	p := newDNSProbe(silent.LocalAddr().String())
	clk := clocktesting.NewFakeClock(time.Now())
	p.clock = clk
	web, db := []imports.DNSCheck{{Name: "web.ns.svc.clusterset.local."}}, []imports.DNSCheck{{Name: "db.ns.svc.clusterset.local."}}
	timed := func(checks []imports.DNSCheck) (string, time.Duration) {
		start := time.Now()
		why := p.ask(context.Background(), checks)
		return why, time.Since(start)
	}
	noAnswer := ": no answer from " + p.addr + ": i/o timeout"
	first, took := timed(web)
	if first != question(web[0])+noAnswer || took < dnsTimeout {
		t.Errorf("first question: %q after %v, want no answer after the timeout", first, took)
	}
	clk.Step(silentPause - time.Millisecond)
	if second, took := timed(db); second != question(db[0])+noAnswer || took > dnsTimeout/2 {
		t.Errorf("within the pause: %q after %v, want no answer at once, naming its own question", second, took)
	}
	clk.Step(time.Millisecond)
	if third, took := timed(db); third != question(db[0])+noAnswer || took < dnsTimeout {
		t.Errorf("after the pause: %q after %v, want the server asked again", third, took)
	}
}

// probeUnderTest is a probe of addr running on a fake clock, with the imports it brings back.
type probeUnderTest struct {
	*dnsProbe
	clk        *clocktesting.FakeClock
	enqueuedMu sync.Mutex
	enqueued   []types.NamespacedName
}

func startProbe(t *testing.T, addr string) *probeUnderTest {
	t.Helper()
	pt := &probeUnderTest{dnsProbe: newDNSProbe(addr), clk: clocktesting.NewFakeClock(time.Now())}
	pt.clock = pt.clk
	pt.enqueue = func(_ context.Context, keys ...types.NamespacedName) error {
		pt.enqueuedMu.Lock()
		defer pt.enqueuedMu.Unlock()
		pt.enqueued = append(pt.enqueued, keys...)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- pt.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("probe: %v", err)
		}
	})
	return pt
}

// until polls cond every millisecond for up to 10 s, failing t with what when it does not hold by then.
func until(t *testing.T, what string, cond func() error) {
	t.Helper()
	if err := poll.Until(context.Background(), time.Millisecond, 10*time.Second, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// times returns how often key was brought back to the workers.
func (pt *probeUnderTest) times(key types.NamespacedName) int {
	pt.enqueuedMu.Lock()
	defer pt.enqueuedMu.Unlock()
	return len(slices.DeleteFunc(slices.Clone(pt.enqueued), func(k types.NamespacedName) bool { return k != key }))
}

// settled says whether the probe waits for its timer, having asked the server n questions of name.
func (pt *probeUnderTest) settled(srv *testDNS, name string, n int) func() error {
	return func() error {
		if got := srv.questions(name); got != n || !pt.clk.HasWaiters() {
			return fmt.Errorf("%d questions (want %d), timer set: %v", got, n, pt.clk.HasWaiters())
		}
		return nil
	}
}

// An import is asked at once, then again after waits that double from minDNSBackoff up to maxDNSBackoff; other
// checks start over. Each answer is kept, and only one that changed brings the import back.
func TestDNSProbeBackoff(t *testing.T) {
	srv := startDNS(t)
	pt := startProbe(t, srv.addr)
	key := types.NamespacedName{Namespace: "ns", Name: "wrong"}
	name := "wrong.ns.svc.clusterset.local."
	checks := []imports.DNSCheck{{Name: name, Want: addrs("10.0.0.9")}}
	wrong := name + " A: answered [10.9.9.9], want [10.0.0.9]"

	if got := pt.answer(key, checks); got != name+" A: not asked yet" {
		t.Fatalf("before the first question: %q", got)
	}
	until(t, "the first question", pt.settled(srv, name, 1))
	if got := pt.answer(key, checks); got != wrong || pt.times(key) != 1 {
		t.Fatalf("after the first question: %q, brought back %d times; want %q, once", got, pt.times(key), wrong)
	}
	wait := minDNSBackoff
	for n := 2; n <= 10; n++ {
		pt.clk.Step(wait - time.Millisecond)
		if got := srv.questions(name); got != n-1 || !pt.clk.HasWaiters() {
			t.Fatalf("question %d asked %v early", n, time.Millisecond)
		}
		pt.clk.Step(time.Millisecond)
		until(t, fmt.Sprintf("question %d, %v after the one before", n, wait), pt.settled(srv, name, n))
		wait = min(2*wait, maxDNSBackoff)
		pt.mu.Lock()
		next := pt.waiting[key].next.Sub(pt.clk.Now())
		pt.mu.Unlock()
		if next != wait {
			t.Fatalf("after question %d: the next in %v, want %v", n, next, wait)
		}
	}
	if wait != maxDNSBackoff || pt.times(key) != 1 {
		t.Errorf("backoff %v after 10 questions, brought back %d times: want %v, once (the answer never changed)",
			wait, pt.times(key), maxDNSBackoff)
	}

	// The server changes its answer: the import is brought back once, and asks as often as before.
	srv.set(t, name+" 5 IN A 10.0.0.9")
	pt.clk.Step(wait)
	until(t, "the answer after the server's change", func() error {
		if got := pt.answer(key, checks); got != "" || pt.times(key) != 2 {
			return fmt.Errorf("answer %q, brought back %d times", got, pt.times(key))
		}
		return nil
	})

	// Other checks (the import's IP changed) are asked at once and back off from the start.
	checks = []imports.DNSCheck{{Name: name, Want: addrs("10.0.0.1")}}
	n := srv.questions(name)
	if got := pt.answer(key, checks); got != name+" A: not asked yet" {
		t.Fatalf("new checks before their first question: %q", got)
	}
	until(t, "the new checks' first question", pt.settled(srv, name, n+1))
	pt.clk.Step(minDNSBackoff)
	until(t, "the new checks' second question, after the shortest wait", pt.settled(srv, name, n+2))
	if got := pt.answer(key, checks); got != name+" A: answered [10.0.0.9], want [10.0.0.1]" || pt.times(key) != 3 {
		t.Errorf("new checks: %q, brought back %d times", got, pt.times(key))
	}
}

// A forgotten import is asked nothing more, and nothing of it is kept.
func TestDNSProbeForget(t *testing.T) {
	srv := startDNS(t)
	pt := startProbe(t, srv.addr)
	gone, other := types.NamespacedName{Namespace: "ns", Name: "wrong"}, types.NamespacedName{Namespace: "ns", Name: "web"}
	goneName, otherName := "wrong.ns.svc.clusterset.local.", "web.ns.svc.clusterset.local."
	pt.answer(gone, []imports.DNSCheck{{Name: goneName, Want: addrs("10.0.0.9")}})
	until(t, "the first question", pt.settled(srv, goneName, 1))
	pt.forget(gone)
	pt.clk.Step(time.Hour)
	// Another import's question shows that the probe went round again since.
	pt.answer(other, []imports.DNSCheck{{Name: otherName, Want: addrs("10.0.0.9")}})
	until(t, "the other import's question", pt.settled(srv, otherName, 1))
	pt.forget(other)
	pt.mu.Lock()
	kept := len(pt.waiting)
	pt.mu.Unlock()
	if n := srv.questions(goneName); n != 1 || kept != 0 {
		t.Errorf("the forgotten import asked %d times (want once), %d imports kept (want none)", n, kept)
	}
}

// An answer to checks that were forgotten or replaced while it was asked is not kept, nor brings anything back.
func TestDNSProbeStaleAnswer(t *testing.T) {
	srv := startDNS(t)
	p := newDNSProbe(srv.addr)
	p.enqueue = func(_ context.Context, keys ...types.NamespacedName) error {
		t.Errorf("brought back %v", keys)
		return nil
	}
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	old := []imports.DNSCheck{{Name: "web.ns.svc.clusterset.local.", Want: addrs("10.0.0.1")}}
	p.answer(key, old)
	asked := p.waiting[key]
	p.answer(key, []imports.DNSCheck{{Name: "web.ns.svc.clusterset.local.", Want: addrs("10.0.0.2")}})
	p.probe(context.Background(), key, asked)
	if w := p.waiting[key]; w.asked {
		t.Errorf("the replaced checks' answer was kept: %+v", w)
	}
	p.forget(key)
	p.probe(context.Background(), key, asked)
	if len(p.waiting) != 0 {
		t.Errorf("a forgotten import's answer was kept: %v", p.waiting)
	}
}

func TestReady(t *testing.T) {
	live, dead := startDNS(t).addr, deadAddress(t)
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
		// waits says whether the probe still asks about the import afterwards.
		waits bool
	}{
		{"no DNS to ask", "", 0, wanted("10.0.0.9"), nil, metav1.ConditionTrue, imports.Ready(wanted("10.0.0.9"), v4, 3).Message, 0, "", false},
		{"not ready anyway: DNS not asked", dead, 0, wanted(), nil, metav1.ConditionFalse, "Waiting for the cluster-set IPs", 0, "", false},
		{"DNS answers", live, hour, wanted("10.0.0.1"), nil, metav1.ConditionTrue, imports.ReadyResolvesMessage, 0, "", false},
		// A new answer brings the import back: nothing to look at before the hold ends.
		{"within the hold", live, hour, wanted("10.0.0.9"), nil, "", "", hour, "", true},
		{"after the hold", live, 0, wanted("10.0.0.9"), nil, metav1.ConditionFalse, live + " to answer the service: web.ns.svc.clusterset.local. A: answered [10.0.0.1], want [10.0.0.9]", readyRecheck, "", true},
		{"stored Ready at this generation: DNS not asked", dead, 0, wanted("10.0.0.9"), readyAt(3), metav1.ConditionTrue, "checked before", 0, "", false},
		{"stored Ready at an older generation", dead, 0, wanted("10.0.0.9"), readyAt(2), metav1.ConditionFalse, "DNS server " + dead, readyRecheck, "", true},
		{"headless without a ready endpoint: nothing resolves yet", live, 0, headless, nil, metav1.ConditionFalse, "Waiting for a ready endpoint", readyRecheck, "", false},
		{"headless without a ready endpoint, no DNS to ask", "", 0, headless, nil, metav1.ConditionTrue, "programmed", 0, "", false},
		{"slices missing, within the hold", live, hour, wanted("10.0.0.1"), nil, "", "", readyRetry, "the endpoints of b (0 of 1 EndpointSlices)", false},
		{"slices missing after the hold, no DNS", "", 0, wanted("10.0.0.1"), nil, metav1.ConditionFalse, "Waiting for the endpoints of b (0 of 1 EndpointSlices).", readyRecheck, "the endpoints of b (0 of 1 EndpointSlices)", false},
		{"slices missing but Ready at this generation", "", 0, wanted("10.0.0.1"), readyAt(3), metav1.ConditionTrue, "checked before", 0, "the endpoints of b (0 of 1 EndpointSlices)", false},
	}
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	for _, c := range cases {
		r := testReconciler(nil, nil)
		r.readyWaits = newHold(c.hold)
		si := &mcsv1beta1.ServiceImport{ObjectMeta: objMeta("ns", "web")}
		si.Generation = 3
		if c.stored != nil {
			si.Status.Conditions = []metav1.Condition{*c.stored}
		}
		if c.addr != "" {
			// The reconcile hands the probe the import's questions; it reads the answer once the probe has it.
			pt := startProbe(t, c.addr)
			r.dns = pt.dnsProbe
			r.ready(si, c.want, v4, nil, c.missing)
			until(t, c.name+": the probe's answer", func() error {
				pt.mu.Lock()
				defer pt.mu.Unlock()
				if w := pt.waiting[key]; w != nil && !w.asked {
					return errors.New("not asked yet")
				}
				return nil
			})
		}
		got, requeue := r.ready(si, c.want, v4, nil, c.missing)
		// The hold counts real time from the first call: an hour's has a little less left.
		if c.requeue == hour && requeue > hour-time.Minute {
			requeue = hour
		}
		switch {
		case requeue != c.requeue:
			t.Errorf("%s: requeue %v, want %v", c.name, requeue, c.requeue)
		case c.status == "" && got != nil:
			t.Errorf("%s: condition %+v, want none", c.name, got)
		case c.status != "" && (got == nil || got.Status != c.status || !strings.Contains(got.Message, c.msg) || got.ObservedGeneration != 3):
			t.Errorf("%s: condition %+v, want %s at generation 3 with a message containing %q", c.name, got, c.status, c.msg)
		}
		if r.dns != nil {
			r.dns.mu.Lock()
			_, waits := r.dns.waiting[key]
			r.dns.mu.Unlock()
			if waits != c.waits {
				t.Errorf("%s: the probe asks about the import: %v, want %v", c.name, waits, c.waits)
			}
		}
	}
}

// Before the probe has asked, a Pending status says so.
func TestReadyNotAskedYet(t *testing.T) {
	r := testReconciler(nil, nil)
	r.readyWaits = newHold(0)
	r.dns = newDNSProbe(deadAddress(t)) // not started: it asks nothing
	si := &mcsv1beta1.ServiceImport{ObjectMeta: objMeta("ns", "web")}
	want := &mcsv1beta1.ServiceImport{ObjectMeta: objMeta("ns", "web"), Spec: mcsv1beta1.ServiceImportSpec{
		Type: mcsv1beta1.ClusterSetIP, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPs: []string{"10.0.0.1"}}}
	got, _ := r.ready(si, want, want.Spec.IPFamilies, nil, "")
	if got == nil || got.Status != metav1.ConditionFalse || !strings.HasSuffix(got.Message, "web.ns.svc.clusterset.local. A: not asked yet.") {
		t.Errorf("condition %+v, want False saying the server is not asked yet", got)
	}
}

func TestPathHealth(t *testing.T) {
	cases := []struct {
		name     string
		answered []bool
		want     []pathState // after each question
	}{
		{"answered at once", []bool{true}, []pathState{pathOK}},
		{"one failure first is no verdict", []bool{false, true}, []pathState{pathUnknown, pathOK}},
		{"two failures first", []bool{false, false}, []pathState{pathUnknown, pathBroken}},
		{"a lost packet now and then", []bool{true, false, true, false, true}, []pathState{pathOK, pathOK, pathOK, pathOK, pathOK}},
		{"broken after two failures in a row", []bool{true, false, false, false}, []pathState{pathOK, pathOK, pathBroken, pathBroken}},
		{"good again after one answer", []bool{false, false, true, false}, []pathState{pathUnknown, pathBroken, pathOK, pathOK}},
	}
	for _, c := range cases {
		var h pathHealth
		var got []pathState
		for _, a := range c.answered {
			h.observe(a)
			got = append(got, h.state)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: states %v, want %v", c.name, got, c.want)
		}
	}
}

// pathImport is a ServiceImport in ns, the controller's when ours, of type ClusterSetIP with ips (headless without),
// Ready at its generation when ready.
func pathImport(ns, name string, ours, ready bool, ips ...string) *mcsv1beta1.ServiceImport {
	si := &mcsv1beta1.ServiceImport{ObjectMeta: objMeta(ns, name), Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless, IPs: ips}}
	if ours {
		si.Labels = map[string]string{names.LabelImportManagedBy: names.ManagedBy}
	}
	if len(ips) > 0 {
		si.Spec.Type = mcsv1beta1.ClusterSetIP
	}
	si.Generation = 2
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	si.Status.Conditions = []metav1.Condition{{Type: string(mcsv1beta1.ServiceImportConditionReady), Status: status,
		Reason: "R", ObservedGeneration: 2, LastTransitionTime: metav1.Now()}}
	return si
}

// The Ready imports of the controller's are asked about in turn, each with the first of its readiness questions.
func TestReadyQuestion(t *testing.T) {
	olderGeneration := pathImport("ns", "d", true, true, "10.0.0.4")
	olderGeneration.Generation = 3
	ready := true
	slice := &discoveryv1.EndpointSlice{ObjectMeta: objMeta("ns", "f-x", discoveryv1.LabelManagedBy, names.ManagedBy,
		mcsv1beta1.LabelServiceName, "f"), AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.6"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}}
	local := newFakeCluster(t,
		pathImport("ns", "a", true, true, "10.0.0.1"),
		pathImport("ns", "b", true, false, "10.0.0.2"),
		pathImport("ns", "c", false, true, "10.0.0.3"), // another implementation's
		olderGeneration,
		pathImport("ns", "e", true, true), // headless, no ready endpoint: nothing to ask
		pathImport("ns", "f", true, true), slice,
		pathImport("other", "g", true, true, "fd00::7", "10.0.0.7"))
	r := testReconciler(local, nil)
	question := func(name string, v6 bool, want ...string) string {
		return fmt.Sprintf("%s %v %v", name, v6, addrs(want...))
	}
	var after types.NamespacedName
	var got []string
	for range 4 {
		key, checks, err := r.readyQuestion(context.Background(), after)
		if err != nil || len(checks) == 0 {
			t.Fatalf("after %v: %v, %v", after, checks, err)
		}
		got = append(got, fmt.Sprintf("%s: %s", key, question(checks[0].Name, checks[0].IPv6, netipStrings(checks[0].Want)...)))
		after = key
	}
	want := []string{
		"ns/a: " + question("a.ns.svc.clusterset.local.", false, "10.0.0.1"),
		"ns/f: " + question("f.ns.svc.clusterset.local.", false),
		"other/g: " + question("g.other.svc.clusterset.local.", false, "10.0.0.7"),
		"ns/a: " + question("a.ns.svc.clusterset.local.", false, "10.0.0.1"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("questions in turn:\n%q\nwant\n%q", got, want)
	}
	// After an import that is not Ready, the next that is.
	if key, _, _ := r.readyQuestion(context.Background(), types.NamespacedName{Namespace: "ns", Name: "b"}); key.Name != "f" {
		t.Errorf("after ns/b: %v, want ns/f", key)
	}

	none := testReconciler(newFakeCluster(t, pathImport("ns", "b", true, false, "10.0.0.2"), pathImport("ns", "c", false, true, "10.0.0.3"),
		pathImport("ns", "e", true, true)), nil)
	if key, checks, err := none.readyQuestion(context.Background(), types.NamespacedName{}); checks != nil || err != nil {
		t.Errorf("no Ready import with a question: %v %v, %v", key, checks, err)
	}
}

func netipStrings(as []netip.Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

// pathGauge returns the gauge mcs_controller_dns_path_ok of the cluster id, and whether it has one.
func pathGauge(t *testing.T, id string) (float64, bool) {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	dnsPathOK.Collect(ch)
	close(ch)
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		for _, l := range pb.GetLabel() {
			if l.GetName() == "cluster_id" && l.GetValue() == id {
				return pb.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// pathFailures returns the counter mcs_controller_dns_path_failures_total of the cluster id.
func pathFailures(t *testing.T, id string) float64 {
	t.Helper()
	var pb dto.Metric
	if err := dnsPathFailuresTotal.WithLabelValues(id).Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetCounter().GetValue()
}

// The DNS path of Ready imports turns bad after two questions in a row are not answered as expected, with a
// Warning Event, and good after one that is, with a Normal one; the gauge says so, and is absent while no import is
// Ready. Only a Ready import of the controller's is asked about.
func TestDNSPath(t *testing.T) {
	const id = "path-test"
	// Another run of the test (-count) left its series.
	dnsPathOK.DeleteLabelValues(id)
	dnsPathFailuresTotal.DeleteLabelValues(id)
	srv := startDNS(t)
	webName, wrongName := "web.ns.svc.clusterset.local.", "wrong.ns.svc.clusterset.local."
	local := newFakeCluster(t, pathImport("ns", "web", true, true, "10.0.0.1"),
		pathImport("ns", "wrong", false, true, "10.0.0.9")) // another implementation's, which the server answers wrong
	r := testReconciler(local, nil)
	clk := clocktesting.NewFakeClock(time.Now())
	path := newDNSPath(id)
	path.clock = clk
	probe := newDNSProbe(srv.addr)
	probe.clock = clk
	rec := events.NewFakeRecorder(10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- path.run(ctx, probe, r.readyQuestion, rec, logr.Discard()) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	// round waits for the round that asks the asked-th question about web, or asks none more, to end, and checks
	// what it leaves: the gauge (-1 for none), the failures counted and the Events recorded.
	round := func(asked int, gauge, failures float64, events ...string) {
		t.Helper()
		until(t, fmt.Sprintf("the round of question %d", asked), func() error {
			if got := srv.questions(webName); got != asked || !clk.HasWaiters() {
				return fmt.Errorf("%d questions, waiting for the next round: %v", got, clk.HasWaiters())
			}
			return nil
		})
		got, ok := pathGauge(t, id)
		if !ok {
			got = -1
		}
		recorded := drain(rec)
		if got != gauge || pathFailures(t, id) != failures || len(recorded) != len(events) {
			t.Fatalf("question %d: gauge %v, %v failures, events %q; want %v, %v, %d events", asked, got, pathFailures(t, id),
				recorded, gauge, failures, len(events))
		}
		for i, e := range events {
			if !strings.HasPrefix(recorded[i], e) {
				t.Errorf("question %d: event %q, want %q...", asked, recorded[i], e)
			}
		}
	}
	next := func() { clk.Step(dnsPathInterval) }
	round(1, 1, 0)
	// The cluster DNS no longer forwards clusterset.local to ours: the name is answered otherwise.
	srv.set(t, webName+" 5 IN A 10.9.9.9")
	next()
	round(2, 1, 1)
	next()
	round(3, 0, 2, "Warning DNSPathBroken This member's DNS server "+srv.addr+" did not answer 2 questions in a row "+
		"about Ready imports as expected, the last "+webName+" A: answered [10.9.9.9], want [10.0.0.1]")
	next()
	round(4, 0, 3)
	srv.set(t, webName+" 5 IN A 10.0.0.1")
	next()
	round(5, 1, 3, "Normal DNSPathRestored")
	srv.set(t, webName+" 5 IN A 10.9.9.9")
	next()
	round(6, 1, 4)
	next()
	round(7, 0, 5, "Warning DNSPathBroken")
	// No import is Ready any more: nothing is asked, and the gauge is gone with the verdict, without an Event.
	web := &mcsv1beta1.ServiceImport{}
	if err := local.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "web"}, web); err != nil {
		t.Fatal(err)
	}
	web.Status.Conditions[0].Status = metav1.ConditionFalse
	if err := local.Status().Update(ctx, web); err != nil {
		t.Fatal(err)
	}
	next()
	round(7, -1, 5)
	if n := srv.questions(wrongName); n != 0 {
		t.Errorf("another implementation's import asked about %d times", n)
	}
}
