package controller

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
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
)

func init() {
	metrics.Registry.MustRegister(writesTotal, memberAlive, brokerReachable)
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
