// Package monitoring tests the alert rules and the dashboard of build/deploy/monitoring against a real Prometheus
// (Debian's, run by the fleet with framework.Options.Monitoring) scraping a running clusterset with nodes, 2 members
// with cluster-b exporting one service:
//
//   - every target (each member's controller and CoreDNS pods and every node's kube-proxy) is up;
//   - every dashboard panel's query and every alert expression, read from dashboard.json and rules.yaml, evaluates
//     without error; every panel query returns data, but for those that ask only for metrics a healthy clusterset
//     does not have (mayBeEmpty), and every alert expression returns nothing: they are thresholds on trouble;
//   - cluster-b's controller stopped, MCSMemberLeaseLost fires for cluster-b, and resolves once it is started again;
//     at the same time, cluster-a's cluster DNS (kubeadm's CoreDNS, the fleet's default standalone DNS mode) put back
//     to its Corefile from before join, its controller's mcs_controller_dns_path_ok turns 0 within a minute of the
//     last replica's reload, MCSClusterSetDNSPathBroken fires while the import stays Ready, and both resolve once
//     the forward block is back.
package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/build/deploy/monitoring"
	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

const (
	ns      = "monitoring"
	nodes   = 2
	timeout = 2 * time.Minute
	// leaseLostTimeout bounds the wait for MCSMemberLeaseLost: the controllers' lease grace (5 s, framework.StartTest),
	// the alert's `for: 1m`, and a few evaluation intervals.
	leaseLostTimeout = 3 * time.Minute
	// corefileReload bounds the wait for a Corefile written to the ConfigMap to be served by every cluster DNS
	// replica: the kubelet's update of the mounted ConfigMap (about a minute), then the reload plugin's check (30 s).
	corefileReload = 3 * time.Minute
	// dnsPathBound is how soon after the cluster DNS stopped forwarding the controller must say so (issue 39: within
	// a minute): two questions in a row, 30 s apart, and a scrape's margin.
	dnsPathBound = 65 * time.Second
)

// mayBeEmpty are the metrics whose series appear only once something goes wrong: counters of errors, refusals,
// failovers and drops (no series before the first), the oldest Pending import's time (absent while none is
// Pending), and the cluster id conflict gauge, which the controller sets only when a conflict starts or ends. A
// query that asks for nothing else may return no data on a healthy clusterset.
var mayBeEmpty = map[string]bool{
	"mcs_controller_cluster_id_conflict":                             true,
	"mcs_controller_reconcile_errors_total":                          true,
	"mcs_controller_refused_total":                                   true,
	"mcs_controller_locality_failovers_total":                        true,
	"mcs_controller_service_imports_pending_since_timestamp_seconds": true,
	"coredns_multicluster_dropped_total":                             true,
	"coredns_multicluster_sync_errors_total":                         true,
}

// metricName is a metric name of ours in a query.
var metricName = regexp.MustCompile(`\b(?:mcs_controller|coredns_multicluster)_[a-z_]+`)

