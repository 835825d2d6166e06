package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"vksfleet.dev/fleet/build/deploy/monitoring"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/proc"
)

// With Options.Monitoring, the fleet runs Debian's Prometheus (/usr/bin/prometheus, `make tools`) as a process of
// its own, with its own configuration and data under the fleet's folder, on a loopback port: not Debian's
// prometheus.service, which reads /etc/prometheus and would outlive the fleet. Debian builds Prometheus without
// its Kubernetes discovery, so the fleet discovers the targets itself and hands them over in file_sd files, which
// Prometheus watches: every running controller and CoreDNS pod of every member (found through the member's API
// server by the labels build/deploy gives them, at the container port named metrics, as the ServiceMonitors of
// build/deploy/monitoring select them), polled every targetsPoll so that restarted pods are scraped at their new
// addresses within a scrape or two, and every node's kube-proxy. It loads build/deploy/monitoring/rules.yaml
// unmodified.

const (
	// PrometheusInterval is the scrape and rule evaluation interval: short, so that tests see changes in seconds.
	PrometheusInterval = 2 * time.Second
	// targetsPoll is how often the fleet looks for new or gone pods to scrape.
	targetsPoll   = time.Second
	prometheusBin = "/usr/bin/prometheus"
)

// scrapedPods are the product's pods Prometheus scrapes, by job name. Every series gets the target labels job
// and cluster, the member's name, as multi-cluster Prometheus setups label them: cluster_id is the controller's
// and plugin's own label, the member a series is about, which a target label of that name would rename to
// exported_cluster_id.
func (f *Fleet) scrapedPods() []scrapedPod {
	return []scrapedPod{{"mcs-controller", controllerPods}, {"coredns", f.dnsPods()}}
}

// scrapedPod is one job of scrapedPods.
type scrapedPod struct {
	job  string
	pods productPods
}

// targetGroup is one entry of a file_sd file.
type targetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// startPrometheus writes the configuration, the rule file and the first targets, starts Prometheus and the
// targets' poll, and returns once Prometheus is ready.
func (f *Fleet) startPrometheus(ctx context.Context) error {
	if !f.pods {
		return errors.New("fleet: monitoring needs nodes: the controller and CoreDNS run in pods")
	}
	if _, err := exec.LookPath(prometheusBin); err != nil {
		return fmt.Errorf("fleet: monitoring needs Debian's prometheus (make tools): %w", err)
	}
	dir := filepath.Join(f.dir, "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, monitoring.RulesFile, 0o644); err != nil {
		return err
	}
	config, err := yaml.Marshal(prometheusConfig(rules, filepath.Join(dir, "targets.json")))
	if err != nil {
		return err
	}
	configPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configPath, config, 0o644); err != nil {
		return err
	}
	last, err := f.writeTargets(ctx, dir, nil)
	if err != nil {
		return err
	}
	port, err := clusterset.FreePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := proc.Start(f.opts.Log, "prometheus", prometheusBin,
		"--config.file="+configPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
	)
	if err != nil {
		return err
	}
	pollCtx, cancel := context.WithCancel(context.Background())
	polled := make(chan struct{})
	f.PrometheusURL = "http://" + addr
	f.stopPrometheus = func() {
		cancel()
		<-polled
		p.Stop()
	}
	go func() {
		defer close(polled)
		tick := time.NewTicker(targetsPoll)
		defer tick.Stop()
		for {
			select {
			case <-pollCtx.Done():
				return
			case <-tick.C:
			}
			// A member's API server that does not answer (a fault) leaves its last targets in place.
			if b, err := f.writeTargets(pollCtx, dir, last); err == nil {
				last = b
			}
		}
	}()
	return p.WaitHTTP(ctx, &http.Client{Timeout: time.Second}, f.PrometheusURL+"/-/ready", time.Minute)
}

// prometheusConfig is Prometheus' configuration: one job whose targets, with their job and cluster labels, are
// in the file_sd file targets.
func prometheusConfig(rules, targets string) map[string]any {
	return map[string]any{
		"global": map[string]any{
			"scrape_interval":     PrometheusInterval.String(),
			"scrape_timeout":      PrometheusInterval.String(),
			"evaluation_interval": PrometheusInterval.String(),
		},
		"rule_files": []string{rules},
		"scrape_configs": []any{map[string]any{
			"job_name":        "fleet",
			"file_sd_configs": []any{map[string]any{"files": []string{targets}, "refresh_interval": targetsPoll.String()}},
		}},
	}
}

// writeTargets finds every member's targets and, unless they are last, writes them to dir/targets.json; it
// returns what it wrote.
func (f *Fleet) writeTargets(ctx context.Context, dir string, last []byte) ([]byte, error) {
	var groups []targetGroup
	for _, m := range f.Members {
		for _, s := range f.scrapedPods() {
			pods, err := m.pods(ctx, s.pods)
			if err != nil {
				return nil, err
			}
			for _, p := range pods {
				if t := metricsTarget(&p); t != "" {
					groups = append(groups, targetGroup{Targets: []string{t},
						Labels: map[string]string{"job": s.job, "cluster": m.Name, "pod": p.Name}})
				}
			}
		}
		for _, n := range m.Nodes {
			groups = append(groups, targetGroup{Targets: []string{netip.AddrPortFrom(n.Addrs[0], clusterset.ProxyMetricsPort).String()},
				Labels: map[string]string{"job": "kube-proxy", "cluster": m.Name, "node": n.Name}})
		}
	}
	b, err := json.Marshal(groups)
	if err != nil || bytes.Equal(b, last) {
		return last, err
	}
	// Prometheus reads the file when it changes: it must never see half of it.
	path := filepath.Join(dir, "targets.json")
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return nil, err
	}
	return b, os.Rename(path+".tmp", path)
}

// metricsTarget is the IPv4 address and metrics port of a running pod, or "".
func metricsTarget(p *corev1.Pod) string {
	a, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil || !a.Is4() || p.Status.Phase != corev1.PodRunning {
		return ""
	}
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == "metrics" {
				return netip.AddrPortFrom(a, uint16(port.ContainerPort)).String()
			}
		}
	}
	return ""
}
