// Package framework runs the whole project on a local clusterset, per member an mcs-controller and our CoreDNS
// serving cluster.local and clusterset.local. With nodes (kubelets and containers), both are installed as a user
// installs them, from the deploy manifests and our images (pods.go): `make up`, `make demo` and the traffic
// tests. Without nodes, both run as processes of this machine, for tests of the control plane alone, which need
// no pod: the end-to-end, DNS readiness, hostile-input and kubectl-mcs suites.
//
// Beside the fleet, the package holds what the suites share: their programs, built once for all of them (Build:
// a content-addressed cache under the repository's .cache/programs, so that the suites of one `make test`, each a
// test process of its own, link our CoreDNS, the mcs-controller and kubectl-mcs once, and a suite run alone reuses
// that build); the one launcher of our CoreDNS (StartCoreDNS, StartCorefile; the controller's is
// ctrlharness.InProcess and StartProcess); and the TestMain of a suite that shares a clusterset or a fleet (Main).
package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"vksfleet.dev/fleet/build/deploy/corefile"
	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/proc"
	"vksfleet.dev/fleet/test/framework/ctrlharness"
)

// Options say what fleet to start.
type Options struct {
	// ClusterSet is passed to clusterset.Start; a broker is always started.
	ClusterSet clusterset.Options
	// BinDir holds the `coredns` and `controller` binaries (make build puts them in bin/).
	BinDir string
	// LeaseGrace is the controllers' --lease-grace; default 30 s, the manifests' own.
	LeaseGrace time.Duration
	// ImagesDir holds coredns.tar and mcs-controller.tar, the images a fleet with nodes runs (`make images`);
	// default the repository's bin/images.
	ImagesDir string
	// Log receives every process's output; default discarded.
	Log io.Writer
	// DNS, with nodes, is the DNS mode of the fleet's joins (install.DNSModes): default standalone, join's own,
	// on kubeadm's CoreDNS; install.DNSReplace runs our CoreDNS in place of kube-dns.
	DNS string
	// Bare, with nodes, leaves the product out: the broker is prepared (`kubectl mcs broker init`, which writes
	// BrokerInfoPath) and each member waits for Member.Join, or an operator's `kubectl mcs join`.
	Bare bool
	// BrokerIdentities, without nodes, gives each member's controller its own ServiceAccount on the broker, as
	// join does (`kubectl mcs broker init`, then the member's identity), and a kubeconfig file with a token of it
	// (Member.BrokerKubeconfigPath), rather than the broker administrator's kubeconfig. With nodes, members
	// always have their own.
	BrokerIdentities bool
	// KubectlMCS, with nodes, is a kubectl-mcs binary that installs the product (broker init, then join for every
	// member) instead of this tree's command run in process: a previous release's, say (BuildRelease), for a
	// fleet that starts on it. JoinArgs are more flags for those joins, such as its images (Release.JoinArgs).
	KubectlMCS string
	JoinArgs   []string
	// Monitoring, with nodes, runs a Prometheus that scrapes every controller, CoreDNS and kube-proxy and loads the
	// alert rules (prometheus.go), at PrometheusURL.
	Monitoring bool
}

// Fleet is a running local fleet.
type Fleet struct {
	*clusterset.ClusterSet
	// Members are the member clusters with their controller and DNS server, in clusterset order.
	Members []*Member

	// KubeconfigPath, with nodes, is a kubeconfig with every member's context and the broker's, by name.
	KubeconfigPath string
	// BrokerInfoPath, with nodes, is the broker-info file `kubectl mcs broker init` wrote.
	BrokerInfoPath string
	// PrometheusURL, with Options.Monitoring, is where Prometheus answers: http://127.0.0.1:port.
	PrometheusURL string
	// Images, with nodes, are our images the nodes hold, which this tree's joins install (ImageArgs).
	Images ProductImages

	opts     Options
	dir      string
	pods     bool       // the product runs in pods, installed from the manifests
	faultMu  sync.Mutex // one fault at a time, and none while the fleet stops
	stopOnce sync.Once
	stopErr  error

	stopPrometheus func() // stops Prometheus and the poll of its targets, with Options.Monitoring
}

// Member is a member cluster with its processes.
type Member struct {
	*clusterset.Cluster
	// DNS is the address where the member's CoreDNS answers over UDP and TCP: 127.0.0.1:port for a process, or,
	// with nodes, the address, port 53, of one pod of the cluster's DNS, whose pods reach every replica through
	// the kube-dns Service (Cluster.DNSServiceIP port 53), and which forwards clusterset.local to ours in
	// standalone mode.
	DNS string

	fleet          *Fleet
	mu             sync.Mutex
	controllerArgs []string
	// Without nodes: the processes, the DNS port, where the controller serves its metrics and health probes,
	// the broker kubeconfig file it reads, and whether it reads the broker Secret instead.
	controller       *proc.Process
	coredns          *proc.Process
	dnsPort          int
	metricsAddr      string
	healthAddr       string
	brokerKubeconfig string
	brokerSecret     bool
	// With nodes: the controller's arguments as the manifest has them.
	baseArgs []string
	// With nodes, under fleet.faultMu: what stop-control-plane stopped (nil while the control plane runs), and the
	// control-plane processes start-control-plane started again, which Stop stops.
	stopped   *stoppedControlPlane
	restarted []*proc.Process
}

