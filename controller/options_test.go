package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"vksfleet.dev/fleet/controller/export"
)

func TestOptionsWithDefaults(t *testing.T) {
	discard := logr.Discard()
	cases := []struct {
		name    string
		in      Options
		grace   time.Duration
		workers int
		denied  []string
	}{
		{"zero takes the defaults", Options{}, DefaultLeaseGrace, DefaultWorkers, export.DefaultDeniedNamespaces},
		{"settings stay", Options{LeaseGrace: 5 * time.Second, Workers: 2, DeniedExportNamespaces: []string{"a"}, Logger: &discard},
			5 * time.Second, 2, []string{"a"}},
		{"an empty denied list refuses none", Options{DeniedExportNamespaces: []string{}}, DefaultLeaseGrace, DefaultWorkers, []string{}},
		{"out of range settings are left to Validate", Options{LeaseGrace: -time.Second, Workers: -1},
			-time.Second, -1, export.DefaultDeniedNamespaces},
	}
	for _, c := range cases {
		got := c.in.withDefaults()
		if got.LeaseGrace != c.grace || got.Workers != c.workers || !slices.Equal(got.DeniedExportNamespaces, c.denied) ||
			(got.DeniedExportNamespaces == nil) != (c.denied == nil) || got.Logger == nil {
			t.Errorf("%s: withDefaults() = %+v", c.name, got)
		}
		if c.in.Logger != nil && got.Logger != c.in.Logger {
			t.Errorf("%s: withDefaults() replaced the logger", c.name)
		}
	}
}

// TestOptionsLimits: zero limits take their defaults, which Validate accepts; set ones stay.
func TestOptionsLimits(t *testing.T) {
	got := Options{}.withDefaults()
	if got.MaxEndpointsPerService != DefaultMaxEndpointsPerService || got.MaxEndpointsPerMember != DefaultMaxEndpointsPerMember ||
		got.MaxSlicesPerNamespace != DefaultMaxSlicesPerNamespace {
		t.Errorf("withDefaults() limits %d, %d, %d", got.MaxEndpointsPerService, got.MaxEndpointsPerMember, got.MaxSlicesPerNamespace)
	}
	set := Options{MaxEndpointsPerService: 1, MaxEndpointsPerMember: 2, MaxSlicesPerNamespace: 3}.withDefaults()
	if set.MaxEndpointsPerService != 1 || set.MaxEndpointsPerMember != 2 || set.MaxSlicesPerNamespace != 3 {
		t.Errorf("withDefaults() replaced set limits: %d, %d, %d", set.MaxEndpointsPerService, set.MaxEndpointsPerMember, set.MaxSlicesPerNamespace)
	}
}

