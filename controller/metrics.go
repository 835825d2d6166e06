package controller

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/reach"
	"vksfleet.dev/fleet/mcs/buildinfo"
	"vksfleet.dev/fleet/mcs/locality"
)

// Metrics beyond controller-runtime's own (reconciles, workqueues, client requests), served on the metrics
// address. cluster_id, as in the CoreDNS plugin's metrics, is the cluster id of the member a series is about:
// this controller's own, or for the member metrics the member observed, where observer_cluster_id names this
// controller. Tests run several controllers in one process, which the label keeps apart; a label named cluster
// would collide with the one multi-cluster Prometheus setups add to every series.
var (
	writesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcs_controller_api_writes_total",
		Help: "Write requests the controller sent, by target API server (local or broker), verb (the HTTP method, as " +
			"apiserver_request_total has it) and resource. Idle clustersets and restarts should add only broker Lease renewals.",
	}, []string{"cluster_id", "target", "verb", "resource"})
	brokerReachable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcs_controller_broker_reachable",
		Help: "1 while this member's last broker Lease renewal succeeded.",
	}, []string{"cluster_id"})
	brokerViewTrusted = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcs_controller_broker_view_trusted",
		Help: "1 while the broker's view may be acted on with withdrawals; 0 while they are held back (after a start, " +
			"or while this member's Lease or sentinel record is missing or cannot be renewed).",
	}, []string{"cluster_id"})
	clusterIDConflict = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcs_controller_cluster_id_conflict",
		Help: "1 while another controller renews this member's broker Lease: two clusters claim the cluster id.",
	}, []string{"cluster_id"})
	localityTier = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcs_controller_locality_tier",
		Help: "The tier an import's traffic uses, per node zone (scope=zone/<zone>) and for headless DNS " +
			"(scope=dns): 0 same-zone, 1 same-cluster, 2 same-region, 3 anywhere, 4 draining, 5 none ready.",
	}, []string{"cluster_id", "namespace", "service", "scope"})
	localityEndpoints = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcs_controller_locality_ready_endpoints",
		Help: "Ready endpoints of an import by tier, seen from this member: same-cluster, same-region, anywhere, draining.",
	}, []string{"cluster_id", "namespace", "service", "tier"})
	refusedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcs_controller_refused_total",
		Help: "Values another cluster or a namespace user wrote that the controller left out of an import, by reason " +
			"(package admit): broker records, cluster ids, ports, exported labels and annotations, endpoints, slices, and " +
			"EndpointSlices past the limits (TooManyEndpoints, TooManySlices, TooManyMemberEndpoints). " +
			"A refusal counts once, when it appears, however often its service is reconciled while it stands; member is " +
			"the cluster that wrote it (its broker namespace when its id cannot be trusted).",
	}, []string{"cluster_id", "member", "reason"})
	failoversTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcs_controller_locality_failovers_total",
		Help: "Times a node zone or the headless DNS of an import moved to a farther tier.",
	}, []string{"cluster_id"})
	failedOpenTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcs_controller_member_failed_open_total",
		Help: "Times an import of observer_cluster_id started using a member's endpoints as published only because no " +
			"other exporter of the service had a ready endpoint (fail open): its probes judge the member unreachable, or " +
			"its control plane has been lost for longer than --stale-limit. The imports failing open now are " +
			"mcs_controller_service_imports{reason=\"FailedOpen\"}.",
	}, []string{"observer_cluster_id", "cluster_id"})
	reconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcs_controller_reconcile_errors_total",
		Help: "Failures of service reconciles, each joined failure once, by the API server it came from (local or " +
			"broker) and its cause: the Kubernetes status reason (Conflict and AlreadyExists are races with the caches, " +
			"retried at once), Timeout, Unreachable or Other.",
	}, []string{"cluster_id", "target", "reason"})
	dnsPathOK = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcs_controller_dns_path_ok",
		Help: "1 while this member's DNS server (--dns-address) answered the last periodic question about a Ready " +
			"import as expected, 0 once two in a row were not: clusterset.local names may not resolve in the member, as " +
			"when its cluster DNS no longer forwards clusterset.local. Imports stay Ready meanwhile. Absent without " +
			"--dns-address, before the first verdict and while no import is Ready to ask about.",
	}, []string{"cluster_id"})
	dnsPathFailuresTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcs_controller_dns_path_failures_total",
		Help: "Periodic questions about a Ready import that this member's DNS server did not answer as expected.",
	}, []string{"cluster_id"})
	buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcs_controller_build_info",
		Help: "Constant 1, labelled with the controller's version, git revision and Go version.",
	}, []string{"version", "revision", "goversion"})
)

