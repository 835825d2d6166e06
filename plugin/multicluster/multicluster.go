package multicluster

import (
	"context"
	"reflect"
	"sync"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/request"
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

// ServeDNS implements plugin.Handler. It reads one snapshot of the index and takes no lock.
func (m *MultiCluster) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if len(r.Question) != 1 {
		return plugin.NextOrFailure(m.Name(), m.Next, ctx, w, r)
	}
	q := r.Question[0]
	snap := m.index.Snapshot()
	var ans zone.Answer
	if !snap.Answer(q.Name, q.Qtype, &ans) {
		return m.serveReverse(ctx, w, r, snap)
	}
	if q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR {
		// No transfer plugin in front took it (see Transfer): transfers are not allowed, as file and kubernetes
		// answer, rather than a reply that looks like an empty zone.
		return dns.RcodeRefused, nil
	}
	if !m.synced() {
		if m.fall.Through(q.Name) {
			return plugin.NextOrFailure(m.Name(), m.Next, ctx, w, r)
		}
		return dns.RcodeServerFailure, errNotSynced
	}
	if ans.Rcode == dns.RcodeNameError && m.fall.Through(q.Name) {
		return plugin.NextOrFailure(m.Name(), m.Next, ctx, w, r)
	}
	if wrote, err := writeWire(w, r, &ans); wrote || err != nil {
		if err != nil {
			return dns.RcodeServerFailure, err
		}
		return ans.Rcode, nil
	}
	res := ans.Result(q.Name)
	reply := new(dns.Msg)
	reply.SetReply(r)
	reply.Authoritative = true
	reply.Rcode = res.Rcode
	reply.Answer, reply.Ns, reply.Extra = res.Answer, res.Ns, res.Extra
	if err := w.WriteMsg(reply); err != nil {
		return dns.RcodeServerFailure, err
	}
	return res.Rcode, nil
}

// replyBuffers recycles the buffers of replies written in wire format: the server has sent a reply when Write
// returns, so each buffer is back at once, and a busy server needs as many as it answers at the same time.
var replyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// writeWire writes the precompiled answer straight to the client, and reports whether it did. The rule: it does
// only when w reaches the server's own request.ScrubWriter through nothing but the wrappers plugin.NextOrFailure
// adds (see direct), which means that no plugin before this one in the chain wrapped the writer to read or change
// the reply as a dns.Msg (cache, loadbalance, dnssec, rewrite, log, prometheus and the like all do); and when the
// query is a plain QUERY whose EDNS record, if any, carries no option (options are the business of other plugins
// and of the ScrubWriter, which keeps only those CoreDNS supports). Otherwise the caller builds a dns.Msg and
// writes it as every plugin does. Bypassing the ScrubWriter is safe under that rule: what it would do to such a
// reply, mirror the OPT record and truncate to the client's buffer, Reply does itself.
func writeWire(w dns.ResponseWriter, r *dns.Msg, ans *zone.Answer) (bool, error) {
	if r.Opcode != dns.OpcodeQuery || !direct(w) {
		return false, nil
	}
	opt := r.IsEdns0()
	if opt != nil && len(opt.Option) > 0 {
		return false, nil
	}
	state := request.Request{W: w, Req: r}
	bp := replyBuffers.Get().(*[]byte)
	defer replyBuffers.Put(bp)
	b, ok := ans.Reply(*bp, r, opt, state.Size())
	*bp = b[:0]
	if !ok {
		return false, nil
	}
	_, err := w.Write(b) // through the trackers, to the ScrubWriter's connection
	return true, err
}

// direct reports whether w is the server's ScrubWriter, possibly inside the writers plugin.NextOrFailure wraps
// around the writer of each plugin it calls. Those only record which plugin wrote the reply, for a tracker
// further down, and pass Write on like WriteMsg. Their type is unexported, so it is learnt from NextOrFailure
// itself (see tracking) and unwrapped by reflection, which allocates nothing.
func direct(w dns.ResponseWriter) bool {
	for w != nil {
		if _, ok := w.(*request.ScrubWriter); ok {
			return true
		}
		v := reflect.ValueOf(w)
		if v.Type() != tracking.typ {
			return false
		}
		w, _ = v.Elem().Field(tracking.field).Interface().(dns.ResponseWriter)
	}
	return false
}

// tracking is the type of the writer plugin.NextOrFailure gives the next plugin, and the index of the field that
// holds the writer it wraps; typ is nil if NextOrFailure passes the writer on as it is, or wraps it differently.
var tracking = func() (t struct {
	typ   reflect.Type
	field int
}) {
	var seen dns.ResponseWriter
	probe := plugin.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, _ *dns.Msg) (int, error) {
		seen = w
		return 0, nil
	})
	_, _ = plugin.NextOrFailure("", probe, context.Background(), &request.ScrubWriter{}, new(dns.Msg))
	typ := reflect.TypeOf(seen)
	if typ == nil || typ.Kind() != reflect.Pointer || typ.Elem().Kind() != reflect.Struct {
		return t
	}
	f, ok := typ.Elem().FieldByName("ResponseWriter")
	if !ok || !f.Anonymous || len(f.Index) != 1 || f.Type != reflect.TypeFor[dns.ResponseWriter]() {
		return t
	}
	t.typ, t.field = typ, f.Index[0]
	return t
}()

// serveReverse answers PTR questions for clusterset IPs and headless endpoint addresses in the reverse zones the
// plugin serves, and passes everything else on, so that the kubernetes plugin's cluster.local answers (or the
// next plugin's) are never shadowed. The index holds PTR records only for the addresses of those zones, where
// in-addr.arpa and ip6.arpa stand for the private ranges (see ptrRanges). PTR questions are few: they always
// take the dns.Msg path.
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
	reply.Answer = rrs
	if err := w.WriteMsg(reply); err != nil {
		return dns.RcodeServerFailure, err
	}
	return dns.RcodeSuccess, nil
}
