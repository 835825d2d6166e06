package clusterset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"vksfleet.dev/fleet/test/env/dataplane"
)

// DefaultMembers are the member clusters a clusterset has when Options.Members is empty.
var DefaultMembers = []string{"cluster-a", "cluster-b", "cluster-c"}

// BrokerName is the broker's name and kubeconfig context.
const BrokerName = "broker"

// maxMembers bounds the member count so that every member's CIDRs stay distinct (see cidrs.go).
const maxMembers = 100

// Options say what clusterset to start. The zero value starts DefaultMembers and a broker.
type Options struct {
	// Members are the member clusters' names, which are also their kubeconfig contexts.
	Members []string
	// ClusterIDs maps a member name to the cluster id in its cluster.clusterset.k8s.io ClusterProperty. A member
	// missing from the map gets its name as id. Ids may contain dots (KEP-2149), such as "east.prod".
	ClusterIDs map[string]string
	// ClusterSetName is the value of every member's clusterset.k8s.io ClusterProperty; default "clusterset".
	ClusterSetName string
	// NoBroker leaves out the broker API server.
	NoBroker bool
	// BrokerOnly starts the broker alone, without DefaultMembers when Members is empty: for benchmarks of the broker
	// whose members are simulated (test/bench/scalebench).
	BrokerOnly bool
	// HABroker runs the broker highly available, as kubeadm's guide lays out a control plane with an external etcd
	// and a load balancer (habroker.go): a 3-member etcd cluster and 2 kube-apiservers behind HAProxy (Debian's,
	// which `make tools` installs), which every client of the broker reaches. Cluster.HA reaches each process.
	HABroker bool
	// AssetsDir is the folder holding etcd, kube-apiserver, kube-controller-manager and kubectl; default
	// $FLEET_ASSETS, else the repository's .cache/tools/current that `make tools` fills.
	AssetsDir string
	// Log receives the output of every control-plane process; default: discarded.
	Log io.Writer
	// Nodes, when positive, gives every member a data plane (package dataplane): kube-scheduler, and this many
	// nodes, each a network namespace with kube-proxy, Debian's containerd and the real kubelet (built by `make
	// tools`), whose pods are containers of the images in Images. It needs root. Zero keeps one virtual node
	// whose pods are Running in the API only.
	Nodes int
	// Images are docker-archive tars (nodeimages.Build) loaded into every node's containerd, required with
	// Nodes; they must hold nodeimages.Pause, the sandbox image. Nothing is ever pulled.
	Images []string
	// Regions maps a member name to its region (its nodes' topology.kubernetes.io/region and its
	// region.topology.k8s.io ClusterProperty); by default members share regions two by two, in order:
	// region-1 for the first two, region-2 for the next two, and so on.
	Regions map[string]string
	// NoControllerManager names members that run no kube-controller-manager, for benchmarks that write every
	// EndpointSlice themselves and would rather not pay for the process: such a member has no endpointslice,
	// Deployment or namespace controller and no garbage collector.
	NoControllerManager []string
	// DataPlaneWait is how long Start waits for another clusterset's data plane on this machine to stop;
	// default 15 minutes.
	DataPlaneWait time.Duration
	// Oldest names members that run the oldest Kubernetes release the project supports (OldestAssetsDir): its
	// kube-apiserver, and its kube-controller-manager, which must not be newer than the API server it serves; the
	// virtual Node and pod loop stand in for the kubelet as in any member. They start as a cluster of that release
	// is before `kubectl mcs join`, without our CRDs, ClusterProperties and admission policy: Cluster.ID is the id
	// to join them with. Not with Nodes: the pinned kubelet and kube-proxy are newer than that API server too.
	Oldest []string
}

// ClusterSet is a running local clusterset.
type ClusterSet struct {
	// Broker is the broker API server, nil with Options.NoBroker. With kubelet nodes it runs the namespace and
	// garbage collector controllers of kube-controller-manager, for members that join and leave.
	Broker *Cluster
	// Members are the member clusters, in Options.Members order.
	Members []*Cluster

	plane    *dataplane.Plane
	stopOnce sync.Once
	stopErr  error
}

