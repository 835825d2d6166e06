package zone

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	const z = "clusterset.local."
	tests := []struct {
		qname string
		want  Name
	}{
		{"clusterset.local.", Name{Kind: Apex}},
		{"example.com.", Name{Kind: Outside}},
		{"xclusterset.local.", Name{Kind: Outside}},
		{"local.", Name{Kind: Outside}},
		{"dns-version.clusterset.local.", Name{Kind: DNSVersion}},
		{"a.dns-version.clusterset.local.", Name{Kind: Absent}},
		{"ns.dns.clusterset.local.", Name{Kind: NameServer}},
		{"dns.clusterset.local.", Name{Kind: Structural}},
		{"svc.clusterset.local.", Name{Kind: Structural}},
		{"pod.clusterset.local.", Name{Kind: Absent}},
		{"db.ns.pod.clusterset.local.", Name{Kind: Absent}},
		{"other.clusterset.local.", Name{Kind: Absent}},
		{"ns.svc.clusterset.local.", Name{Kind: NamespaceName, Namespace: "ns"}},
		{"db.ns.svc.clusterset.local.", Name{Kind: ServiceName, Namespace: "ns", Key: "db.ns"}},
		{"_http._tcp.db.ns.svc.clusterset.local.",
			Name{Kind: ServiceName, Namespace: "ns", Key: "db.ns", Prefix: "_http._tcp"}},
		{"db-0.east.prod.db.ns.svc.clusterset.local.",
			Name{Kind: ServiceName, Namespace: "ns", Key: "db.ns", Prefix: "db-0.east.prod"}},
		{"east.db.ns.svc.clusterset.local.",
			Name{Kind: ServiceName, Namespace: "ns", Key: "db.ns", Prefix: "east"}},
		// 253 octets: a 100-character cluster id in two labels, under a hostname and a service name of 62 and 63.
		{strings.Repeat("h", 62) + "." + strings.Repeat("a", 63) + "." + strings.Repeat("b", 36) + "." +
			strings.Repeat("s", 63) + ".conf.svc.clusterset.local.",
			Name{Kind: ServiceName, Namespace: "conf", Key: strings.Repeat("s", 63) + ".conf",
				Prefix: strings.Repeat("h", 62) + "." + strings.Repeat("a", 63) + "." + strings.Repeat("b", 36)}},
	}
	for _, tt := range tests {
		if got := Parse(tt.qname, z); got != tt.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tt.qname, got, tt.want)
		}
	}
}

func TestParseRootZone(t *testing.T) {
	if got := Parse("db.ns.svc.", "."); got.Kind != ServiceName || got.Key != "db.ns" {
		t.Errorf("Parse in the root zone = %+v", got)
	}
}

func TestParseDoesNotAllocate(t *testing.T) {
	var got Name
	n := testing.AllocsPerRun(100, func() {
		got = Parse("db-0.east.prod.db.ns.svc.clusterset.local.", "clusterset.local.")
	})
	if got.Prefix != "db-0.east.prod" {
		t.Fatalf("Parse = %+v", got)
	}
	if n != 0 {
		t.Errorf("Parse allocates %v times", n)
	}
}

func TestAddressHostname(t *testing.T) {
	tests := map[string]string{
		"10.1.2.3":         "10-1-2-3",
		"fd00::1":          "fd00--1",
		"fd00::":           "fd00--0",
		"::1":              "0--1",
		"::":               "0--0",
		"::ffff:10.0.0.1":  "10-0-0-1",
		"2001:db8:0:1::a0": "2001-db8-0-1--a0",
	}
	for in, want := range tests {
		got := addressHostname(netip.MustParseAddr(in))
		if got != want {
			t.Errorf("addressHostname(%s) = %q, want %q", in, got, want)
		}
		if strings.HasPrefix(got, "-") || strings.HasSuffix(got, "-") {
			t.Errorf("addressHostname(%s) = %q starts or ends with '-'", in, got)
		}
	}
}

func TestValidName(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	tests := []struct {
		name string
		want bool
	}{
		{"a.b.", true},
		{"a.b", false},
		{".", false},
		{"a..b.", false},
		{label63 + ".b.", true},
		{label63 + "a.b.", false},
		{strings.Repeat("a.", 126) + "a.", true},   // 253 octets
		{strings.Repeat("a.", 127) + "a.", false},  // 255 octets
		{strings.Repeat("a.", 126) + "ab.", false}, // 254 octets
		{"_http._tcp.web.ns.", true},
		{"_" + strings.Repeat("a", 62) + ".b.", true},
		{"_" + label63 + ".b.", false}, // a 64-octet label
		{"a-b.c.", true},
		{"a\\.b.c.", false}, // an escaped dot: packed, "a.b" would be one label
		{"a\\065.b.", false},
		{"a\\.", false},
		{"-a.b.", false},
		{"a-.b.", false},
		{"a_b.c.", false},
		{"_.a.", false},
		{"__a.b.", false},
		{"A.b.", false}, // names are built in lower case
		{"a b.c.", false},
		{"*.a.", false},
		{"\xc3\xa9.a.", false},
	}
	for _, tt := range tests {
		if got := validName(tt.name); got != tt.want {
			t.Errorf("validName(%d octets %.20q) = %v, want %v", len(tt.name), tt.name, got, tt.want)
		}
	}
}

func TestCheckZone(t *testing.T) {
	for zone, ok := range map[string]bool{
		"clusterset.local.":                  true,
		"example.org.":                       true,
		"cluster_set.local.":                 false,
		"a\\.b.local.":                       false,
		".":                                  false,
		strings.Repeat("a.", 118) + "local.": true,  // 241 octets: dns-version.<zone> is 253
		strings.Repeat("a.", 119) + "local.": false, // 243: dns-version.<zone> would be 255
	} {
		if err := CheckZone(zone); (err == nil) != ok {
			t.Errorf("CheckZone(%.30q, %d octets) = %v, want ok %v", zone, len(zone), err, ok)
		}
	}
}
