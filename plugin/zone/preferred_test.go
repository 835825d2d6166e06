package zone

import (
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"vksfleet.dev/fleet/plugin/mcstest"
)

// TestPreferredClusters: a headless name answers the member's preferred clusters while one of them has a ready
// endpoint, every cluster otherwise; per-endpoint names answer whatever the preference.
func TestPreferredClusters(t *testing.T) {
	ports := []Port{{Name: "sql", Protocol: "TCP", Port: 5432}}
	eps := func(readyInA bool) []Endpoint {
		return []Endpoint{
			{Cluster: "cluster-a", Hostname: "db-0", Addresses: addrs("10.1.0.5"), Ready: readyInA, Ports: ports},
			{Cluster: "cluster-a", Hostname: "db-0", Addresses: addrs("fd01::5"), Ready: readyInA, Ports: ports},
			{Cluster: "cluster-b", Hostname: "db-0", Addresses: addrs("10.2.0.5"), Ready: true, Ports: ports},
			{Cluster: "cluster-b", Hostname: "db-0", Addresses: addrs("fd02::5"), Ready: true, Ports: ports},
		}
	}
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name      string
		preferred []string
		readyInA  bool
		a, aaaa   []string
		srv       int
	}{
		{"no preference: every cluster", nil, true, []string{"10.1.0.5", "10.2.0.5"}, []string{"fd01::5", "fd02::5"}, 2},
		{"cluster-a preferred", []string{"cluster-a"}, true, []string{"10.1.0.5"}, []string{"fd01::5"}, 1},
		{"cluster-a preferred but not ready: every cluster", []string{"cluster-a"}, false, []string{"10.2.0.5"}, []string{"fd02::5"}, 1},
		{"two clusters preferred", []string{"cluster-a", "cluster-b"}, true, []string{"10.1.0.5", "10.2.0.5"}, []string{"fd01::5", "fd02::5"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := New(Options{Zone: "clusterset.local", TTL: 5, Now: func() time.Time { return now }})
			ix.SetNamespaces([]string{"ns"})
			ix.Apply(Change{Key: Key("ns", "db"), Service: &Service{Namespace: "ns", Name: "db", Type: Headless,
				Ports: ports, Endpoints: eps(tc.readyInA), Preferred: tc.preferred}})
			snap := ix.Snapshot()
			for qtype, want := range map[uint16][]string{dns.TypeA: tc.a, dns.TypeAAAA: tc.aaaa} {
				r, _ := snap.Lookup("db.ns.svc.clusterset.local.", qtype)
				if got := mcstest.Addresses(r.Answer); !slices.Equal(got, want) {
					t.Errorf("%s: %v, want %v", dns.TypeToString[qtype], got, want)
				}
			}
			for _, name := range []string{"db.ns.svc.clusterset.local.", "_sql._tcp.db.ns.svc.clusterset.local."} {
				if r, _ := snap.Lookup(name, dns.TypeSRV); len(r.Answer) != tc.srv {
					t.Errorf("SRV %s: %d records, want %d", name, len(r.Answer), tc.srv)
				}
			}
			// The other cluster's pod stays reachable by its own name.
			if r, _ := snap.Lookup("db-0.cluster-b.db.ns.svc.clusterset.local.", dns.TypeA); len(r.Answer) != 1 {
				t.Errorf("db-0.cluster-b: %v, want its address", r.Answer)
			}
		})
	}
}