// Start starts a clusterset: every cluster concurrently, each ready for use when Start returns. On error,
// whatever was started is stopped again.
func Start(ctx context.Context, opts Options) (*ClusterSet, error) {
	specs, assets, err := plan(opts)
	if err != nil {
		return nil, err
	}
	var plane *dataplane.Plane
	if opts.Nodes > 0 {
		if plane, err = startDataPlane(ctx, opts, specs); err != nil {
			return nil, err
		}
	}
	clusters := make([]*Cluster, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, spec := range specs {
		wg.Go(func() { clusters[i], errs[i] = startCluster(ctx, spec, assets) })
	}
	wg.Wait()
	cs := &ClusterSet{plane: plane}
	for _, c := range clusters {
		switch {
		case c == nil:
		case c.Name == BrokerName && !c.member:
			cs.Broker = c
		default:
			cs.Members = append(cs.Members, c)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, cs.Stop())
	}
	return cs, nil
}

// plan validates the options and turns them into one spec per cluster.
func plan(opts Options) ([]clusterSpec, string, error) {
	members := opts.Members
	if len(members) == 0 && !opts.BrokerOnly {
		members = DefaultMembers
	}
	if len(members) > maxMembers {
		return nil, "", fmt.Errorf("clusterset: %d members requested, at most %d are supported", len(members), maxMembers)
	}
	setName := opts.ClusterSetName
	if setName == "" {
		setName = "clusterset"
	}
	assets, err := AssetsDir(opts.AssetsDir)
	if err != nil {
		return nil, "", err
	}
	var oldestAssets string
	for _, name := range opts.Oldest {
		if !slices.Contains(members, name) {
			return nil, "", fmt.Errorf("clusterset: Oldest names %q, which is not a member", name)
		}
		if opts.Nodes > 0 {
			return nil, "", errors.New("clusterset: Oldest members cannot have Nodes: the pinned kubelet is newer than their API server")
		}
		if oldestAssets, err = OldestAssetsDir(); err != nil {
			return nil, "", err
		}
	}
	if opts.Nodes > 0 {
		if err := dataPlaneReady(opts, assets); err != nil {
			return nil, "", err
		}
	}
	logw := opts.Log
	if logw == nil {
		logw = io.Discard
	}
	seen := map[string]bool{}
	noKCM := map[string]bool{}
	for _, name := range opts.NoControllerManager {
		if !slices.Contains(members, name) {
			return nil, "", fmt.Errorf("clusterset: NoControllerManager names %q, which is not a member", name)
		}
		noKCM[name] = true
	}
	var specs []clusterSpec
	for i, name := range members {
		if name == BrokerName {
			return nil, "", fmt.Errorf("clusterset: %q is reserved for the broker", BrokerName)
		}
		if seen[name] {
			return nil, "", fmt.Errorf("clusterset: member %q is listed twice", name)
		}
		seen[name] = true
		id := name
		if v, ok := opts.ClusterIDs[name]; ok {
			id = v
		}
		region := fmt.Sprintf("region-%d", i/2+1)
		if r, ok := opts.Regions[name]; ok {
			region = r
		}
		spec := clusterSpec{name: name, id: id, setName: setName, member: true, index: i, log: logw,
			region: region, nodes: opts.Nodes, noKCM: noKCM[name], images: opts.Images}
		if slices.Contains(opts.Oldest, name) {
			spec.assets, spec.fresh = oldestAssets, true
		}
		specs = append(specs, spec)
	}
	if opts.HABroker && opts.NoBroker {
		return nil, "", errors.New("clusterset: HABroker asks for a broker, NoBroker for none")
	}
	if !opts.NoBroker {
		specs = append(specs, clusterSpec{name: BrokerName, index: maxMembers, log: logw, nodes: opts.Nodes, ha: opts.HABroker})
	}
	return specs, assets, nil
}

// dataPlaneReady checks what a data plane needs before anything starts, so that `make up` fails at once with a
// message that says what is missing.
func dataPlaneReady(opts Options, assets string) error {
	if err := dataplane.CheckHost(); err != nil {
		return err
	}
	if err := kubeletCheck(opts, assets); err != nil {
		return err
	}
	for _, b := range []string{"kube-scheduler", "kube-proxy"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return fmt.Errorf("clusterset: %s not found in %s: run `make tools` first", b, assets)
		}
	}
	return nil
}

// startDataPlane takes the machine's data plane and routes every cluster's ranges: pod CIDRs into the fabric,
// Service CIDRs nowhere.
func startDataPlane(ctx context.Context, opts Options, specs []clusterSpec) (*dataplane.Plane, error) {
	wait := opts.DataPlaneWait
	if wait == 0 {
		wait = 15 * time.Minute
	}
	plane, err := dataplane.Acquire(ctx, wait)
	if err != nil {
		return nil, err
	}
	for i := range specs {
		s := &specs[i]
		var pods []netip.Prefix
		if s.member {
			pods = podCIDRs(s.index)
		}
		if err := plane.AddMember(pods, serviceCIDRs(s.index)); err != nil {
			return nil, errors.Join(err, plane.Close())
		}
		s.plane = plane
	}
	return plane, nil
}

