package clusterset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
	brokerv1alpha1 "vksfleet.dev/fleet/api/broker/v1alpha1"
	"vksfleet.dev/fleet/build/deploy/crds"
	"vksfleet.dev/fleet/build/deploy/policy"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/proc"
)

// Scheme knows the built-in types, both mcs-api versions and ClusterProperty.
var Scheme = runtime.NewScheme()

func init() {
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, mcsv1alpha1.Install, mcsv1beta1.Install,
		aboutv1alpha1.AddToScheme,
	} {
		if err := add(Scheme); err != nil {
			panic(err)
		}
	}
}

// Cluster is one running control plane of the clusterset: a member, or the broker.
type Cluster struct {
	// Name is the cluster's name and kubeconfig context.
	Name string
	// ID is the member's cluster id (its cluster.clusterset.k8s.io ClusterProperty); empty for the broker.
	ID string
	// SetName is a member's clusterset name, its clusterset.k8s.io ClusterProperty's value.
	SetName string
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a controller-runtime client using Scheme.
	Client client.Client
	// Records is a controller-runtime client of the broker's records (api/broker/v1alpha1): ServiceImports,
	// EndpointSlices and Leases read and written with it are ExportRecords, EndpointRecords and MemberLeases, as
	// members write them. Client reads the previous release's records, and a member's own objects.
	Records client.Client
	// Kube is a client-go clientset.
	Kube kubernetes.Interface
	// KubeconfigPath is a kubeconfig file for this cluster alone, with administrator credentials.
	KubeconfigPath string
	// PodCIDRs are the member's pod ranges (IPv4, IPv6); empty for the broker.
	PodCIDRs []netip.Prefix
	// ServiceCIDRs are the ranges ClusterIPs are allocated from (IPv4, IPv6).
	ServiceCIDRs []netip.Prefix
	// NodeName is the member's one virtual Node; empty for the broker and with a data plane.
	NodeName string
	// Zone is the virtual Node's topology.kubernetes.io/zone label; empty for the broker and with a data plane.
	Zone string
	// Region is the member's region; empty for the broker.
	Region string
	// Nodes are the member's nodes with a data plane (Options.Nodes).
	Nodes []*Node
	// DNSServiceIP is the address pods use as their nameserver: the cluster DNS Service's ClusterIP. With kubelet
	// nodes the member has the Service, kube-system/kube-dns, without a server behind it, as kubeadm leaves it
	// before its DNS add-on is applied (test/framework applies ours).
	DNSServiceIP netip.Addr
	// HA reaches each process of a highly available broker (Options.HABroker); nil for any other cluster.
	HA *HABroker

	member    bool
	dir       string
	env       *envtest.Environment
	kcm       *proc.Process
	scheduler *proc.Process
	// apiServers are API servers started in place of envtest's (AdoptAPIServer), stopped where it would be.
	apiServers []*proc.Process
	pods       *podLoop
	// kubeletPKI holds the kubelets' client CA and the API server's client certificate, with kubelet nodes.
	kubeletPKI kubeletPKI
	// rootCAFile is the API server's serving CA, which pods trust, with kubelet nodes.
	rootCAFile string
}

// clusterSpec is what plan decided for one cluster.
type clusterSpec struct {
	name, id, setName string
	member            bool
	index             int
	log               io.Writer
	region            string
	noKCM             bool // the member runs no kube-controller-manager
	ha                bool // the broker is highly available (Options.HABroker)
	// assets, when set, holds the member's own control-plane binaries (Options.Oldest), and fresh leaves out
	// what the clusterset otherwise installs in a member.
	assets string
	fresh  bool
	// With a data plane: the plane, and for a member the node count and the images its nodes load.
	plane  *dataplane.Plane
	nodes  int
	images []string
}

