package cli

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/memberlease"
	"vksfleet.dev/fleet/mcs/names"
)

// Result is a check's outcome.
type Result string

// Results. Unknown is for what the plugin cannot see (no Corefile ConfigMap, a DNS server it cannot reach, a
// member no context reaches): it is reported with a hint but does not fail diagnose.
const (
	Pass    Result = "PASS"
	Fail    Result = "FAIL"
	Unknown Result = "UNKNOWN"
)

// The checks' names, stable for scripts reading -o json.
const (
	CheckReachable        = "reachable"
	CheckCRDs             = "crds"
	CheckCorefile         = "corefile"
	CheckDNS              = "dns"
	CheckLease            = "lease"
	CheckClock            = "clock"
	CheckStaleSlices      = "stale-slices"
	CheckDataPlane        = "data-plane"
	CheckExportValid      = "export-valid"
	CheckExportReady      = "export-ready"
	CheckExportConflict   = "export-conflict"
	CheckImportPresent    = "import-present"
	CheckImportConsistent = "import-consistent"
)

// Check is one line of `kubectl mcs diagnose`.
type Check struct {
	Check string `json:"check"`
	// Cluster is the member's context (its cluster id when no context reaches it), or the broker's.
	Cluster string `json:"cluster"`
	// Service is namespace/name for the per-service checks.
	Service string `json:"service,omitempty"`
	Result  Result `json:"result"`
	Message string `json:"message"`
	// Hint says how to fix what did not pass.
	Hint string `json:"hint,omitempty"`
}

// Passed reports whether no check failed.
func Passed(checks []Check) bool {
	return !slices.ContainsFunc(checks, func(c Check) bool { return c.Result == Fail })
}

// Diagnose runs every check on the snapshot: the clusterset's (broker, then each member) and, for each service of
// scope, the export, import and DNS checks in each member.
func Diagnose(s *Snapshot, scope []types.NamespacedName) []Check {
	var out []Check
	out = append(out, brokerChecks(s)...)
	for i := range s.Members {
		out = append(out, memberChecks(s, &s.Members[i])...)
	}
	for _, svc := range scope {
		for i := range s.Members {
			out = append(out, serviceChecks(s, &s.Members[i], svc)...)
		}
	}
	return out
}

// brokerChecks are the broker's: a snapshot exists only once the broker was read, so it is reachable.
func brokerChecks(s *Snapshot) []Check {
	b := &s.Broker
	out := []Check{{Check: CheckReachable, Cluster: b.Context, Result: Pass, Message: "broker reachable"}}
	return append(out, crdCheck(b.Context, b.MissingAPIs, "kubectl mcs broker init"))
}

// crdCheck fails when CRDs are missing. The hint installs the CRDs alone (build/deploy/crds), never a whole
// manifest: the member's also replaces the cluster's Corefile, CoreDNS Deployment and kube-dns Service.
func crdCheck(context string, missing []string, setup string) Check {
	if len(missing) == 0 {
		return Check{Check: CheckCRDs, Cluster: context, Result: Pass, Message: "CRDs installed"}
	}
	return Check{Check: CheckCRDs, Cluster: context, Result: Fail,
		Message: "not served: " + strings.Join(missing, ", "),
		Hint: fmt.Sprintf("install the CRDs alone, from a checkout of the repository: kubectl --context %s apply -k build/deploy/crds; or set the cluster up with %s",
			context, setup)}
}

