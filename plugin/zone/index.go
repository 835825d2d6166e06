package zone

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"vksfleet.dev/fleet/mcs/names"
)

// Options configure an Index.
type Options struct {
	// Zone is the forward zone, such as "clusterset.local."; it is lower-cased and made fully qualified.
	Zone string
	// TTL is the TTL of every record, and the SOA minimum.
	TTL uint32
	// NameServers are the addresses given to ns.dns.<zone>, the apex NS target; it has none when empty.
	NameServers []netip.Addr
	// Now gives the time the SOA serial derives from; default time.Now.
	Now func() time.Time
	// Reverse are the address ranges whose addresses get PTR records; no other address does, and none without
	// ranges. Whoever may write an EndpointSlice puts any address in the zone: its reverse name is only answered
	// when the operator said its range belongs to the clusterset (review finding #17).
	Reverse []netip.Prefix
}

// Change replaces or removes one service.
type Change struct {
	// Key is Key(namespace, name).
	Key string
	// Service is the service's new content, nil when it is gone.
	Service *Service
}

// Index is the writer side of the zone: it applies changes and publishes immutable snapshots. Writers are
// serialised; readers call Snapshot and never block.
type Index struct {
	opts Options
	mu   sync.Mutex // serialises writers
	b    *builder   // used by writers only
	snap atomic.Pointer[Snapshot]
}

// ptrTarget is one PTR record: its target is the name of prefix below the service of key, built when asked
// (see Snapshot.LookupPTR), so that the index keeps no name and no record per address, only references to
// strings it holds anyway. The targets of an address are sorted by key and prefix, so that two services sharing
// an address both keep their record as either one changes; nearly every address has one.
type ptrTarget struct {
	key, prefix string
}

// withTargets returns targets with key's replaced by prefixes (sorted), keeping the order. It never modifies
// targets, which a published snapshot may hold.
func withTargets(targets []ptrTarget, key string, prefixes []string) []ptrTarget {
	out := make([]ptrTarget, 0, len(targets)+len(prefixes))
	inserted := false
	for _, t := range targets {
		if t.key == key {
			continue
		}
		if !inserted && t.key > key {
			for _, p := range prefixes {
				out = append(out, ptrTarget{key: key, prefix: p})
			}
			inserted = true
		}
		out = append(out, t)
	}
	if !inserted {
		for _, p := range prefixes {
			out = append(out, ptrTarget{key: key, prefix: p})
		}
	}
	return slices.Clip(out)
}

// addrKey is the key of an address in Snapshot.ptrs: its 4 or 16 octets.
func addrKey(a netip.Addr) string { return string(a.AsSlice()) }

// New returns an index holding no service and no namespace.
func New(opts Options) *Index {
	opts.Zone = dns.Fqdn(lower(opts.Zone))
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ix := &Index{opts: opts, b: newBuilder(opts.TTL, opts.Reverse)}
	s := &Snapshot{zone: opts.Zone, namespaces: map[string]struct{}{}}
	s.static(opts)
	s.bump(0, opts.Now())
	ix.snap.Store(s)
	return ix
}

// Snapshot returns the current snapshot. It never blocks; the snapshot never changes.
func (ix *Index) Snapshot() *Snapshot { return ix.snap.Load() }

