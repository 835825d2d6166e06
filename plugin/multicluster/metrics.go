package multicluster

import (
	"context"
	"sync"
	"time"

	"github.com/coredns/coredns/plugin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"vksfleet.dev/fleet/mcs/clusterid"
	"vksfleet.dev/fleet/plugin/kubesource"
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

	answerLatency = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace: plugin.Namespace,
		Subsystem: Name,
		Name:      "endpoint_change_to_answer_seconds",
		Help: "Time from an endpoint change in the exporting cluster (its EndpointSlice's last-change-trigger-time, " +
			"carried through the broker) to this server answering with it: cross-cluster propagation, end to end, " +
			"clocks of both clusters included.",
		Buckets:                     prometheus.ExponentialBuckets(0.005, 2, 12),
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

// synced reports coredns_multicluster_synced over the sources running in this process: one per server block
// with a multicluster stanza, and during a Corefile reload the old ones as well, until they stop. It reads them
// when scraped, so that the metric cannot lag what queries see.
var synced = &syncedCollector{sources: map[*kubesource.Source]struct{}{}, desc: prometheus.NewDesc(
	prometheus.BuildFQName(plugin.Namespace, Name, "synced"),
	"1 while the informers of every multicluster server block have synced and its index holds what they listed "+
		"(the plugin answers, and reports Ready), else 0 (SERVFAIL, or fallthrough, for the zone).",
	nil, nil)}

func init() { prometheus.MustRegister(synced) }

// syncedCollector is a prometheus.Collector of the running sources' sync state.
type syncedCollector struct {
	desc    *prometheus.Desc
	mu      sync.Mutex
	sources map[*kubesource.Source]struct{}
}

// track makes src count from its start until untrack.
func (c *syncedCollector) track(src *kubesource.Source) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources[src] = struct{}{}
}

func (c *syncedCollector) untrack(src *kubesource.Source) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.sources, src)
}

// Describe implements prometheus.Collector.
func (c *syncedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector; a CoreDNS without a multicluster stanza reports nothing.
func (c *syncedCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sources) == 0 {
		return
	}
	all := true
	for src := range c.sources {
		all = all && src.HasSynced()
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, gauge(all))
}

func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// observer turns the source's measurements into metrics.
type observer struct{}

func (observer) Rebuilt(_ int, d time.Duration) { rebuildDuration.Observe(d.Seconds()) }

func (observer) Propagated(d time.Duration) { propagationDuration.Observe(d.Seconds()) }
func (observer) Answered(d time.Duration)   { answerLatency.Observe(d.Seconds()) }

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