func memberChecks(s *Snapshot, m *Member) []Check {
	switch {
	case m.Context == "":
		return []Check{{Check: CheckReachable, Cluster: m.name(), Result: Unknown,
			Message: fmt.Sprintf("no kubeconfig context reaches member %s", m.ClusterID),
			Hint:    fmt.Sprintf("add a context for cluster %s to the kubeconfig, or pass --contexts naming the one that reaches it", m.ClusterID)}}
	case !m.reachable():
		return []Check{{Check: CheckReachable, Cluster: m.Context, Result: Fail, Message: m.Error,
			Hint: fmt.Sprintf("check the member's address and credentials: kubectl --context %s get --raw /version", m.Context)},
			dataPlaneCheck(s, m)}
	}
	return []Check{
		{Check: CheckReachable, Cluster: m.Context, Result: Pass, Message: "member reachable"},
		crdCheck(m.Context, m.MissingAPIs, "kubectl mcs join"),
		corefileCheck(m),
		zoneCheck(m),
		leaseCheck(s, m),
		clockCheck(s, m),
		staleSlicesCheck(s, m),
		dataPlaneCheck(s, m),
	}
}

// dataPlaneCheck reports the members whose data-plane probe finds m's endpoints silent, as their broker Leases
// say: a member can renew its Lease while its pods cannot be reached, or the reverse.
func dataPlaneCheck(s *Snapshot, m *Member) Check {
	c := Check{Check: CheckDataPlane, Cluster: m.name()}
	from := s.unreachableFrom(m.ClusterID)
	if len(from) == 0 {
		c.Result, c.Message = Pass, "no member reports its endpoints unreachable"
		return c
	}
	c.Result = Fail
	c.Message = fmt.Sprintf("its endpoints do not answer from %s (their data-plane probes): there, they are imported not ready "+
		"while its Lease lives, and withdrawn once it lapses", strings.Join(from, ", "))
	c.Hint = "check the member's nodes and pods, and the network between its pods and those members' (routes, firewalls); " +
		"they use its endpoints again within seconds of their answering"
	return c
}

func corefileCheck(m *Member) Check {
	c := Check{Check: CheckCorefile, Cluster: m.Context}
	if m.Corefile == nil {
		c.Result, c.Message = Unknown, fmt.Sprintf("no ConfigMap %s/%s with a %s key", metav1.NamespaceSystem, corednsConfigMap, corefileKey)
		c.Hint = "the cluster's DNS reads its configuration elsewhere: the dns check asks the DNS server itself whether it serves clusterset.local"
		return c
	}
	how, err := servesZone(*m.Corefile)
	switch {
	case err != nil:
		c.Result, c.Message = Fail, err.Error()
		c.Hint = fmt.Sprintf("fix the Corefile: kubectl --context %s -n %s edit configmap %s", m.Context, metav1.NamespaceSystem, corednsConfigMap)
	case how == "":
		c.Result, c.Message = Fail, "the Corefile has no multicluster stanza for clusterset.local, and does not forward it"
		c.Hint = noZoneHint(m)
	case how == "forward":
		c.Result, c.Message = Pass, "the Corefile forwards clusterset.local (the standalone DNS of kubectl mcs join): the dns check asks whether it answers"
	default:
		c.Result, c.Message = Pass, "the Corefile serves clusterset.local with multicluster"
	}
	return c
}

// noZoneHint says how a member's DNS comes to serve clusterset.local. Only our CoreDNS build has the multicluster
// plugin: a stock CoreDNS given a Corefile naming it stops loading that Corefile, so adding the stanza is
// suggested only when the member's CoreDNS Deployment runs our image.
func noZoneHint(m *Member) string {
	if m.ourCoreDNS() {
		return fmt.Sprintf("the member runs our CoreDNS build (%s): add a `multicluster clusterset.local` stanza to its server block as in Corefile.example: kubectl --context %s -n %s edit configmap %s",
			m.CoreDNSImage, m.Context, metav1.NamespaceSystem, corednsConfigMap)
	}
	return "clusterset.local is served by our CoreDNS build (cmd/coredns), whose multicluster plugin stock CoreDNS lacks " +
		"(a stock CoreDNS stops on a Corefile naming it): set the member's DNS up with kubectl mcs join"
}