// TestOptionsDeniedImportNamespaces: unset, the import side refuses the namespaces the export side refuses, so that
// a namespace an operator opened to exports before the setting existed stays open to imports.
func TestOptionsDeniedImportNamespaces(t *testing.T) {
	cases := []struct {
		name string
		in   Options
		want []string
	}{
		{"zero takes the export default", Options{}, export.DefaultDeniedNamespaces},
		{"unset follows the export list", Options{DeniedExportNamespaces: []string{"kube-system"}}, []string{"kube-system"}},
		{"set stays", Options{DeniedImportNamespaces: []string{"shared"}}, []string{"shared"}},
		{"empty stays empty", Options{DeniedImportNamespaces: []string{}}, []string{}},
	}
	for _, c := range cases {
		got := c.in.withDefaults().DeniedImportNamespaces
		if !slices.Equal(got, c.want) || got == nil {
			t.Errorf("%s: withDefaults().DeniedImportNamespaces = %#v, want %#v", c.name, got, c.want)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	valid := Options{}.withDefaults()
	cases := []struct {
		name string
		edit func(*Options)
		want []string // substrings of the error, each naming the option and its flag; none for no error
	}{
		{"defaults", func(*Options) {}, nil},
		{"cluster id", func(o *Options) { o.ClusterID = "east.prod" }, nil},
		{"bad cluster id", func(o *Options) { o.ClusterID = "Bad_ID" }, []string{"--cluster-id (Options.ClusterID): ", "RFC 1123"}},
		{"one second grace", func(o *Options) { o.LeaseGrace = time.Second }, nil},
		{"short grace", func(o *Options) { o.LeaseGrace = 100 * time.Millisecond },
			[]string{"--lease-grace (Options.LeaseGrace): 100ms is shorter than 1s"}},
		{"zero grace", func(o *Options) { o.LeaseGrace = 0 }, []string{"--lease-grace (Options.LeaseGrace): 0s is shorter than 1s"}},
		{"zero workers", func(o *Options) { o.Workers = 0 }, []string{"--workers (Options.Workers): 0 must be positive"}},
		{"negative workers", func(o *Options) { o.Workers = -1 }, []string{"--workers (Options.Workers): -1 must be positive"}},
		{"zero stale limit", func(o *Options) { o.StaleLimit = 0 }, []string{"--stale-limit (Options.StaleLimit): 0s must be positive"}},
		{"no denied namespaces", func(o *Options) { o.DeniedExportNamespaces = nil }, nil},
		{"largest endpoints per service", func(o *Options) { o.MaxEndpointsPerService = 100_000 }, nil},
		{"too many endpoints per service", func(o *Options) { o.MaxEndpointsPerService = 100_001 },
			[]string{"--max-endpoints-per-service (Options.MaxEndpointsPerService): 100001 is not within 1 to 100000"}},
		{"zero endpoints per service", func(o *Options) { o.MaxEndpointsPerService = 0 },
			[]string{"--max-endpoints-per-service (Options.MaxEndpointsPerService): 0 is not within 1 to 100000"}},
		{"zero endpoints per member", func(o *Options) { o.MaxEndpointsPerMember = 0 },
			[]string{"--max-endpoints-per-member (Options.MaxEndpointsPerMember): 0 must be positive"}},
		{"negative slices per namespace", func(o *Options) { o.MaxSlicesPerNamespace = -1 },
			[]string{"--max-slices-per-namespace (Options.MaxSlicesPerNamespace): -1 must be positive"}},
		{"DNS address", func(o *Options) { o.DNSAddress = "kube-dns.kube-system.svc.cluster.local.:53" }, nil},
		{"cluster domain", func(o *Options) { o.ClusterDomain = "corp.example." }, nil},
		{"bad cluster domain", func(o *Options) { o.ClusterDomain = "Corp_Example" }, []string{`--cluster-domain (Options.ClusterDomain): "Corp_Example": `}},
		{"DNS address without a port", func(o *Options) { o.DNSAddress = "10.96.0.10" }, []string{"--dns-address (Options.DNSAddress): \"10.96.0.10\" is not host:port"}},
		{"bad denied namespace", func(o *Options) { o.DeniedExportNamespaces = []string{"default", "Not_A_Namespace"} },
			[]string{`--denied-export-namespaces (Options.DeniedExportNamespaces): "Not_A_Namespace": `}},
		{"bad denied import namespace", func(o *Options) { o.DeniedImportNamespaces = []string{"default", "Not_A_Namespace"} },
			[]string{`--denied-import-namespaces (Options.DeniedImportNamespaces): "Not_A_Namespace": `}},
		{"every mistake", func(o *Options) { o.ClusterID, o.LeaseGrace, o.Workers = "Bad_ID", 0, 0 },
			[]string{"--cluster-id", "--lease-grace", "--workers"}},
	}
	for _, c := range cases {
		o := valid
		c.edit(&o)
		err := o.Validate()
		if (err != nil) != (len(c.want) > 0) {
			t.Errorf("%s: Validate() = %v", c.name, err)
			continue
		}
		for _, want := range c.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: Validate() = %v, want it to contain %q", c.name, err, want)
			}
		}
	}
}

// TestOptionsClusterDomain: a DNS address naming a Service without the cluster domain is completed with it, as an
// absolute name; any other address stays as given.
func TestOptionsClusterDomain(t *testing.T) {
	for _, c := range []struct {
		in   Options
		want string
	}{
		{Options{DNSAddress: "kube-dns.kube-system.svc:53"}, "kube-dns.kube-system.svc.cluster.local.:53"},
		{Options{DNSAddress: "kube-dns.kube-system.svc:53", ClusterDomain: "corp.example"}, "kube-dns.kube-system.svc.corp.example.:53"},
		{Options{DNSAddress: "kube-dns.kube-system.svc:53", ClusterDomain: "corp.example."}, "kube-dns.kube-system.svc.corp.example.:53"},
		{Options{DNSAddress: "kube-dns.kube-system.svc.cluster.local.:53", ClusterDomain: "corp.example"}, "kube-dns.kube-system.svc.cluster.local.:53"},
		{Options{DNSAddress: "10.96.0.10:53", ClusterDomain: "corp.example"}, "10.96.0.10:53"},
		{Options{DNSAddress: "[fd00::a]:53"}, "[fd00::a]:53"},
		{Options{}, ""},
	} {
		if got := c.in.withDefaults().DNSAddress; got != c.want {
			t.Errorf("DNS address %q in domain %q: %q, want %q", c.in.DNSAddress, c.in.ClusterDomain, got, c.want)
		}
	}
}
