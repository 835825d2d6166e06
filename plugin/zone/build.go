package zone

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// node holds the precomputed records of one owner name. A node with no records is an empty non-terminal: the
// name exists (NODATA) but has no data.
type node struct {
	// name is the owner name, shared by every record of the node instead of one string per record.
	name         string
	a, aaaa, srv []dns.RR
}

// entry is everything one service contributes to the zone.
type entry struct {
	// names maps the prefix below the service name (see Name.Prefix) to its records; "" is the service name.
	names map[string]*node
	// ptrs maps reverse owner names to the PTR records this service contributes there.
	ptrs map[string][]dns.RR
}

// builder turns one Service into an entry.
type builder struct {
	base string // <svc>.<ns>.svc.<zone>
	ttl  uint32
	e    *entry
	// seen de-duplicates records per owner: an endpoint listed in an IPv4 and an IPv6 slice is one SRV target,
	// and an address reported by two clusters is one A record.
	seen map[string]bool
}

// buildEntry precomputes the records of s. Names that would exceed DNS limits are left out.
func buildEntry(s *Service, zone string, ttl uint32) *entry {
	b := &builder{
		base: lower(s.Name) + "." + lower(s.Namespace) + ".svc." + zone,
		ttl:  ttl,
		e:    &entry{names: map[string]*node{}, ptrs: map[string][]dns.RR{}},
		seen: map[string]bool{},
	}
	if !validName(b.base) {
		return b.e
	}
	if s.Type == Headless {
		b.headless(s)
	} else {
		b.clusterSetIP(s)
	}
	return b.e
}

func (b *builder) clusterSetIP(s *Service) {
	b.node("")
	for _, ip := range s.IPs {
		b.address("", ip)
		b.ptr(ip, b.base)
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
		prefix := host + "." + lower(ep.Cluster)
		target := b.owner(prefix)
		if !validName(target) {
			continue
		}
		for _, ip := range ep.Addresses {
			if shared {
				b.address("", ip)
			}
			b.address(prefix, ip)
			b.ptr(ip, target)
		}
		if !shared {
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

// node returns the node of prefix, creating it and, for a port name "_<port>._<proto>", the "_<proto>" empty
// non-terminal above it. Endpoint names get no empty non-terminal: <clusterid>.<svc>.<ns> must not exist.
func (b *builder) node(prefix string) *node {
	n, ok := b.e.names[prefix]
	if !ok {
		n = &node{name: b.owner(prefix)}
		b.e.names[prefix] = n
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
func (b *builder) once(key string) bool {
	if b.seen[key] {
		return false
	}
	b.seen[key] = true
	return true
}

// address adds an A or AAAA record for ip to the name of prefix.
func (b *builder) address(prefix string, ip netip.Addr) {
	ip = ip.Unmap()
	if !ip.IsValid() || !b.once("addr "+prefix+" "+ip.String()) {
		return
	}
	n := b.node(prefix)
	if ip.Is4() {
		a := ip.As4()
		n.a = append(n.a, &dns.A{Hdr: b.hdr(n.name, dns.TypeA), A: a[:]})
		return
	}
	a := ip.As16()
	n.aaaa = append(n.aaaa, &dns.AAAA{Hdr: b.hdr(n.name, dns.TypeAAAA), AAAA: a[:]})
}

// srv adds an SRV record for target and port to the name of prefix.
func (b *builder) srv(prefix, target string, port uint16) {
	if !b.once("srv " + prefix + " " + target + " " + strconv.Itoa(int(port))) {
		return
	}
	n := b.node(prefix)
	n.srv = append(n.srv, &dns.SRV{Hdr: b.hdr(n.name, dns.TypeSRV), Weight: 100, Port: port, Target: target})
}

// ptr adds a PTR record from ip's reverse name to target.
func (b *builder) ptr(ip netip.Addr, target string) {
	ip = ip.Unmap()
	if !ip.IsValid() || !b.once("ptr "+ip.String()+" "+target) {
		return
	}
	rev, err := dns.ReverseAddr(ip.String())
	if err != nil {
		return
	}
	b.e.ptrs[rev] = append(b.e.ptrs[rev], &dns.PTR{Hdr: b.hdr(rev, dns.TypePTR), Ptr: target})
}

func (b *builder) hdr(owner string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: owner, Rrtype: t, Class: dns.ClassINET, Ttl: b.ttl}
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
