package zone

import (
	"iter"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// Transfer returns the records of a transfer of the zone from this snapshot (RFC 5936), in batches: the apex
// SOA, every record the zone answers, and the SOA again, all at the snapshot's serial. The index keeps no
// history, so an IXFR from an older serial gets the same full transfer, and one from the current serial or a
// newer one (RFC 1982) gets the SOA alone (RFC 1995 section 2); serial 0 means AXFR.
//
// Every record is what a query gets: each owner name of the index (the apex NS, ns.dns.<zone>, dns-version,
// then each service's names in order of namespace and name) is asked through Answer, so the transfer carries
// the names of services in namespaces this cluster has, the per-endpoint names with their cluster ids, and the
// headless names as the member's locality tier cuts them, exactly as queries answer. What no zone can carry
// are names without records that queries answer with NODATA and nothing below: a namespace without services,
// a ClusterSetIP service without IPs or ports. PTR records are not in the zone: see TransferReverse.
func (s *Snapshot) Transfer(serial uint32) iter.Seq[[]dns.RR] {
	return func(yield func([]dns.RR) bool) {
		if !yield(s.records(s.zone, dns.TypeSOA)) || upToDate(s.serial, serial) {
			return
		}
		head := slices.Concat(s.records(s.zone, dns.TypeNS), s.records(s.nsTarget, dns.TypeANY),
			s.records(versionName(s.zone), dns.TypeANY))
		if !yield(head) {
			return
		}
		keys := s.services.keys()
		slices.SortFunc(keys, byNamespace)
		for _, key := range keys {
			e, _ := s.services.get(key)
			var rrs []dns.RR
			for i := range e.nodes {
				rrs = append(rrs, s.records(s.owner(key, e.nodes[i].prefix), dns.TypeANY)...)
			}
			if len(rrs) > 0 && !yield(rrs) {
				return
			}
		}
		yield(s.records(s.zone, dns.TypeSOA))
	}
}

// TransferReverse returns the records of a transfer of apex, a reverse zone in lower case (such as
// "in-addr.arpa." or "10.in-addr.arpa."), as Transfer does for the zone: the PTR records LookupPTR answers for
// every address below apex, in address order, between two SOAs. The reverse zone has no data of its own, so its
// SOA (same serial) and its NS are the zone's, owned by apex: they frame the transfer and make it a zone a
// secondary can load, although queries for them are not this index's to answer.
func (s *Snapshot) TransferReverse(apex string, serial uint32) iter.Seq[[]dns.RR] {
	return func(yield func([]dns.RR) bool) {
		if !yield([]dns.RR{s.soaRecord(apex)}) || upToDate(s.serial, serial) {
			return
		}
		addrs := make([]netip.Addr, 0, s.ptrs.len)
		for _, k := range s.ptrs.keys() {
			a, _ := netip.AddrFromSlice([]byte(k))
			addrs = append(addrs, a)
		}
		slices.SortFunc(addrs, netip.Addr.Compare)
		const batch = 256 // addresses per batch: a channel send each would cost more than building them
		rrs := []dns.RR{&dns.NS{Hdr: dns.RR_Header{Name: apex, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: s.ttl}, Ns: s.nsTarget}}
		for i, a := range addrs {
			name, err := dns.ReverseAddr(a.String())
			if err == nil && dns.IsSubDomain(apex, name) {
				rrs = append(rrs, s.LookupPTR(name)...)
			}
			if (i+1)%batch == 0 && len(rrs) > 0 {
				if !yield(rrs) {
					return
				}
				rrs = nil
			}
		}
		if len(rrs) > 0 && !yield(rrs) {
			return
		}
		yield([]dns.RR{s.soaRecord(apex)})
	}
}

// records returns the answer a query for name and qtype gets, owned by name; nothing for NXDOMAIN or NODATA.
func (s *Snapshot) records(name string, qtype uint16) []dns.RR {
	var a Answer
	if !s.Answer(name, qtype, &a) || a.Rcode != dns.RcodeSuccess {
		return nil
	}
	return a.Answer.RRs(name)
}

// upToDate reports whether an IXFR from serial (0 for an AXFR) needs no records: the zone at current is not
// newer, in serial number arithmetic (RFC 1982).
func upToDate(current, serial uint32) bool { return serial != 0 && int32(current-serial) <= 0 }

// byNamespace orders service keys ("<svc>.<ns>") by namespace, then name, as a zone file lists them.
func byNamespace(x, y string) int {
	xs, xn, _ := strings.Cut(x, ".")
	ys, yn, _ := strings.Cut(y, ".")
	if c := strings.Compare(xn, yn); c != 0 {
		return c
	}
	return strings.Compare(xs, ys)
}
