package cli

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/names"
)

func serviceChecks(s *Snapshot, m *Member, svc types.NamespacedName) []Check {
	if !m.reachable() || len(m.MissingAPIs) > 0 {
		return nil // the member's reachable and crds checks already fail
	}
	var out []Check
	if se := m.export(svc); se != nil {
		out = append(out, exportValidCheck(m, svc, se), exportReadyCheck(m, svc, se), exportConflictCheck(m, svc, se))
	}
	exports := s.exports(svc)
	// In the cluster-local mode the member's DNS does not serve clusterset.local: what its clusterset.local answers
	// would be is not judged, and the import's reflection into cluster.local is.
	askDNS := len(m.DNSAnswers) > 0 && len(exports) > 0 && !m.ClusterLocal
	if !m.hasNamespace(svc.Namespace) {
		if askDNS {
			out = append(out, absentNamespaceDNSCheck(m, svc))
		}
		return out
	}
	si := m.serviceImport(svc)
	if present := importPresentCheck(m, svc, exports, si); present != nil {
		out = append(out, *present)
	}
	if si != nil && len(exports) > 0 {
		out = append(out, importConsistentCheck(s, m, svc, exports, si))
	}
	if askDNS {
		out = append(out, serviceDNSCheck(m, svc, si, exports))
	}
	if m.ClusterLocal && si != nil && len(exports) > 0 {
		out = append(out, clusterLocalCheck(m, svc, si))
	}
	return out
}

// clusterLocalCheck judges, in the cluster-local mode, the import's reflection into cluster.local, as its
// controller reports it in the ClusterLocalService condition: stock DNS answers <svc>-clusterset.<ns>.svc in the
// cluster domain once the controller wrote that Service and its slices.
func clusterLocalCheck(m *Member, svc types.NamespacedName, si *mcsv1beta1.ServiceImport) Check {
	c := newCheck(CheckClusterLocal, m, svc)
	name := names.ClusterLocalServiceName(svc.Namespace, svc.Name)
	switch cond := meta.FindStatusCondition(si.Status.Conditions, imports.ConditionClusterLocalService); {
	case cond == nil:
		c.Result = Fail
		c.Message = fmt.Sprintf("the ServiceImport has no %s condition: the controller has not reflected it into cluster.local as %s", imports.ConditionClusterLocalService, name)
		c.Hint = controllerHint(m)
	case cond.Status != metav1.ConditionTrue:
		c.Result, c.Message = Fail, fmt.Sprintf("%s/%s: %s", cond.Status, cond.Reason, cond.Message)
		c.Hint = fmt.Sprintf("another Service holds the name %s: rename or delete it (kubectl --context %s -n %s get service %s), and the controller reflects the import",
			name, m.Context, svc.Namespace, name)
	default:
		c.Result, c.Message = Pass, fmt.Sprintf("reflected into cluster.local: pods resolve %s.%s.svc", name, svc.Namespace)
	}
	return c
}

func newCheck(name string, m *Member, svc types.NamespacedName) Check {
	return Check{Check: name, Cluster: m.name(), Service: svc.String()}
}

// controllerHint points at the member's controller, which writes what a failed check found missing.
func controllerHint(m *Member) string {
	return fmt.Sprintf("the member's mcs-controller writes this: see its lease check and its logs (kubectl --context %s -n %s logs deploy/%s)",
		m.Context, controllerNamespace, controllerDeployment)
}

func exportValidCheck(m *Member, svc types.NamespacedName, se *mcsv1beta1.ServiceExport) Check {
	c := newCheck(CheckExportValid, m, svc)
	if cond := judgeCondition(&c, m, se, mcsv1beta1.ServiceExportConditionValid, "the ServiceExport is valid"); cond != nil && c.Result == Fail {
		switch mcsv1beta1.ServiceExportConditionReason(cond.Reason) {
		case mcsv1beta1.ServiceExportReasonNoService:
			c.Hint = fmt.Sprintf("create the Service %s in %s, or delete its ServiceExport", svc, m.Context)
		case mcsv1beta1.ServiceExportReasonInvalidServiceType:
			c.Hint = "an ExternalName Service cannot be exported: export a ClusterIP or headless Service"
		default:
			c.Hint = "fix what the message names, or export from another namespace"
		}
	}
	return c
}

