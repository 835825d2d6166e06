package zone

import (
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

// validName reports whether a fully qualified name fits DNS limits: at most 253 octets without the final dot,
// labels of 1 to 63 octets.
func validName(fqdn string) bool {
	if len(fqdn) < 2 || len(fqdn)-1 > 253 || fqdn[len(fqdn)-1] != '.' {
		return false
	}
	start := 0
	for i := 0; i < len(fqdn); i++ {
		if fqdn[i] == '.' {
			if n := i - start; n < 1 || n > 63 {
				return false
			}
			start = i + 1
		}
	}
	return true
}
