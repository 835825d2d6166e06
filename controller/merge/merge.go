// Package merge computes the ServiceImport that a set of exports of one service forms, and the conflicts between
// them, following KEP-1645: the oldest ServiceExport (ties broken by cluster id) wins every single-valued field,
// ports are a union, and IP families an intersection. It is pure: no clients, no clock.
package merge

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Export is one cluster's export of a service, as its exporter published it.
type Export struct {
	// Cluster is the exporting cluster's id.
	Cluster string
	// Created is the ServiceExport's creationTimestamp: the oldest export takes precedence.
	Created time.Time
	// Spec holds the exported service's properties; IPs is ignored.
	Spec mcsv1beta1.ServiceImportSpec
	// Labels and Annotations are the ServiceExport's exportedLabels and exportedAnnotations.
	Labels, Annotations map[string]string
	// Region is the exporting cluster's region, "" when unknown; Draining is set while an operator drains the
	// export. Neither takes part in the merge: importers use them to rank the cluster's endpoints.
	Region   string
	Draining bool
	// Slices is how many EndpointSlices the exporter publishes, -1 when its record does not say (a controller
	// from before the count). It takes no part in the merge either: an importer waits for them before Ready.
	Slices int
}

// Conflict is one way in which the exports disagree.
type Conflict struct {
	// Reason is the ServiceExport Conflict condition reason, such as PortConflict.
	Reason mcsv1beta1.ServiceExportConditionReason
	// Message says which value was used, from where, and how many clusters disagree.
	Message string
}

// Result is the merged import.
type Result struct {
	// Spec is the ServiceImport spec without IPs, which the importing cluster allocates.
	Spec mcsv1beta1.ServiceImportSpec
	// Labels and Annotations are the winner's exported labels and annotations.
	Labels, Annotations map[string]string
	// Clusters are the exporting cluster ids, sorted.
	Clusters []string
	// SlicePorts says how each exporting cluster's EndpointSlice ports become the union's.
	SlicePorts SlicePorts
	// Conflicts are the disagreements, in the order of the SPEC's reason list; empty when all agree.
	Conflicts []Conflict
	// FamilyDisjoint are the clusters whose exports share no IP family with the older ones, and were left out of
	// the intersection (an IPFamilyConflict): while there are any, the families are not all the exports' word, and
	// an existing ClusterSetIP stays (imports.Served).
	FamilyDisjoint []string
}