// Start starts the clusterset, then every member's controller and CoreDNS, and returns once each member's
// CoreDNS is ready (and, with nodes, its controller Deployment available). On error, whatever was started is
// stopped.
func Start(ctx context.Context, opts Options) (*Fleet, error) {
	pods := opts.ClusterSet.Nodes > 0
	if !pods {
		for _, b := range []string{"coredns", "controller"} {
			if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
				return nil, fmt.Errorf("fleet: %s not found in %q: run `make build` first", b, opts.BinDir)
			}
		}
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.DNS == "" {
		opts.DNS = install.DNSStandalone
	}
	opts.ClusterSet.NoBroker = false
	dir, err := os.MkdirTemp("", "fleet-processes-")
	if err != nil {
		return nil, err
	}
	var images ProductImages
	if pods {
		if images, err = podsMode(ctx, &opts, dir); err != nil {
			return nil, errors.Join(err, os.RemoveAll(dir))
		}
	}
	cs, err := clusterset.Start(ctx, opts.ClusterSet)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	f := &Fleet{ClusterSet: cs, opts: opts, dir: dir, pods: pods, Images: images}
	for _, c := range cs.Members {
		f.Members = append(f.Members, &Member{Cluster: c, fleet: f})
	}
	if pods {
		if err := f.install(ctx); err != nil {
			return nil, errors.Join(err, f.Stop())
		}
		if opts.Monitoring {
			if err := f.startPrometheus(ctx); err != nil {
				return nil, errors.Join(err, f.Stop())
			}
		}
		return f, nil
	}
	for _, m := range f.Members {
		// The DNS port is known before the controller starts: the controller asks that server before it says an
		// import is Ready.
		ports, err := clusterset.FreePorts(3)
		if err != nil {
			return nil, errors.Join(err, f.Stop())
		}
		m.dnsPort, m.DNS, m.metricsAddr = ports[0], fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
		m.healthAddr, m.brokerKubeconfig = fmt.Sprintf("127.0.0.1:%d", ports[2]), f.Broker.KubeconfigPath
	}
	if opts.BrokerIdentities {
		if err := f.giveBrokerIdentities(ctx); err != nil {
			return nil, errors.Join(err, f.Stop())
		}
	}
	errs := make([]error, len(f.Members))
	var wg sync.WaitGroup
	for i, m := range f.Members {
		wg.Go(func() {
			if errs[i] = m.StartController(); errs[i] == nil {
				errs[i] = m.startCoreDNS(ctx)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, f.Stop())
	}
	return f, nil
}

// Member returns the member with the given name, or nil.
func (f *Fleet) Member(name string) *Member {
	for _, m := range f.Members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Stop stops every process and the clusterset. It is safe to call more than once.
func (f *Fleet) Stop() error {
	f.stopOnce.Do(func() {
		var errs []error
		// Before its targets, which it would otherwise report down.
		if f.stopPrometheus != nil {
			f.stopPrometheus()
		}
		// The data plane's faults go with its fabric; a stopped control plane must run to stop.
		f.faultMu.Lock()
		for _, m := range f.Members {
			errs = append(errs, m.stopFaults())
		}
		f.faultMu.Unlock()
		for _, m := range f.Members {
			if f.pods {
				// The pods go with the nodes; their logs go with them unless kept.
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				m.writePodLogs(ctx, f.opts.Log)
				cancel()
				continue
			}
			m.StopController()
			m.StopCoreDNS()
		}
		errs = append(errs, f.ClusterSet.Stop(), os.RemoveAll(f.dir))
		f.stopErr = errors.Join(errs...)
	})
	return f.stopErr
}

// StartController starts the member's mcs-controller, unless it is running: with nodes, it scales the
// Deployment to its 2 replicas, with the arguments SetControllerArgs gave, and waits until both are available.
func (m *Member) StartController() error {
	if m.fleet.pods {
		return m.scaleController(replicas)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.controller != nil {
		return nil
	}
	flags := ctrlharness.Flags{
		Kubeconfig: m.KubeconfigPath, HealthProbeBindAddress: m.healthAddr, MetricsBindAddress: m.metricsAddr,
		DNSAddress: m.DNS, More: m.extraArgs(),
	}
	if m.brokerSecret {
		flags.BrokerSecret = BrokerSecret.String()
	} else {
		flags.BrokerKubeconfig = m.brokerKubeconfig
	}
	p, err := ctrlharness.StartProcess(m.fleet.opts.Log, m.Name+"/controller", filepath.Join(m.fleet.opts.BinDir, "controller"), flags)
	if err != nil {
		return err
	}
	m.controller = p
	return nil
}

// giveBrokerIdentities prepares the broker as `kubectl mcs broker init` does, gives each member its identity on
// the broker as join does, and points each member's controller at a kubeconfig file with a token of its own.
func (f *Fleet) giveBrokerIdentities(ctx context.Context) error {
	if err := f.brokerInit(ctx); err != nil {
		return err
	}
	info, err := install.ReadBrokerInfo(f.BrokerInfoPath)
	if err != nil {
		return err
	}
	for _, m := range f.Members {
		if err := install.BrokerIdentity(ctx, info, m.ID); err != nil {
			return fmt.Errorf("fleet: the broker identity of %s: %w", m.Name, err)
		}
		// A month: the local clusterset lives for hours at most.
		kubeconfig, err := m.BrokerKubeconfig(ctx, 30*24*time.Hour, nil)
		if err != nil {
			return err
		}
		m.brokerKubeconfig = filepath.Join(f.dir, "broker-kubeconfig."+m.Name)
		if err := os.WriteFile(m.brokerKubeconfig, kubeconfig, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// BrokerKubeconfigPath is the broker kubeconfig file the member's controller reads (--broker-kubeconfig), and
// watches for new credentials: the member's own with Options.BrokerIdentities, else the broker administrator's.
func (m *Member) BrokerKubeconfigPath() string { return m.brokerKubeconfig }

// ReadBrokerSecret makes the member's controller, from its next start on, read its broker kubeconfig from the
// member Secret BrokerSecret, as deployed (--broker-secret), instead of a file; nothing creates the Secret.
func (m *Member) ReadBrokerSecret() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.brokerSecret = true
}

// ControllerReady asks the member's controller process for /readyz, and returns why it is not ready.
func (m *Member) ControllerReady(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.healthAddr+"/readyz?verbose", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s's controller: /readyz %s: %s", m.Name, resp.Status, body)
	}
	return nil
}

// extraArgs are the controller flags the fleet adds to those of its deployment: --lease-grace, unless the
// default, and the test's own.
func (m *Member) extraArgs() []string {
	var args []string
	if g := m.fleet.opts.LeaseGrace; g != 0 {
		args = append(args, "--lease-grace="+g.String())
	}
	return append(args, m.controllerArgs...)
}

// ControllerMetric adds up the member's controller metric name over the series whose labels include want.
func (m *Member) ControllerMetric(name string, want map[string]string) (float64, error) {
	if m.fleet.pods {
		return m.podMetric(name, want)
	}
	families, err := proc.Scrape("http://" + m.metricsAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	return proc.Sum(families, name, want), nil
}

// SetControllerArgs sets flags the member's mcs-controller gets from its next start on, beside those the fleet
// gives every controller, such as --cluster-local-services.
func (m *Member) SetControllerArgs(args ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.controllerArgs = args
}

// StopController stops the member's mcs-controller, if it runs, as a crash would; with nodes, it scales the
// Deployment to zero and returns once no controller pod is left, or fails the same way StartController does.
func (m *Member) StopController() error {
	if m.fleet.pods {
		return m.scaleController(0)
	}
	m.stop(&m.controller)
	return nil
}

// startCoreDNS starts the member's CoreDNS on the member's DNS address, and returns once it reports ready.
func (m *Member) startCoreDNS(ctx context.Context) error {
	dnsPort := m.dnsPort
	readyPort, err := clusterset.FreePort()
	if err != nil {
		return err
	}
	path := filepath.Join(m.fleet.dir, "Corefile."+m.Name)
	// The deployed Corefile's two plugins, on loopback ports.
	s := corefile.Server{
		Port: dnsPort, Bind: []string{"127.0.0.1"}, Stock: corefile.Stock{Ready: true}, ReadyAddr: fmt.Sprintf("127.0.0.1:%d", readyPort),
		Kubeconfig: m.KubeconfigPath, Context: m.Name,
		Kubernetes: &corefile.Kubernetes{Reverse: true, Pods: true, LeaveImported: true}, Multicluster: &corefile.Multicluster{Reverse: true},
	}
	p, err := StartCoreDNS(ctx, m.fleet.opts.Log, m.Name+"/coredns", filepath.Join(m.fleet.opts.BinDir, "coredns"), path, s)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.coredns = p
	m.mu.Unlock()
	return nil
}

// StopCoreDNS stops the member's CoreDNS, if it runs, as a crash would.
func (m *Member) StopCoreDNS() { m.stop(&m.coredns) }

// PauseCoreDNS freezes the member's CoreDNS (SIGSTOP): queries go unanswered, as with a server that hangs, while
// it keeps its port. A stopped server's port could be taken meanwhile by another test's server, and CoreDNS
// binds with SO_REUSEPORT, so both would then share it.
func (m *Member) PauseCoreDNS() error { return m.signalCoreDNS(syscall.SIGSTOP) }

// ResumeCoreDNS thaws the member's CoreDNS after PauseCoreDNS.
func (m *Member) ResumeCoreDNS() error { return m.signalCoreDNS(syscall.SIGCONT) }

func (m *Member) signalCoreDNS(sig syscall.Signal) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.coredns == nil {
		return fmt.Errorf("%s: CoreDNS is not running", m.Name)
	}
	return syscall.Kill(m.coredns.Pid(), sig)
}

// stop stops the process *p, if it runs.
func (m *Member) stop(p **proc.Process) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if *p != nil {
		(*p).Stop()
		*p = nil
	}
}
