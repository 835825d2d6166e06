package multicluster

import (
	"context"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/miekg/dns"

	"vksfleet.dev/fleet/plugin/zone"
)

// MultiCluster is the plugin handler.
type MultiCluster struct {
	// Next is the next plugin in the chain.
	Next plugin.Handler

	zone    string
	reverse plugin.Zones
	fall    fall.F
	index   *zone.Index
	synced  func() bool
}

// Name implements plugin.Handler.
func (m *MultiCluster) Name() string { return Name }

// Ready implements the ready plugin's Readiness: true once every informer has synced and the index holds what
// they listed.
func (m *MultiCluster) Ready() bool { return m.synced() }

// ServeDNS implements plugin.Handler. It reads one snapshot of the index and takes no lock.
func (m *MultiCluster) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if len(r.Question) != 1 {
		return plugin.NextOrFailure(m.Name(), m.Next, ctx, w, r)
	}
	q := r.Question[0]
	snap := m.index.Snapshot()
	res, inZone := snap.Lookup(q.Name, q.Qtype)
	if !inZone {
		return m.serveReverse(ctx, w, r, snap)
	}
	if !m.synced() {
		if m.fall.Through(q.Name) {
			return plugin.NextOrFailure(m.Name(), m.Next, ctx, w, r)
		}
		return dns.RcodeServerFailure, errNotSynced
	}
	if res.Rcode == dns.RcodeNameError && m.fall.Through(q.Name) {
		return plugin.NextOrFailure(m.Name(), m.Next, ctx, w, r)
	}
	reply := new(dns.Msg)
	reply.SetReply(r)
	reply.Authoritative = true
	reply.Rcode = res.Rcode
	// The records are shared by every query; the slices are copied so that later plugins may reorder or cut them.
	reply.Answer = copyRRs(res.Answer)
	reply.Ns = copyRRs(res.Ns)
	reply.Extra = copyRRs(res.Extra)
	if err := w.WriteMsg(reply); err != nil {
		return dns.RcodeServerFailure, err
	}
	return res.Rcode, nil
}

// serveReverse answers PTR questions for clusterset IPs and headless endpoints in the reverse zones the plugin
// serves, and passes everything else on, so that the kubernetes plugin's cluster.local answers (or the next
// plugin's) are never shadowed.
func (m *MultiCluster) serveReverse(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, snap *zone.Snapshot) (int, error) {
	q := r.Question[0]
	if q.Qtype != dns.TypePTR || m.reverse.Matches(q.Name) == "" {
		return plugin.NextOrFailure(m.Name(), m.Next, ctx, w, r)
	}
	rrs := snap.LookupPTR(q.Name)
	if len(rrs) == 0 {
		return plugin.NextOrFailure(m.Name(), m.Next, ctx, w, r)
	}
	reply := new(dns.Msg)
	reply.SetReply(r)
	reply.Authoritative = true
	reply.Answer = copyRRs(rrs)
	if err := w.WriteMsg(reply); err != nil {
		return dns.RcodeServerFailure, err
	}
	return dns.RcodeSuccess, nil
}

func copyRRs(rrs []dns.RR) []dns.RR {
	if len(rrs) == 0 {
		return nil
	}
	return append(make([]dns.RR, 0, len(rrs)), rrs...)
}
