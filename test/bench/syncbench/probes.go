package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"vksfleet.dev/fleet/build/deploy/corefile"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/proc"
	"vksfleet.dev/fleet/test/framework"
)

// The histograms the probes are read for: each endpoint change from its EndpointSlice's last-change-trigger-time in
// cluster-a, carried through the broker to cluster-b's imported slices, to kube-proxy's rules and to CoreDNS's
// answers; and what each process spent of that itself, to say where the time goes.
const (
	proxyProgrammed = "kubeproxy_network_programming_duration_seconds"
	proxySync       = "kubeproxy_sync_proxy_rules_duration_seconds"
	dnsAnswered     = "coredns_multicluster_endpoint_change_to_answer_seconds"
	dnsInside       = "coredns_multicluster_propagation_duration_seconds"
)

// proxyPending are kube-proxy's gauges of changes it has seen and not yet synced.
var proxyPending = []string{"kubeproxy_sync_proxy_rules_endpoint_changes_pending", "kubeproxy_sync_proxy_rules_service_changes_pending"}

// probes are the consumers of one member's imports that a user's cluster runs: the pinned kube-proxy, standalone
// (clusterset.Proxy), and our CoreDNS with the multicluster and prometheus plugins, as a process on loopback.
type probes struct {
	proxy      *clusterset.Proxy
	coredns    *proc.Process
	dnsMetrics string // CoreDNS's metrics URL
}

// startProbes starts kube-proxy and CoreDNS (from bin, its Corefile in dir) for c, and returns once both serve.
func startProbes(ctx context.Context, c *clusterset.Cluster, bin, dir string) (p *probes, err error) {
	p = &probes{}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.stop())
		}
	}()
	if p.proxy, err = c.StartProxy(ctx, io.Discard); err != nil {
		return p, err
	}
	ports, err := clusterset.FreePorts(3)
	if err != nil {
		return p, err
	}
	s := corefile.Server{
		Port: ports[0], Bind: []string{"127.0.0.1"}, Stock: corefile.Stock{Ready: true, Prometheus: true},
		ReadyAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]), MetricsAddr: fmt.Sprintf("127.0.0.1:%d", ports[2]),
		Kubeconfig: c.KubeconfigPath, Context: c.Name, Multicluster: &corefile.Multicluster{},
	}
	p.dnsMetrics = "http://" + s.MetricsAddr + "/metrics"
	p.coredns, err = framework.StartCoreDNS(ctx, io.Discard, c.Name+"/coredns", filepath.Join(bin, "coredns"), filepath.Join(dir, "Corefile"), s)
	return p, err
}

func (p *probes) stop() error {
	if p.coredns != nil {
		p.coredns.Stop()
	}
	if p.proxy != nil {
		return p.proxy.Stop()
	}
	return nil
}

// snapshot is the probes' histograms at one time, or their difference over a phase, by name.
type snapshot map[string]proc.Histogram

// sub returns what s observed since before.
func (s snapshot) sub(before snapshot) (snapshot, error) {
	d := snapshot{}
	for name, h := range s {
		var err error
		if d[name], err = h.Sub(before[name]); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return d, nil
}

// settle waits until kube-proxy has synced every change it has seen and neither process has observed anything
// new for three polls in a row, and returns their histograms then: the changes of a phase reach the
// probes after the benchmark's own watch saw them (kube-proxy up to its minimum sync period later), and must all
// be counted in that phase.
func (p *probes) settle(ctx context.Context) (snapshot, error) {
	var last snapshot
	quiet := 0
	err := poll.Until(ctx, 100*time.Millisecond, 2*time.Minute, func() error {
		proxy, err := p.proxy.Scrape()
		if err != nil {
			return err
		}
		dns, err := proc.Scrape(p.dnsMetrics)
		if err != nil {
			return err
		}
		now := snapshot{}
		for _, name := range []string{proxyProgrammed, proxySync} {
			if now[name], err = proc.HistogramOf(proxy, name); err != nil {
				return err
			}
		}
		for _, name := range []string{dnsAnswered, dnsInside} {
			if now[name], err = proc.HistogramOf(dns, name); err != nil {
				return err
			}
		}
		same := last != nil
		for name, h := range now {
			same = same && h.Count() == last[name].Count()
		}
		last = now
		for _, name := range proxyPending {
			if n := proc.Sum(proxy, name, nil); n > 0 {
				quiet = 0
				return fmt.Errorf("kube-proxy has %.0f changes to sync (%s)", n, name)
			}
		}
		if !same {
			quiet = 0
			return errors.New("kube-proxy or CoreDNS observed more changes")
		}
		if quiet++; quiet < 3 {
			return errors.New("quiet only just now")
		}
		return nil
	})
	return last, err
}
