package clusterset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"

	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/proc"
)

// proxyNSPrefix starts the name of every standalone kube-proxy's network namespace. It is not dataplane.Prefix:
// a data plane that starts on this machine sweeps that prefix, and must not take a benchmark's kube-proxy with it.
const proxyNSPrefix = "fleetproxy-"

// Proxy is the pinned kube-proxy for a member without a data plane, programming its nftables rules for the
// member's virtual Node in a network namespace of its own that has nothing but loopback: its rules reach no packet
// of this machine, and it needs no machine-wide data plane. It reaches the member's API server, which listens on
// the host's loopback, through a relay this process runs from the namespace's loopback, at the same address, so
// that the member's kubeconfig serves as it is.
type Proxy struct {
	// MinSyncPeriod is kube-proxy's minimum period between syncs of its nftables rules, as it reports its
	// configuration: a change that comes sooner after a sync waits for the next.
	MinSyncPeriod time.Duration

	ns     string
	p      *proc.Process
	relay  net.Listener
	client *http.Client // dials in ns
	wg     sync.WaitGroup
}

// ProxyMetricsPort is where every kube-proxy serves its metrics: on a node's addresses, or for a standalone Proxy on
// its namespace's loopback only.
const ProxyMetricsPort = 10249

// proxyArgs are kube-proxy's flags for a node named hostname of c: the same for nodes of a data plane and a
// standalone Proxy.
func (c *Cluster) proxyArgs(hostname string) []string {
	return []string{
		"--proxy-mode=nftables",
		"--kubeconfig=" + c.KubeconfigPath,
		"--hostname-override=" + hostname,
		"--cluster-cidr=" + joinPrefixes(c.PodCIDRs),
		// nf_conntrack_max is not per namespace: kube-proxy exits if it has to write it.
		"--conntrack-max-per-core=0",
		"--healthz-bind-address=0.0.0.0:" + strconv.Itoa(proxyHealthPort),
		// On the node's addresses, for a Prometheus on the host (framework.Options.Monitoring), as for healthz.
		"--metrics-bind-address=0.0.0.0:" + strconv.Itoa(ProxyMetricsPort),
	}
}

// StartProxy starts a standalone kube-proxy for c's virtual Node, with c's kubeconfig and the flags of a data
// plane's nodes, and returns once it has synced its rules for the first time. It needs root; Stop removes it
// and its namespace, and a later StartProxy removes the namespaces of processes that died without Stop.
func (c *Cluster) StartProxy(ctx context.Context, log io.Writer) (_ *Proxy, err error) {
	if c.NodeName == "" {
		return nil, fmt.Errorf("clusterset: %s has no virtual node for a standalone kube-proxy", c.Name)
	}
	if err := dataplane.CheckHost(); err != nil {
		return nil, err
	}
	assets, err := AssetsDir("")
	if err != nil {
		return nil, err
	}
	sweepProxyNamespaces()
	api, err := url.Parse(c.Config.Host)
	if err != nil {
		return nil, err
	}
	x := &Proxy{ns: fmt.Sprintf("%s%d-%s", proxyNSPrefix, os.Getpid(), c.Name)}
	if err := dataplane.RunAll([]string{"ip", "netns", "add", x.ns}, []string{"ip", "-n", x.ns, "link", "set", "lo", "up"}); err != nil {
		_ = dataplane.Run("ip", "netns", "del", x.ns)
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, x.Stop())
		}
	}()
	err = dataplane.InNS(x.ns, func() (err error) {
		x.relay, err = net.Listen("tcp", api.Host)
		return err
	})
	if err != nil {
		return nil, err
	}
	x.wg.Go(func() { relay(x.relay, api.Host) })
	x.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
			err = dataplane.InNS(x.ns, func() error {
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		},
	}}
	x.p, err = proc.Start(log, c.Name+"/kube-proxy", "nsenter", append([]string{"--net=/run/netns/" + x.ns, "--",
		filepath.Join(assets, "kube-proxy")}, c.proxyArgs(c.NodeName)...)...)
	if err != nil {
		return nil, err
	}
	if err := x.p.WaitHTTP(ctx, x.client, fmt.Sprintf("http://127.0.0.1:%d/healthz", proxyHealthPort), 2*time.Minute); err != nil {
		return nil, fmt.Errorf("kube-proxy of %s: %w", c.Name, err)
	}
	if x.MinSyncPeriod, err = x.minSyncPeriod(); err != nil {
		return nil, fmt.Errorf("kube-proxy of %s: %w", c.Name, err)
	}
	return x, nil
}

// minSyncPeriod reads the nftables mode's minimum sync period from kube-proxy's /configz, where it reports the
// configuration it runs with, defaults applied.
func (x *Proxy) minSyncPeriod() (time.Duration, error) {
	resp, err := x.client.Get(fmt.Sprintf("http://127.0.0.1:%d/configz", ProxyMetricsPort))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var configz struct {
		Config struct {
			NFTables struct {
				MinSyncPeriod string `json:"minSyncPeriod"`
			} `json:"nftables"`
		} `json:"kubeproxy.config.k8s.io"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&configz); err != nil {
		return 0, fmt.Errorf("/configz: %w", err)
	}
	return time.ParseDuration(configz.Config.NFTables.MinSyncPeriod)
}

// relay accepts connections on l until it closes, and joins each to a new connection to addr, dialled from this
// process's own network namespace.
func relay(l net.Listener, addr string) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer in.Close()
			out, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer out.Close()
			done := make(chan struct{})
			go func() {
				_, _ = io.Copy(out, in)
				// The API server sees the client's end of the stream, and ends its own.
				_ = out.(*net.TCPConn).CloseWrite()
				close(done)
			}()
			_, _ = io.Copy(in, out)
			_ = in.(*net.TCPConn).CloseWrite()
			<-done
		}()
	}
}

// Scrape reads kube-proxy's metrics.
func (x *Proxy) Scrape() ([]*dto.MetricFamily, error) {
	return proc.ScrapeWith(x.client, fmt.Sprintf("http://127.0.0.1:%d/metrics", ProxyMetricsPort))
}

// Stop stops kube-proxy and the relay, and removes the namespace with the rules kube-proxy left in it.
func (x *Proxy) Stop() error {
	if x.p != nil {
		x.p.Stop()
	}
	if x.relay != nil {
		x.relay.Close()
		x.wg.Wait()
	}
	return dataplane.Run("ip", "netns", "del", x.ns)
}

// sweepProxyNamespaces removes the namespaces of standalone kube-proxies whose starting process is gone: killed
// before Stop, it left the namespace behind, empty, since kube-proxy dies with the process that started it.
func sweepProxyNamespaces() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], proxyNSPrefix) {
			continue
		}
		pid, _, _ := strings.Cut(strings.TrimPrefix(f[0], proxyNSPrefix), "-")
		if n, err := strconv.Atoi(pid); err == nil && syscall.Kill(n, 0) == syscall.ESRCH {
			_ = dataplane.Run("ip", "netns", "del", f[0])
		}
	}
}
