package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/imports"
)

const (
	// dnsTimeout bounds one question: a server on the cluster network answers in milliseconds.
	dnsTimeout = time.Second
	// silentPause is how long the probe asks nothing after the server failed to answer: a silent server costs
	// the questions in flight one timeout each per pause, not one per waiting import.
	silentPause = 5 * time.Second
	// minDNSBackoff and maxDNSBackoff bound the wait between two questions for one import: the first comes at
	// once, and the waits double, so that an import the server answers late still turns Ready within a second
	// or two, and one it never answers costs one question every maxDNSBackoff.
	minDNSBackoff = 100 * time.Millisecond
	maxDNSBackoff = 10 * time.Second
	// dnsParallel bounds the questions in flight: a burst of new imports is answered in parallel, a silent
	// server holds this many timeouts at most.
	dnsParallel = 4
)

// dnsProbe asks this member's DNS server the questions that imports waiting to turn Ready wait for, so that
// Ready means the name resolves here and users need not poll DNS themselves. It runs beside the reconcile
// workers, never on them: a reconcile hands it an import's questions and reads the latest answer (answer), and
// the probe asks again with a per-import backoff and brings the import back to the workers when its answer
// changes.
type dnsProbe struct {
	addr     string // host:port
	udp, tcp *dns.Client
	clock    clock.Clock
	// enqueue brings imports back to the reconcile workers; set before the probe starts.
	enqueue func(context.Context, ...types.NamespacedName) error
	// wake tells the probe that an import has new questions, which are asked at once.
	wake chan struct{}

	mu      sync.Mutex
	waiting map[types.NamespacedName]*dnsWait
	silent  time.Time // until then, the server is taken as silent without asking
	why     string    // what the last unanswered question got
}

// dnsWait is what one import waits for: its questions, the latest answer to them and when to ask again.
type dnsWait struct {
	checks  []imports.DNSCheck
	why     string // why the server does not answer as expected, "" when it answers all
	asked   bool   // why holds an answer (or the silence) to checks
	next    time.Time
	backoff time.Duration // the wait after the next question
}

func newDNSProbe(addr string) *dnsProbe {
	return &dnsProbe{addr: addr, udp: &dns.Client{Net: "udp", Timeout: dnsTimeout},
		tcp: &dns.Client{Net: "tcp", Timeout: dnsTimeout}, clock: clock.RealClock{},
		wake: make(chan struct{}, 1), waiting: map[types.NamespacedName]*dnsWait{}}
}

// answer says why the server does not answer key's checks as expected, or returns "" when it answers them all,
// as last asked. Checks other than those key waited for so far are asked at once, and until then their answer
// says they are not asked yet.
func (p *dnsProbe) answer(key types.NamespacedName, checks []imports.DNSCheck) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.waiting[key]
	if w == nil || !slices.EqualFunc(w.checks, checks, sameCheck) {
		w = &dnsWait{checks: checks, next: p.clock.Now(), backoff: minDNSBackoff}
		p.waiting[key] = w
		select {
		case p.wake <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
	if !w.asked {
		return question(checks[0]) + ": not asked yet"
	}
	return w.why
}

// forget stops asking key's questions: it no longer waits for DNS.
func (p *dnsProbe) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waiting, key)
}

// Start asks the waiting imports' questions as they come due until ctx ends (a manager.Runnable).
func (p *dnsProbe) Start(ctx context.Context) error {
	for ctx.Err() == nil {
		due, next := p.due()
		var asking sync.WaitGroup
		slots := make(chan struct{}, dnsParallel)
		for key, w := range due {
			slots <- struct{}{}
			asking.Go(func() {
				defer func() { <-slots }()
				p.probe(ctx, key, w)
			})
		}
		asking.Wait()
		if len(due) > 0 {
			continue // time went by while asking: more may be due
		}
		var timer clock.Timer
		var fired <-chan time.Time // nil, never, when nothing waits
		if !next.IsZero() {
			timer = p.clock.NewTimer(next.Sub(p.clock.Now()))
			fired = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-p.wake:
		case <-fired:
		}
		if timer != nil {
			timer.Stop()
		}
	}
	return nil
}

// due returns the waits whose questions are due now, and when the next of the others is; zero when none waits.
func (p *dnsProbe) due() (map[types.NamespacedName]*dnsWait, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	due := map[types.NamespacedName]*dnsWait{}
	var next time.Time
	for key, w := range p.waiting {
		switch {
		case !w.next.After(now):
			due[key] = w
		case next.IsZero() || w.next.Before(next):
			next = w.next
		}
	}
	return due, next
}