func TestMonitoring(t *testing.T) {
	if err := dataplane.CheckHost(); err != nil {
		t.Skip(err)
	}
	// envtest logs through controller-runtime, which otherwise complains that no logger was set.
	ctrl.SetLogger(logr.Discard())
	start := time.Now()
	f, _ := framework.StartTest(t, 2, nodes, func(o *framework.Options) { o.Monitoring = true })
	t.Logf("fleet with 2 members x %d nodes and Prometheus up in %s", nodes, time.Since(start).Round(100*time.Millisecond))
	prom := &prometheus{url: f.PrometheusURL}
	a, b := f.Member("cluster-a"), f.Member("cluster-b")
	ctx := context.Background()

	for _, m := range f.Members {
		if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := workload.Deploy(ctx, b.Client, ns, "serve", b.Name, 1, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Client.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "serve", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	poll.T(t, timeout, "cluster-a's ServiceImport of serve is Ready", func() error {
		var si mcsv1beta1.ServiceImport
		if err := a.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "serve"}, &si); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady)) {
			return fmt.Errorf("conditions %v", si.Status.Conditions)
		}
		return nil
	})

	// Per member: 2 controller and 2 CoreDNS replicas, and a kube-proxy per node.
	want := len(f.Members) * (2 + 2 + nodes)
	poll.T(t, timeout, fmt.Sprintf("Prometheus has %d targets, all up", want), func() error { return prom.targetsUp(want) })
	t.Logf("%d targets up after %s", want, time.Since(start).Round(100*time.Millisecond))

	panels, err := monitoring.Panels(monitoring.DashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var queries []check
	for _, p := range panels {
		for _, target := range p.Targets {
			queries = append(queries, check{"panel " + p.Title, target.Expr, !onlyMayBeEmpty(target.Expr)})
		}
	}
	alerts, err := monitoring.Alerts(monitoring.RulesFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range alerts {
		queries = append(queries, check{"alert " + r.Alert, r.Expr, false})
	}
	// Rates need two scrapes, the leaders' state gauges a scrape after the election, and a controller's view of the
	// broker is untrusted (MCSBrokerViewUntrusted's expression) for one lease grace after its start.
	var wrong []string
	err = poll.Until(ctx, time.Second, timeout, func() error {
		wrong = nil
		for _, q := range queries {
			n, err := prom.query(q.expr)
			if err != nil {
				t.Fatalf("%s: %s: %v", q.what, q.expr, err)
			}
			if q.data && n == 0 {
				wrong = append(wrong, fmt.Sprintf("%s: %s returns no data", q.what, q.expr))
			}
			if strings.HasPrefix(q.what, "alert ") && n > 0 {
				wrong = append(wrong, fmt.Sprintf("%s: %s returns %d series on a healthy clusterset", q.what, q.expr, n))
			}
		}
		if len(wrong) > 0 {
			return fmt.Errorf("%d queries wrong", len(wrong))
		}
		return nil
	})
	for _, w := range wrong {
		t.Error(w)
	}
	if err != nil {
		t.Errorf("queries: %v", err)
	}
	t.Logf("%d panels' queries and %d alert expressions checked after %s", len(panels), len(alerts), time.Since(start).Round(100*time.Millisecond))

	// Two troubles at once, each with its alert: cluster-b's controller stopped (MCSMemberLeaseLost), and cluster-a's
	// cluster DNS put back to its Corefile from before join, as a GitOps tool or a managed add-on's update does, which
	// drops the block that forwards clusterset.local to ours (MCSClusterSetDNSPathBroken, issue 39: seen within a
	// minute of the last replica's reload, while the import stays Ready).
	name := "serve." + ns + ".svc.clusterset.local"
	poll.T(t, timeout, "cluster-a's mcs_controller_dns_path_ok is 1", func() error { return dnsPathOK(a, 1) })
	joined := setCorefile(t, a, originalCorefile(t, a))
	stopped := time.Now()
	if err := b.StopController(); err != nil {
		t.Fatal(err)
	}
	// The replicas read the ConfigMap as the kubelet updates its volume, then reload: the path is broken once none
	// of them answers the name any more.
	poll.T(t, corefileReload, "no replica of cluster-a's cluster DNS answers "+name, func() error { return noneAnswers(ctx, a, name) })
	broken := time.Now()
	poll.T(t, dnsPathBound, "cluster-a's mcs_controller_dns_path_ok turns 0", func() error { return dnsPathOK(a, 0) })
	t.Logf("cluster-a's reverted Corefile: mcs_controller_dns_path_ok 0 %s after the last replica stopped forwarding",
		time.Since(broken).Round(100*time.Millisecond))
	troubles := []struct{ alert, id string }{{"MCSMemberLeaseLost", b.ID}, {"MCSClusterSetDNSPathBroken", a.ID}}
	for _, trouble := range troubles {
		prom.waitAlert(t, trouble.alert, trouble.id, "firing")
		t.Logf("%s firing %s after the troubles began", trouble.alert, time.Since(stopped).Round(100*time.Millisecond))
	}
	var si mcsv1beta1.ServiceImport
	if err := a.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "serve"}, &si); err != nil || !meta.IsStatusConditionTrue(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady)) {
		t.Errorf("cluster-a's import of serve, with its DNS path broken: %v, conditions %v; want Ready", err, si.Status.Conditions)
	}

	started := time.Now()
	setCorefile(t, a, joined)
	if err := b.StartController(); err != nil {
		t.Fatal(err)
	}
	for _, trouble := range troubles {
		prom.waitAlert(t, trouble.alert, trouble.id, "")
		t.Logf("%s resolved %s after the troubles were undone", trouble.alert, time.Since(started).Round(100*time.Millisecond))
	}
}

// dnsPathOK returns nil once the member's elected controller says mcs_controller_dns_path_ok is want.
func dnsPathOK(m *framework.Member, want float64) error {
	v, err := m.ControllerMetric("mcs_controller_dns_path_ok", map[string]string{"cluster_id": m.ID})
	if err == nil && v != want {
		err = fmt.Errorf("%v", v)
	}
	return err
}

