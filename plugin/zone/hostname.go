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