// probe asks w's questions and keeps the answer, unless key was forgotten or given other checks meanwhile; an
// answer that changed brings the import back to the workers.
func (p *dnsProbe) probe(ctx context.Context, key types.NamespacedName, w *dnsWait) {
	why := p.ask(ctx, w.checks)
	if ctx.Err() != nil {
		return // stopping: the answer may be the cancellation's
	}
	p.mu.Lock()
	if p.waiting[key] != w {
		p.mu.Unlock()
		return
	}
	changed := !w.asked || w.why != why
	w.why, w.asked = why, true
	w.next = p.clock.Now().Add(w.backoff)
	w.backoff = min(2*w.backoff, maxDNSBackoff)
	p.mu.Unlock()
	if changed {
		_ = p.enqueue(ctx, key) // fails only when ctx ends
	}
}

// ask says why the server does not answer the first check as expected, or returns "" when it answers all. After
// a question goes unanswered, every call answers that at once for silentPause.
func (p *dnsProbe) ask(ctx context.Context, checks []imports.DNSCheck) string {
	p.mu.Lock()
	silent, silentWhy := p.clock.Now().Before(p.silent), p.why
	p.mu.Unlock()
	if silent {
		return fmt.Sprintf("%s: no answer from %s: %s", question(checks[0]), p.addr, silentWhy)
	}
	for _, c := range checks {
		q := question(c)
		m := new(dns.Msg)
		m.SetQuestion(c.Name, qtype(c))
		in, _, err := p.udp.ExchangeContext(ctx, m, p.addr)
		if err == nil && in.Truncated {
			in, _, err = p.tcp.ExchangeContext(ctx, m, p.addr)
		}
		if err != nil {
			why := unanswered(err)
			p.mu.Lock()
			p.silent, p.why = p.clock.Now().Add(silentPause), why
			p.mu.Unlock()
			return fmt.Sprintf("%s: no answer from %s: %s", q, p.addr, why)
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

// unanswered says what an exchange that got no answer met, without the socket's addresses: the local port
// changes at every question, and a Pending message that changed with it would be rewritten at every answer.
func unanswered(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Err.Error()
	}
	return err.Error()
}

func qtype(c imports.DNSCheck) uint16 {
	if c.IPv6 {
		return dns.TypeAAAA
	}
	return dns.TypeA
}

// question names a check in messages, as "<name> A".
func question(c imports.DNSCheck) string {
	return c.Name + " " + dns.TypeToString[qtype(c)]
}

func sameCheck(a, b imports.DNSCheck) bool {
	return a.Name == b.Name && a.IPv6 == b.IPv6 && slices.Equal(a.Want, b.Want)
}

const (
	// dnsPathInterval is how often the leader asks its DNS server about one Ready import: a cluster DNS that stops
	// forwarding clusterset.local to ours (a managed add-on or a GitOps tool that reverts the forward block) is seen
	// within dnsPathFailures of them, at one question per interval however many imports there are.
	dnsPathInterval = 30 * time.Second
	// dnsPathFailures is how many questions in a row must go unanswered as expected before the path is taken as
	// broken, so that one lost UDP packet or an answer racing an endpoint change does not alert; one answered
	// question makes it good again.
	dnsPathFailures = 2
)

// Reasons of the Events on the cluster id ClusterProperty when the DNS path breaks and when it works again.
const (
	reasonDNSPathBroken   = "DNSPathBroken"
	reasonDNSPathRestored = "DNSPathRestored"
)

// pathState is the verdict on the DNS path of Ready imports.
type pathState int

const (
	pathUnknown pathState = iota // nothing asked yet, or nothing to ask
	pathOK
	pathBroken
)

// pathHealth turns the periodic questions' outcomes into a verdict: broken after dnsPathFailures failures in a
// row, good after one success.
type pathHealth struct {
	state    pathState
	failures int // questions failed in a row
}

// observe takes one question's outcome and returns the verdict before it.
func (h *pathHealth) observe(answered bool) (was pathState) {
	was = h.state
	if answered {
		h.state, h.failures = pathOK, 0
		return was
	}
	h.failures++
	if h.failures >= dnsPathFailures {
		h.state = pathBroken
	}
	return was
}

// dnsPath keeps asking this member's DNS server about the imports that are Ready, which the readiness check
// (dnsProbe) no longer asks about: in the standalone DNS mode the cluster's own DNS forwards clusterset.local to
// ours, and a forward block reverted after the imports turned Ready would otherwise go unnoticed. A broken path
// is said loudly (mcs_controller_dns_path_ok, a Warning Event, the log) and changes no import's Ready: flipping
// every status restores nothing and would churn them, and the imports' IPs and endpoints stay programmed. Its
// verdict is kept from one run of the manager to the next (decisions), so that a restart neither repeats nor
// loses the Events of a change.
type dnsPath struct {
	id     string
	clock  clock.Clock
	health pathHealth
	// last is the import asked about last: each question is about the next Ready import after it, round robin.
	last types.NamespacedName
}

func newDNSPath(id string) *dnsPath { return &dnsPath{id: id, clock: clock.RealClock{}} }

// readyQuestions finds the next question to ask: the key and DNS checks of the first Ready import after the one
// given, or no checks when no import has a question.
type readyQuestions func(ctx context.Context, after types.NamespacedName) (types.NamespacedName, []imports.DNSCheck, error)

// run asks probe's server one question every dnsPathInterval, from now until ctx ends; runs of the manager call it
// one after the other, as a runnable that only the leader runs.
func (p *dnsPath) run(ctx context.Context, probe *dnsProbe, next readyQuestions, rec events.EventRecorder, log logr.Logger) error {
	for {
		p.round(ctx, probe, next, rec, log)
		timer := p.clock.NewTimer(dnsPathInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C():
		}
	}
}

// round asks the question of the next Ready import and records the outcome.
func (p *dnsPath) round(ctx context.Context, probe *dnsProbe, next readyQuestions, rec events.EventRecorder, log logr.Logger) {
	key, checks, err := next(ctx, p.last)
	if err != nil {
		if ctx.Err() == nil {
			log.Error(err, "reading the Ready imports to ask this member's DNS server about")
		}
		return
	}
	if len(checks) == 0 {
		// Nothing to ask is no verdict: a 0 kept from before would alert on a path no longer checked.
		if p.health.state == pathBroken {
			log.Info("no Ready import left to ask this member's DNS server about: its clusterset.local path is no longer checked")
		}
		p.health = pathHealth{}
		dnsPathOK.DeleteLabelValues(p.id)
		return
	}
	p.last = key
	// One question of the import's: the path that answers one answers all.
	why := probe.ask(ctx, checks[:1])
	if ctx.Err() != nil {
		return // stopping: the answer may be the cancellation's
	}
	if why != "" {
		dnsPathFailuresTotal.WithLabelValues(p.id).Inc()
	}
	was := p.health.observe(why == "")
	property := clusterIDProperty()
	switch {
	case p.health.state == pathBroken && was != pathBroken:
		log.Info("this member's DNS server no longer answers a Ready import's clusterset.local name: check that the "+
			"cluster DNS still forwards clusterset.local to ours (kubectl mcs diagnose); imports stay Ready",
			"dnsAddress", probe.addr, "service", key, "answer", why)
		rec.Eventf(property, nil, corev1.EventTypeWarning, reasonDNSPathBroken, "Observe", "%s", cutNote(fmt.Sprintf(
			"This member's DNS server %s did not answer %d questions in a row about Ready imports as expected, the last "+
				"%s: clusterset.local names may not resolve in this cluster. Check that the cluster DNS still forwards "+
				"clusterset.local to ours (kubectl mcs diagnose). The imports stay Ready.", probe.addr, dnsPathFailures, why)))
	case p.health.state == pathOK && was == pathBroken:
		log.Info("this member's DNS server answers Ready imports' clusterset.local names again", "dnsAddress", probe.addr, "service", key)
		rec.Eventf(property, nil, corev1.EventTypeNormal, reasonDNSPathRestored, "Observe",
			"This member's DNS server %s answers Ready imports' clusterset.local names again.", probe.addr)
	}
	if p.health.state != pathUnknown {
		dnsPathOK.WithLabelValues(p.id).Set(gauge(p.health.state == pathOK))
	}
}

// readyQuestion returns the key and DNS checks of the controller's first Ready import after the one given, in
// namespace and name order and round, with the questions the readiness check asked of it (imports.DNSChecks over
// the stored import and its imported slices); no checks when no import is Ready at its generation or has a
// question (a headless import with no ready endpoint). Another implementation's ServiceImport is none of ours
// to ask about.
func (r *reconciler) readyQuestion(ctx context.Context, after types.NamespacedName) (types.NamespacedName, []imports.DNSCheck, error) {
	list := &mcsv1beta1.ServiceImportList{}
	if err := r.local.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return types.NamespacedName{}, nil, err
	}
	var ready []types.NamespacedName
	for i := range list.Items {
		si := &list.Items[i]
		c := meta.FindStatusCondition(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady))
		// Ready at an older generation, the import waits for the readiness check to ask again.
		if c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == si.Generation {
			ready = append(ready, types.NamespacedName{Namespace: si.Namespace, Name: si.Name})
		}
	}
	slices.SortFunc(ready, compareKeys)
	start, found := slices.BinarySearchFunc(ready, after, compareKeys)
	if found {
		start++
	}
	for n := range len(ready) {
		key := ready[(start+n)%len(ready)]
		got, err := r.stored(ctx, key)
		if err != nil {
			return types.NamespacedName{}, nil, err
		}
		if got.si == nil || !ownsImport(got) {
			continue
		}
		if checks := imports.DNSChecks(got.si, got.slices); len(checks) > 0 {
			return key, checks, nil
		}
	}
	return types.NamespacedName{}, nil, nil
}

func compareKeys(a, b types.NamespacedName) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}
