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
	"time"

	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

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