func init() {
	b := buildinfo.Read()
	revision := b.Revision
	if b.Modified {
		revision += "-dirty"
	}
	buildInfo.WithLabelValues(b.Version, revision, b.GoVersion).Set(1)
	metrics.Registry.MustRegister(writesTotal, brokerReachable, brokerViewTrusted, clusterIDConflict, localityTier,
		localityEndpoints, refusedTotal, failoversTotal, failedOpenTotal, reconcileErrors, dnsPathOK, dnsPathFailuresTotal,
		buildInfo, states, importsNotOurs)
}

// recordLocality publishes an import's plan in the locality gauges.
func recordLocality(cluster string, key types.NamespacedName, plan locality.Plan) {
	forgetLocality(cluster, key)
	for z, t := range plan.Zones {
		localityTier.WithLabelValues(cluster, key.Namespace, key.Name, "zone/"+z).Set(float64(t))
	}
	localityTier.WithLabelValues(cluster, key.Namespace, key.Name, "dns").Set(float64(plan.DNSTier))
	for t, n := range plan.Ready {
		localityEndpoints.WithLabelValues(cluster, key.Namespace, key.Name, t.String()).Set(float64(n))
	}
}

// forgetLocality removes an import's locality gauges: it is gone, or no longer ranks its endpoints.
func forgetLocality(cluster string, key types.NamespacedName) {
	match := prometheus.Labels{"cluster_id": cluster, "namespace": key.Namespace, "service": key.Name}
	localityTier.DeletePartialMatch(match)
	localityEndpoints.DeletePartialMatch(match)
}

// countWrites returns cfg with its write requests counted in writesTotal.
func countWrites(cfg *rest.Config, cluster, target string) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			// Access and token reviews are POSTs that store nothing: the broker scope's poll asks them.
			if res := resourceOf(req.URL.Path); req.Method != http.MethodGet && !strings.HasSuffix(res, "reviews") {
				writesTotal.WithLabelValues(cluster, target, req.Method, res).Inc()
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// resourceOf extracts the resource from an API path, /api/v1/namespaces/x/services/y or
// /apis/group/version/namespaces/x/resource/name[/status], keeping the label's cardinality bounded.
func resourceOf(path string) string {
	parts := strings.FieldsFunc(path, func(r rune) bool { return r == '/' })
	i := 2 // after "api", "v1"
	if len(parts) > 0 && parts[0] == "apis" {
		i = 3 // after "apis", group, version
	}
	if len(parts) > i+2 && parts[i] == "namespaces" {
		i += 2
	}
	if len(parts) > i {
		return parts[i]
	}
	return "other"
}

// The state metrics are read from a controller's own state when scraped rather than kept in gauges, so that a
// member or an object that is gone leaves no series behind and nothing is counted twice.
var (
	memberAliveDesc = prometheus.NewDesc("mcs_controller_member_alive",
		"1 while a member's broker Lease is within the grace and its endpoints are imported, else 0; seen by "+
			"observer_cluster_id, the elected controller of a member.",
		[]string{"observer_cluster_id", "cluster_id"}, nil)
	leaseAgeDesc = prometheus.NewDesc("mcs_controller_member_lease_age_seconds",
		"Time since observer_cluster_id saw a member's broker Lease renewed, on its own clock: a member is lost "+
			"once this passes the lease grace.",
		[]string{"observer_cluster_id", "cluster_id"}, nil)
	reachableDesc = prometheus.NewDesc("mcs_controller_member_data_plane_reachable",
		"1 while a member's endpoints answer observer_cluster_id's probes from its own network position, 0 once "+
			"they stopped answering (--probe-data-plane); absent while unknown: not probed yet, or nothing to probe.",
		[]string{"observer_cluster_id", "cluster_id"}, nil)
	exportsDesc = prometheus.NewDesc("mcs_controller_service_exports",
		"ServiceExports of this member by condition (Valid, Ready, Conflict), status and reason, as their status says.",
		[]string{"cluster_id", "condition", "status", "reason"}, nil)
	importsDesc = prometheus.NewDesc("mcs_controller_service_imports",
		"ServiceImports of this member by condition (Ready, ClusterLocalService), status and reason (Pending while "+
			"their exporters' slices or this member's DNS are awaited), as their status says.",
		[]string{"cluster_id", "condition", "status", "reason"}, nil)
	pendingSinceDesc = prometheus.NewDesc("mcs_controller_service_imports_pending_since_timestamp_seconds",
		"When the longest-waiting ServiceImport still Ready=False/Pending turned so (its condition's "+
			"lastTransitionTime); absent while none is Pending.",
		[]string{"cluster_id"}, nil)
)

// states collects the state metrics of every controller that runs in this process.
var states = &stateCollector{runs: map[*runState]struct{}{}}

// runState is what one run of a controller's manager shows the scrape.
type runState struct {
	id       string
	liveness *broker.Liveness
	reach    *reach.Tracker // nil without the data-plane probe
	local    client.Reader  // the member's cache
}

// stateCollector is a prometheus.Collector over the running controllers.
type stateCollector struct {
	mu   sync.Mutex
	runs map[*runState]struct{}
}

// add makes a run's state scraped, until the returned function is called.
func (s *stateCollector) add(run *runState) (remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs[run] = struct{}{}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.runs, run)
	}
}

