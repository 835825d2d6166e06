package multicluster

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/clusterid"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/plugin/kubesource"
	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/framework/promtool"
)

// The integration tests share one member cluster, started on first use, whose cluster id spans two labels.
var (
	csOnce sync.Once
	cs     *clusterset.ClusterSet
	csErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cs != nil {
		if err := cs.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the clusterset:", err)
		}
	}
	os.Exit(code)
}

func member(t *testing.T) *clusterset.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane")
	}
	csOnce.Do(func() {
		start := time.Now()
		cs, csErr = clusterset.Start(context.Background(), clusterset.Options{
			Members: []string{"cluster-a"}, ClusterIDs: map[string]string{"cluster-a": "east.prod"}, NoBroker: true,
		})
		t.Logf("cluster started in %s", time.Since(start).Round(time.Millisecond))
	})
	if csErr != nil {
		t.Fatal(csErr)
	}
	return cs.Members[0]
}

const pollTimeout = 30 * time.Second

// startPlugin runs the plugin against c until the test ends and waits until it is ready.
func startPlugin(t *testing.T, c *clusterset.Cluster, noEndpoints bool) *MultiCluster {
	t.Helper()
	m, src, err := newWithSource(&config{zone: "clusterset.local.", reverse: []string{"in-addr.arpa."}, ttl: 5,
		noEndpoints: noEndpoints, managers: []string{names.ManagedBy}}, c.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Next = nextHandler()
	src.Start()
	t.Cleanup(src.Stop)
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, pollTimeout, true,
		func(context.Context) (bool, error) { return m.Ready(), nil }); err != nil {
		t.Fatal("plugin not ready:", err)
	}
	return m
}

// eventually asks name/qtype until the reply's rcode and answer data are want, failing after pollTimeout.
func eventually(t *testing.T, m *MultiCluster, name string, qtype uint16, rcode int, want ...string) time.Duration {
	t.Helper()
	slices.Sort(want)
	start := time.Now()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, pollTimeout, true,
		func(context.Context) (bool, error) {
			_, msg := serve(t, m, name, qtype)
			if msg == nil {
				last = "no reply"
				return false, nil
			}
			got := rdata(msg.Answer)
			last = fmt.Sprintf("%s %v", dns.RcodeToString[msg.Rcode], got)
			return msg.Rcode == rcode && slices.Equal(got, want), nil
		})
	if err != nil {
		t.Fatalf("%s %s: want %s %v, last got %s", name, dns.TypeToString[qtype], dns.RcodeToString[rcode], want, last)
	}
	return time.Since(start)
}

// rdata returns the sorted data of records: addresses, "port target" for SRV.
func rdata(rrs []dns.RR) []string {
	out := mcstest.Addresses(rrs)
	for _, rr := range rrs {
		switch r := rr.(type) {
		case *dns.A, *dns.AAAA:
		case *dns.SRV:
			out = append(out, fmt.Sprintf("%d %s", r.Port, r.Target))
		case *dns.PTR:
			out = append(out, r.Ptr)
		default:
			out = append(out, rr.String())
		}
	}
	slices.Sort(out)
	return out
}

// read returns the current value of one metric.
func read(t *testing.T, metric prometheus.Metric) *dto.Metric {
	t.Helper()
	var m dto.Metric
	if err := metric.Write(&m); err != nil {
		t.Fatal(err)
	}
	return &m
}

