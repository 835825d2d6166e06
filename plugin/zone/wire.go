package zone

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/miekg/dns"
)

// Records is a run of resource records in wire format, as they appear in a section of a message. A record owned
// by the name asked has a compression pointer to the question (offset 12 of the message) as its owner, so that
// one precompiled answer serves the name in any case and its owners are the name exactly as asked (RFC 4343);
// any other record (the SOA in the authority section, the NS target's addresses) carries its owner in full.
// Names in the data are never compressed (RFC 2782 forbids it for SRV targets). Records is shared by every
// query: never modify it.
type Records struct {
	wire []byte
	n    int
}

// Len returns the number of records.
func (r Records) Len() int { return r.n }

// askedOwner is the owner of a record owned by the question's name: a pointer to offset 12.
var askedOwner = []byte{0xC0, 12}

// errMalformed is returned when precompiled records do not unpack, which would be a bug in this package.
var errMalformed = errors.New("zone: malformed precompiled records")

// appendRR appends rr in wire format. With asked, its owner is the question's name (see Records) and rr's own
// owner is ignored. The names the index builds are checked (see validName), but what a record holds comes from
// objects that users and other clusters write: a record that does not pack is an error, and wire is returned as
// it was, so that the caller leaves the record out rather than stop serving.
func appendRR(wire []byte, rr dns.RR, asked bool) ([]byte, error) {
	off := len(wire)
	// Room for the longest record the index builds: an SOA with two names, or an owner and a name.
	wire = slices.Grow(wire, 2*256+32)
	h := rr.Header()
	owner := h.Name
	at := off
	if asked {
		// The root owner "." packs as one zero octet; packed one octet further, it becomes the pointer's second.
		h.Name, at = ".", off+1
	}
	n, err := dns.PackRR(rr, wire[:cap(wire)], at, nil, false)
	h.Name = owner
	if err != nil {
		return wire, fmt.Errorf("zone: packing %s: %w", rr, err)
	}
	wire = wire[:n]
	if asked {
		wire[off], wire[off+1] = askedOwner[0], askedOwner[1]
	}
	return wire, nil
}

// RRs unpacks the records, those owned by the question's name owned by qname. Every call returns new records, so
// that the caller (a later plugin) may change them.
func (r Records) RRs(qname string) []dns.RR {
	if r.n == 0 {
		return nil
	}
	out := make([]dns.RR, 0, r.n)
	w := r.wire
	for off := 0; off < len(w); {
		var (
			h   dns.RR_Header
			err error
		)
		if off+2 <= len(w) && w[off] == askedOwner[0] && w[off+1] == askedOwner[1] {
			h.Name, off = qname, off+2
		} else if h.Name, off, err = dns.UnpackDomainName(w, off); err != nil {
			panic(errMalformed)
		}
		if off+10 > len(w) {
			panic(errMalformed)
		}
		h.Rrtype = binary.BigEndian.Uint16(w[off:])
		h.Class = binary.BigEndian.Uint16(w[off+2:])
		h.Ttl = binary.BigEndian.Uint32(w[off+4:])
		h.Rdlength = binary.BigEndian.Uint16(w[off+8:])
		rr, next, err := dns.UnpackRRWithHeader(h, w, off+10)
		if err != nil {
			panic(errMalformed)
		}
		out = append(out, rr)
		off = next
	}
	return out
}

// Answer is the precompiled reply to one question: an rcode and the records of each section, shared by every
// query. Reply writes it in wire format, patching only the header and the question; Msg builds it as a dns.Msg.
type Answer struct {
	// Rcode is dns.RcodeSuccess or dns.RcodeNameError.
	Rcode int
	// Answer holds the records of the name and type asked for.
	Answer Records
	// Ns is the authority section: the SOA when there is no answer (NXDOMAIN or NODATA).
	Ns Records
	// Extra holds the addresses of the apex NS target, when the NS is asked for.
	Extra Records
}

// Result returns the sections as records, those of the name asked owned by qname (see Records.RRs).
func (a *Answer) Result(qname string) Result {
	return Result{Rcode: a.Rcode, Answer: a.Answer.RRs(qname), Ns: a.Ns.RRs(qname), Extra: a.Extra.RRs(qname)}
}

// Result is an answer as records, for callers that need a dns.Msg: each call builds new records.
type Result struct {
	// Rcode is dns.RcodeSuccess or dns.RcodeNameError.
	Rcode int
	// Answer holds the records of the name and type asked for, owned by the name exactly as asked; the names in
	// their data are in lower case.
	Answer []dns.RR
	// Ns is the authority section: the SOA, owned by the apex in lower case, when there is no answer.
	Ns []dns.RR
	// Extra holds the addresses of the apex NS target, when the NS is asked for.
	Extra []dns.RR
}

