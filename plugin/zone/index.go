package zone

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Version is the DNS schema version the zone implements, answered in dns-version.<zone> TXT.
const Version = "1.0.0"

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
	snap atomic.Pointer[Snapshot]
	// ptrOwners maps a reverse name to the PTR records each service contributes to it, sorted by service key, so
	// that two services sharing an address both keep their PTR record as either one changes. Nearly every address
	// has one owner: a slice costs a fraction of a map per reverse name.
	ptrOwners map[string][]ptrOwner
}

// ptrOwner is the PTR records one service contributes to one reverse name.
type ptrOwner struct {
	key string
	rrs []dns.RR
}

// withOwner returns owners with key's records set to rrs, or removed when rrs is nil, keeping the key order.
func withOwner(owners []ptrOwner, key string, rrs []dns.RR) []ptrOwner {
	i, found := slices.BinarySearchFunc(owners, key, func(o ptrOwner, k string) int { return strings.Compare(o.key, k) })
	switch {
	case found && rrs == nil:
		return slices.Delete(owners, i, i+1)
	case found:
		owners[i].rrs = rrs
		return owners
	case rrs == nil:
		return owners
	}
	return slices.Insert(owners, i, ptrOwner{key: key, rrs: rrs})
}

// New returns an index holding no service and no namespace.
func New(opts Options) *Index {
	opts.Zone = dns.Fqdn(lower(opts.Zone))
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ix := &Index{opts: opts, ptrOwners: map[string][]ptrOwner{}}
	s := &Snapshot{zone: opts.Zone, namespaces: map[string]struct{}{}}
	s.static(opts)
	s.bump(0, opts.Now())
	ix.snap.Store(s)
	return ix
}

// Snapshot returns the current snapshot. It never blocks; the snapshot never changes.
func (ix *Index) Snapshot() *Snapshot { return ix.snap.Load() }

// Apply rebuilds the entries of the changed services only and publishes a new snapshot sharing everything else.
func (ix *Index) Apply(changes ...Change) {
	if len(changes) == 0 {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	latest := make(map[string]*Service, len(changes)) // the last change of a key wins
	for _, c := range changes {
		latest[c.Key] = c.Service
	}
	old := ix.snap.Load()
	next := *old
	upserts := map[string]*entry{}
	var deletes []string
	ptrTouched := map[string]bool{}
	for key, svc := range latest {
		if prev, ok := old.services.get(key); ok {
			next.names -= len(prev.names)
			for rev := range prev.ptrs {
				ix.ptrOwners[rev] = withOwner(ix.ptrOwners[rev], key, nil)
				ptrTouched[rev] = true
			}
		}
		if svc == nil {
			deletes = append(deletes, key)
			continue
		}
		e := buildEntry(svc, ix.opts.Zone, ix.opts.TTL)
		upserts[key] = e
		next.names += len(e.names)
		for rev, rrs := range e.ptrs {
			ix.ptrOwners[rev] = withOwner(ix.ptrOwners[rev], key, rrs)
			ptrTouched[rev] = true
		}
	}
	next.services = old.services.with(upserts, deletes)
	ptrUpserts := map[string][]dns.RR{}
	var ptrDeletes []string
	for rev := range ptrTouched {
		owners := ix.ptrOwners[rev]
		if len(owners) == 0 {
			delete(ix.ptrOwners, rev)
			ptrDeletes = append(ptrDeletes, rev)
			continue
		}
		if len(owners) == 1 {
			ptrUpserts[rev] = owners[0].rrs // shared, never modified
			continue
		}
		var rrs []dns.RR
		for _, o := range owners {
			rrs = append(rrs, o.rrs...)
		}
		ptrUpserts[rev] = rrs
	}
	next.ptrs = old.ptrs.with(ptrUpserts, ptrDeletes)
	next.bump(old.serial, ix.opts.Now())
	ix.snap.Store(&next)
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
	ptrs       shardMap[[]dns.RR]
	namespaces map[string]struct{}
	names      int // owner names below the services, for metrics

	soa      []dns.RR // the SOA, as answer or authority
	ns       []dns.RR // the apex NS
	nsAddrs  node     // A and AAAA of ns.dns.<zone>
	version  []dns.RR // the dns-version TXT
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
	s.ns = []dns.RR{&dns.NS{Hdr: hdr(o.Zone, dns.TypeNS), Ns: s.nsTarget}}
	s.version = []dns.RR{&dns.TXT{Hdr: hdr("dns-version."+o.Zone, dns.TypeTXT), Txt: []string{Version}}}
	for _, ip := range o.NameServers {
		ip = ip.Unmap()
		if ip.Is4() {
			a := ip.As4()
			s.nsAddrs.a = append(s.nsAddrs.a, &dns.A{Hdr: hdr(s.nsTarget, dns.TypeA), A: a[:]})
		} else if ip.Is6() {
			a := ip.As16()
			s.nsAddrs.aaaa = append(s.nsAddrs.aaaa, &dns.AAAA{Hdr: hdr(s.nsTarget, dns.TypeAAAA), AAAA: a[:]})
		}
	}
}

// bump moves the SOA serial forward: to the current Unix time, or by one if that is not ahead of prev.
func (s *Snapshot) bump(prev uint32, now time.Time) {
	s.serial = uint32(now.Unix())
	if int32(s.serial-prev) <= 0 { // serial number arithmetic (RFC 1982)
		s.serial = prev + 1
	}
	s.soa = []dns.RR{&dns.SOA{
		Hdr:     dns.RR_Header{Name: s.zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: s.ttl},
		Ns:      s.nsTarget,
		Mbox:    "hostmaster." + s.zone,
		Serial:  s.serial,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  s.ttl,
	}}
}

// Serial returns the SOA serial.
func (s *Snapshot) Serial() uint32 { return s.serial }

// Sizes returns how many services, owner names below them and reverse names the snapshot holds.
func (s *Snapshot) Sizes() (services, names, reverse int) { return s.services.len, s.names, s.ptrs.len }