// judgeCondition fills c from the ServiceExport's condition typ, which must be True: Fail with the controller hint
// while it is missing, Fail with its status, reason and message while it is not True (the caller adds the hint,
// which depends on the condition), else Pass with the message pass. It returns the condition.
func judgeCondition(c *Check, m *Member, se *mcsv1beta1.ServiceExport, typ mcsv1beta1.ServiceExportConditionType, pass string) *metav1.Condition {
	cond := meta.FindStatusCondition(se.Status.Conditions, string(typ))
	switch {
	case cond == nil:
		c.Result, c.Message, c.Hint = Fail, fmt.Sprintf("the ServiceExport has no %s condition yet", typ), controllerHint(m)
	case cond.Status != metav1.ConditionTrue:
		c.Result, c.Message = Fail, fmt.Sprintf("%s=%s/%s: %s", typ, cond.Status, cond.Reason, cond.Message)
	default:
		c.Result, c.Message = Pass, pass
	}
	return cond
}

// exportReadyCheck fails while a valid export is not published: its record never reaches the broker, so no member
// imports it and no other check would notice.
func exportReadyCheck(m *Member, svc types.NamespacedName, se *mcsv1beta1.ServiceExport) Check {
	c := newCheck(CheckExportReady, m, svc)
	if !meta.IsStatusConditionTrue(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionValid)) {
		c.Result, c.Message = Pass, "not valid, so not published (see export-valid)"
		return c
	}
	if cond := judgeCondition(&c, m, se, mcsv1beta1.ServiceExportConditionReady, "the ServiceExport is published"); cond != nil && c.Result == Fail {
		c.Hint = "fix what the message names (broker credentials, RBAC or quota on the broker, another cluster with this cluster id); " +
			controllerHint(m)
	}
	return c
}

func exportConflictCheck(m *Member, svc types.NamespacedName, se *mcsv1beta1.ServiceExport) Check {
	c := newCheck(CheckExportConflict, m, svc)
	cond := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict))
	if cond != nil && cond.Status == metav1.ConditionTrue {
		c.Result, c.Message = Fail, fmt.Sprintf("Conflict=True/%s: %s", cond.Reason, cond.Message)
		c.Hint = fmt.Sprintf("make the exported Services agree in every cluster (kubectl mcs services -n %s %s -o wide); until then the oldest export wins", svc.Namespace, svc.Name)
		return c
	}
	c.Result, c.Message = Pass, "no conflict"
	return c
}

// importPresentCheck: an import exists in every member with the namespace while a cluster exports the service,
// and nowhere once none does. It says nothing about a service that no cluster exports and no member imports.
func importPresentCheck(m *Member, svc types.NamespacedName, exports []merge.Export, si *mcsv1beta1.ServiceImport) *Check {
	c := newCheck(CheckImportPresent, m, svc)
	switch {
	case len(exports) == 0 && si == nil:
		return nil
	case len(exports) == 0:
		c.Result, c.Message, c.Hint = Fail, "a ServiceImport remains though no cluster exports the service", controllerHint(m)
	case si == nil:
		c.Result = Fail
		c.Message = fmt.Sprintf("namespace %s exists but there is no ServiceImport (exported by %s)", svc.Namespace, clustersOf(exports))
		c.Hint = controllerHint(m)
	default:
		c.Result, c.Message = Pass, fmt.Sprintf("imported (exported by %s)", clustersOf(exports))
	}
	return &c
}

func clustersOf(exports []merge.Export) string {
	ids := make([]string, len(exports))
	for i, e := range exports {
		ids[i] = e.Cluster
	}
	return strings.Join(ids, ", ")
}