// Merge merges the exports of one service. It returns the zero Result for no exports.
func Merge(exports []Export) Result {
	if len(exports) == 0 {
		return Result{}
	}
	sorted := slices.Clone(exports)
	slices.SortStableFunc(sorted, func(a, b Export) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.Cluster, b.Cluster)
	})
	w := sorted[0]
	ws := w.Spec.DeepCopy()
	res := Result{
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:                  ws.Type,
			SessionAffinity:       ws.SessionAffinity,
			SessionAffinityConfig: ws.SessionAffinityConfig,
			InternalTrafficPolicy: ws.InternalTrafficPolicy,
			TrafficDistribution:   ws.TrafficDistribution,
		},
		Labels:      maps.Clone(w.Labels),
		Annotations: maps.Clone(w.Annotations),
	}
	for _, e := range sorted {
		res.Clusters = append(res.Clusters, e.Cluster)
	}
	slices.Sort(res.Clusters)
	res.Clusters = slices.Compact(res.Clusters)

	var merged []mergedPort
	matched := make([][]int, len(sorted))
	for i, e := range sorted {
		merged, matched[i] = mergePorts(merged, e)
	}
	named := namePorts(merged)
	for _, m := range named {
		res.Spec.Ports = append(res.Spec.Ports, m.port)
	}
	res.SlicePorts = slicePorts(sorted, matched, merged, named)
	families, famDisagree, disjoint := intersectFamilies(sorted)
	res.Spec.IPFamilies = families
	res.FamilyDisjoint = disjoint

	n := len(sorted)
	add := func(reason mcsv1beta1.ServiceExportConditionReason, what, value string, disagree int) {
		if disagree == 0 {
			return
		}
		res.Conflicts = append(res.Conflicts, Conflict{Reason: reason, Message: fmt.Sprintf(
			"Conflicting %s. Using %s from oldest service export in %q. %d/%d clusters disagree.",
			what, value, w.Cluster, disagree, n)})
	}
	if partial, disagree := portDifference(sorted, merged); disagree > 0 {
		res.Conflicts = append(res.Conflicts, Conflict{Reason: mcsv1beta1.ServiceExportReasonPortConflict, Message: fmt.Sprintf(
			"Conflicting ports. Using %s. %d/%d clusters disagree.", partial, disagree, n)})
	}
	add(mcsv1beta1.ServiceExportReasonTypeConflict, "type", quote(w.Spec.Type),
		count(sorted, func(e Export) bool { return e.Spec.Type != w.Spec.Type }))
	add(mcsv1beta1.ServiceExportReasonSessionAffinityConflict, "session affinity", quote(affinity(w.Spec.SessionAffinity)),
		count(sorted, func(e Export) bool { return affinity(e.Spec.SessionAffinity) != affinity(w.Spec.SessionAffinity) }))
	add(mcsv1beta1.ServiceExportReasonSessionAffinityConfigConflict, "session affinity config", jsonOf(w.Spec.SessionAffinityConfig),
		count(sorted, func(e Export) bool {
			return !equality.Semantic.DeepEqual(e.Spec.SessionAffinityConfig, w.Spec.SessionAffinityConfig)
		}))
	add(mcsv1beta1.ServiceExportReasonLabelsConflict, "exported labels", brief(w.Labels),
		count(sorted, func(e Export) bool { return !maps.Equal(e.Labels, w.Labels) }))
	add(mcsv1beta1.ServiceExportReasonAnnotationsConflict, "exported annotations", brief(w.Annotations),
		count(sorted, func(e Export) bool { return !maps.Equal(e.Annotations, w.Annotations) }))
	add(mcsv1beta1.ServiceExportReasonInternalTrafficPolicyConflict, "internal traffic policy", quotePtr(w.Spec.InternalTrafficPolicy),
		count(sorted, func(e Export) bool { return deref(e.Spec.InternalTrafficPolicy) != deref(w.Spec.InternalTrafficPolicy) }))
	add(mcsv1beta1.ServiceExportReasonTrafficDistributionConflict, "traffic distribution", quotePtr(w.Spec.TrafficDistribution),
		count(sorted, func(e Export) bool { return deref(e.Spec.TrafficDistribution) != deref(w.Spec.TrafficDistribution) }))
	if famDisagree > 0 {
		but := ""
		if len(disjoint) > 0 {
			quoted := make([]string, len(disjoint))
			for i, c := range disjoint {
				quoted[i] = fmt.Sprintf("%q", c)
			}
			but = fmt.Sprintf(" but those in %s, which share none of them", strings.Join(firstFew(quoted), ", "))
		}
		res.Conflicts = append(res.Conflicts, Conflict{Reason: mcsv1beta1.ServiceExportReasonIPFamilyConflict, Message: fmt.Sprintf(
			"Conflicting IP families. Using %s, the families every service export has%s. %d/%d clusters disagree.",
			jsonOf(families), but, famDisagree, n)})
	}
	return res
}

// Condition is the ServiceExport Conflict condition for the conflicts: False/NoConflicts when there are none,
// else True with the reasons joined by commas and the messages joined by spaces.
func Condition(conflicts []Conflict, generation int64) metav1.Condition {
	if len(conflicts) == 0 {
		return metav1.Condition{
			Type: string(mcsv1beta1.ServiceExportConditionConflict), Status: metav1.ConditionFalse,
			Reason: string(mcsv1beta1.ServiceExportReasonNoConflicts), Message: "All service exports agree.",
			ObservedGeneration: generation,
		}
	}
	reasons := make([]string, len(conflicts))
	messages := make([]string, len(conflicts))
	for i, c := range conflicts {
		reasons[i], messages[i] = string(c.Reason), c.Message
	}
	return metav1.Condition{
		Type: string(mcsv1beta1.ServiceExportConditionConflict), Status: metav1.ConditionTrue,
		Reason: strings.Join(reasons, ","), Message: truncate(strings.Join(messages, " "), MaxMessage), ObservedGeneration: generation,
	}
}

// MaxMessage is the longest condition message the API server stores (metav1.Condition's maxLength); a status
// update with a longer one would be refused on every exporter, again and again.
const MaxMessage = 32768

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = " [truncated]"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// maxBriefJSON is the longest JSON of exported labels or annotations a Conflict message quotes; past it, the
// message names keys only.
const maxBriefJSON = 256

// brief renders exported labels or annotations for a message: their JSON when short, else their first keys.
func brief(m map[string]string) string {
	if s := jsonOf(m); len(s) <= maxBriefJSON {
		return s
	}
	keys := slices.Sorted(maps.Keys(m))
	const listed = 5
	s := "the keys " + jsonOf(keys[:min(listed, len(keys))])
	if len(keys) > listed {
		s += fmt.Sprintf(" and %d more", len(keys)-listed)
	}
	return s
}

// mergedPort is a port of the union and the cluster whose export brought it in.
type mergedPort struct {
	port mcsv1beta1.ServicePort
	from string
}

