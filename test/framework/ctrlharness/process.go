package ctrlharness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/proc"
)

// metricsClient reads a controller process's metrics on loopback.
var metricsClient = &http.Client{Timeout: 10 * time.Second}

// startProcess starts the controller binary with the member's and the broker's kubeconfigs and the Options'
// limits, and waits until it serves its metrics; c.mu is held.
func (c *Controller) startProcess() (*proc.Process, string, error) {
	port, err := clusterset.FreePort()
	if err != nil {
		return nil, "", err
	}
	log := c.opts.Log
	if log == nil {
		log = io.Discard
	}
	// Zero options keep the binary's own defaults, as they keep controller.Options' in this process.
	p, err := StartProcess(log, c.Name+"/controller", c.opts.Binary, Flags{
		Kubeconfig: c.KubeconfigPath, BrokerKubeconfig: c.Broker.KubeconfigPath,
		HealthProbeBindAddress: "0", MetricsBindAddress: "127.0.0.1:" + strconv.Itoa(port),
		LeaseGrace: c.opts.LeaseGrace, Workers: c.opts.Workers, QPS: c.opts.QPS, Burst: c.opts.Burst,
	})
	if err != nil {
		return nil, "", err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	if err := p.WaitHTTP(context.Background(), metricsClient, url, time.Minute); err != nil {
		p.Stop()
		return nil, "", err
	}
	return p, url, nil
}

// stopProcess keeps the process's last metrics, so that totals survive the restart as they do in this process,
// and stops it; c.mu is held. Whatever the controller does between that reading and its exit is not counted:
// callers stop idle controllers.
func (c *Controller) stopProcess() error {
	if c.proc == nil {
		err := c.startErr
		c.startErr = nil
		return err
	}
	last, err := proc.Scrape(c.metricsURL)
	if err == nil {
		c.carried = append(c.carried, last)
	}
	c.proc.Stop()
	c.proc = nil
	return err
}

// families returns the controller's metric families; see gather.
func (c *Controller) families() ([]*dto.MetricFamily, error) {
	if c.opts.Binary == "" {
		return metrics.Registry.Gather()
	}
	c.mu.Lock()
	url, running := c.metricsURL, c.proc != nil
	var all []*dto.MetricFamily
	for _, fs := range c.carried {
		for _, f := range fs {
			// A gauge is a state of the process that ended; totals go on.
			if t := f.GetType(); t == dto.MetricType_COUNTER || t == dto.MetricType_HISTOGRAM {
				all = append(all, f)
			}
		}
	}
	c.mu.Unlock()
	if !running {
		return all, nil
	}
	live, err := proc.Scrape(url)
	return append(all, live...), err
}

// Usage is what the controller's process has used since it started; it fails without Binary or while the
// controller is stopped.
func (c *Controller) Usage() (proc.Usage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return proc.Usage{}, fmt.Errorf("%s's controller runs no process", c.Name)
	}
	return c.proc.Usage()
}
