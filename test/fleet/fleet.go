// Package fleet runs the whole project on a local clusterset: per member, one mcs-controller process and one of
// our CoreDNS processes serving cluster.local and clusterset.local, as a real member would run them. `make up`,
// `make demo` and the end-to-end tests share it.
package fleet

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

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"vksfleet.dev/fleet/build/deploy/corefile"
	"vksfleet.dev/fleet/test/clusterset"
	"vksfleet.dev/fleet/test/dataplane"
	"vksfleet.dev/fleet/test/proc"
)

// Options say what fleet to start.
type Options struct {
	// ClusterSet is passed to clusterset.Start; a broker is always started.
	ClusterSet clusterset.Options
	// BinDir holds the `coredns` and `controller` binaries (make build puts them in bin/).
	BinDir string
	// LeaseGrace is the controllers' --lease-grace; default 30 s.
	LeaseGrace time.Duration
	// Log receives every process's output; default discarded.
	Log io.Writer
}

// Fleet is a running local fleet.
type Fleet struct {
	*clusterset.ClusterSet
	// Members are the member clusters with their controller and DNS server, in clusterset order.
	Members []*Member

	opts     Options
	dir      string
	stopOnce sync.Once
	stopErr  error
}

// Member is a member cluster with its processes.
type Member struct {
	*clusterset.Cluster
	// DNS is the address (127.0.0.1:port) where the member's CoreDNS answers over UDP and TCP. With a data plane,
	// pods reach the same server through the kube-dns Service (Cluster.DNSServiceIP port 53).
	DNS string

	fleet          *Fleet
	mu             sync.Mutex
	controller     *proc.Process
	controllerArgs []string
	coredns        *proc.Process
	dnsPort        int
	metricsAddr    string // where the controller serves its metrics
}

// Start starts the clusterset, then every member's controller and CoreDNS, and returns once each CoreDNS reports
// ready. On error, whatever was started is stopped.
func Start(ctx context.Context, opts Options) (*Fleet, error) {
	for _, b := range []string{"coredns", "controller"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("fleet: %s not found in %q: run `make build` first", b, opts.BinDir)
		}
	}
	if opts.LeaseGrace == 0 {
		opts.LeaseGrace = 30 * time.Second
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	opts.ClusterSet.NoBroker = false
	if opts.ClusterSet.Nodes > 0 && opts.ClusterSet.NodeAgent == "" {
		opts.ClusterSet.NodeAgent = filepath.Join(opts.BinDir, "nodeagent")
	}
	dir, err := os.MkdirTemp("", "fleet-processes-")
	if err != nil {
		return nil, err
	}
	cs, err := clusterset.Start(ctx, opts.ClusterSet)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	f := &Fleet{ClusterSet: cs, opts: opts, dir: dir}
	for _, c := range cs.Members {
		// The DNS port is known before the controller starts: the controller asks that server before it says an
		// import is Ready.
		port, err := clusterset.FreePort()
		if err != nil {
			return nil, errors.Join(err, f.Stop())
		}
		metricsPort, err := clusterset.FreePort()
		if err != nil {
			return nil, errors.Join(err, f.Stop())
		}
		f.Members = append(f.Members, &Member{Cluster: c, fleet: f, DNS: fmt.Sprintf("127.0.0.1:%d", port), dnsPort: port,
			metricsAddr: fmt.Sprintf("127.0.0.1:%d", metricsPort)})
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
		for _, m := range f.Members {
			m.StopController()
			m.StopCoreDNS()
		}
		errs = append(errs, f.ClusterSet.Stop(), os.RemoveAll(f.dir))
		f.stopErr = errors.Join(errs...)
	})
	return f.stopErr
}