func TestIntegrationClusterSetIP(t *testing.T) {
	c := member(t)
	ctx := context.Background()
	m := startPlugin(t, c, false)
	clusterset.CreateNamespace(t, "it-vip", c)
	const name = "web.it-vip.svc.clusterset.local."
	si := mcstest.Import("it-vip", "web", mcsv1beta1.ClusterSetIP, []string{"10.250.0.10", "fd00:250::10"},
		mcstest.Port("http", corev1.ProtocolTCP, 80), mcstest.Port("dns", corev1.ProtocolUDP, 53),
		mcstest.Port("dns-tcp", corev1.ProtocolTCP, 53))
	serial := m.index.Snapshot().Serial()
	if err := c.Client.Create(ctx, si); err != nil {
		t.Fatal(err)
	}
	d := eventually(t, m, name, dns.TypeA, dns.RcodeSuccess, "10.250.0.10")
	t.Logf("created ServiceImport answered after %s", d)
	eventually(t, m, name, dns.TypeAAAA, dns.RcodeSuccess, "fd00:250::10")
	eventually(t, m, name, dns.TypeSRV, dns.RcodeSuccess, "53 "+name, "80 "+name)
	eventually(t, m, "_http._tcp."+name, dns.TypeSRV, dns.RcodeSuccess, "80 "+name)
	eventually(t, m, "_dns._udp."+name, dns.TypeSRV, dns.RcodeSuccess, "53 "+name)
	eventually(t, m, "10.0.250.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, name)
	if m.index.Snapshot().Serial() == serial {
		t.Error("the SOA serial did not move")
	}
	if m := read(t, indexSize.WithLabelValues("services")); m.GetGauge().GetValue() < 1 {
		t.Errorf("index_size{kind=services} = %v", m.GetGauge().GetValue())
	}
	if m := read(t, propagationDuration); m.GetHistogram().GetSampleCount() < 1 {
		t.Error("propagation_duration_seconds has no sample")
	}
	if m := read(t, rebuildDuration); m.GetHistogram().GetSampleCount() < 1 {
		t.Error("index_rebuild_duration_seconds has no sample")
	}

	si.Spec.IPs, si.Spec.IPFamilies = []string{"10.250.0.20"}, []corev1.IPFamily{corev1.IPv4Protocol}
	if err := c.Client.Update(ctx, si); err != nil {
		t.Fatal(err)
	}
	d = eventually(t, m, name, dns.TypeA, dns.RcodeSuccess, "10.250.0.20")
	t.Logf("changed VIP answered after %s", d)
	eventually(t, m, name, dns.TypeAAAA, dns.RcodeSuccess)

	if err := c.Client.Delete(ctx, si); err != nil {
		t.Fatal(err)
	}
	eventually(t, m, name, dns.TypeA, dns.RcodeNameError)
	eventually(t, m, "_http._tcp."+name, dns.TypeSRV, dns.RcodeNameError)
}

func TestIntegrationHeadless(t *testing.T) {
	c := member(t)
	ctx := context.Background()
	m := startPlugin(t, c, false)
	const ns = "it-headless"
	clusterset.CreateNamespace(t, ns, c)
	const name = "db." + ns + ".svc.clusterset.local."
	ports := []discoveryv1.EndpointPort{mcstest.SlicePort("sql", corev1.ProtocolTCP, 5432)}
	if err := c.Client.Create(ctx, mcstest.Import(ns, "db", mcsv1beta1.Headless, nil, mcstest.Port("sql", corev1.ProtocolTCP, 5432))); err != nil {
		t.Fatal(err)
	}
	eventually(t, m, name, dns.TypeA, dns.RcodeNameError) // no endpoint yet

	east4 := mcstest.Slice(ns, "db", "east.prod", discoveryv1.AddressTypeIPv4, ports,
		mcstest.Endpoint("10.1.0.5", "db-0", true), mcstest.Endpoint("10.1.0.6", "db-1", false))
	east6 := mcstest.Slice(ns, "db", "east.prod", discoveryv1.AddressTypeIPv6, ports, mcstest.Endpoint("fd01::5", "db-0", true))
	west := mcstest.Slice(ns, "db", "cluster-b", discoveryv1.AddressTypeIPv4, ports, mcstest.Endpoint("10.2.0.7", "", true))
	local := mcstest.Slice(ns, "db", "unlabelled", discoveryv1.AddressTypeIPv4, ports, mcstest.Endpoint("10.9.9.9", "", true))
	delete(local.Labels, mcsv1beta1.LabelSourceCluster)
	for _, sl := range []*discoveryv1.EndpointSlice{east4, east6, west, local} {
		if err := c.Client.Create(ctx, sl); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, m, name, dns.TypeA, dns.RcodeSuccess, "10.1.0.5", "10.2.0.7")
	eventually(t, m, name, dns.TypeAAAA, dns.RcodeSuccess, "fd01::5")
	db0 := "db-0.east.prod." + name
	eventually(t, m, db0, dns.TypeA, dns.RcodeSuccess, "10.1.0.5")
	eventually(t, m, db0, dns.TypeAAAA, dns.RcodeSuccess, "fd01::5")
	eventually(t, m, "10-2-0-7.cluster-b."+name, dns.TypeA, dns.RcodeSuccess, "10.2.0.7")
	eventually(t, m, "db-1.east.prod."+name, dns.TypeA, dns.RcodeNameError)
	eventually(t, m, "east.prod."+name, dns.TypeA, dns.RcodeNameError)
	eventually(t, m, "_sql._tcp."+name, dns.TypeSRV, dns.RcodeSuccess, "5432 "+db0, "5432 10-2-0-7.cluster-b."+name)
	eventually(t, m, "5.0.1.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, db0)

	east4.Endpoints[1].Conditions.Ready = ptr.To(true)
	if err := c.Client.Update(ctx, east4); err != nil {
		t.Fatal(err)
	}
	d := eventually(t, m, name, dns.TypeA, dns.RcodeSuccess, "10.1.0.5", "10.1.0.6", "10.2.0.7")
	t.Logf("endpoint readiness answered after %s", d)

	for _, sl := range []*discoveryv1.EndpointSlice{east4, east6} {
		if err := c.Client.Delete(ctx, sl); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, m, name, dns.TypeA, dns.RcodeSuccess, "10.2.0.7")
	eventually(t, m, db0, dns.TypeA, dns.RcodeNameError)

	west.Endpoints[0].Conditions.Ready = ptr.To(false)
	if err := c.Client.Update(ctx, west); err != nil {
		t.Fatal(err)
	}
	eventually(t, m, name, dns.TypeA, dns.RcodeNameError) // no ready endpoint left
}

// TestIntegrationHostileSlices writes, through a real API server, the slices a namespace user can write next to a
// headless import: the review's payload (finding #1: a cluster id of 52 'a', a dot, 60 'b' and a backslash, with
// the hashed source-cluster label and the cluster-id annotation that match it), which made every CoreDNS replica
// panic, and a slice that another manager labels as imported. The plugin answers with the honest cluster's
// endpoint alone and counts the refused slice.
func TestIntegrationHostileSlices(t *testing.T) {
	c := member(t)
	ctx := context.Background()
	m := startPlugin(t, c, false)
	const ns = "it-hostile"
	clusterset.CreateNamespace(t, ns, c)
	const name = "web." + ns + ".svc.clusterset.local."
	ports := []discoveryv1.EndpointPort{mcstest.SlicePort("sql", corev1.ProtocolTCP, 5432)}
	if err := c.Client.Create(ctx, mcstest.Import(ns, "web", mcsv1beta1.Headless, nil, mcstest.Port("sql", corev1.ProtocolTCP, 5432))); err != nil {
		t.Fatal(err)
	}
	before := read(t, dropped.WithLabelValues(kubesource.DropInvalidClusterID)).GetCounter().GetValue()
	id := strings.Repeat("a", 52) + "." + strings.Repeat("b", 60) + "\\"
	payload := mcstest.Slice(ns, "web", names.LabelValue(id), discoveryv1.AddressTypeIPv4, ports, mcstest.Endpoint("10.3.0.66", "db-0", true))
	payload.Name = "payload"
	payload.Annotations = map[string]string{names.AnnotationClusterID: id}
	unmanaged := mcstest.Slice(ns, "web", "west", discoveryv1.AddressTypeIPv4, ports, mcstest.Endpoint("10.3.0.67", "db-0", true))
	delete(unmanaged.Labels, discoveryv1.LabelManagedBy)
	honest := mcstest.Slice(ns, "web", "east.prod", discoveryv1.AddressTypeIPv4, ports, mcstest.Endpoint("10.3.0.1", "db-0", true))
	for _, sl := range []*discoveryv1.EndpointSlice{payload, unmanaged, honest} {
		if err := c.Client.Create(ctx, sl); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, m, name, dns.TypeA, dns.RcodeSuccess, "10.3.0.1")
	eventually(t, m, "_sql._tcp."+name, dns.TypeSRV, dns.RcodeSuccess, "5432 db-0.east.prod."+name)
	eventually(t, m, "db-0.west."+name, dns.TypeA, dns.RcodeNameError)
	if after := read(t, dropped.WithLabelValues(kubesource.DropInvalidClusterID)).GetCounter().GetValue(); after <= before {
		t.Errorf("dropped_total{reason=%q} = %v, was %v", kubesource.DropInvalidClusterID, after, before)
	}
}

// TestIntegrationStartWaitsForSync is finding #8: a server starting, as after every Corefile reload, with an
// import already there answers it from its first query, where it used to answer SERVFAIL until its fresh
// informers had listed everything.
func TestIntegrationStartWaitsForSync(t *testing.T) {
	c := member(t)
	ctx := context.Background()
	const ns = "it-reload"
	clusterset.CreateNamespace(t, ns, c)
	if err := c.Client.Create(ctx, mcstest.Import(ns, "web", mcsv1beta1.ClusterSetIP, []string{"10.250.3.1"})); err != nil {
		t.Fatal(err)
	}
	m, src, err := newWithSource(&config{zone: "clusterset.local.", ttl: 5}, c.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Next = nextHandler()
	began := time.Now()
	start(src, syncTimeout)
	t.Cleanup(func() { stop(src) })
	t.Logf("started in %s", time.Since(began).Round(time.Millisecond))
	rcode, msg := serve(t, m, "web."+ns+".svc.clusterset.local.", dns.TypeA)
	if rcode != dns.RcodeSuccess || msg == nil || !slices.Equal(rdata(msg.Answer), []string{"10.250.3.1"}) {
		t.Errorf("first query after start: rcode %s, reply %v; want the VIP", dns.RcodeToString[rcode], msg)
	}
	if !m.Ready() {
		t.Error("not ready after start")
	}
}

// TestIntegrationMetrics checks the metrics CoreDNS serves with promtool, as Prometheus reads them, once a started
// plugin has synced and told its cluster id.
func TestIntegrationMetrics(t *testing.T) {
	c := member(t)
	m, src, err := newWithSource(&config{zone: "clusterset.local.", ttl: 5}, c.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Next = nextHandler()
	start(src, syncTimeout)
	t.Cleanup(func() { stop(src) })
	reportClusterID(c.Config, "")
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"coredns_multicluster_synced": 1, "coredns_multicluster_cluster_info": 1}
	for _, f := range families {
		if v, ok := want[f.GetName()]; ok && len(f.GetMetric()) == 1 && f.GetMetric()[0].GetGauge().GetValue() == v {
			delete(want, f.GetName())
		}
	}
	if len(want) > 0 {
		t.Errorf("missing or wrong: %v", want)
	}
	promtool.CheckMetrics(t, prometheus.DefaultGatherer)
}

func TestIntegrationNamespaceDeleted(t *testing.T) {
	c := member(t)
	ctx := context.Background()
	m := startPlugin(t, c, false)
	const ns = "it-gone"
	clusterset.CreateNamespace(t, ns, c)
	if err := c.Client.Create(ctx, mcstest.Import(ns, "web", mcsv1beta1.ClusterSetIP, []string{"10.250.1.1"})); err != nil {
		t.Fatal(err)
	}
	eventually(t, m, "web."+ns+".svc.clusterset.local.", dns.TypeA, dns.RcodeSuccess, "10.250.1.1")
	eventually(t, m, ns+".svc.clusterset.local.", dns.TypeA, dns.RcodeSuccess)
	if err := c.Kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, m, "web."+ns+".svc.clusterset.local.", dns.TypeA, dns.RcodeNameError)
	eventually(t, m, ns+".svc.clusterset.local.", dns.TypeA, dns.RcodeNameError)
}

func TestIntegrationNoEndpoints(t *testing.T) {
	c := member(t)
	ctx := context.Background()
	m := startPlugin(t, c, true)
	const ns = "it-noendpoints"
	clusterset.CreateNamespace(t, ns, c)
	ports := []discoveryv1.EndpointPort{mcstest.SlicePort("http", corev1.ProtocolTCP, 80)}
	if err := c.Client.Create(ctx, mcstest.Import(ns, "vip", mcsv1beta1.ClusterSetIP, []string{"10.250.2.1"})); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.Create(ctx, mcstest.Import(ns, "hl", mcsv1beta1.Headless, nil)); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.Create(ctx, mcstest.Slice(ns, "hl", "east.prod", discoveryv1.AddressTypeIPv4, ports,
		mcstest.Endpoint("10.1.2.3", "", true))); err != nil {
		t.Fatal(err)
	}
	eventually(t, m, "vip."+ns+".svc.clusterset.local.", dns.TypeA, dns.RcodeSuccess, "10.250.2.1")
	// Without an endpoint watch a headless service has no ready endpoint: NXDOMAIN, never SERVFAIL.
	eventually(t, m, "hl."+ns+".svc.clusterset.local.", dns.TypeA, dns.RcodeNameError)
}

func TestIntegrationClusterID(t *testing.T) {
	c := member(t)
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	id, _, err := clusterid.Read(context.Background(), dyn)
	if err != nil || id != "east.prod" {
		t.Errorf("cluster id = %q, %v; want east.prod", id, err)
	}
}

func TestIntegrationBadServer(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a connection to fail")
	}
	cfg := &config{zone: "clusterset.local.", ttl: 5, endpoint: "http://127.0.0.1:1"}
	rc, err := cfg.restConfig()
	if err != nil {
		t.Fatal(err)
	}
	m, src, err := newWithSource(cfg, rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Next = nextHandler()
	src.Start()
	defer src.Stop()
	if rcode, msg := serve(t, m, "web.ns.svc.clusterset.local.", dns.TypeA); rcode != dns.RcodeServerFailure || msg != nil {
		t.Errorf("unreachable API server: rcode %s, reply %v; want SERVFAIL", dns.RcodeToString[rcode], msg)
	}
	if m.Ready() {
		t.Error("ready without an API server")
	}
}
