package multicluster

import (
	"context"
	"time"

	"github.com/coredns/coredns/plugin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"vksfleet.dev/fleet/mcs/clusterid"
)

// The metrics are registered in the default registry, which the prometheus plugin serves, like the metrics of
// every stock plugin.
var (
	indexSize = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Name,
		Name:      "index_size",
		Help:      "Entries in the multicluster index: services, owner names below them, and reverse names.",
	}, []string{"kind"})

	rebuildDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace:                   plugin.Namespace,
		Subsystem:                   Name,
		Name:                        "index_rebuild_duration_seconds",
		Help:                        "Time to rebuild the index entries of a batch of changed services and publish them.",
		Buckets:                     prometheus.ExponentialBuckets(0.00001, 4, 10),
		NativeHistogramBucketFactor: plugin.NativeHistogramBucketFactor,
	})

	propagationDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace:                   plugin.Namespace,
		Subsystem:                   Name,
		Name:                        "propagation_duration_seconds",
		Help:                        "Time from an object change reaching CoreDNS to the answers changing.",
		Buckets:                     prometheus.ExponentialBuckets(0.0001, 4, 10),
		NativeHistogramBucketFactor: plugin.NativeHistogramBucketFactor,
	})

	syncErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: Name,
		Name:      "sync_errors_total",
		Help:      "Failed discoveries, lists and watches, by resource.",
	}, []string{"resource"})

	// dropped has no label for the object or its cluster id: both are written by whoever sends the bad data, and
	// each value would be a series of its own. The log names them.
	dropped = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: Name,
		Name:      "dropped_total",
		Help: "Imported EndpointSlices, endpoints, records and service builds left out, by reason, each time " +
			"they arrive or are built.",
	}, []string{"reason"})

	clusterInfo = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Name,
		Name:      "cluster_info",
		Help:      "Constant 1, labelled with the local cluster id.",
	}, []string{"cluster_id"})
)

// observer turns the source's measurements into metrics.
type observer struct{}

func (observer) Rebuilt(_ int, d time.Duration) { rebuildDuration.Observe(d.Seconds()) }

func (observer) Propagated(d time.Duration) { propagationDuration.Observe(d.Seconds()) }

func (observer) SyncError(resource string, err error) {
	syncErrors.WithLabelValues(resource).Inc()
	log.Warningf("%s: %v", resource, err)
}

func (observer) Dropped(reason, object string, n int, why error) {
	dropped.WithLabelValues(reason).Add(float64(n))
	if object == "" {
		log.Warningf("%s: %d left out: %v", reason, n, why)
		return
	}
	log.Warningf("%s: %s: %d left out: %v", reason, object, n, why)
}

func (observer) Sized(services, names, reverse int) {
	indexSize.WithLabelValues("services").Set(float64(services))
	indexSize.WithLabelValues("names").Set(float64(names))
	indexSize.WithLabelValues("reverse").Set(float64(reverse))
}

// reportClusterID publishes the local cluster id in the cluster_info metric: the clusterid option, else the
// cluster.clusterset.k8s.io ClusterProperty.
func reportClusterID(rc *rest.Config, id string) {
	if id == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		dyn, err := dynamic.NewForConfig(rc)
		if err != nil {
			log.Warningf("cluster id: %v", err)
			return
		}
		if id, _, err = clusterid.Read(ctx, dyn); err != nil {
			log.Warningf("cluster id: %v", err)
			return
		}
		if id == "" {
			log.Info("no cluster id: no clusterid option and no ClusterProperty " + "cluster.clusterset.k8s.io")
			return
		}
	}
	log.Infof("local cluster id %q", id)
	clusterInfo.WithLabelValues(id).Set(1)
}