// Header flags of a reply (RFC 1035 section 4.1.1).
const (
	flagQR = 1 << 15
	flagAA = 1 << 10
	flagTC = 1 << 9
	flagRD = 1 << 8
	flagCD = 1 << 4
)

// headerLen is the length of a message header; the question starts right after it, at the offset every asked
// owner points to.
const headerLen = 12

// Reply writes into buf (from its start, reusing its capacity) the authoritative reply to req, a query with one
// question: req's ID, opcode, RD and CD bits, its question byte for byte, the rcode and the sections. With opt,
// the request's EDNS record without options, the reply carries an OPT record with the same UDP size and DO
// bit. A reply larger than size octets (at least 512) keeps as many whole records as fit and has the TC bit set.
// This is what CoreDNS's request.ScrubWriter makes of the same reply as a dns.Msg (SizeAndDo, then Truncate).
// ok is false only for a question name that does not pack.
func (a *Answer) Reply(buf []byte, req *dns.Msg, opt *dns.OPT, size int) (out []byte, ok bool) {
	q := req.Question[0]
	// A packed name is at most one octet longer than its presentation form; 4 for the type and class.
	b := append(buf[:0], make([]byte, headerLen+len(q.Name)+1+4)...)
	off, err := dns.PackDomainName(q.Name, b, headerLen, nil, false)
	if err != nil {
		return buf, false
	}
	binary.BigEndian.PutUint16(b[off:], q.Qtype)
	binary.BigEndian.PutUint16(b[off+2:], q.Qclass)
	b = b[:off+4]

	const optLen = 11
	budget := max(size, dns.MinMsgSize)
	if opt != nil {
		budget -= optLen
	}
	full := [3]Records{a.Answer, a.Ns, a.Extra}
	sections := full
	truncated := false
	if len(b)+len(a.Answer.wire)+len(a.Ns.wire)+len(a.Extra.wire) > budget {
		truncated = true
		room := budget - len(b)
		for i := range sections {
			sections[i] = full[i].prefix(room)
			room -= len(sections[i].wire)
			if sections[i].n < full[i].n {
				room = 0 // once a record is left out, nothing after it goes in, as with dns.Msg.Truncate
			}
		}
	}
	flags := uint16(flagQR|flagAA) | uint16(req.Opcode&0xF)<<11 | uint16(a.Rcode&0xF)
	if req.RecursionDesired {
		flags |= flagRD
	}
	if req.CheckingDisabled {
		flags |= flagCD
	}
	if truncated {
		flags |= flagTC
	}
	arcount := sections[2].n
	if opt != nil {
		arcount++
	}
	binary.BigEndian.PutUint16(b[0:], req.Id)
	binary.BigEndian.PutUint16(b[2:], flags)
	binary.BigEndian.PutUint16(b[4:], 1)
	binary.BigEndian.PutUint16(b[6:], uint16(sections[0].n))
	binary.BigEndian.PutUint16(b[8:], uint16(sections[1].n))
	binary.BigEndian.PutUint16(b[10:], uint16(arcount))
	for _, r := range sections {
		b = append(b, r.wire...)
	}
	if opt != nil {
		var do byte
		if opt.Do() {
			do = 0x80
		}
		// Root owner, type OPT, the UDP size as class, extended rcode 0, version 0, the DO bit, no data.
		b = append(b, 0, byte(dns.TypeOPT>>8), byte(dns.TypeOPT), byte(opt.UDPSize()>>8), byte(opt.UDPSize()), 0, 0, do, 0, 0, 0)
	}
	return b, true
}

// prefix returns the first records of r that fit in room octets.
func (r Records) prefix(room int) Records {
	if len(r.wire) <= room {
		return r
	}
	off, n := 0, 0
	for off < len(r.wire) {
		next, err := skipRR(r.wire, off)
		if err != nil || next > room {
			break
		}
		off, n = next, n+1
	}
	return Records{wire: r.wire[:off], n: n}
}

// skipRR returns the offset of the record after the one at off.
func skipRR(w []byte, off int) (int, error) {
	if off+2 <= len(w) && w[off] == askedOwner[0] && w[off+1] == askedOwner[1] {
		off += 2
	} else {
		var err error
		if _, off, err = dns.UnpackDomainName(w, off); err != nil {
			return 0, err
		}
	}
	if off+10 > len(w) {
		return 0, errMalformed
	}
	return off + 10 + int(binary.BigEndian.Uint16(w[off+8:])), nil
}