// importConsistentCheck compares the member's import with what the broker's records make of it: the merged type
// and ports, the derived Service's IPs as the import's ClusterSetIPs, and per live exporter the same endpoints
// as that exporter's slices on the broker.
func importConsistentCheck(s *Snapshot, m *Member, svc types.NamespacedName, exports []merge.Export, si *mcsv1beta1.ServiceImport) Check {
	c := newCheck(CheckImportConsistent, m, svc)
	merged := merge.Merge(exports)
	var problems []string
	if si.Spec.Type != merged.Spec.Type {
		problems = append(problems, fmt.Sprintf("type %s, the exports make %s", si.Spec.Type, merged.Spec.Type))
	}
	if got, want := portTexts(si.Spec.Ports), portTexts(merged.Spec.Ports); !slices.Equal(got, want) {
		problems = append(problems, fmt.Sprintf("ports %v, the exports make %v", got, want))
	}
	if si.Spec.Type == mcsv1beta1.ClusterSetIP {
		switch d := m.derivedService(svc); {
		case d == nil:
			problems = append(problems, "no derived Service "+names.DerivedServiceName(svc.Namespace, svc.Name))
		case !slices.Equal(d.Spec.ClusterIPs, si.Spec.IPs):
			problems = append(problems, fmt.Sprintf("ips %v, the derived Service has %v", si.Spec.IPs, d.Spec.ClusterIPs))
		}
	}
	local := m.importedSlices(svc)
	for _, e := range exports {
		if e.Cluster != m.ClusterID && !s.lease(e.Cluster).alive() {
			continue // withdrawn: the stale-slices check looks at what remains of it
		}
		here := endpointKeys(slices.DeleteFunc(slices.Clone(local), func(sl discoveryv1.EndpointSlice) bool { return broker.ClusterOf(&sl) != e.Cluster }))
		there := endpointKeys(s.brokerSlices(svc, e.Cluster))
		if !slices.Equal(here, there) {
			problems = append(problems, fmt.Sprintf("endpoints from %s: %d here %v, %d on the broker %v", e.Cluster, len(here), here, len(there), there))
		}
	}
	if len(problems) > 0 {
		c.Result, c.Message, c.Hint = Fail, strings.Join(problems, "; "), controllerHint(m)
		return c
	}
	c.Result, c.Message = Pass, "the import, derived Service and slices match the broker"
	return c
}

func portTexts(ps []mcsv1beta1.ServicePort) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = portText(p)
	}
	slices.Sort(out)
	return out
}

// endpointKeys are the slices' endpoints as sorted "address(ready,serving)" strings, so that two sets of slices
// compare equal however the endpoints are split among them.
func endpointKeys(in []discoveryv1.EndpointSlice) []string {
	out := []string{}
	for _, sl := range in {
		for _, ep := range sl.Endpoints {
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			serving := ep.Conditions.Serving == nil || *ep.Conditions.Serving
			state := ""
			if !ready {
				state = "(not ready)"
			} else if !serving {
				state = "(not serving)"
			}
			out = append(out, strings.Join(ep.Addresses, ",")+state)
		}
	}
	slices.Sort(out)
	return out
}

// serviceDNSCheck asks whether the member's DNS answers the service's name as its import says: a ClusterSetIP
// import's IPs exactly; for a headless one a non-empty subset of the ready endpoints (locality may narrow it),
// or NXDOMAIN when none is ready; and `<clusterid>.<svc>.<ns>` NXDOMAIN for every exporter's id, as SPEC section 4
// requires of both types (only `<hostname>.<clusterid>.<svc>.<ns>` names exist below a service).
func serviceDNSCheck(m *Member, svc types.NamespacedName, si *mcsv1beta1.ServiceImport, exports []merge.Export) Check {
	c := newCheck(CheckDNS, m, svc)
	qs := serviceQueries(svc)
	name := strings.TrimSuffix(qs[0].name, ".")
	if si == nil {
		a := m.DNSAnswers[qs[0].key()]
		c.Result, c.Message = Fail, fmt.Sprintf("%s does not resolve (%s%s): there is no ServiceImport here", name, a.Rcode, a.Error)
		c.Hint = controllerHint(m)
		return c
	}
	var want []string
	headless := si.Spec.Type == mcsv1beta1.Headless
	if headless {
		want = ReadyAddresses(m.importedSlices(svc))
	} else {
		want = slices.Clone(si.Spec.IPs)
	}
	var problems, got []string
	for _, q := range qs {
		a, unanswered := answerOf(c, m, q)
		if unanswered != nil {
			return *unanswered
		}
		family := familyOf(want, q.qtype == dns.TypeAAAA)
		records := slices.Sorted(slices.Values(a.Records))
		got = append(got, records...)
		switch {
		case headless && len(want) == 0:
			// SPEC §4: a headless name without a ready endpoint does not exist.
			if a.Rcode != "NXDOMAIN" {
				problems = append(problems, fmt.Sprintf("%s answered %v (%s) though no endpoint is ready, want NXDOMAIN",
					dns.TypeToString[q.qtype], records, a.Rcode))
			}
		case headless:
			if len(family) > 0 && (len(records) == 0 || !subset(records, family)) {
				problems = append(problems, fmt.Sprintf("%s answered %v (%s), the ready endpoints are %v", dns.TypeToString[q.qtype], records, a.Rcode, family))
			}
		case !slices.Equal(records, family):
			problems = append(problems, fmt.Sprintf("%s answered %v (%s), the ClusterSetIPs are %v", dns.TypeToString[q.qtype], records, a.Rcode, family))
		}
	}
	for _, e := range exports {
		q := clusterIDQuery(svc, e.Cluster)
		a, unanswered := answerOf(c, m, q)
		switch {
		case unanswered != nil:
			return *unanswered
		case a.Rcode != "NXDOMAIN":
			problems = append(problems, fmt.Sprintf("%s answered %v (%s), want NXDOMAIN: no name exists at a cluster id", strings.TrimSuffix(q.name, "."), a.Records, a.Rcode))
		}
	}
	if len(problems) > 0 {
		c.Result, c.Message = Fail, name+": "+strings.Join(problems, "; ")
		c.Hint = fmt.Sprintf("check the member's CoreDNS (its Corefile and logs) at %s; it may lag the import by its cache TTL", m.DNS)
		return c
	}
	c.Result, c.Message = Pass, fmt.Sprintf("%s resolves to %v", name, got)
	return c
}