// dnsHint says how to reach a member's DNS when it could not be asked, or did not answer.
func dnsHint(m *Member) string {
	reach := fmt.Sprintf("pass --dns %s=HOST:PORT with an address this machine reaches, or --in-cluster to ask from a pod", m.name())
	switch {
	case m.DNSSource == inClusterSource:
		return fmt.Sprintf("the cluster's DNS did not answer its own pods: kubectl --context %s -n %s get pods,endpoints -l k8s-app=%s",
			m.Context, metav1.NamespaceSystem, kubeDNSService)
	case m.DNS == "":
		return fmt.Sprintf("the member has no %s/%s Service: %s", metav1.NamespaceSystem, kubeDNSService, reach)
	case m.inClusterDNS():
		return fmt.Sprintf("%s is the %s Service's ClusterIP, rarely reachable from outside the cluster: %s", m.DNS, kubeDNSService, reach)
	default:
		return fmt.Sprintf("check that a DNS server runs at %s (from %s)", m.DNS, m.DNSSource)
	}
}

// dnsErrorCheck judges a DNS question that got no answer: unknown when the address is in-cluster, which this
// machine rarely reaches, a failure when the user said the DNS server is there.
func dnsErrorCheck(c Check, m *Member, a DNSAnswer) Check {
	c.Result, c.Message, c.Hint = Fail, fmt.Sprintf("no answer from %s: %s", m.DNS, a.Error), dnsHint(m)
	if m.inClusterDNS() {
		c.Result = Unknown
	}
	return c
}

func zoneCheck(m *Member) Check {
	c := Check{Check: CheckDNS, Cluster: m.Context}
	a, ok := m.DNSAnswers[versionQuery]
	switch {
	case m.DNSError != "":
		c.Result, c.Message = Unknown, m.DNSError
		c.Hint = fmt.Sprintf("the probe needs to create pods in namespace %s of %s and exec into them, and an --image with dig (e.g. nicolaka/netshoot); or pass --dns %s=HOST:PORT",
			probeNamespace, m.Context, m.name())
	case m.DNS == "" || !ok:
		c.Result, c.Message, c.Hint = Unknown, "no DNS address known", dnsHint(m)
	case a.Error != "":
		c = dnsErrorCheck(c, m, a)
	case a.Rcode != "NOERROR" || len(a.Records) == 0:
		c.Result = Fail
		c.Message = fmt.Sprintf("%s answers dns-version.%s with %s: it does not serve the zone", m.DNS, clustersetZone, a.Rcode)
		c.Hint = noZoneHint(m)
	default:
		c.Result = Pass
		c.Message = fmt.Sprintf("%s serves %s (dns-version %s)", m.DNS, names.DNSZone, strings.Join(a.Records, ","))
		if a.Records[0] != names.DNSSchemaVersion {
			c.Message += fmt.Sprintf("; our CoreDNS answers %s", names.DNSSchemaVersion)
		}
	}
	return c
}

func leaseCheck(s *Snapshot, m *Member) Check {
	c := Check{Check: CheckLease, Cluster: m.Context}
	logs := fmt.Sprintf("the member's mcs-controller is down or cannot reach the broker: kubectl --context %s -n %s logs deploy/%s",
		m.Context, controllerNamespace, controllerDeployment)
	switch l := s.lease(m.ClusterID); {
	case !l.found:
		c.Result, c.Message = Fail, fmt.Sprintf("no Lease %s/%s on the broker", names.BrokerNamespace(m.ClusterID), names.LeaseName)
		c.Hint = logs
	case l.age < -l.grace:
		c.Result = Fail
		c.Message = fmt.Sprintf("renewed %s in the broker's future (grace %s)", round(-l.age), l.grace)
		c.Hint = "the controller's clock runs ahead of the broker's: synchronise the clocks (NTP)"
	case !l.alive():
		c.Result = Fail
		c.Message = fmt.Sprintf("renewed %s ago, past the grace of %s: its control plane is lost; members whose data-plane "+
			"probes still reach its endpoints keep them (their imports say Stale), the others withdraw them", round(l.age), l.grace)
		c.Hint = logs
	default:
		c.Result, c.Message = Pass, fmt.Sprintf("renewed %s ago (grace %s)", round(max(l.age, 0)), l.grace)
	}
	return c
}

