package zone

import (
	"strings"

	"vksfleet.dev/fleet/mcs/names"
)

// Kind says what part of the zone's namespace a query name falls in.
type Kind uint8

// The kinds of names in the zone.
const (
	// Outside is a name that is not in the zone.
	Outside Kind = iota
	// Apex is the zone itself (SOA, NS).
	Apex
	// DNSVersion is dns-version.<zone> (TXT).
	DNSVersion
	// NameServer is ns.dns.<zone>, the target of the apex NS record.
	NameServer
	// Structural is an empty non-terminal that always exists: svc.<zone> and dns.<zone>.
	Structural
	// NamespaceName is <ns>.svc.<zone>: it exists while the namespace exists in this cluster.
	NamespaceName
	// ServiceName is <svc>.<ns>.svc.<zone> or a name below it; Name.Prefix holds the labels below the service.
	ServiceName
	// Absent is a name in the zone that can never exist, such as anything under pod.<zone>.
	Absent
)

// Name is a parsed query name. Its strings are slices of the query name, so parsing allocates nothing.
type Name struct {
	// Kind says which part of the zone the name is in.
	Kind Kind
	// Namespace is the namespace label, for NamespaceName and ServiceName.
	Namespace string
	// Key identifies the service in an index: "<svc>.<ns>", for ServiceName.
	Key string
	// Prefix is what precedes the service name, without its trailing dot: "" for the service itself,
	// "_http._tcp" for a port, "db-0.east.prod" for an endpoint of cluster east.prod.
	Prefix string
}

// Parse splits qname, a lower-case fully qualified name, against zone, a lower-case fully qualified zone name.
// Callers lower-case once (see Lookup), because parsing runs on the query path and must not allocate.
func Parse(qname, zone string) Name {
	if !inZone(qname, zone) {
		return Name{Kind: Outside}
	}
	if len(qname) == len(zone) {
		return Name{Kind: Apex}
	}
	rel := strings.TrimSuffix(qname[:len(qname)-len(zone)], ".") // relative name, no trailing dot
	switch rel {
	case names.DNSVersionLabel:
		return Name{Kind: DNSVersion}
	case "ns.dns":
		return Name{Kind: NameServer}
	case "svc", "dns":
		return Name{Kind: Structural}
	}
	rest, last := cutLast(rel)
	if last != "svc" || rest == "" {
		return Name{Kind: Absent} // pod.<zone>, unknown labels, and anything below dns-version or ns.dns
	}
	rest, ns := cutLast(rest)
	if rest == "" {
		return Name{Kind: NamespaceName, Namespace: ns}
	}
	prefix, svc := cutLast(rest)
	// rest is "<prefix>.<svc>" or "<svc>"; the key "<svc>.<ns>" is the slice of rel that starts at svc.
	key := rel[len(rest)-len(svc) : len(rel)-len(".svc")]
	return Name{Kind: ServiceName, Namespace: ns, Key: key, Prefix: prefix}
}

// inZone reports whether qname is zone or a name below it, at a label boundary.
func inZone(qname, zone string) bool {
	if !strings.HasSuffix(qname, zone) {
		return false
	}
	if len(qname) == len(zone) || zone == "." {
		return true
	}
	return qname[len(qname)-len(zone)-1] == '.'
}

// cutLast splits "a.b.c" into "a.b" and "c"; a single label comes back as "" and the label.
func cutLast(s string) (rest, last string) {
	i := strings.LastIndexByte(s, '.')
	if i < 0 {
		return "", s
	}
	return s[:i], s[i+1:]
}

// versionName is the name of zone (fully qualified) whose TXT record answers the DNS schema version
// (names.DNSSchemaVersion): dns-version.<zone>.
func versionName(zone string) string { return names.DNSVersionLabel + "." + zone }

// lower lower-cases ASCII only, like DNS name comparison does; a name already in lower case, nearly every one, is
// returned as is, without allocating.
func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

// validName reports whether a fully qualified name is one the index may build: at most 253 octets without the
// final dot, and every label a valid one (see validLabel). The parts of a name come from objects that users and
// other clusters write (cluster ids, hostnames, port names), and packing a name that is not plain letters,
// digits and hyphens can fail or mean something else: "\." is an escaped dot inside a label, so the labels this
// function would count are not those packed.
func validName(fqdn string) bool {
	if len(fqdn) < 2 || len(fqdn)-1 > 253 || fqdn[len(fqdn)-1] != '.' {
		return false
	}
	start := 0
	for i := 0; i < len(fqdn); i++ {
		if fqdn[i] == '.' {
			if !validLabel(fqdn[start:i]) {
				return false
			}
			start = i + 1
		}
	}
	return true
}

// validLabel reports whether label is an RFC 1123 label in lower case (1 to 63 letters, digits and hyphens,
// starting and ending with a letter or digit), or one with a leading underscore, as the port and protocol labels
// of SRV names have (RFC 2782). It runs for every name a build makes, so it does not allocate.
func validLabel(label string) bool {
	if len(label) > 63 {
		return false
	}
	label = strings.TrimPrefix(label, "_")
	if len(label) < 1 || label[0] == '-' || label[len(label)-1] == '-' {
		return false
	}
	for i := 0; i < len(label); i++ {
		if c := label[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
