package clusterset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"vksfleet.dev/fleet/test/env/proc"
)

// A highly available broker (Options.HABroker) is laid out as kubeadm's guide to highly available control planes
// lays one out with an external etcd and a load balancer (ha-considerations.md): a 3-member etcd cluster; 2
// kube-apiservers that use all of it and share one serving certificate, one client CA and one service-account
// signing key, so that a client or a token of one is good on the other; and HAProxy in TCP mode in front of both,
// checking each one's /readyz, at the address every client of the broker is given (Cluster.Config, the broker's
// kubeconfig, and so the broker-info that `kubectl mcs broker init` writes). Only HAProxy listens where the members
// reach the broker; etcd and the API servers listen on loopback, each at a port of its own. Unlike kubeadm's API
// servers, these two share a host, and so the identity Lease kube-apiserver names after its hostname
// (kube-system/apiserver-<hash>), which each renews as its own: nothing a broker serves depends on it.

const (
	haEtcdMembers = 3
	haAPIServers  = 2
	// haStartTimeout bounds each process's start, as envtest's ControlPlaneStartTimeout bounds a single broker's.
	haStartTimeout = 90 * time.Second
)

// HABroker reaches the processes of a highly available broker, for tests that make them fail.
type HABroker struct {
	// Etcd are the etcd cluster's members; each one's URL is its client URL.
	Etcd []*BrokerProcess
	// APIServers are the kube-apiservers; each one's URL reaches it directly, not through the load balancer.
	APIServers []*BrokerProcess
	// LoadBalancer is HAProxy; its URL is the broker's, Cluster.Config.Host.
	LoadBalancer *BrokerProcess

	lbSocket string // HAProxy's stats socket, which InService asks
}

// InService returns the names of the API servers the load balancer sends new connections to: those its health
// checks last found ready.
func (h *HABroker) InService() ([]string, error) {
	conn, err := net.DialTimeout("unix", h.lbSocket, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("clusterset: the load balancer's stats socket: %w", err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(conn, "show servers state "+haBackend+"\n"); err != nil {
		return nil, err
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		return nil, err
	}
	return parseServersState(string(out))
}

// parseServersState returns the servers that HAProxy's `show servers state` lists as running: a format version
// line, a header line "# be_id be_name srv_id srv_name srv_addr srv_op_state ...", then a line per server, whose
// srv_op_state is 2 while the server is up.
func parseServersState(out string) ([]string, error) {
	var header []string
	var up []string
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0 || header == nil && len(fields) == 1: // the version line
		case fields[0] == "#":
			header = fields[1:]
		case header == nil:
			return nil, fmt.Errorf("clusterset: unexpected HAProxy servers state %q", out)
		default:
			name, state := slices.Index(header, "srv_name"), slices.Index(header, "srv_op_state")
			if name < 0 || state < 0 || len(fields) <= max(name, state) {
				return nil, fmt.Errorf("clusterset: unexpected HAProxy servers state %q", out)
			}
			if fields[state] == "2" {
				up = append(up, fields[name])
			}
		}
	}
	if header == nil {
		return nil, fmt.Errorf("clusterset: unexpected HAProxy servers state %q", out)
	}
	return up, nil
}

// BrokerProcess is one process of a highly available broker. Kill and Pause fail it as a crash or a hang would;
// Restart starts it again with the same command line, and so the same port and data (an etcd member rejoins with
// its data folder).
type BrokerProcess struct {
	// Name names it in the log: broker-etcd-0, broker-apiserver-1, broker-lb.
	Name string
	// URL is where it serves its clients.
	URL string

	bin      string
	args     []string
	log      io.Writer
	readyURL string       // answers 200 once the process is ready
	hc       *http.Client // asks readyURL
	// inService, for an API server, says whether the load balancer sends connections to it.
	inService func() error

	mu sync.Mutex
	p  *proc.Process // the process last started
}

// launch starts the process without waiting until it is ready: an etcd member is ready only once a quorum of its
// cluster runs.
func (b *BrokerProcess) launch() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.p != nil && !b.p.Exited() {
		return fmt.Errorf("clusterset: %s still runs (pid %d)", b.Name, b.p.Pid())
	}
	p, err := proc.Start(b.log, b.Name, b.bin, b.args...)
	if err != nil {
		return err
	}
	b.p = p
	return nil
}

