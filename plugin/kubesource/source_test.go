package kubesource

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"vksfleet.dev/fleet/plugin/zone"
)

// TestApplyGuarded checks that a service whose index build panics neither stops the worker nor holds back the
// other services of its batch, keeps its last good entry, and is reported once; and that records skipped by the
// builds are summed.
func TestApplyGuarded(t *testing.T) {
	ix := zone.New(zone.Options{Zone: "clusterset.local.", TTL: 5})
	ix.SetNamespaces([]string{"ns"})
	vip := func(name, ip string) zone.Change {
		return zone.Change{Key: zone.Key("ns", name), Service: &zone.Service{Namespace: "ns", Name: name,
			IPs: []netip.Addr{netip.MustParseAddr(ip)}}}
	}
	ix.Apply(vip("bad", "10.0.0.1"))
	// The fake build panics on any batch holding "bad", as a build with a bug would, and skips one record per
	// other service, as a build that meets an unpackable record does.
	var applied []string
	apply := func(changes ...zone.Change) (int, error) {
		for _, c := range changes {
			if c.Key == zone.Key("ns", "bad") {
				panic("a bug")
			}
		}
		for _, c := range changes {
			applied = append(applied, c.Key)
		}
		ix.Apply(changes...)
		return len(changes), errors.New("first skipped")
	}
	skipped, panicked, why := applyGuarded(apply, []zone.Change{vip("a", "10.0.0.2"), vip("bad", "10.0.0.3"), vip("b", "10.0.0.4")})
	slices.Sort(applied)
	if !slices.Equal(applied, []string{"a.ns", "b.ns"}) {
		t.Errorf("applied %v, want the two good services", applied)
	}
	if skipped != 2 || why == nil || why.Error() != "first skipped" {
		t.Errorf("skipped %d (%v), want 2 (first skipped)", skipped, why)
	}
	if len(panicked) != 1 || panicked[0].key != "bad.ns" || !strings.Contains(panicked[0].why.Error(), "a bug") ||
		!strings.Contains(panicked[0].why.Error(), "applyGuarded") {
		t.Errorf("panicked %v, want bad.ns with the panic and its stack", panicked)
	}
	for name, want := range map[string]string{"a": "10.0.0.2", "b": "10.0.0.4", "bad": "10.0.0.1"} {
		r, _ := ix.Snapshot().Lookup(name+".ns.svc.clusterset.local.", dns.TypeA)
		if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != want {
			t.Errorf("%s answers %v, want %s", name, r.Answer, want)
		}
	}
	if skipped, panicked, _ := applyGuarded(apply, []zone.Change{vip("c", "10.0.0.5")}); skipped != 1 || panicked != nil {
		t.Errorf("a batch without a panic: skipped %d, panicked %v", skipped, panicked)
	}
}
