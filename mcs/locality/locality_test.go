package locality

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// The clusterset of the tests: member a (zones a1, a2) and b share region r1; c is in r2.
var (
	top     = Topology{Cluster: "a", Region: "r1", Zones: []string{"a2", "a1"}}
	origins = map[string]Origin{"a": {Region: "r1"}, "b": {Region: "r1"}, "c": {Region: "r2"}}
)

// ep is an endpoint "ip@zone", ready unless it ends in "!", serving-terminating if it ends in "~".
func ep(s string) discoveryv1.Endpoint {
	ready, serving := true, true
	switch {
	case strings.HasSuffix(s, "!"):
		s, ready, serving = strings.TrimSuffix(s, "!"), false, false
	case strings.HasSuffix(s, "~"):
		s, ready = strings.TrimSuffix(s, "~"), false
	}
	ip, zone, _ := strings.Cut(s, "@")
	return discoveryv1.Endpoint{
		Addresses: []string{ip}, Zone: ptr.To(zone),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(serving), Terminating: ptr.To(!ready && serving)},
		// The exporting cluster's own controller may have hinted its zones: they never survive import.
		Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}},
	}
}

// sources builds one slice per cluster from "cluster: ep ep ..." specs.
func sources(specs ...string) []Source {
	var out []Source
	for _, spec := range specs {
		cluster, eps, _ := strings.Cut(spec, ":")
		s := &discoveryv1.EndpointSlice{}
		for _, e := range strings.Fields(eps) {
			s.Endpoints = append(s.Endpoints, ep(e))
		}
		out = append(out, Source{Cluster: cluster, Slice: s})
	}
	return out
}

// hints renders every endpoint's hints as "ip=z1,z2" ("ip=-" for none), in source order.
func hints(srcs []Source) string {
	var parts []string
	for _, s := range srcs {
		for _, e := range s.Slice.Endpoints {
			h := "-"
			if e.Hints != nil {
				var zs []string
				for _, z := range e.Hints.ForZones {
					if z.Name == Unpreferred {
						z.Name = "x"
					}
					zs = append(zs, z.Name)
				}
				h = strings.Join(zs, ",")
			}
			parts = append(parts, e.Addresses[0]+"="+h)
		}
	}
	return strings.Join(parts, " ")
}

func TestApply(t *testing.T) {
	full := []string{"a: 1@a1 2@a2", "b: 3@b1", "c: 4@c1"}
	for _, tc := range []struct {
		name     string
		mode     Mode
		origins  map[string]Origin
		specs    []string
		hints    string
		zones    string
		dnsTier  Tier
		dnsClust []string
	}{
		{name: "prefer: each zone its own pod; b and c unpreferred", mode: Prefer, specs: full,
			hints: "1=a1 2=a2 3=x 4=x", zones: "a1=same-zone a2=same-zone", dnsTier: SameCluster, dnsClust: []string{"a"}},
		{name: "prefer: zone a1 empty falls to the cluster", mode: Prefer, specs: []string{"a: 1@a1! 2@a2", "b: 3@b1", "c: 4@c1"},
			hints: "1=- 2=a1,a2 3=x 4=x", zones: "a1=same-cluster a2=same-zone", dnsTier: SameCluster, dnsClust: []string{"a"}},
		{name: "prefer: nothing ready in a, region b before c", mode: Prefer, specs: []string{"a: 1@a1~ 2@a2!", "b: 3@b1 5@b2", "c: 4@c1"},
			hints: "1=- 2=- 3=a1,a2 5=a1,a2 4=x", zones: "a1=same-region a2=same-region", dnsTier: SameRegion, dnsClust: []string{"b"}},
		{name: "prefer: only c left", mode: Prefer, specs: []string{"b: 3@b1!", "c: 4@c1 6@c2"},
			hints: "3=- 4=a1,a2 6=a1,a2", zones: "a1=anywhere a2=anywhere", dnsTier: Anywhere, dnsClust: []string{"c"}},
		{name: "prefer: a draining export goes last", mode: Prefer, origins: map[string]Origin{"a": {Region: "r1", Draining: true}, "b": {Region: "r1"}, "c": {Region: "r2"}},
			specs: full, hints: "1=x 2=x 3=a1,a2 4=x", zones: "a1=same-region a2=same-region", dnsTier: SameRegion, dnsClust: []string{"b"}},
		{name: "prefer: only draining left", mode: Prefer, origins: map[string]Origin{"b": {Region: "r1", Draining: true}},
			specs: []string{"b: 3@b1"}, hints: "3=a1,a2", zones: "a1=draining a2=draining", dnsTier: Draining, dnsClust: []string{"b"}},
		{name: "prefer: nothing ready", mode: Prefer, specs: []string{"b: 3@b1~"},
			hints: "3=-", zones: "a1=none a2=none", dnsTier: None},
		{name: "even: no hints, every cluster in DNS", mode: Even, specs: full,
			hints: "1=- 2=- 3=- 4=-", zones: "", dnsTier: Anywhere, dnsClust: []string{"a", "b", "c"}},
		{name: "even: a draining export is hinted away while others are ready", mode: Even,
			origins: map[string]Origin{"c": {Region: "r2", Draining: true}}, specs: full,
			hints: "1=a1,a2 2=a1,a2 3=a1,a2 4=x", zones: "a1=anywhere a2=anywhere", dnsTier: Anywhere, dnsClust: []string{"a", "b"}},
		{name: "even: only the draining export is ready", mode: Even,
			origins: map[string]Origin{"c": {Region: "r2", Draining: true}}, specs: []string{"a: 1@a1!", "c: 4@c1"},
			hints: "1=- 4=-", zones: "", dnsTier: Draining, dnsClust: []string{"c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := origins
			if tc.origins != nil {
				o = tc.origins
			}
			srcs := sources(tc.specs...)
			plan := Apply(top, o, tc.mode, srcs)
			if got := hints(srcs); got != tc.hints {
				t.Errorf("hints %s, want %s", got, tc.hints)
			}
			var zones []string
			for _, z := range slices.Sorted(maps.Keys(plan.Zones)) {
				zones = append(zones, fmt.Sprintf("%s=%s", z, plan.Zones[z]))
			}
			if got := strings.Join(zones, " "); got != tc.zones {
				t.Errorf("zone tiers %q, want %q", got, tc.zones)
			}
			if plan.DNSTier != tc.dnsTier || !slices.Equal(plan.DNSClusters, tc.dnsClust) {
				t.Errorf("DNS %s %v, want %s %v", plan.DNSTier, plan.DNSClusters, tc.dnsTier, tc.dnsClust)
			}
		})
	}
}