// startCluster starts one cluster. On error it stops whatever it started.
func startCluster(ctx context.Context, spec clusterSpec, assets string) (c *Cluster, err error) {
	dir, err := os.MkdirTemp("", "fleet-"+spec.name+"-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{Name: spec.name, ID: spec.id, SetName: spec.setName, member: spec.member, dir: dir, ServiceCIDRs: serviceCIDRs(spec.index)}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("clusterset: starting %s: %w", spec.name, err), c.stop())
			c = nil
		}
	}()
	if spec.assets != "" {
		assets = spec.assets
	}
	var cfg *rest.Config
	if spec.ha {
		cfg, err = c.startHA(ctx, spec, assets)
	} else {
		cfg, err = c.startEnvtest(spec, assets)
	}
	if err != nil {
		return c, err
	}
	// Tests create thousands of objects: client-side throttling would measure the client, not the system.
	cfg.QPS, cfg.Burst = 1000, 2000
	c.Config = cfg
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return c, err
	}
	if c.Client, err = client.New(cfg, client.Options{Scheme: Scheme}); err != nil {
		return c, err
	}
	records, err := brokerv1alpha1.NewScheme()
	if err != nil {
		return c, err
	}
	if c.Records, err = client.New(cfg, client.Options{Scheme: records}); err != nil {
		return c, err
	}
	if c.KubeconfigPath, err = c.writeKubeconfig(); err != nil {
		return c, err
	}
	if spec.ha {
		if err := c.InstallCRDs(); err != nil {
			return c, err
		}
	}
	if !spec.member {
		c.kcm, err = startControllerManager(ctx, assets, c.dir, c.KubeconfigPath, "", brokerControllers, spec.log)
		return c, err
	}
	c.PodCIDRs = podCIDRs(spec.index)
	c.Region = spec.region
	c.DNSServiceIP = dnsServiceIP(c.ServiceCIDRs)
	if !spec.fresh {
		if err := c.createClusterProperties(ctx, spec.id, spec.setName); err != nil {
			return c, err
		}
		if err := c.installExportPolicy(ctx); err != nil {
			return c, err
		}
	}
	if !spec.noKCM {
		if c.kcm, err = startControllerManager(ctx, assets, c.dir, c.KubeconfigPath, c.rootCAFile, controllers, spec.log); err != nil {
			return c, err
		}
	}
	if spec.plane != nil {
		if c.scheduler, err = startScheduler(ctx, assets, c.dir, c.KubeconfigPath, spec.log); err != nil {
			return c, err
		}
		if spec.nodes > 0 {
			if err := c.createKubeDNSService(ctx); err != nil {
				return c, err
			}
		}
		return c, c.startNodes(ctx, spec, assets)
	}
	c.NodeName = spec.name + "-node"
	c.Zone = spec.name + "-zone"
	if err := c.createNode(ctx, spec.index); err != nil {
		return c, err
	}
	c.pods = startPodLoop(c.Kube, c.NodeName, nodeIP(spec.index), newIPAllocator(c.PodCIDRs))
	return c, nil
}

// startEnvtest starts the cluster's etcd and API server with envtest, which installs its CRDs, and returns an
// administrator's configuration.
func (c *Cluster) startEnvtest(spec clusterSpec, assets string) (*rest.Config, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	if !spec.fresh {
		var err error
		if crds, err = crdsFor(spec.member); err != nil {
			return nil, err
		}
	}
	c.env = &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDs:                     crds,
		Scheme:                   Scheme,
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  20 * time.Second,
	}
	// Our ports, not envtest's: envtest suggests ports from the ephemeral range, which an outgoing connection
	// can take before the server binds them.
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	c.env.ControlPlane.Etcd = &envtest.Etcd{Out: spec.log, Err: spec.log,
		URL: &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}}
	c.env.ControlPlane.Etcd.Configure().Set("listen-peer-urls", "http://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])))
	// The etcd data is thrown away at stop: skipping fsync makes every write much faster on a shared disk.
	c.env.ControlPlane.Etcd.Configure().Set("unsafe-no-fsync", "true")
	api := c.env.ControlPlane.GetAPIServer()
	api.Out, api.Err = spec.log, spec.log
	// A directory of our own, which stopping the API server leaves in place: RestartEmpty starts it again with the
	// same serving certificate, so that every client's configuration still trusts it.
	api.CertDir = filepath.Join(c.dir, "apiserver")
	if err := os.Mkdir(api.CertDir, 0o700); err != nil {
		return nil, err
	}
	api.Configure().Set("service-cluster-ip-range", joinPrefixes(c.ServiceCIDRs))
	host := apiHost(spec)
	port, err := freePortOn(host.String())
	if err != nil {
		return nil, err
	}
	api.SecureServing.ListenAddr = envtest.ListenAddr{Address: host.String(), Port: strconv.Itoa(port)}
	if spec.plane != nil {
		api.Configure().Set("advertise-address", host.String())
		if spec.member && spec.nodes > 0 {
			if err := c.configureKubeletAuth(api); err != nil {
				return nil, err
			}
			if c.rootCAFile, err = c.configureInCluster(api); err != nil {
				return nil, err
			}
		}
	}
	return c.env.Start()
}