// Apply rebuilds the entries of the changed services only and publishes a new snapshot sharing everything else.
// A record that does not pack is left out and the rest of its service is served: Apply returns how many were,
// and the error of the first.
func (ix *Index) Apply(changes ...Change) (skipped int, why error) {
	if len(changes) == 0 {
		return 0, nil
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.b.skipped, ix.b.why = 0, nil
	latest := make(map[string]*Service, len(changes)) // the last change of a key wins
	for _, c := range changes {
		latest[c.Key] = c.Service
	}
	old := ix.snap.Load()
	next := *old
	upserts := map[string]*entry{}
	var deletes []string
	ptrs := map[string][]ptrTarget{} // the addresses touched, with their new targets
	targets := func(a string) []ptrTarget {
		if t, ok := ptrs[a]; ok {
			return t
		}
		t, _ := old.ptrs.get(a)
		return t
	}
	for key, svc := range latest {
		if prev, ok := old.services.get(key); ok {
			next.names -= len(prev.nodes)
			for _, a := range prev.addresses() {
				k := addrKey(a)
				ptrs[k] = withTargets(targets(k), key, nil)
			}
		}
		if svc == nil {
			deletes = append(deletes, key)
			continue
		}
		e, contributed := ix.b.build(svc, ix.opts.Zone)
		upserts[key] = e
		next.names += len(e.nodes)
		for a, prefixes := range contributed {
			k := addrKey(a)
			ptrs[k] = withTargets(targets(k), key, prefixes)
		}
	}
	next.services = old.services.with(upserts, deletes)
	var ptrDeletes []string
	for a, t := range ptrs {
		if len(t) == 0 {
			delete(ptrs, a)
			// An address outside the reverse ranges never had targets: deleting it would copy a shard for nothing.
			if _, had := old.ptrs.get(a); had {
				ptrDeletes = append(ptrDeletes, a)
			}
		}
	}
	next.ptrs = old.ptrs.with(ptrs, ptrDeletes)
	next.bump(old.serial, ix.opts.Now())
	ix.snap.Store(&next)
	return ix.b.skipped, ix.b.why
}

// SetNamespaces replaces the set of namespaces that exist in this cluster.
func (ix *Index) SetNamespaces(names []string) {
	set := make(map[string]struct{}, len(names))
	for _, n := range names {
		set[lower(n)] = struct{}{}
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	old := ix.snap.Load()
	next := *old
	next.namespaces = set
	next.bump(old.serial, ix.opts.Now())
	ix.snap.Store(&next)
}

// Snapshot is one immutable state of the zone. Its records are shared by every query: never modify them.
type Snapshot struct {
	zone       string
	serial     uint32
	services   shardMap[*entry]
	ptrs       shardMap[[]ptrTarget] // by address (see addrKey)
	namespaces map[string]struct{}
	names      int // owner names below the services, for metrics

	soa      Records // the SOA owned by the name asked: the apex SOA answer
	soaApex  Records // the SOA owned by the apex, in the authority section of NXDOMAIN and NODATA
	apexAny  Records // the SOA and the NS, the apex ANY answer
	ns       Records // the apex NS
	nsGlue   Records // the addresses of ns.dns.<zone> owned by that name: the additional section of the NS answer
	nsAddrs  node    // the same addresses, answering ns.dns.<zone> itself
	version  Records // the dns-version TXT
	nsTarget string
	ttl      uint32
}

// static builds the records that do not depend on services.
func (s *Snapshot) static(o Options) {
	s.ttl = o.TTL
	s.nsTarget = "ns.dns." + o.Zone
	hdr := func(name string, t uint16) dns.RR_Header {
		return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: o.TTL}
	}
	s.ns = records(true, &dns.NS{Hdr: hdr(o.Zone, dns.TypeNS), Ns: s.nsTarget})
	s.version = records(true, &dns.TXT{Hdr: hdr(versionName(o.Zone), dns.TypeTXT), Txt: []string{names.DNSSchemaVersion}})
	var a, aaaa []dns.RR
	for _, ip := range o.NameServers {
		ip = ip.Unmap()
		if ip.Is4() {
			b := ip.As4()
			a = append(a, &dns.A{Hdr: hdr(s.nsTarget, dns.TypeA), A: b[:]})
		} else if ip.Is6() {
			b := ip.As16()
			aaaa = append(aaaa, &dns.AAAA{Hdr: hdr(s.nsTarget, dns.TypeAAAA), AAAA: b[:]})
		}
	}
	glue := slices.Concat(a, aaaa)
	s.nsGlue = records(false, glue...)
	all := records(true, glue...)
	s.nsAddrs = node{wire: all.wire, end: [3]uint32{uint32(len(records(true, a...).wire)), uint32(len(all.wire)), uint32(len(all.wire))},
		n: [3]uint32{uint32(len(a)), uint32(len(aaaa)), 0}}
}

// records packs rrs (see appendRR), the records that do not come from services. They are made of the zone's name
// and the server's addresses only, which pack for every zone CheckZone accepts; one that does not is left out.
func records(asked bool, rrs ...dns.RR) Records {
	var (
		wire []byte
		n    int
	)
	for _, rr := range rrs {
		var err error
		if wire, err = appendRR(wire, rr, asked); err == nil {
			n++
		}
	}
	return Records{wire: wire, n: n}
}

// bump moves the SOA serial forward: to the current Unix time, or by one if that is not ahead of prev.
func (s *Snapshot) bump(prev uint32, now time.Time) {
	s.serial = uint32(now.Unix())
	if int32(s.serial-prev) <= 0 { // serial number arithmetic (RFC 1982)
		s.serial = prev + 1
	}
	soa := s.soaRecord(s.zone)
	s.soa, s.soaApex = records(true, soa), records(false, soa)
	s.apexAny = Records{wire: slices.Concat(s.soa.wire, s.ns.wire), n: 2}
}

// soaRecord returns the zone's SOA at the current serial, owned by apex: the zone itself, or a reverse zone
// being transferred, which has the same server and the same serial (see TransferReverse).
func (s *Snapshot) soaRecord(apex string) *dns.SOA {
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: apex, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: s.ttl},
		Ns:      s.nsTarget,
		Mbox:    "hostmaster." + s.zone,
		Serial:  s.serial,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  s.ttl,
	}
}

// Serial returns the SOA serial.
func (s *Snapshot) Serial() uint32 { return s.serial }

// Sizes returns how many services, owner names below them and addresses with a PTR record the snapshot holds.
func (s *Snapshot) Sizes() (services, names, reverse int) { return s.services.len, s.names, s.ptrs.len }