// TestZoneHintLimit: an endpoint preferred by more zones than the API allows keeps the first eight.
func TestZoneHintLimit(t *testing.T) {
	many := Topology{Cluster: "a", Region: "r1"}
	for i := range 10 {
		many.Zones = append(many.Zones, fmt.Sprintf("z%d", i))
	}
	srcs := sources("b: 3@b1")
	Apply(many, origins, Prefer, srcs)
	if n := len(srcs[0].Slice.Endpoints[0].Hints.ForZones); n != maxZoneHints {
		t.Errorf("%d zone hints, want %d", n, maxZoneHints)
	}
}

// TestMoreZonesThanHints: ten zones share one choice, two endpoints, while a draining export has a ready one.
// Every zone is hinted on an endpoint it chose, so kube-proxy never falls back to all endpoints, the draining
// one included, for any zone.
func TestMoreZonesThanHints(t *testing.T) {
	many := Topology{Cluster: "a", Region: "r1"}
	for i := range 10 {
		many.Zones = append(many.Zones, fmt.Sprintf("z%d", i))
	}
	draining := map[string]Origin{"b": {Region: "r1"}, "c": {Region: "r2", Draining: true}}
	srcs := sources("b: 1@b1 2@b2", "c: 3@c1")
	plan := Apply(many, draining, Even, srcs)
	hinted := map[string]bool{}
	for _, e := range srcs[0].Slice.Endpoints {
		if n := len(e.Hints.ForZones); n > maxZoneHints {
			t.Errorf("%s has %d zone hints", e.Addresses[0], n)
		}
		for _, z := range e.Hints.ForZones {
			hinted[z.Name] = true
		}
	}
	for _, z := range many.Zones {
		if !hinted[z] || plan.Zones[z] != Anywhere {
			t.Errorf("zone %s: hinted %v, tier %v", z, hinted[z], plan.Zones[z])
		}
	}
	if got := hints(srcs[1:]); got != "3=x" {
		t.Errorf("the draining endpoint: %s, want no zone", got)
	}
}

func TestModeOf(t *testing.T) {
	for in, want := range map[string]Mode{"PreferClose": Prefer, "PreferSameZone": Prefer, "PreferSameNode": Even, "": Even} {
		v := &in
		if in == "" {
			v = nil
		}
		if got := ModeOf(v); got != want {
			t.Errorf("ModeOf(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestAnnotationRoundTrip(t *testing.T) {
	plan := Plan{Zones: map[string]Tier{"a1": SameZone, "a2": SameRegion}, DNSTier: SameRegion, DNSClusters: []string{"b"}}
	a, err := Decode(Annotate(plan).Encode())
	if err != nil {
		t.Fatal(err)
	}
	if a.Zones["a1"] != "same-zone" || a.Zones["a2"] != "same-region" || a.DNSTier != "same-region" || !slices.Equal(a.DNSClusters, []string{"b"}) {
		t.Errorf("round trip: %+v", a)
	}
	if Rank("same-zone") >= Rank("same-cluster") || Rank("draining") >= Rank("none") || Rank("bogus") <= Rank("none") {
		t.Error("Rank does not order the tiers closest first, unknown last")
	}
}