// apiHost is the address where the cluster's API server is reached: with a data plane the host link's, through
// which node agents and kube-proxies reach it from their namespaces, else loopback.
func apiHost(spec clusterSpec) netip.Addr {
	if spec.plane != nil {
		return dataplane.HostV4
	}
	return netip.MustParseAddr("127.0.0.1")
}

// stop stops the cluster's processes and removes its folder; it tolerates a partly started cluster.
func (c *Cluster) stop() error {
	var errs []error
	if c.pods != nil {
		c.pods.stop()
	}
	if slices.ContainsFunc(c.Nodes, func(n *Node) bool { return n.kubelet != nil }) {
		// Nothing may replace or reschedule the pods the kubelets are stopping.
		for _, p := range []*proc.Process{c.kcm, c.scheduler} {
			if p != nil {
				p.Stop()
			}
		}
		errs = append(errs, c.drainKubeletNodes(context.Background()))
	}
	errs = append(errs, c.stopNodes())
	if c.scheduler != nil {
		c.scheduler.Stop()
	}
	if c.kcm != nil {
		c.kcm.Stop()
	}
	for _, p := range c.apiServers {
		p.Stop()
	}
	if c.env != nil {
		errs = append(errs, graceless(c.env.Stop()))
	}
	if c.HA != nil {
		c.HA.stop()
	}
	errs = append(errs, os.RemoveAll(c.dir))
	return errors.Join(errs...)
}

// graceless drops from err envtest's report that kube-apiserver outlasted its graceful stop, after which envtest
// killed it: with a fleet's controllers, kubelets and informers watching, a graceful stop can take longer than
// ControlPlaneStopTimeout on a busy machine, and the process is gone all the same (the suites check that no
// process is left).
func graceless(err error) error {
	if err == nil {
		return nil
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var keep []error
		for _, e := range joined.Unwrap() {
			keep = append(keep, graceless(e))
		}
		return errors.Join(keep...)
	}
	if strings.Contains(err.Error(), "timeout waiting for process kube-apiserver to stop") {
		return nil
	}
	return err
}

// AdoptAPIServer makes the cluster stop p, an API server started again in place of the one envtest started (which
// a test killed), when it stops: after its nodes, before its etcd.
func (c *Cluster) AdoptAPIServer(p *proc.Process) { c.apiServers = append(c.apiServers, p) }

// RestartEmpty stops the cluster's API server and etcd, throws etcd's data away and starts both again at the same
// address with the same credentials, as after the loss of etcd's disk: the API server comes back with its own
// bootstrap objects only, without CRDs. InstallCRDs puts the CRDs back, as an operator would. Only the control
// plane restarts: a member's controller-manager, nodes and pod loop are not for this.
func (c *Cluster) RestartEmpty() error {
	if c.HA != nil {
		return errHA
	}
	api, etcd := c.env.ControlPlane.GetAPIServer(), c.env.ControlPlane.Etcd
	// With clients watching, kube-apiserver takes longer than a test should wait to stop gracefully: it is killed
	// after a second, as in a crash, and is gone once its port refuses connections.
	stopTimeout := api.StopTimeout
	api.StopTimeout = time.Second
	err := api.Stop()
	api.StopTimeout = stopTimeout
	if err != nil && !strings.Contains(err.Error(), "timeout waiting for process") {
		return fmt.Errorf("clusterset: stopping %s's API server: %w", c.Name, err)
	}
	hostPort := api.SecureServing.ListenAddr.HostPort()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		conn, err := net.DialTimeout("tcp", hostPort, time.Second)
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			return fmt.Errorf("clusterset: %s's API server still listens on %s after it was killed", c.Name, hostPort)
		}
	}
	if err := etcd.Stop(); err != nil {
		return fmt.Errorf("clusterset: stopping %s's etcd: %w", c.Name, err)
	}
	if err := etcd.Start(); err != nil {
		return fmt.Errorf("clusterset: starting %s's etcd: %w", c.Name, err)
	}
	if err := api.Start(); err != nil {
		return fmt.Errorf("clusterset: starting %s's API server: %w", c.Name, err)
	}
	return nil
}

