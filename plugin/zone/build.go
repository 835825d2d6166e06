package zone

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// node holds the precompiled answers of one owner name below a service. A node with no records is an empty
// non-terminal: the name exists (NODATA) but has no data.
type node struct {
	// prefix is the name below the service's (see Name.Prefix); "" is the service's name itself.
	prefix string
	// wire holds the node's records kind after kind, in the order of kinds, owned by the question (see
	// Records). It may be part of another node's wire: a port's SRV records and an endpoint's addresses are
	// nearly always also the service name's, and are then stored once.
	wire []byte
	// end and n are, per kind (indexed as kinds), where its records end in wire and how many there are.
	end, n [len(kinds)]uint32
}

// The kinds of records a node holds, as indexes of kinds.
const (
	kindA = iota
	kindAAAA
	kindSRV
)

// kinds are the record types a node holds, in the order they are packed into its wire: this table drives both
// packing (compile, over rrsets) and lookup (node.records). A new record type is one more entry here and an
// emitter that fills its rrsets.
var kinds = [...]uint16{kindA: dns.TypeA, kindAAAA: dns.TypeAAAA, kindSRV: dns.TypeSRV}

// kindOf returns the index in kinds of a record type, or false when a node holds no records of it.
func kindOf(qtype uint16) (int, bool) {
	for k, t := range kinds {
		if t == qtype {
			return k, true
		}
	}
	return 0, false
}

// span returns the node's records of the kinds from to to (excluded), which are contiguous in wire.
func (n *node) span(from, to int) Records {
	start, count := uint32(0), 0
	if from > 0 {
		start = n.end[from-1]
	}
	for k := from; k < to; k++ {
		count += int(n.n[k])
	}
	return Records{wire: n.wire[start:n.end[to-1]], n: count}
}

// entry is everything one service contributes to the zone.
type entry struct {
	// nodes are the owner names of the service, sorted by prefix.
	nodes []node
}

// find returns the node of prefix.
func (e *entry) find(prefix string) (*node, bool) {
	i, ok := slices.BinarySearchFunc(e.nodes, prefix, func(n node, p string) int { return strings.Compare(n.prefix, p) })
	if !ok {
		return nil, false
	}
	return &e.nodes[i], true
}