// StartController starts the member's mcs-controller, unless it is running.
func (m *Member) StartController() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.controller != nil {
		return nil
	}
	f := m.fleet
	args := append([]string{
		"--kubeconfig=" + m.KubeconfigPath,
		"--broker-kubeconfig=" + f.Broker.KubeconfigPath,
		"--lease-grace=" + f.opts.LeaseGrace.String(),
		"--health-probe-bind-address=0",
		"--metrics-bind-address=" + m.metricsAddr,
		"--dns-address=" + m.DNS,
	}, m.controllerArgs...)
	p, err := proc.Start(f.opts.Log, m.Name+"/controller", filepath.Join(f.opts.BinDir, "controller"), args...)
	if err != nil {
		return err
	}
	m.controller = p
	return nil
}

// ControllerMetric adds up the member's controller metric name over the series whose labels include want.
func (m *Member) ControllerMetric(name string, want map[string]string) (float64, error) {
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

// StopController stops the member's mcs-controller, if it runs, as a crash or an upgrade would.
func (m *Member) StopController() { m.stop(&m.controller) }

// startCoreDNS starts the member's CoreDNS on the member's DNS address, and returns once it reports ready.
func (m *Member) startCoreDNS(ctx context.Context) error {
	dnsPort := m.dnsPort
	readyPort, err := clusterset.FreePort()
	if err != nil {
		return err
	}
	path := filepath.Join(m.fleet.dir, "Corefile."+m.Name)
	// The deployed Corefile's two plugins, on loopback ports, and with a data plane on the host link too, where
	// kube-proxy sends the pods' queries.
	s := corefile.Server{
		Port: dnsPort, Bind: []string{"127.0.0.1"}, Stock: corefile.Stock{Ready: true}, ReadyAddr: fmt.Sprintf("127.0.0.1:%d", readyPort),
		Kubeconfig: m.KubeconfigPath, Context: m.Name,
		Kubernetes: &corefile.Kubernetes{Reverse: true, Pods: true, LeaveImported: true}, Multicluster: &corefile.Multicluster{Reverse: true},
	}
	if len(m.Nodes) > 0 {
		s.Bind = append(s.Bind, dataplane.HostV4.String())
	}
	if err := os.WriteFile(path, []byte(s.Render()), 0o644); err != nil {
		return err
	}
	p, err := proc.Start(m.fleet.opts.Log, m.Name+"/coredns", filepath.Join(m.fleet.opts.BinDir, "coredns"), "-conf", path)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.coredns = p
	m.mu.Unlock()
	hc := &http.Client{Timeout: time.Second}
	if err := p.WaitHTTP(ctx, hc, "http://"+s.ReadyAddr+"/ready", 2*time.Minute); err != nil {
		return err
	}
	if len(m.Nodes) == 0 {
		return nil
	}
	return m.createDNSService(ctx, dnsPort)
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

// createDNSService publishes the member's CoreDNS to its pods as kube-system/kube-dns, as a cluster's DNS add-on
// does: a Service at the address the node agents write into every pod's resolv.conf, whose one endpoint is
// CoreDNS on the host link. The EndpointSlice is managed by us, not by the endpointslice controller, since the
// Service has no selector.
func (m *Member) createDNSService(ctx context.Context, port int) error {
	ports := []corev1.ServicePort{
		{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(int32(port))},
		{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(int32(port))},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec:       corev1.ServiceSpec{ClusterIP: m.DNSServiceIP.String(), Ports: ports},
	}
	if err := m.Client.Create(ctx, svc); err != nil {
		return fmt.Errorf("creating kube-dns Service: %w", err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-host", Namespace: metav1.NamespaceSystem, Labels: map[string]string{
			discoveryv1.LabelServiceName: "kube-dns", discoveryv1.LabelManagedBy: "fleet.vksfleet.dev",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{dataplane.HostV4.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
	}
	for _, p := range ports {
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(int32(port))})
	}
	if err := m.Client.Create(ctx, slice); err != nil {
		return fmt.Errorf("creating kube-dns EndpointSlice: %w", err)
	}
	return nil
}