// waitReady waits until the process answers as ready, failing early if it exits.
func (b *BrokerProcess) waitReady(ctx context.Context) error {
	return b.process().WaitHTTP(ctx, b.hc, b.readyURL, haStartTimeout)
}

func (b *BrokerProcess) process() *proc.Process {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.p
}

// Restart starts the process again once it has exited (Kill) and waits until it is ready, and an API server until
// the load balancer sends connections to it again: a test that fails the other one next finds the broker as
// available as before.
func (b *BrokerProcess) Restart(ctx context.Context) error {
	if err := b.launch(); err != nil {
		return err
	}
	if err := b.waitReady(ctx); err != nil || b.inService == nil {
		return err
	}
	return b.process().Wait(ctx, haStartTimeout, "in the load balancer's service", b.inService)
}

// Kill kills the process (SIGKILL), as a crash would, and waits until it has exited.
func (b *BrokerProcess) Kill() { b.process().Kill() }

// Pause freezes the process (SIGSTOP): it keeps its port and its connections and answers nothing, as a hung
// server.
func (b *BrokerProcess) Pause() error { return b.process().Signal(syscall.SIGSTOP) }

// Resume thaws the process after Pause.
func (b *BrokerProcess) Resume() error { return b.process().Signal(syscall.SIGCONT) }

// Pid is the process id of the process last started.
func (b *BrokerProcess) Pid() int { return b.process().Pid() }

// stop stops the process, thawing it first should it be paused; it tolerates one never started.
func (b *BrokerProcess) stop() {
	p := b.process()
	if p == nil {
		return
	}
	_ = p.Signal(syscall.SIGCONT)
	p.Stop()
}

// stop stops every process that started, each tier at once, clients before their servers.
func (h *HABroker) stop() {
	for _, tier := range [][]*BrokerProcess{{h.LoadBalancer}, h.APIServers, h.Etcd} {
		var wg sync.WaitGroup
		for _, b := range tier {
			if b != nil {
				wg.Go(b.stop)
			}
		}
		wg.Wait()
	}
}

// startHA starts the processes of a highly available broker and returns an administrator's configuration, which
// reaches it through the load balancer. It does not install the broker's CRDs, as envtest does for the others.
func (c *Cluster) startHA(ctx context.Context, spec clusterSpec, assets string) (*rest.Config, error) {
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		return nil, fmt.Errorf("clusterset: a highly available broker needs HAProxy: run `make tools` first: %w", err)
	}
	c.HA = &HABroker{lbSocket: filepath.Join(c.dir, "haproxy.sock")}
	pki := filepath.Join(c.dir, "pki")
	if err := os.Mkdir(pki, 0o700); err != nil {
		return nil, err
	}
	lbHost := apiHost(spec)
	lbPort, err := freePortOn(lbHost.String())
	if err != nil {
		return nil, err
	}
	lbAddr := net.JoinHostPort(lbHost.String(), strconv.Itoa(lbPort))
	cfg := &rest.Config{Host: "https://" + lbAddr}
	if cfg.TLSClientConfig, err = writeHAPKI(pki, lbHost); err != nil {
		return nil, err
	}
	if err := c.startHAEtcd(ctx, spec, assets); err != nil {
		return nil, err
	}
	if err := c.startHAAPIServers(ctx, spec, assets, pki, cfg); err != nil {
		return nil, err
	}
	hc, err := readyClient(cfg)
	if err != nil {
		return nil, err
	}
	lbConfig := filepath.Join(c.dir, "haproxy.cfg")
	if err := os.WriteFile(lbConfig, []byte(haproxyConfig(lbAddr, c.HA.lbSocket, c.HA.APIServers)), 0o600); err != nil {
		return nil, err
	}
	c.HA.LoadBalancer = &BrokerProcess{Name: spec.name + "-lb", URL: cfg.Host, bin: haproxy, log: spec.log,
		// -db: in the foreground, the child of the process that started it.
		args:     []string{"-db", "-f", lbConfig},
		readyURL: cfg.Host + "/readyz", hc: hc}
	if err := c.HA.LoadBalancer.Restart(ctx); err != nil {
		return nil, err
	}
	for _, a := range c.HA.APIServers {
		a.inService = func() error {
			names, err := c.HA.InService()
			if err == nil && !slices.Contains(names, a.Name) {
				err = fmt.Errorf("the load balancer has %s out of service", a.Name)
			}
			return err
		}
	}
	return cfg, nil
}

