// Package locality decides which endpoints of an imported service each part of the importing member uses: the
// zone hints that kube-proxy obeys for a ClusterSetIP, and the clusters whose endpoints the member's DNS answers
// for a headless name. It is pure: the controller gives it the member's topology and the endpoints with their
// origin, and writes what it returns in an Annotation, which the CoreDNS plugin decodes.
//
// The model is availability first, then locality. With trafficDistribution PreferSameZone (or its alias
// PreferClose) each zone of the member uses the first tier that has a ready endpoint:
//
//	same zone (this cluster) > same cluster > same region > anywhere > draining exports
//
// and the member's headless DNS answers the first of: same cluster > same region > anywhere > draining. Without
// trafficDistribution every endpoint is used alike, except draining exports, which are used only when nothing
// else is ready. kube-proxy offers one level of preference and a fallback to all endpoints, and uses hints only
// when every ready endpoint has one, so every ready endpoint gets a hint: those no zone of the member prefers are
// hinted for Unpreferred, a zone no node has.
package locality

import (
	"encoding/json"
	"slices"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// Tier says how close the endpoints a zone or the DNS uses are. Lower is closer.
type Tier int

// The tiers, closest first.
const (
	SameZone Tier = iota
	SameCluster
	SameRegion
	Anywhere
	Draining
	// None: no endpoint is ready.
	None
)

var tierNames = [...]string{"same-zone", "same-cluster", "same-region", "anywhere", "draining", "none"}

// String is the tier's name in annotations, metrics and events.
func (t Tier) String() string { return tierNames[t] }

// Unpreferred is the zone hint of ready endpoints that no zone of the member prefers: no node has this zone, so
// kube-proxy leaves them out while it uses hints, and takes them back when it falls back to all endpoints.
const Unpreferred = "mcs.vksfleet.dev-unpreferred"

// maxZoneHints is the API server's limit on zone hints per endpoint.
const maxZoneHints = 8

// Topology is where the importing member is.
type Topology struct {
	// Cluster is its cluster id; Region its region ("" when unknown: no endpoint is then in the same region).
	Cluster, Region string
	// Zones are its nodes' zones.
	Zones []string
}

// Origin is where an exporting cluster is, and whether its export drains.
type Origin struct {
	Region   string
	Draining bool
}

// Mode is how an import spreads its traffic.
type Mode int

const (
	// Even uses every ready endpoint alike; draining exports only when nothing else is ready.
	Even Mode = iota
	// Prefer uses the closest tier with a ready endpoint.
	Prefer
)

// ModeOf maps an import's trafficDistribution to its Mode.
func ModeOf(trafficDistribution *string) Mode {
	if trafficDistribution != nil && (*trafficDistribution == "PreferSameZone" || *trafficDistribution == "PreferClose") {
		return Prefer
	}
	return Even
}

// Source is an imported slice and the cluster it comes from.
type Source struct {
	Cluster string
	Slice   *discoveryv1.EndpointSlice
}

// Plan is what Apply decided.
type Plan struct {
	// Zones maps each zone of the member to the tier it uses; empty when no hints are written.
	Zones map[string]Tier
	// DNSTier is the tier the member's headless answers use, and DNSClusters the clusters in it, sorted.
	DNSTier     Tier
	DNSClusters []string
	// Ready counts the ready endpoints by their tier as seen from the member as a whole (SameCluster and
	// farther).
	Ready map[Tier]int
}

// Apply sets the zone hints of every endpoint of the sources, which it modifies, and returns the plan. Hints
// are written only when they change something: in Prefer mode, or when a draining export has ready endpoints
// that others can replace; otherwise every hint is removed, including those the exporting cluster's own
// endpointslice controller had set for its zones.
func Apply(top Topology, origins map[string]Origin, mode Mode, sources []Source) Plan {
	eps := candidates(top, origins, sources)
	plan := Plan{DNSTier: None, Ready: map[Tier]int{}}
	for _, e := range eps {
		plan.Ready[e.tier(top, "")]++
	}
	dnsTiers := []Tier{SameCluster, SameRegion, Anywhere, Draining}
	if mode == Even {
		dnsTiers = []Tier{Anywhere, Draining}
	}
	plan.DNSTier, plan.DNSClusters = dnsPick(top, eps, dnsTiers)

	hinting := mode == Prefer || (plan.DNSTier == Anywhere && slices.ContainsFunc(eps, func(e candidate) bool { return e.tier(top, "") == Draining }))
	for _, s := range sources {
		for i := range s.Slice.Endpoints {
			s.Slice.Endpoints[i].Hints = nil
		}
	}
	if !hinting {
		return plan
	}
	zones := slices.Clone(top.Zones)
	slices.Sort(zones)
	zones = slices.Compact(zones)
	plan.Zones = map[string]Tier{}
	chosen := make([][]int, len(zones))
	for zi, z := range zones {
		zoneTiers := []Tier{SameZone, SameCluster, SameRegion, Anywhere, Draining}
		if mode == Even {
			zoneTiers = []Tier{Anywhere, Draining}
		}
		plan.Zones[z], chosen[zi] = pick(eps, zoneTiers, func(e candidate, t Tier) bool { return e.within(top, z, t) })
	}
	hints := assignHints(zones, chosen, len(eps))
	for i, e := range eps {
		forZones := hints[i]
		if len(forZones) == 0 {
			forZones = []string{Unpreferred}
		}
		ep := e.ep
		ep.Hints = &discoveryv1.EndpointHints{}
		for _, z := range forZones {
			ep.Hints.ForZones = append(ep.Hints.ForZones, discoveryv1.ForZone{Name: z})
		}
	}
	return plan
}

// assignHints gives each endpoint the zones that chose it (chosen[z] holds the endpoints zone z chose), within the
// API's maxZoneHints per endpoint. kube-proxy sends a zone that no endpoint is hinted for to every endpoint,
// draining ones included, so first every zone gets one endpoint of its choice, the one with the fewest zones so
// far; only then do the zones take the rest of their choice while there is room. With more than eight zones
// sharing one choice, each zone keeps its tier on fewer endpoints rather than some zones losing it.
func assignHints(zones []string, chosen [][]int, n int) [][]string {
	hints := make([][]string, n)
	has := func(i int, z string) bool { return slices.Contains(hints[i], z) }
	for zi, z := range zones {
		best := -1
		for _, i := range chosen[zi] {
			if len(hints[i]) < maxZoneHints && (best < 0 || len(hints[i]) < len(hints[best])) {
				best = i
			}
		}
		if best >= 0 {
			hints[best] = append(hints[best], z)
		}
	}
	for zi, z := range zones {
		for _, i := range chosen[zi] {
			if len(hints[i]) < maxZoneHints && !has(i, z) {
				hints[i] = append(hints[i], z)
			}
		}
	}
	for i := range hints {
		slices.Sort(hints[i])
	}
	return hints
}

// candidate is a ready endpoint with its origin.
type candidate struct {
	ep      *discoveryv1.Endpoint
	cluster string
	origin  Origin
}

func candidates(top Topology, origins map[string]Origin, sources []Source) []candidate {
	var eps []candidate
	for _, s := range sources {
		for i := range s.Slice.Endpoints {
			ep := &s.Slice.Endpoints[i]
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				eps = append(eps, candidate{ep: ep, cluster: s.Cluster, origin: origins[s.Cluster]})
			}
		}
	}
	return eps
}