// absentNamespaceDNSCheck asks that a member without the service's namespace answers its name NXDOMAIN, as SPEC
// section 4 requires: a namespace that does not exist in this cluster has no clusterset names there.
func absentNamespaceDNSCheck(m *Member, svc types.NamespacedName) Check {
	c := newCheck(CheckDNS, m, svc)
	var problems []string
	for _, q := range serviceQueries(svc) {
		a, unanswered := answerOf(c, m, q)
		switch {
		case unanswered != nil:
			return *unanswered
		case a.Rcode != "NXDOMAIN":
			problems = append(problems, fmt.Sprintf("%s answered %v (%s)", dns.TypeToString[q.qtype], a.Records, a.Rcode))
		}
	}
	name := strings.TrimSuffix(serviceQueries(svc)[0].name, ".")
	if len(problems) > 0 {
		c.Result = Fail
		c.Message = fmt.Sprintf("%s: %s though namespace %s does not exist here, want NXDOMAIN", name, strings.Join(problems, "; "), svc.Namespace)
		c.Hint = fmt.Sprintf("check the member's CoreDNS (its Corefile and logs) at %s; it may lag the namespace's deletion by its cache TTL", m.DNS)
		return c
	}
	c.Result, c.Message = Pass, fmt.Sprintf("%s is NXDOMAIN: namespace %s does not exist here", name, svc.Namespace)
	return c
}

// familyOf keeps the addresses of one family, sorted: IPv6 when v6, else IPv4.
func familyOf(addrs []string, v6 bool) []string {
	var out []string
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a); err == nil && ip.Is6() == v6 {
			out = append(out, ip.String())
		}
	}
	slices.Sort(out)
	return out
}

// ReadyAddresses returns the addresses of the ready endpoints of the slices (an endpoint without the condition is
// ready, as the API says), in the slices' order: what DNS should answer of them. The suites check a member's
// slices with it, as diagnose does.
func ReadyAddresses(in []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, sl := range in {
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				out = append(out, ep.Addresses...)
			}
		}
	}
	return out
}

func subset(a, b []string) bool {
	return !slices.ContainsFunc(a, func(x string) bool { return !slices.Contains(b, x) })
}

// answerOf returns the member's answer to q, or, when there is none to judge, the check c judged by that: Unknown
// when q was not asked, as dnsErrorCheck says when it got no answer.
func answerOf(c Check, m *Member, q query) (DNSAnswer, *Check) {
	a, ok := m.DNSAnswers[q.key()]
	switch {
	case !ok:
		c.Result, c.Message, c.Hint = Unknown, "not asked", dnsHint(m)
		return a, &c
	case a.Error != "":
		c = dnsErrorCheck(c, m, a)
		return a, &c
	}
	return a, nil
}
