package zone

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// Lookup answers qname (in any case) and qtype with records (see Result). ok is false when qname is outside the
// zone.
func (s *Snapshot) Lookup(qname string, qtype uint16) (r Result, ok bool) {
	var a Answer
	if !s.Answer(qname, qtype, &a) {
		return Result{}, false
	}
	return a.Result(qname), true
}

// Answer fills a, a zero Answer, with the precompiled answer to qname (in any case) and qtype; it builds no
// record, and allocates only to lower-case a name in mixed case. It reports false when qname is outside the
// zone. An Answer is too large for registers: filling one in place spares every question a copy.
func (s *Snapshot) Answer(qname string, qtype uint16, a *Answer) bool {
	lname := lower(qname)
	n := Parse(lname, s.zone)
	switch n.Kind {
	case Outside:
		return false
	case Apex:
		switch qtype {
		case dns.TypeSOA:
			a.Answer = s.soa
		case dns.TypeNS:
			a.Answer, a.Extra = s.ns, s.nsGlue
		case dns.TypeANY:
			a.Answer = s.apexAny
		default:
			a.Ns = s.soaApex
		}
		return true
	case DNSVersion:
		if qtype == dns.TypeTXT || qtype == dns.TypeANY {
			a.Answer = s.version
		} else {
			a.Ns = s.soaApex
		}
		return true
	case NameServer:
		s.answer(&s.nsAddrs, qtype, a)
		return true
	case Structural:
		a.Ns = s.soaApex
		return true
	case NamespaceName:
		if _, ok := s.namespaces[n.Namespace]; ok {
			a.Ns = s.soaApex
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
		if nd, ok := e.find(n.Prefix); ok {
			s.answer(nd, qtype, a)
			return true
		}
	}
	a.Rcode, a.Ns = dns.RcodeNameError, s.soaApex
	return true
}

// LookupPTR returns the PTR records of a reverse name (in any case), owned by the name as asked, or nil.
func (s *Snapshot) LookupPTR(qname string) []dns.RR {
	a, ok := reverseAddr(lower(qname))
	if !ok {
		return nil
	}
	targets, _ := s.ptrs.get(addrKey(a))
	if len(targets) == 0 {
		return nil
	}
	out := make([]dns.RR, 0, len(targets))
	for _, t := range targets {
		out = append(out, &dns.PTR{Hdr: dns.RR_Header{Name: qname, Rrtype: dns.TypePTR, Class: dns.ClassINET, Ttl: s.ttl}, Ptr: s.owner(t.key, t.prefix)})
	}
	return out
}

// owner returns the fully qualified name of prefix (see Name.Prefix) below the service of key.
func (s *Snapshot) owner(key, prefix string) string {
	name := key + ".svc." + s.zone
	if prefix != "" {
		name = prefix + "." + name
	}
	return name
}

// reverseAddr parses a lower-case in-addr.arpa or ip6.arpa name of a whole address, in the one form
// dns.ReverseAddr writes: decimal octets without leading zeros, or 32 hexadecimal nibbles.
func reverseAddr(name string) (netip.Addr, bool) {
	if rest, ok := strings.CutSuffix(name, ".in-addr.arpa."); ok {
		var b [4]byte
		labels := strings.Split(rest, ".")
		if len(labels) != 4 {
			return netip.Addr{}, false
		}
		for i, l := range labels {
			v, err := strconv.ParseUint(l, 10, 8)
			if err != nil || strconv.FormatUint(v, 10) != l {
				return netip.Addr{}, false
			}
			b[3-i] = byte(v)
		}
		return netip.AddrFrom4(b), true
	}
	if rest, ok := strings.CutSuffix(name, ".ip6.arpa."); ok && len(rest) == 63 {
		var b [16]byte
		for i := range 32 {
			c := rest[2*i]
			if i < 31 && rest[2*i+1] != '.' {
				return netip.Addr{}, false
			}
			var v byte
			switch {
			case '0' <= c && c <= '9':
				v = c - '0'
			case 'a' <= c && c <= 'f':
				v = c - 'a' + 10
			default:
				return netip.Addr{}, false
			}
			// The first label is the last nibble.
			if i%2 == 0 {
				b[15-i/2] |= v
			} else {
				b[15-i/2] |= v << 4
			}
		}
		return netip.AddrFrom16(b), true
	}
	return netip.Addr{}, false
}

// answer fills a with the records of n of type qtype, or NODATA.
func (s *Snapshot) answer(n *node, qtype uint16, a *Answer) {
	if a.Answer = n.records(qtype); a.Answer.n == 0 {
		a.Ns = s.soaApex
	}
}

// records returns the node's records of one type (see kinds); ANY gets all of them, which are contiguous.
func (n *node) records(qtype uint16) Records {
	if qtype == dns.TypeANY {
		return n.span(0, len(kinds))
	}
	if k, ok := kindOf(qtype); ok {
		return n.span(k, k+1)
	}
	return Records{}
}