// addresses returns the addresses the service may have PTR records for: every address it answers, which are the
// ClusterSetIPs or the ready endpoints' addresses, although those outside the reverse ranges have none. The index
// derives them rather than keeping a list per service.
func (e *entry) addresses() []netip.Addr {
	var out []netip.Addr
	for i := range e.nodes {
		n := &e.nodes[i]
		for _, rr := range n.span(kindA, kindAAAA+1).RRs(".") {
			switch rr := rr.(type) {
			case *dns.A:
				a, _ := netip.AddrFromSlice(rr.A.To4())
				out = append(out, a)
			case *dns.AAAA:
				a, _ := netip.AddrFromSlice(rr.AAAA.To16())
				out = append(out, a)
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// rrsets are the records of one owner name while a service is being built, per kind (indexed as kinds).
type rrsets [len(kinds)][]dns.RR

// builder turns one Service into an entry. An Index keeps one and reuses its maps and buffer for every service
// it builds: rebuilding thousands of services at once (the first sync) then makes little garbage.
type builder struct {
	base    string // <svc>.<ns>.svc.<zone>
	ttl     uint32
	reverse []netip.Prefix          // the ranges whose addresses get PTR records (see Options.Reverse)
	names   map[string]*rrsets      // by prefix
	ptrs    map[netip.Addr][]string // the prefixes of the names each address has a PTR record to
	scratch []byte                  // packing goes through it, so that each node's bytes are allocated at their size
	// seen de-duplicates records per owner: an endpoint listed in an IPv4 and an IPv6 slice is one SRV target,
	// and an address reported by two clusters is one A record.
	seen map[seen]bool
	// skipped counts the records left out because they do not pack, since the index last reset it, and why is
	// the error of the first.
	skipped int
	why     error
}

// seen is one record of the service being built: kind (A or AAAA, SRV or PTR), owner prefix and data.
type seen struct {
	kind   uint16
	prefix string
	ip     netip.Addr
	target string
	port   uint16
}

func newBuilder(ttl uint32, reverse []netip.Prefix) *builder {
	return &builder{ttl: ttl, reverse: reverse, names: map[string]*rrsets{}, ptrs: map[netip.Addr][]string{},
		seen: map[seen]bool{}}
}

// build precompiles the answers of s, and returns the names below it each of its addresses has a PTR record to,
// by prefix (see ptrTarget), valid until the next build. Names that would exceed DNS limits are left out.
func (b *builder) build(s *Service, zone string) (*entry, map[netip.Addr][]string) {
	b.base = lower(s.Name) + "." + lower(s.Namespace) + ".svc." + zone
	clear(b.names)
	clear(b.ptrs)
	clear(b.seen)
	if validName(b.base) {
		if s.Type == Headless {
			b.headless(s)
		} else {
			b.clusterSetIP(s)
		}
	}
	return b.compile()
}

// compile packs the records built. A node's records that already appear, byte for byte, in the service name's
// node are not stored again but share its bytes.
func (b *builder) compile() (*entry, map[netip.Addr][]string) {
	e := &entry{nodes: make([]node, 0, len(b.names))}
	for prefix := range b.names {
		e.nodes = append(e.nodes, node{prefix: prefix})
	}
	// The service name sorts first, so its records are there for the others to share.
	slices.SortFunc(e.nodes, func(x, y node) int { return strings.Compare(x.prefix, y.prefix) })
	var root []byte
	for i := range e.nodes {
		n := &e.nodes[i]
		rs := b.names[n.prefix]
		scratch := b.scratch[:0]
		for t, rrs := range rs {
			packed := 0
			for _, rr := range rrs {
				var err error
				if scratch, err = appendRR(scratch, rr, true); err != nil {
					b.skip(err)
					continue
				}
				packed++
			}
			n.end[t], n.n[t] = uint32(len(scratch)), uint32(packed)
		}
		b.scratch = scratch
		switch j := bytes.Index(root, scratch); {
		case len(scratch) == 0:
		case j >= 0 && i > 0:
			n.wire = root[j : j+len(scratch) : j+len(scratch)]
		default:
			n.wire = bytes.Clone(scratch)
		}
		if i == 0 && n.prefix == "" {
			root = n.wire
		}
	}
	// The PTR targets share the prefix strings of the nodes, which the entry keeps anyway.
	for _, prefixes := range b.ptrs {
		for i, p := range prefixes {
			if n, ok := e.find(p); ok {
				prefixes[i] = n.prefix
			}
		}
		slices.Sort(prefixes)
	}
	return e, b.ptrs
}

// skip counts a record left out because it does not pack: the names are checked before records are made, so
// this is what those checks missed, and the rest of the service is still served.
func (b *builder) skip(err error) {
	if b.skipped == 0 {
		b.why = err
	}
	b.skipped++
}

func (b *builder) clusterSetIP(s *Service) {
	b.node("")
	for _, ip := range s.IPs {
		b.address("", ip)
		b.ptr(ip, "")
	}
	for _, p := range distinctPorts(s.Ports) {
		b.srv("", b.base, p.Port)
	}
	for _, p := range s.Ports {
		if prefix, ok := portPrefix(p); ok && validName(b.owner(prefix)) {
			b.srv(prefix, b.base, p.Port)
		}
	}
}

func (b *builder) headless(s *Service) {
	preferred := preferredClusters(s)
	for _, ep := range s.Endpoints {
		if !ep.Ready || len(ep.Addresses) == 0 || ep.Cluster == "" {
			continue
		}
		// The service's name, bare or with a port, answers the preferred clusters only; the endpoint's own name
		// answers always.
		shared := preferred == nil || slices.Contains(preferred, ep.Cluster)
		host := lower(ep.Hostname)
		if host == "" {
			host = addressHostname(ep.Addresses[0])
		}
		// An endpoint whose own name would exceed DNS limits (a long cluster id under long host and service
		// names) is still one of the service's ready endpoints: its addresses answer the service's name, but it
		// has no name, no PTR record and no SRV record, whose target that name would be.
		prefix := host + "." + lower(ep.Cluster)
		target := b.owner(prefix)
		named := validName(target)
		for _, ip := range ep.Addresses {
			if shared {
				b.address("", ip)
			}
			if named {
				b.address(prefix, ip)
				b.ptr(ip, prefix)
			}
		}
		if !shared || !named {
			continue
		}
		ports := ep.Ports
		if len(ports) == 0 {
			ports = s.Ports
		}
		for _, p := range distinctPorts(ports) {
			b.srv("", target, p.Port)
		}
		for _, p := range ports {
			if portName, ok := portPrefix(p); ok && validName(b.owner(portName)) {
				b.srv(portName, target, p.Port)
			}
		}
	}
}

// preferredClusters returns the clusters a headless service's name answers with: s.Preferred while one of them
// has a ready endpoint, else nil, which means every cluster.
func preferredClusters(s *Service) []string {
	if len(s.Preferred) == 0 {
		return nil
	}
	for _, ep := range s.Endpoints {
		if ep.Ready && len(ep.Addresses) > 0 && slices.Contains(s.Preferred, ep.Cluster) {
			return s.Preferred
		}
	}
	return nil
}

// node returns the records of prefix, creating them and, for a port name "_<port>._<proto>", the "_<proto>"
// empty non-terminal above it. Endpoint names get no empty non-terminal: <clusterid>.<svc>.<ns> must not exist.
func (b *builder) node(prefix string) *rrsets {
	n, ok := b.names[prefix]
	if !ok {
		n = &rrsets{}
		b.names[prefix] = n
		if strings.HasPrefix(prefix, "_") {
			if i := strings.IndexByte(prefix, '.'); i > 0 {
				b.node(prefix[i+1:])
			}
		}
	}
	return n
}

// owner returns the fully qualified name of a prefix of the service being built.
func (b *builder) owner(prefix string) string {
	if prefix == "" {
		return b.base
	}
	return prefix + "." + b.base
}

// once reports whether key is new for this service.
func (b *builder) once(key seen) bool {
	if b.seen[key] {
		return false
	}
	b.seen[key] = true
	return true
}

// address adds an A or AAAA record for ip to the name of prefix.
func (b *builder) address(prefix string, ip netip.Addr) {
	ip = ip.Unmap()
	if !ip.IsValid() || !b.once(seen{kind: dns.TypeA, prefix: prefix, ip: ip}) {
		return
	}
	n := b.node(prefix)
	if ip.Is4() {
		a := ip.As4()
		n[kindA] = append(n[kindA], &dns.A{Hdr: b.hdr(dns.TypeA), A: a[:]})
		return
	}
	a := ip.As16()
	n[kindAAAA] = append(n[kindAAAA], &dns.AAAA{Hdr: b.hdr(dns.TypeAAAA), AAAA: a[:]})
}

// srv adds an SRV record for target and port to the name of prefix.
func (b *builder) srv(prefix, target string, port uint16) {
	if !b.once(seen{kind: dns.TypeSRV, prefix: prefix, target: target, port: port}) {
		return
	}
	n := b.node(prefix)
	n[kindSRV] = append(n[kindSRV], &dns.SRV{Hdr: b.hdr(dns.TypeSRV), Weight: 100, Port: port, Target: target})
}

// ptr adds a PTR record from ip's reverse name to the name of prefix, if ip is in the reverse ranges.
func (b *builder) ptr(ip netip.Addr, prefix string) {
	ip = ip.Unmap()
	if !ip.IsValid() || !b.inReverse(ip) || !b.once(seen{kind: dns.TypePTR, prefix: prefix, ip: ip}) {
		return
	}
	b.ptrs[ip] = append(b.ptrs[ip], prefix)
}

// inReverse reports whether ip is in one of the reverse ranges.
func (b *builder) inReverse(ip netip.Addr) bool {
	for _, r := range b.reverse {
		if r.Contains(ip) {
			return true
		}
	}
	return false
}

// hdr is the header of a record owned by the name asked, which packing does not read (see appendRR).
func (b *builder) hdr(t uint16) dns.RR_Header {
	return dns.RR_Header{Rrtype: t, Class: dns.ClassINET, Ttl: b.ttl}
}

// portPrefix returns "_<name>._<proto>" for a named port.
func portPrefix(p Port) (string, bool) {
	if p.Name == "" {
		return "", false
	}
	proto := lower(p.Protocol)
	if proto == "" {
		proto = "tcp"
	}
	return "_" + lower(p.Name) + "._" + proto, true
}

// distinctPorts keeps the first port of each port number: a bare-name SRV answer has one record per port
// number, so tcp/53 and udp/53 are one record.
func distinctPorts(ports []Port) []Port {
	var out []Port
	for _, p := range ports {
		dup := false
		for _, q := range out {
			dup = dup || q.Port == p.Port
		}
		if !dup {
			out = append(out, p)
		}
	}
	return out
}
