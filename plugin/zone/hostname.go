package zone

import (
	"fmt"
	"net/netip"
	"strings"
)

// addressHostname derives an endpoint's DNS label from its address, for endpoints without a hostname: the IP with
// '.' and ':' replaced by '-'. A compressed IPv6 address may start or end with "::", which would give a label
// starting or ending in '-' (not a valid hostname), so a "0" is added on that side: the canonical text form never
// puts a "0" group next to "::", so the result is still unique per address.
func addressHostname(a netip.Addr) string {
	s := a.Unmap().WithZone("").String()
	s = dashes.Replace(s)
	if strings.HasPrefix(s, "-") {
		s = "0" + s
	}
	if strings.HasSuffix(s, "-") {
		s += "0"
	}
	return s
}

var dashes = strings.NewReplacer(".", "-", ":", "-")

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

// CheckZone says why zone, a fully qualified name in lower case, cannot be served, or returns nil. The index
// builds names below it from valid labels only (see validName), so the zone must be made of them too, and leave
// room for the longest name of its own, dns-version.<zone>: then the records that do not come from services,
// the SOA and NS among them, always pack.
func CheckZone(zone string) error {
	if !validName(zone) || !validName(versionName(zone)) {
		return fmt.Errorf("zone %q is not a name of RFC 1123 labels of at most 63 characters, at most %d octets long",
			zone, 253-len(versionName("")))
	}
	return nil
}
