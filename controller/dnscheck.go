package controller

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/imports"
)

// DNSZone is the zone whose answers an import's Ready condition waits for (Options.DNSAddress).
const DNSZone = "clusterset.local"

const (
	// dnsTimeout bounds one question: a server on the cluster network answers in milliseconds.
	dnsTimeout = time.Second
	// dnsRetry is how soon an unanswered import is asked about again while its status is held back, and
	// dnsRecheck how often once it has been written Pending.
	dnsRetry   = 50 * time.Millisecond
	dnsRecheck = time.Second
	// dnsHold is how long an import may wait for the DNS server before its status says so: the server's
	// informers see a new import within tens of milliseconds, so a status is written once, Ready, as a rule.
	dnsHold = 2 * time.Second
)

// dnsProbe asks this member's DNS server the questions an import's Ready condition waits for, so that Ready
// means the name resolves here and users need not poll DNS themselves.
type dnsProbe struct {
	addr     string // host:port
	udp, tcp *dns.Client
}

func newDNSProbe(addr string) *dnsProbe {
	return &dnsProbe{addr: addr, udp: &dns.Client{Net: "udp", Timeout: dnsTimeout}, tcp: &dns.Client{Net: "tcp", Timeout: dnsTimeout}}
}

// failed says why the server does not answer the first check as expected, or returns "" when it answers all.
func (p *dnsProbe) failed(ctx context.Context, checks []imports.DNSCheck) string {
	for _, c := range checks {
		qtype := dns.TypeA
		if c.IPv6 {
			qtype = dns.TypeAAAA
		}
		q := fmt.Sprintf("%s %s", c.Name, dns.TypeToString[qtype])
		m := new(dns.Msg)
		m.SetQuestion(c.Name, qtype)
		in, _, err := p.udp.ExchangeContext(ctx, m, p.addr)
		if err == nil && in.Truncated {
			in, _, err = p.tcp.ExchangeContext(ctx, m, p.addr)
		}
		if err != nil {
			return fmt.Sprintf("%s: no answer from %s: %v", q, p.addr, err)
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

// ready returns the Ready condition to write on the stored import si, given the desired import want and its
// slices, and when to look again. With a DNS server to ask, a condition that would turn Ready waits until the
// server answers the import: no condition is returned (nothing to write) while the hold lasts, then Pending,
// rechecked until the server answers. An import already Ready at its generation is not asked about again: later
// endpoint changes do not make it unready, as they do not for the slices.
func (r *reconciler) ready(ctx context.Context, si, want *mcsv1beta1.ServiceImport, exported []corev1.IPFamily,
	slices []discoveryv1.EndpointSlice) (*metav1.Condition, time.Duration) {
	key := types.NamespacedName{Namespace: si.Namespace, Name: si.Name}
	c := imports.Ready(want, exported, si.Generation)
	if r.dns == nil || c.Status != metav1.ConditionTrue {
		r.dnsWaits.forget(key)
		return &c, 0
	}
	if stored := meta.FindStatusCondition(si.Status.Conditions, c.Type); stored != nil &&
		stored.Status == metav1.ConditionTrue && stored.ObservedGeneration == si.Generation {
		return stored, 0
	}
	why := r.dns.failed(ctx, imports.DNSChecks(want, slices, DNSZone))
	if why == "" {
		r.dnsWaits.forget(key)
		c.Message = imports.ReadyResolvesMessage
		return &c, 0
	}
	if wait := r.dnsWaits.wait(key, time.Now()); wait > 0 {
		return nil, min(wait, dnsRetry)
	}
	c.Status, c.Reason = metav1.ConditionFalse, string(mcsv1beta1.ServiceImportReasonPending)
	c.Message = fmt.Sprintf("Waiting for this cluster's DNS server %s to answer the service: %s.", r.dns.addr, why)
	return &c, dnsRecheck
}