// originalCorefile is the member's Corefile before join, as join's backup (install.DNSBackup, key Corefile) keeps it.
func originalCorefile(t *testing.T, m *framework.Member) string {
	t.Helper()
	var backup corev1.ConfigMap
	if err := m.Client.Get(context.Background(), client.ObjectKey{Namespace: "kube-system", Name: install.DNSBackup}, &backup); err != nil {
		t.Fatal(err)
	}
	corefile, ok := backup.Data["Corefile"]
	if !ok || strings.Contains(corefile, "clusterset.local") {
		t.Fatalf("%s's DNS backup holds no Corefile without clusterset.local: %q", m.Name, corefile)
	}
	return corefile
}

// setCorefile writes corefile into the member's ConfigMap kube-system/coredns, and returns what it held.
func setCorefile(t *testing.T, m *framework.Member, corefile string) (was string) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cm corev1.ConfigMap
		if err := m.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, &cm); err != nil {
			return err
		}
		was = cm.Data["Corefile"]
		cm.Data["Corefile"] = corefile
		return m.Client.Update(ctx, &cm)
	})
	if err != nil {
		t.Fatal(err)
	}
	return was
}

// noneAnswers returns nil once no replica of the member's cluster DNS answers name with an address.
func noneAnswers(ctx context.Context, m *framework.Member, name string) error {
	addrs, err := m.ClusterDNSAddrs(ctx)
	if err != nil {
		return err
	}
	for _, addr := range addrs {
		q := new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA)
		if r, _, err := (&dns.Client{Timeout: time.Second}).Exchange(q, addr); err == nil && len(mcstest.Addresses(r.Answer)) > 0 {
			return fmt.Errorf("%s still answers %v", addr, mcstest.Addresses(r.Answer))
		}
	}
	return nil
}

// check is a query of the dashboard or the rules, and whether it must return data.
type check struct {
	what, expr string
	data       bool
}

// onlyMayBeEmpty says whether every metric expr asks for is one of mayBeEmpty.
func onlyMayBeEmpty(expr string) bool {
	for _, name := range metricName.FindAllString(expr, -1) {
		if !mayBeEmpty[strings.TrimSuffix(name, "_bucket")] {
			return false
		}
	}
	return true
}

// prometheus is a client of Prometheus' HTTP API.
type prometheus struct{ url string }

// get asks path of the API and decodes the data of a successful answer into data.
func (p *prometheus) get(path string, data any) error {
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(p.url + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var answer struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if answer.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, answer.Error)
	}
	return json.Unmarshal(answer.Data, data)
}

// query evaluates expr now and returns how many series (or 1 for a scalar) it gives.
func (p *prometheus) query(expr string) (int, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.get("/api/v1/query?query="+url.QueryEscape(expr), &data); err != nil {
		return 0, err
	}
	if data.ResultType == "scalar" || data.ResultType == "string" {
		return 1, nil
	}
	var series []json.RawMessage
	err := json.Unmarshal(data.Result, &series)
	return len(series), err
}

// targetsUp returns nil once Prometheus has want active targets and every one is up.
func (p *prometheus) targetsUp(want int) error {
	var data struct {
		ActiveTargets []struct {
			Labels    map[string]string `json:"labels"`
			Health    string            `json:"health"`
			LastError string            `json:"lastError"`
		} `json:"activeTargets"`
	}
	if err := p.get("/api/v1/targets?state=active", &data); err != nil {
		return err
	}
	var down []string
	for _, t := range data.ActiveTargets {
		if t.Health != "up" {
			down = append(down, fmt.Sprintf("%s %s %s: %s %s", t.Labels["job"], t.Labels["cluster"], t.Labels["instance"], t.Health, t.LastError))
		}
	}
	if len(data.ActiveTargets) != want || len(down) > 0 {
		return fmt.Errorf("%d targets, down: %v", len(data.ActiveTargets), down)
	}
	return nil
}

// waitAlert waits, within leaseLostTimeout, until the alert name about cluster id is in state: "firing", or ""
// once it resolved.
func (p *prometheus) waitAlert(t *testing.T, name, id, state string) {
	t.Helper()
	what := name + " for " + id + " resolves"
	if state != "" {
		what = name + " " + state + " for " + id
	}
	poll.T(t, leaseLostTimeout, what, func() error {
		got, err := p.alertState(name, id)
		if err == nil && got != state {
			err = fmt.Errorf("state %q", got)
		}
		return err
	})
}

// alertState returns the state (pending, firing) of the alert name about cluster id, or "" if there is none.
func (p *prometheus) alertState(name, id string) (string, error) {
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.get("/api/v1/alerts", &data); err != nil {
		return "", err
	}
	for _, a := range data.Alerts {
		if a.Labels["alertname"] == name && a.Labels["cluster_id"] == id {
			return a.State, nil
		}
	}
	return "", nil
}
