package controller

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"vksfleet.dev/fleet/mcs/locality"
)

// Metrics beyond controller-runtime's own (reconciles, workqueues, client requests), served on the metrics
// address. The cluster label keeps controllers sharing a process apart.
var (
	writesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcs_controller_api_writes_total",
		Help: "Write requests the controller sent, by target API server (local or broker) and HTTP method. " +
			"Idle clustersets and restarts should add only broker Lease renewals.",
	}, []string{"cluster", "target", "method", "resource"})
	memberAlive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcs_controller_member_alive",
		Help: "1 while a member's broker Lease is within the grace and its endpoints are imported, else 0.",
	}, []string{"cluster", "member"})
	brokerReachable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcs_controller_broker_reachable",
		Help: "1 while this member's last broker Lease renewal succeeded.",
	}, []string{"cluster"})
	brokerViewTrusted = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcs_controller_broker_view_trusted",
		Help: "1 while the broker's view may be acted on with withdrawals; 0 while they are held back (after a start, " +
			"or while this member's Lease or sentinel record is missing or cannot be renewed).",
	}, []string{"cluster"})
	clusterIDConflict = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcs_controller_cluster_id_conflict",
		Help: "1 while another controller renews this member's broker Lease: two clusters claim the cluster id.",
	}, []string{"cluster"})
	localityTier = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcs_controller_locality_tier",
		Help: "The tier an import's traffic uses, per node zone (scope=zone/<zone>) and for headless DNS " +
			"(scope=dns): 0 same-zone, 1 same-cluster, 2 same-region, 3 anywhere, 4 draining, 5 none ready.",
	}, []string{"cluster", "namespace", "service", "scope"})
	localityEndpoints = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcs_controller_locality_ready_endpoints",
		Help: "Ready endpoints of an import by tier, seen from this member: same-cluster, same-region, anywhere, draining.",
	}, []string{"cluster", "namespace", "service", "tier"})
	refusedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcs_controller_refused_total",
		Help: "Values another cluster or a namespace user wrote that the controller left out of an import, by reason " +
			"(package admit): broker records, cluster ids, ports, exported labels and annotations, endpoints, slices. " +
			"A refusal counts once, when it appears, however often its service is reconciled while it stands.",
	}, []string{"cluster", "reason"})
	failoversTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcs_controller_locality_failovers_total",
		Help: "Times a node zone or the headless DNS of an import moved to a farther tier.",
	}, []string{"cluster"})
)

func init() {
	metrics.Registry.MustRegister(writesTotal, memberAlive, brokerReachable, brokerViewTrusted, clusterIDConflict, localityTier, localityEndpoints, refusedTotal, failoversTotal)
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
	match := prometheus.Labels{"cluster": cluster, "namespace": key.Namespace, "service": key.Name}
	localityTier.DeletePartialMatch(match)
	localityEndpoints.DeletePartialMatch(match)
}

// countWrites returns cfg with its write requests counted in writesTotal.
func countWrites(cfg *rest.Config, cluster, target string) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet {
				writesTotal.WithLabelValues(cluster, target, req.Method, resourceOf(req.URL.Path)).Inc()
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