// mergePorts adds e's ports to the merged ones: a port matching a merged port by name, else by protocol and port,
// is the same port, and the merged one stays even when they differ; one that matches neither is added. It also
// returns, for each of e's ports, the index of the merged port it is. That match holds for good: a younger export
// that later adds a port of the name does not make the port another (slicePorts).
func mergePorts(merged []mergedPort, e Export) ([]mergedPort, []int) {
	matched := make([]int, len(e.Spec.Ports))
	for j, p := range e.Spec.Ports {
		p = normalise(p)
		i := match(merged, p)
		if i < 0 {
			i = len(merged)
			merged = append(merged, mergedPort{port: p, from: e.Cluster})
		}
		matched[j] = i
	}
	return merged, matched
}

// match returns the index of the merged port that p is: the one of its name, else the one of its protocol and
// port; -1 for none.
func match(merged []mergedPort, p mcsv1beta1.ServicePort) int {
	i := slices.IndexFunc(merged, func(m mergedPort) bool { return p.Name != "" && m.port.Name == p.Name })
	if i < 0 {
		i = slices.IndexFunc(merged, func(m mergedPort) bool { return m.port.Protocol == p.Protocol && m.port.Port == p.Port })
	}
	return i
}

// namePorts returns the union with a name on every port when it has several, as a Service requires: an unnamed
// port is named for its protocol and number ("tcp-8080"), with "-2", "-3"... appended should a named port have
// that name already. Two Services made with `kubectl expose` on different ports thus merge into a valid one.
func namePorts(merged []mergedPort) []mergedPort {
	named := slices.Clone(merged)
	if len(named) < 2 {
		return named
	}
	taken := func(name string) bool {
		return slices.ContainsFunc(named, func(m mergedPort) bool { return m.port.Name == name })
	}
	for i := range named {
		if named[i].port.Name != "" {
			continue
		}
		base := fmt.Sprintf("%s-%d", strings.ToLower(string(named[i].port.Protocol)), named[i].port.Port)
		name := base
		for n := 2; taken(name); n++ {
			name = fmt.Sprintf("%s-%d", base, n)
		}
		named[i].port.Name = name
	}
	return named
}

// slicePorts works out, per export, how its ports become the named union's (Result.SlicePorts), from the union
// port each matched when mergePorts met it (matched, per sorted export and port): a port that matched a union port
// of the same number and protocol takes the union's name where it differs; one that matched by name a union port
// of another number or protocol (from an older export: a PortConflict) is withheld. Matching again against the
// whole union would not do: a port that merged by number into an older export's port of another name would then
// match by name a port a younger export brought in, and be withheld although the union serves it. Maps without
// entries are nil.
func slicePorts(sorted []Export, matched [][]int, merged, named []mergedPort) SlicePorts {
	var sp SlicePorts
	for k, e := range sorted {
		for j, p := range e.Spec.Ports {
			p = normalise(p)
			i := matched[k][j]
			switch {
			case merged[i].port.Port != p.Port || merged[i].port.Protocol != p.Protocol:
				if sp.Withheld == nil {
					sp.Withheld = map[string][]string{}
				}
				sp.Withheld[e.Cluster] = append(sp.Withheld[e.Cluster], p.Name)
			case named[i].port.Name != p.Name:
				if sp.Names == nil {
					sp.Names = map[string]map[string]string{}
				}
				if sp.Names[e.Cluster] == nil {
					sp.Names[e.Cluster] = map[string]string{}
				}
				sp.Names[e.Cluster][p.Name] = named[i].port.Name
			}
		}
	}
	return sp
}

// maxListed bounds the ports or clusters a Conflict message names, so that a service with many keeps a readable
// condition.
const maxListed = 4

// firstFew returns the first maxListed items, and how many more there are.
func firstFew(items []string) []string {
	if extra := len(items) - maxListed; extra > 0 {
		return append(items[:maxListed:maxListed], fmt.Sprintf("and %d more", extra))
	}
	return items
}

// portDifference describes the ports of the union that not every export has exactly (v1beta1 PortConflict: "the
// ports are not identical in all the constituent Services"), each with the oldest export it came from, and
// counts the exports whose ports are not the union. Port order does not count.
func portDifference(sorted []Export, merged []mergedPort) (string, int) {
	has := func(e Export, want mcsv1beta1.ServicePort) bool {
		return slices.ContainsFunc(e.Spec.Ports, func(p mcsv1beta1.ServicePort) bool {
			return equality.Semantic.DeepEqual(normalise(p), want)
		})
	}
	var partial []string
	for _, m := range merged {
		if !all(sorted, func(e Export) bool { return has(e, m.port) }) {
			partial = append(partial, fmt.Sprintf("%s from oldest service export in %q", describePort(m.port), m.from))
		}
	}
	// A valid Service never has two ports of one name or protocol and port, so an export lacks a port of the
	// union exactly when it is not the union.
	disagree := count(sorted, func(e Export) bool {
		return slices.ContainsFunc(merged, func(m mergedPort) bool { return !has(e, m.port) })
	})
	return strings.Join(firstFew(partial), ", "), disagree
}