func clockCheck(s *Snapshot, m *Member) Check {
	c := Check{Check: CheckClock, Cluster: m.Context}
	skew, grace := m.ClockOffset-s.Broker.ClockOffset, s.leaseGrace()
	if skew.Abs() > grace {
		c.Result = Fail
		c.Message = fmt.Sprintf("the API server's clock is %s off the broker's, more than the lease grace %s", round(skew), grace)
		c.Hint = "synchronise the clocks (NTP): the controllers judge each other's liveness by when they see a Lease renewed, " +
			"on their own clocks, so skew does not withdraw anyone, but the renew times, the lease ages this tool shows, Events and logs are off by it"
		return c
	}
	c.Result, c.Message = Pass, fmt.Sprintf("within %s of the broker's clock (grace %s)", round(skew.Abs()), grace)
	return c
}

// staleSlicesCheck finds imported slices whose source cluster no longer contributes: it has no Lease (it left),
// its Lease expired, or it no longer exports the service. The member's own endpoints are never stale.
func staleSlicesCheck(s *Snapshot, m *Member) Check {
	c := Check{Check: CheckStaleSlices, Cluster: m.Context}
	var stale []string
	var sources []string
	for _, sl := range m.Slices {
		src := broker.ClusterOf(&sl)
		if src == m.ClusterID {
			continue
		}
		svc := types.NamespacedName{Namespace: sl.Namespace, Name: sl.Labels[mcsv1beta1.LabelServiceName]}
		why := ""
		switch l := s.lease(src); {
		case !l.found:
			why = "which left the clusterset (no Lease)"
		case !memberlease.Fresh(l.age, l.grace+withdrawMargin) && keptStale(m.serviceImport(svc), src):
			continue // its control plane is lost, its endpoints answer here: kept on purpose
		case !memberlease.Fresh(l.age, l.grace+withdrawMargin):
			why = fmt.Sprintf("whose Lease was last renewed %s ago (grace %s)", round(l.age), l.grace)
		case !l.alive():
			continue // being withdrawn right now
		case !slices.ContainsFunc(s.exports(svc), func(e merge.Export) bool { return e.Cluster == src }):
			why = "which no longer exports it"
		default:
			continue
		}
		stale = append(stale, fmt.Sprintf("%s/%s of %s from %s, %s", sl.Namespace, sl.Name, svc, src, why))
		if !slices.Contains(sources, src) {
			sources = append(sources, src)
		}
	}
	if len(stale) == 0 {
		c.Result, c.Message = Pass, "every imported slice comes from a live exporter"
		return c
	}
	slices.Sort(stale)
	c.Result, c.Message = Fail, fmt.Sprintf("%d stale slices: %s", len(stale), strings.Join(stale, "; "))
	c.Hint = fmt.Sprintf("the member's mcs-controller deletes them when it runs (see its lease check); by hand: kubectl --context %s delete endpointslices -A -l %s=%s",
		m.Context, mcsv1beta1.LabelSourceCluster, names.LabelValue(sources[0]))
	return c
}

// keptStale says whether the import keeps src's endpoints on purpose: its Stale condition names src, whose control
// plane is lost while its endpoints answer from this member.
func keptStale(si *mcsv1beta1.ServiceImport, src string) bool {
	if si == nil {
		return false
	}
	c := meta.FindStatusCondition(si.Status.Conditions, imports.ConditionStale)
	return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, src+" (")
}

// withdrawMargin is how long past a Lease's expiry its member's slices may remain before they count as stale:
// the controllers withdraw them within about a second, and diagnose must not flag that window.
const withdrawMargin = 5 * time.Second

func round(d time.Duration) time.Duration { return d.Round(time.Second) }

