package zone

import "github.com/miekg/dns"

// Result is the answer to one question. Its slices may be shared with the snapshot: copy a slice before changing
// its order or length, and never modify its records.
type Result struct {
	// Rcode is dns.RcodeSuccess or dns.RcodeNameError.
	Rcode int
	// Answer holds the records of the name and type asked for, owned by the name exactly as asked; the names in
	// their data are in lower case.
	Answer []dns.RR
	// Ns is the authority section: the SOA when there is no answer (NXDOMAIN or NODATA).
	Ns []dns.RR
	// Extra holds the addresses of the apex NS target, when the NS is asked for.
	Extra []dns.RR
}

// Lookup answers qname (in any case) and qtype from the snapshot. ok is false when qname is outside the zone.
func (s *Snapshot) Lookup(qname string, qtype uint16) (r Result, ok bool) {
	lname, mixed := lowered(qname)
	ok = s.lookup(lname, qtype, &r)
	if mixed {
		r.Answer = asAsked(r.Answer, qname)
	}
	return r, ok
}

// lookup answers lname, a lower-case name, with the shared records. It fills r, a zero Result, in place: a Result
// is too large for registers, and returning it by value for Lookup to copy costs every question measurable time.
func (s *Snapshot) lookup(lname string, qtype uint16, r *Result) bool {
	n := Parse(lname, s.zone)
	switch n.Kind {
	case Outside:
		return false
	case Apex:
		switch qtype {
		case dns.TypeSOA:
			*r = Result{Answer: s.soa}
			return true
		case dns.TypeNS:
			*r = Result{Answer: s.ns, Extra: s.nsAddrs.records(dns.TypeA, dns.TypeAAAA)}
			return true
		case dns.TypeANY:
			*r = Result{Answer: append(append([]dns.RR{}, s.soa...), s.ns...)}
			return true
		}
		*r = s.nodata()
		return true
	case DNSVersion:
		if qtype == dns.TypeTXT || qtype == dns.TypeANY {
			*r = Result{Answer: s.version}
			return true
		}
		*r = s.nodata()
		return true
	case NameServer:
		*r = s.answer(&s.nsAddrs, qtype)
		return true
	case Structural:
		*r = s.nodata()
		return true
	case NamespaceName:
		if _, ok := s.namespaces[n.Namespace]; ok {
			*r = s.nodata()
			return true
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
			*r = s.answer(nd, qtype)
			return true
		}
	}
	*r = Result{Rcode: dns.RcodeNameError, Ns: s.soa}
	return true
}

// LookupPTR returns the PTR records of a reverse name (in any case), owned by the name as asked, or nil.
func (s *Snapshot) LookupPTR(qname string) []dns.RR {
	lname, mixed := lowered(qname)
	rrs, _ := s.ptrs.get(lname)
	if mixed {
		return asAsked(rrs, qname)
	}
	return rrs
}

// asAsked returns the answer rrs to a mixed-case question qname, owned by qname as asked. DNS names are
// case-insensitive but case-preserving (RFC 4343): resolvers that randomise the case of their questions (0x20), or
// compare owner names byte for byte, expect the owner to be the name they sent, as stock CoreDNS answers. The
// records are shared, so they are copied; a lower-case question, nearly every one, never comes here and gets the
// shared records themselves. Names inside the records' data stay in lower case.
func asAsked(rrs []dns.RR, qname string) []dns.RR {
	if len(rrs) == 0 {
		return rrs
	}
	out := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		out[i] = renamed(rr, qname)
	}
	return out
}

// renamed returns a copy of rr owned by name. The types the index builds are copied shallowly, one allocation
// each, sharing data that is never modified; any other type gets a deep copy, so that adding a type can never
// make a query change a shared record.
func renamed(rr dns.RR, name string) dns.RR {
	switch rr := rr.(type) {
	case *dns.A:
		return shallow(rr, name)
	case *dns.AAAA:
		return shallow(rr, name)
	case *dns.SRV:
		return shallow(rr, name)
	case *dns.PTR:
		return shallow(rr, name)
	case *dns.SOA:
		return shallow(rr, name)
	case *dns.NS:
		return shallow(rr, name)
	case *dns.TXT:
		return shallow(rr, name)
	}
	c := dns.Copy(rr)
	c.Header().Name = name
	return c
}

// shallow is generic so that each type's copy is a plain struct copy: no reflection, and no copy of this code per
// type.
func shallow[T any, P interface {
	*T
	dns.RR
}](rr P, name string) dns.RR {
	c := *rr
	P(&c).Header().Name = name
	return P(&c)
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