// normalise fills in the protocol's default, so that an unset protocol and TCP compare equal.
func normalise(p mcsv1beta1.ServicePort) mcsv1beta1.ServicePort {
	p = *p.DeepCopy()
	if p.Protocol == "" {
		p.Protocol = corev1.ProtocolTCP
	}
	return p
}

func describePort(p mcsv1beta1.ServicePort) string {
	s := fmt.Sprintf("port %s/%d", p.Protocol, p.Port)
	if p.Name != "" {
		s = fmt.Sprintf("port %q (%s/%d)", p.Name, p.Protocol, p.Port)
	}
	if p.AppProtocol != nil {
		s += fmt.Sprintf(" appProtocol %q", *p.AppProtocol)
	}
	return s
}

// ipFamilies are the IP families a Service may have, in the order the merge lists them: an order of no export's,
// so that which export is the oldest does not decide a derived Service's primary family (imports.Served puts the
// importing cluster's own first).
var ipFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}

// intersectFamilies returns the IP families the exports share, in ipFamilies' order, how many exports have a
// family outside them, and the clusters whose exports share none of them. The exports narrow the families oldest
// first; one that shares none of the families of those before it (only another family, or none a Service may
// have) is left out rather than leaving none: a disjoint export, by mistake or malice, never takes the families,
// and so the ClusterSetIP, of the others. Exports that publish no families (unknown) are left out of all three.
func intersectFamilies(sorted []Export) ([]corev1.IPFamily, int, []string) {
	var families []corev1.IPFamily
	var disjoint []string
	first := true
	for _, e := range sorted {
		if len(e.Spec.IPFamilies) == 0 {
			continue
		}
		shared := ipFamilies
		if !first {
			shared = families
		}
		shared = slices.DeleteFunc(slices.Clone(shared), func(f corev1.IPFamily) bool { return !slices.Contains(e.Spec.IPFamilies, f) })
		if len(shared) == 0 {
			disjoint = append(disjoint, e.Cluster)
			continue
		}
		families, first = shared, false
	}
	disagree := count(sorted, func(e Export) bool {
		return slices.ContainsFunc(e.Spec.IPFamilies, func(f corev1.IPFamily) bool { return !slices.Contains(families, f) })
	})
	return families, disagree, disjoint
}

func count(exports []Export, differs func(Export) bool) int {
	n := 0
	for _, e := range exports {
		if differs(e) {
			n++
		}
	}
	return n
}

func all(exports []Export, ok func(Export) bool) bool {
	return count(exports, func(e Export) bool { return !ok(e) }) == 0
}

// affinity treats an unset session affinity as None, the API default.
func affinity(a corev1.ServiceAffinity) corev1.ServiceAffinity {
	if a == "" {
		return corev1.ServiceAffinityNone
	}
	return a
}

func deref[T ~string](p *T) T {
	if p == nil {
		return ""
	}
	return *p
}

func quote[T ~string](v T) string { return fmt.Sprintf("%q", string(v)) }

func quotePtr[T ~string](p *T) string {
	if p == nil {
		return "unset"
	}
	return quote(*p)
}

// jsonOf renders a value for a message; these values always marshal.
func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil || string(b) == "null" {
		return "none"
	}
	return string(b)
}

// SlicePorts says how each exporting cluster's EndpointSlice ports become the union's ports, which are the derived
// Service's: kube-proxy routes a Service port to the endpoints of the slices' ports of the same name.
type SlicePorts struct {
	// Names maps an exporting cluster id to the names of its ports that the union calls otherwise: an unnamed port
	// that the union names (see namePorts), or a port that merged into one of another name.
	Names map[string]map[string]string
	// Withheld maps an exporting cluster id to the names of its ports that the union has with another number or
	// protocol, from an older export (a PortConflict): the cluster's endpoints must get no traffic for that port,
	// so its slices leave the port out.
	Withheld map[string][]string
}

// Apply returns the ports of a slice of cluster as the union has them: renamed, and without the withheld ones.
// It does not modify ports.
func (sp SlicePorts) Apply(cluster string, ports []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	out := make([]discoveryv1.EndpointPort, 0, len(ports))
	for _, p := range ports {
		name := ptr.Deref(p.Name, "")
		if slices.Contains(sp.Withheld[cluster], name) {
			continue
		}
		if to, ok := sp.Names[cluster][name]; ok {
			p.Name = ptr.To(to)
		}
		out = append(out, p)
	}
	return out
}