// Describe implements prometheus.Collector.
func (s *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{memberAliveDesc, leaseAgeDesc, reachableDesc, exportsDesc, importsDesc, pendingSinceDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	runs := make([]*runState, 0, len(s.runs))
	for r := range s.runs {
		runs = append(runs, r)
	}
	s.mu.Unlock()
	for _, r := range runs {
		r.collect(ch, time.Now())
	}
}

// collect reports a run once it leads: only the elected replica observes the members and writes the conditions,
// and the others would count the same objects again.
func (r *runState) collect(ch chan<- prometheus.Metric, now time.Time) {
	select {
	case <-r.liveness.Observed():
	default:
		return
	}
	for id, m := range r.liveness.Members(now) {
		ch <- prometheus.MustNewConstMetric(memberAliveDesc, prometheus.GaugeValue, gauge(m.Alive), r.id, id)
		ch <- prometheus.MustNewConstMetric(leaseAgeDesc, prometheus.GaugeValue, m.Age.Seconds(), r.id, id)
	}
	if r.reach != nil {
		for id, state := range r.reach.States() {
			if state != reach.Unknown {
				ch <- prometheus.MustNewConstMetric(reachableDesc, prometheus.GaugeValue, gauge(state == reach.Reachable), r.id, id)
			}
		}
	}
	// The cache answers at once once synced; the timeout only bounds a scrape racing the manager's stop.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var exports mcsv1beta1.ServiceExportList
	if err := r.local.List(ctx, &exports); err == nil {
		byCondition := conditionCounts{}
		for i := range exports.Items {
			byCondition.add(exports.Items[i].Status.Conditions)
		}
		byCondition.emit(ch, exportsDesc, r.id)
	}
	var imports mcsv1beta1.ServiceImportList
	if err := r.local.List(ctx, &imports); err == nil {
		byCondition := conditionCounts{}
		var pendingSince time.Time
		for i := range imports.Items {
			conds := imports.Items[i].Status.Conditions
			byCondition.add(conds)
			for _, c := range conds {
				if c.Type == string(mcsv1beta1.ServiceImportConditionReady) && c.Status == metav1.ConditionFalse &&
					c.Reason == string(mcsv1beta1.ServiceImportReasonPending) &&
					(pendingSince.IsZero() || c.LastTransitionTime.Time.Before(pendingSince)) {
					pendingSince = c.LastTransitionTime.Time
				}
			}
		}
		byCondition.emit(ch, importsDesc, r.id)
		if !pendingSince.IsZero() {
			ch <- prometheus.MustNewConstMetric(pendingSinceDesc, prometheus.GaugeValue, float64(pendingSince.UnixNano())/1e9, r.id)
		}
	}
}

// conditionCounts counts objects by condition type, status and reason.
type conditionCounts map[[3]string]int

func (cc conditionCounts) add(conds []metav1.Condition) {
	for _, c := range conds {
		cc[[3]string{c.Type, string(c.Status), c.Reason}]++
	}
}

func (cc conditionCounts) emit(ch chan<- prometheus.Metric, desc *prometheus.Desc, id string) {
	for k, n := range cc {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(n), id, k[0], k[1], k[2])
	}
}