// InstallCRDs creates the cluster's CRDs (those it got at start) where they are missing and waits until they
// are established.
func (c *Cluster) InstallCRDs() error {
	crds, err := crdsFor(c.member)
	if err != nil {
		return err
	}
	_, err = envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{CRDs: crds})
	return err
}

// ServeRecords gives a member the broker's records CRDs, as `kubectl mcs broker init` does to a member that serves
// as the clusterset's broker too.
func (c *Cluster) ServeRecords() error {
	records, err := crds.Parse(crds.ExportRecord, crds.EndpointRecord, crds.MemberLease)
	if err != nil {
		return err
	}
	_, err = envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{CRDs: records})
	return err
}

func (c *Cluster) writeKubeconfig() (string, error) {
	cs := &ClusterSet{Members: []*Cluster{c}}
	b, err := cs.Kubeconfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.dir, "kubeconfig")
	return path, os.WriteFile(path, b, 0o600)
}

// crdsFor returns the CRDs a cluster gets: members get the mcs-api and ClusterProperty CRDs; the broker gets the
// records and the mcs-api CRDs (the previous release's records), as `kubectl mcs broker init` gives it.
func crdsFor(member bool) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	if member {
		return crds.Parse(crds.ServiceExport, crds.ServiceImport, crds.ClusterProperty)
	}
	return crds.Parse(crds.ServiceExport, crds.ServiceImport, crds.ExportRecord, crds.EndpointRecord, crds.MemberLease)
}

func (c *Cluster) createClusterProperties(ctx context.Context, id, setName string) error {
	for name, value := range map[string]string{
		aboutv1alpha1.ClusterIDName: id, aboutv1alpha1.ClusterSetName: setName, aboutv1alpha1.RegionName: c.Region,
	} {
		cp := &aboutv1alpha1.ClusterProperty{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       aboutv1alpha1.ClusterPropertySpec{Value: value},
		}
		if err := c.Client.Create(ctx, cp); err != nil {
			return fmt.Errorf("creating ClusterProperty %s: %w", name, err)
		}
	}
	return nil
}

// installExportPolicy installs the deploy manifests' admission policy that denies ServiceExports in the namespaces
// every cluster shares, as an operator would.
func (c *Cluster) installExportPolicy(ctx context.Context) error {
	p, b, err := policy.Objects()
	if err != nil {
		return err
	}
	for _, obj := range []client.Object{p, b} {
		if err := c.Client.Create(ctx, obj); err != nil {
			return fmt.Errorf("installing the export namespace policy: %w", err)
		}
	}
	return nil
}

// createNode registers the member's one virtual Node, Ready, with a zone label and the member's pod CIDRs.
func (c *Cluster) createNode(ctx context.Context, index int) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: c.NodeName,
			Labels: map[string]string{
				corev1.LabelHostname:       c.NodeName,
				corev1.LabelTopologyZone:   c.Zone,
				corev1.LabelTopologyRegion: c.Region,
				corev1.LabelOSStable:       "linux",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: c.PodCIDRs[0].String(), PodCIDRs: prefixStrings(c.PodCIDRs)},
	}
	created, err := c.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating node: %w", err)
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1000"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   resource.MustParse("100000"),
	}
	created.Status = corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "virtual node of the local clusterset", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: nodeIP(index)},
			{Type: corev1.NodeHostName, Address: c.NodeName},
		},
	}
	if _, err := c.Kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting node status: %w", err)
	}
	return nil
}

// nodeIP is the virtual node's address: recorded in pod status as hostIP, never dialled.
func nodeIP(index int) string { return fmt.Sprintf("192.0.2.%d", index+1) }

func prefixStrings(ps []netip.Prefix) []string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return s
}

func joinPrefixes(ps []netip.Prefix) string { return strings.Join(prefixStrings(ps), ",") }