// AssetsDir resolves the folder with the control-plane binaries (dir, else $FLEET_ASSETS, else the repository's
// tools cache) and checks that each binary is there.
func AssetsDir(dir string) (string, error) {
	return assetsIn(dir, "FLEET_ASSETS", "current", "etcd", "kube-apiserver", "kube-controller-manager", "kubectl")
}

// OldestAssetsDir resolves the folder with the oldest supported Kubernetes release's kube-apiserver and
// kube-controller-manager (build/tools/kube-oldest) and the etcd they run with: $FLEET_OLDEST_ASSETS, else the
// repository's tools cache.
func OldestAssetsDir() (string, error) {
	return assetsIn("", "FLEET_OLDEST_ASSETS", "oldest", "etcd", "kube-apiserver", "kube-controller-manager")
}

// assetsIn resolves a folder of binaries (dir, else $env, else the tools cache's folder cached) and checks that
// each of bins is there.
func assetsIn(dir, env, cached string, bins ...string) (string, error) {
	if dir == "" {
		dir = os.Getenv(env)
	}
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, ".cache", "tools", cached)
	}
	for _, b := range bins {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("clusterset: %s not found in %s: run `make tools` first (or set %s)", b, dir, env)
		}
	}
	return dir, nil
}

// Tool returns the path of a tool `make tools` links into the assets folder beside the control-plane binaries
// (kustomize, helm), so that tests find every tool where they find the control plane.
func Tool(name string) (string, error) {
	dir, err := AssetsDir("")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("clusterset: %s not found in %s: run `make tools` first", name, dir)
	}
	return bin, nil
}

// RepoRoot walks up from the working directory to the folder holding the project's go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && isProjectModule(b) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("clusterset: not inside the vksfleet.dev/fleet module; set FLEET_ASSETS")
		}
		dir = parent
	}
}

// PinnedKubernetes is the release of k8s.io/kubernetes that the tools module build/tools/<module> requires, as
// build/tools.sh reads it: the version its binaries are built from and report.
func PinnedKubernetes(module string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(root, "build", "tools", module, "go.mod"))
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "require" && f[1] == "k8s.io/kubernetes" {
			return f[2], nil
		}
	}
	return "", fmt.Errorf("build/tools/%s/go.mod requires no k8s.io/kubernetes", module)
}

func isProjectModule(goMod []byte) bool {
	const want = "module vksfleet.dev/fleet\n"
	return len(goMod) >= len(want) && string(goMod[:len(want)]) == want
}

// Member returns the member with the given name, or nil.
func (cs *ClusterSet) Member(name string) *Cluster {
	for _, c := range cs.Members {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// All returns the members followed by the broker, if any.
func (cs *ClusterSet) All() []*Cluster {
	all := append([]*Cluster(nil), cs.Members...)
	if cs.Broker != nil {
		all = append(all, cs.Broker)
	}
	return all
}

// Kubeconfig returns one kubeconfig with a context per member (named after it) and one named "broker", all with
// administrator credentials. The current context is the first member's.
func (cs *ClusterSet) Kubeconfig() ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	for _, c := range cs.All() {
		cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
		cfg.AuthInfos[c.Name] = &clientcmdapi.AuthInfo{ClientCertificateData: c.Config.CertData, ClientKeyData: c.Config.KeyData}
		cfg.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: c.Name, Namespace: "default"}
	}
	if len(cs.Members) > 0 {
		cfg.CurrentContext = cs.Members[0].Name
	}
	return clientcmd.Write(*cfg)
}

// Stop stops every cluster and removes their folders. It is safe to call more than once and from t.Cleanup.
func (cs *ClusterSet) Stop() error {
	cs.stopOnce.Do(func() {
		all := cs.All()
		errs := make([]error, len(all))
		var wg sync.WaitGroup
		for i, c := range all {
			wg.Go(func() { errs[i] = c.stop() })
		}
		wg.Wait()
		if cs.plane != nil {
			errs = append(errs, cs.plane.Close())
		}
		cs.stopErr = errors.Join(errs...)
	})
	return cs.stopErr
}

// MemberNames returns n member names: cluster-a, cluster-b, ... and, past 26, cluster-27, cluster-28, ...
func MemberNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		if i < 26 {
			names[i] = "cluster-" + string(rune('a'+i))
		} else {
			names[i] = fmt.Sprintf("cluster-%d", i+1)
		}
	}
	return names
}