// tier is the closest tier an endpoint belongs to, seen from zone z of the member ("" for the member as a
// whole, which has no zone).
func (e candidate) tier(top Topology, z string) Tier {
	switch {
	case e.origin.Draining:
		return Draining
	case e.cluster == top.Cluster && z != "" && e.ep.Zone != nil && *e.ep.Zone == z:
		return SameZone
	case e.cluster == top.Cluster:
		return SameCluster
	case top.Region != "" && e.origin.Region == top.Region:
		return SameRegion
	}
	return Anywhere
}

// within reports whether an endpoint belongs to tier t as seen from zone z: tiers nest, so an endpoint of the
// same zone is also within the same cluster, region and anywhere; draining endpoints are within Draining only.
func (e candidate) within(top Topology, z string, t Tier) bool {
	own := e.tier(top, z)
	if own == Draining || t == Draining {
		return own == t
	}
	return own <= t
}

// pick returns the first of tiers with a member, and the indexes of its members.
func pick(eps []candidate, tiers []Tier, in func(candidate, Tier) bool) (Tier, []int) {
	for _, t := range tiers {
		var chosen []int
		for i, e := range eps {
			if in(e, t) {
				chosen = append(chosen, i)
			}
		}
		if len(chosen) > 0 {
			return t, chosen
		}
	}
	return None, nil
}

// dnsPick is pick for the member as a whole, returning the clusters of the chosen tier.
func dnsPick(top Topology, eps []candidate, tiers []Tier) (Tier, []string) {
	t, chosen := pick(eps, tiers, func(e candidate, t Tier) bool { return e.within(top, "", t) })
	var clusters []string
	for _, i := range chosen {
		clusters = append(clusters, eps[i].cluster)
	}
	slices.Sort(clusters)
	return t, slices.Compact(clusters)
}

// Annotation is what the importing controller records on the ServiceImport (names.AnnotationLocality): the
// tier each node zone uses, and the tier and clusters of the member's headless DNS answers, which this member's
// DNS server reads.
type Annotation struct {
	Zones       map[string]string `json:"zones"`
	DNSTier     string            `json:"dnsTier"`
	DNSClusters []string          `json:"dnsClusters"`
}

// Annotate renders a plan as its Annotation.
func Annotate(p Plan) Annotation {
	a := Annotation{Zones: make(map[string]string, len(p.Zones)), DNSTier: p.DNSTier.String(), DNSClusters: p.DNSClusters}
	for z, t := range p.Zones {
		a.Zones[z] = t.String()
	}
	return a
}

// Encode is the annotation's value.
func (a Annotation) Encode() string {
	b, _ := json.Marshal(a) // maps and strings always marshal
	return string(b)
}

// Decode reads an annotation's value.
func Decode(s string) (Annotation, error) {
	var a Annotation
	err := json.Unmarshal([]byte(s), &a)
	return a, err
}

// Rank orders tier names, closest first; an unknown name ranks last.
func Rank(name string) int {
	for t, n := range tierNames {
		if n == name {
			return t
		}
	}
	return len(tierNames)
}
