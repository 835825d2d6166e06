package zone

import "github.com/miekg/dns"

// Result is the answer to one question. Its slices are shared with the snapshot: copy a slice before changing
// its order or length, and never modify its records.
type Result struct {
	// Rcode is dns.RcodeSuccess or dns.RcodeNameError.
	Rcode int
	// Answer holds the records of the name and type asked for.
	Answer []dns.RR
	// Ns is the authority section: the SOA when there is no answer (NXDOMAIN or NODATA).
	Ns []dns.RR
	// Extra holds the addresses of the apex NS target, when the NS is asked for.
	Extra []dns.RR
}

// Lookup answers qname (in any case) and qtype from the snapshot. ok is false when qname is outside the zone.
func (s *Snapshot) Lookup(qname string, qtype uint16) (r Result, ok bool) {
	n := Parse(lower(qname), s.zone)
	switch n.Kind {
	case Outside:
		return Result{}, false
	case Apex:
		switch qtype {
		case dns.TypeSOA:
			return Result{Answer: s.soa}, true
		case dns.TypeNS:
			return Result{Answer: s.ns, Extra: s.nsAddrs.records(dns.TypeA, dns.TypeAAAA)}, true
		case dns.TypeANY:
			return Result{Answer: append(append([]dns.RR{}, s.soa...), s.ns...)}, true
		}
		return s.nodata(), true
	case DNSVersion:
		if qtype == dns.TypeTXT || qtype == dns.TypeANY {
			return Result{Answer: s.version}, true
		}
		return s.nodata(), true
	case NameServer:
		return s.answer(&s.nsAddrs, qtype), true
	case Structural:
		return s.nodata(), true
	case NamespaceName:
		if _, ok := s.namespaces[n.Namespace]; ok {
			return s.nodata(), true
		}
	case ServiceName:
		if _, ok := s.namespaces[n.Namespace]; !ok {
			break // namespace sameness: a namespace absent here has no names
		}
		e, ok := s.services.get(n.Key)
		if !ok {
			break
		}
		if nd, ok := e.names[n.Prefix]; ok {
			return s.answer(nd, qtype), true
		}
	}
	return Result{Rcode: dns.RcodeNameError, Ns: s.soa}, true
}

// LookupPTR returns the PTR records of a reverse name (in any case), or nil.
func (s *Snapshot) LookupPTR(qname string) []dns.RR {
	rrs, _ := s.ptrs.get(lower(qname))
	return rrs
}

func (s *Snapshot) answer(n *node, qtype uint16) Result {
	if rrs := n.records(qtype); len(rrs) > 0 {
		return Result{Answer: rrs}
	}
	return s.nodata()
}

func (s *Snapshot) nodata() Result { return Result{Ns: s.soa} }

// records returns the node's records of one type; ANY (or more than one type) builds a new slice.
func (n *node) records(qtypes ...uint16) []dns.RR {
	if len(qtypes) == 1 {
		switch qtypes[0] {
		case dns.TypeA:
			return n.a
		case dns.TypeAAAA:
			return n.aaaa
		case dns.TypeSRV:
			return n.srv
		case dns.TypeANY:
			qtypes = []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV}
		default:
			return nil
		}
	}
	var out []dns.RR
	for _, t := range qtypes {
		out = append(out, n.records(t)...)
	}
	return out
}