// startHAEtcd starts the etcd cluster, every member at once, and waits until each one is healthy (it has a
// leader).
func (c *Cluster) startHAEtcd(ctx context.Context, spec clusterSpec, assets string) error {
	ports, err := FreePorts(2 * haEtcdMembers)
	if err != nil {
		return err
	}
	names := make([]string, haEtcdMembers)
	peers := make([]string, haEtcdMembers)
	for i := range haEtcdMembers {
		names[i] = fmt.Sprintf("%s-etcd-%d", spec.name, i)
		peers[i] = names[i] + "=" + loopbackURL("http", ports[2*i+1])
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	for i, name := range names {
		clientURL, peerURL := loopbackURL("http", ports[2*i]), loopbackURL("http", ports[2*i+1])
		b := &BrokerProcess{Name: name, URL: clientURL, bin: filepath.Join(assets, "etcd"), log: spec.log,
			readyURL: clientURL + "/health", hc: hc,
			args: []string{
				"--name=" + name,
				"--data-dir=" + filepath.Join(c.dir, name),
				"--listen-client-urls=" + clientURL, "--advertise-client-urls=" + clientURL,
				"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
				"--initial-cluster=" + strings.Join(peers, ","),
				"--initial-cluster-state=new",
				// Unique to this cluster: a member of another one that got one of these ports later is refused.
				"--initial-cluster-token=" + filepath.Base(c.dir),
				// As for every other cluster's etcd: the data is thrown away at stop.
				"--unsafe-no-fsync=true",
			}}
		c.HA.Etcd = append(c.HA.Etcd, b)
		if err := b.launch(); err != nil {
			return err
		}
	}
	for _, b := range c.HA.Etcd {
		if err := b.waitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// startHAAPIServers starts the API servers, both at once, on etcd and the credentials in pki, and waits until
// each one is ready. lb is the administrator's configuration through the load balancer.
func (c *Cluster) startHAAPIServers(ctx context.Context, spec clusterSpec, assets, pki string, lb *rest.Config) error {
	ports, err := FreePorts(haAPIServers)
	if err != nil {
		return err
	}
	etcd := make([]string, len(c.HA.Etcd))
	for i, b := range c.HA.Etcd {
		etcd[i] = b.URL
	}
	for i, port := range ports {
		direct := rest.CopyConfig(lb)
		direct.Host = loopbackURL("https", port)
		hc, err := readyClient(direct)
		if err != nil {
			return err
		}
		b := &BrokerProcess{Name: fmt.Sprintf("%s-apiserver-%d", spec.name, i), URL: direct.Host,
			bin: filepath.Join(assets, "kube-apiserver"), log: spec.log, readyURL: direct.Host + "/readyz", hc: hc,
			// envtest's flags for a single broker, with the files and addresses both API servers share.
			args: []string{
				"--etcd-servers=" + strings.Join(etcd, ","),
				"--bind-address=127.0.0.1",
				"--secure-port=" + strconv.Itoa(port),
				"--cert-dir=" + filepath.Join(c.dir, fmt.Sprintf("apiserver-%d", i)),
				"--tls-cert-file=" + filepath.Join(pki, servingCertFile),
				"--tls-private-key-file=" + filepath.Join(pki, servingKeyFile),
				"--client-ca-file=" + filepath.Join(pki, clientCAFile),
				"--service-account-issuer=" + lb.Host,
				"--service-account-key-file=" + filepath.Join(pki, saCertFile),
				"--service-account-signing-key-file=" + filepath.Join(pki, saKeyFile),
				"--service-cluster-ip-range=" + joinPrefixes(c.ServiceCIDRs),
				"--authorization-mode=RBAC",
				"--allow-privileged=true",
				"--disable-admission-plugins=ServiceAccount",
				// Both advertise 127.0.0.1, at different ports: each would rewrite the kubernetes Service's
				// endpoints with its own port every few seconds. Nothing on the broker uses that Service.
				"--endpoint-reconciler-type=none",
			}}
		c.HA.APIServers = append(c.HA.APIServers, b)
		if err := b.launch(); err != nil {
			return err
		}
	}
	for _, b := range c.HA.APIServers {
		if err := b.waitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// readyClient asks an API server, directly or through the load balancer, for its /readyz.
func readyClient(cfg *rest.Config) (*http.Client, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	hc.Timeout = 2 * time.Second
	return hc, nil
}

// haproxyConfig is HAProxy's configuration: kubeadm's (ha-considerations.md), in TCP mode, TLS passing through
// to the API servers, each checked with GET /readyz. The checks run every second, and one API server is taken
// out after two failed ones, so that a failure test need not wait long; a connection refused meanwhile is
// retried on the other one (redispatch). The log says when an API server goes down or comes back, not every
// connection. The stats socket, at socket, tells InService which API servers are in service.
func haproxyConfig(bind, socket string, apiServers []*BrokerProcess) string {
	var servers strings.Builder
	for _, b := range apiServers {
		fmt.Fprintf(&servers, "\tserver %s %s\n", b.Name, strings.TrimPrefix(b.URL, "https://"))
	}
	return `global
	log stdout format raw local0 notice
	nbthread 1
	stats socket ` + socket + ` mode 600 level user

defaults
	mode tcp
	log global
	option dontlognull
	option redispatch
	retries 1
	timeout connect 5s
	timeout client 35s
	timeout server 35s
	timeout check 10s

frontend broker
	bind ` + bind + `
	default_backend ` + haBackend + `

backend ` + haBackend + `
	option httpchk GET /readyz
	http-check expect status 200
	balance roundrobin
	default-server check check-ssl verify none inter 1s fall 2 rise 2
` + servers.String()
}

// haBackend is the API servers' backend in HAProxy's configuration.
const haBackend = "apiservers"

// clientCAFile is the CA of the broker's client certificates, beside writeServingPKI's files.
const clientCAFile = "client-ca.crt"

// writeHAPKI writes what both API servers share into dir: the serving certificate, for loopback and for the load
// balancer's address lb, the service-account signing key, and the client CA. It returns the TLS configuration of
// an administrator (system:masters), who trusts the serving CA.
func writeHAPKI(dir string, lb netip.Addr) (rest.TLSClientConfig, error) {
	ips := []netip.Addr{netip.IPv6Loopback(), netip.MustParseAddr("127.0.0.1")}
	if !slices.Contains(ips, lb) {
		ips = append(ips, lb)
	}
	servingCA, err := writeServingPKI(dir, certSpec{cn: "kube-apiserver", server: true, dns: []string{"localhost"}, ips: ips})
	if err != nil {
		return rest.TLSClientConfig{}, err
	}
	clientCA, clientCAKey, err := newCA("broker-client-ca")
	if err != nil {
		return rest.TLSClientConfig{}, err
	}
	if err := writeCert(filepath.Join(dir, clientCAFile), clientCA); err != nil {
		return rest.TLSClientConfig{}, err
	}
	admin, adminKey, err := newCert(certSpec{cn: "admin", orgs: []string{"system:masters"}}, clientCA, clientCAKey)
	if err != nil {
		return rest.TLSClientConfig{}, err
	}
	key, err := keyPEM(adminKey)
	if err != nil {
		return rest.TLSClientConfig{}, err
	}
	return rest.TLSClientConfig{CAData: certPEM(servingCA), CertData: certPEM(admin), KeyData: key}, nil
}

// loopbackURL is scheme://127.0.0.1:port.
func loopbackURL(scheme string, port int) string {
	return scheme + "://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// errHA is RestartEmpty's answer for a highly available broker, whose processes HA reaches one by one.
var errHA = errors.New("clusterset: RestartEmpty is for a cluster envtest runs, not a highly available broker")