func serviceChecks(s *Snapshot, m *Member, svc types.NamespacedName) []Check {
	if !m.reachable() || len(m.MissingAPIs) > 0 {
		return nil // the member's reachable and crds checks already fail
	}
	var out []Check
	if se := m.export(svc); se != nil {
		out = append(out, exportValidCheck(m, svc, se), exportReadyCheck(m, svc, se), exportConflictCheck(m, svc, se))
	}
	exports := s.exports(svc)
	if !m.hasNamespace(svc.Namespace) {
		if len(m.DNSAnswers) > 0 && len(exports) > 0 {
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
	if len(m.DNSAnswers) > 0 && len(exports) > 0 {
		out = append(out, serviceDNSCheck(m, svc, si, exports))
	}
	return out
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
	cond := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionValid))
	switch {
	case cond == nil:
		c.Result, c.Message, c.Hint = Fail, "the ServiceExport has no Valid condition yet", controllerHint(m)
	case cond.Status != metav1.ConditionTrue:
		c.Result, c.Message = Fail, fmt.Sprintf("Valid=%s/%s: %s", cond.Status, cond.Reason, cond.Message)
		switch mcsv1beta1.ServiceExportConditionReason(cond.Reason) {
		case mcsv1beta1.ServiceExportReasonNoService:
			c.Hint = fmt.Sprintf("create the Service %s in %s, or delete its ServiceExport", svc, m.Context)
		case mcsv1beta1.ServiceExportReasonInvalidServiceType:
			c.Hint = "an ExternalName Service cannot be exported: export a ClusterIP or headless Service"
		default:
			c.Hint = "fix what the message names, or export from another namespace"
		}
	default:
		c.Result, c.Message = Pass, "the ServiceExport is valid"
	}
	return c
}

// exportReadyCheck fails while a valid export is not published: its record never reaches the broker, so no member
// imports it and no other check would notice.
func exportReadyCheck(m *Member, svc types.NamespacedName, se *mcsv1beta1.ServiceExport) Check {
	c := newCheck(CheckExportReady, m, svc)
	valid := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionValid))
	cond := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady))
	switch {
	case valid == nil || valid.Status != metav1.ConditionTrue:
		c.Result, c.Message = Pass, "not valid, so not published (see export-valid)"
	case cond == nil:
		c.Result, c.Message, c.Hint = Fail, "the ServiceExport has no Ready condition yet", controllerHint(m)
	case cond.Status != metav1.ConditionTrue:
		c.Result, c.Message = Fail, fmt.Sprintf("Ready=%s/%s: %s", cond.Status, cond.Reason, cond.Message)
		c.Hint = "fix what the message names (broker credentials, RBAC or quota on the broker, another cluster with this cluster id); " +
			controllerHint(m)
	default:
		c.Result, c.Message = Pass, "the ServiceExport is published"
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
		want = readyAddresses(m.importedSlices(svc))
	} else {
		want = slices.Clone(si.Spec.IPs)
	}
	var problems, got []string
	for _, q := range qs {
		a, ok := m.DNSAnswers[q.key()]
		if !ok {
			c.Result, c.Message, c.Hint = Unknown, "not asked", dnsHint(m)
			return c
		}
		if a.Error != "" {
			return dnsErrorCheck(c, m, a)
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
		switch a, ok := m.DNSAnswers[q.key()]; {
		case !ok:
			c.Result, c.Message, c.Hint = Unknown, "not asked", dnsHint(m)
			return c
		case a.Error != "":
			return dnsErrorCheck(c, m, a)
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
		a, ok := m.DNSAnswers[q.key()]
		switch {
		case !ok:
			c.Result, c.Message, c.Hint = Unknown, "not asked", dnsHint(m)
			return c
		case a.Error != "":
			return dnsErrorCheck(c, m, a)
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

func readyAddresses(in []discoveryv1.EndpointSlice) []string {
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
