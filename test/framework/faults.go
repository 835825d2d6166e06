package framework

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/proc"
)

// FaultKind is a kind of fault the local clusterset causes on demand (`make fault`).
type FaultKind string

// The faults. A stopped control plane keeps its data plane: nodes, kube-proxy and pods go on running and
// answering. Data-plane faults act between members only: each member's API server stays reachable from its nodes.
const (
	// StopControlPlane stops a member's API server, kube-controller-manager, kube-scheduler and mcs-controller.
	StopControlPlane FaultKind = "stop-control-plane"
	// StartControlPlane starts again what StopControlPlane stopped.
	StartControlPlane FaultKind = "start-control-plane"
	// CutDataPlane drops every packet between the member's nodes and pods and those of every other member, or of
	// the peer only.
	CutDataPlane FaultKind = "cut-data-plane"
	// Lossy drops Fault.Loss percent of those packets, at random.
	Lossy FaultKind = "lossy"
	// Heal undoes every fault of the fleet: cuts and losses, and stopped control planes.
	Heal FaultKind = "heal"
)

// FaultKinds are the kinds Fleet.Fault takes.
var FaultKinds = []FaultKind{StopControlPlane, StartControlPlane, CutDataPlane, Lossy, Heal}

// DefaultLoss is the share of packets, in percent, that Lossy drops when Fault.Loss is zero.
const DefaultLoss = 5

// Fault is one fault to cause.
type Fault struct {
	Kind FaultKind
	// Member is the member the fault is about; Heal needs none.
	Member string
	// Peer, for CutDataPlane and Lossy, confines the fault to the packets between Member and Peer.
	Peer string
	// Loss is Lossy's share of dropped packets in percent, in each direction; default DefaultLoss.
	Loss float64
}

// Fault causes a fault in the fleet's members, at once, and undoes it (StartControlPlane, Heal); each kind is
// idempotent. It needs a fleet with nodes.
func (f *Fleet) Fault(ctx context.Context, fault Fault) error {
	if err := f.checkFault(fault); err != nil {
		return err
	}
	f.faultMu.Lock()
	defer f.faultMu.Unlock()
	m := f.Member(fault.Member)
	switch fault.Kind {
	case StopControlPlane:
		return m.stopControlPlane(ctx)
	case StartControlPlane:
		return m.startControlPlane(ctx)
	case CutDataPlane:
		return f.drop(fault, "cut", 100)
	case Lossy:
		return f.drop(fault, "loss", cmp.Or(fault.Loss, DefaultLoss))
	default:
		errs := []error{dataplane.Heal()}
		for _, m := range f.Members {
			errs = append(errs, m.startControlPlane(ctx))
		}
		return errors.Join(errs...)
	}
}

// checkFault says what is wrong with a fault, in a message for the person running `make fault`.
func (f *Fleet) checkFault(fault Fault) error {
	if !slices.Contains(FaultKinds, fault.Kind) {
		return fmt.Errorf("fleet: unknown fault %q; the faults are %s", fault.Kind, FaultKindNames())
	}
	if !f.pods {
		return fmt.Errorf("fleet: faults need a fleet with nodes (the fleet of `make up`)")
	}
	if fault.Kind == Heal {
		return nil
	}
	var names []string
	for _, m := range f.Members {
		names = append(names, m.Name)
	}
	if fault.Member == "" {
		return fmt.Errorf("fleet: %s needs a member: one of %s", fault.Kind, strings.Join(names, ", "))
	}
	if f.Member(fault.Member) == nil {
		return fmt.Errorf("fleet: %q is not a member; the members are %s", fault.Member, strings.Join(names, ", "))
	}
	if fault.Peer != "" {
		switch {
		case fault.Kind != CutDataPlane && fault.Kind != Lossy:
			return fmt.Errorf("fleet: %s takes no peer", fault.Kind)
		case fault.Peer == fault.Member:
			return fmt.Errorf("fleet: the peer of %s must be another member than %s", fault.Kind, fault.Member)
		case f.Member(fault.Peer) == nil:
			return fmt.Errorf("fleet: peer %q is not a member; the members are %s", fault.Peer, strings.Join(names, ", "))
		}
	}
	if fault.Kind == Lossy && (fault.Loss < 0 || fault.Loss > 100) {
		return fmt.Errorf("fleet: a loss of %v%% is not between 0 and 100", fault.Loss)
	}
	return nil
}

// FaultKindNames lists the kinds of fault, comma-separated, for messages.
func FaultKindNames() string {
	s := make([]string, len(FaultKinds))
	for i, k := range FaultKinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// drop puts a data-plane fault between the member and every other member, or the peer: its nodes' addresses and
// pod CIDRs on either side. The fault's name says what it is about, so that the same fault again replaces it.
func (f *Fleet) drop(fault Fault, kind string, percent float64) error {
	name := kind + "-" + fault.Member
	var others []netip.Prefix
	for _, o := range f.Members {
		if o.Name == fault.Member || fault.Peer != "" && o.Name != fault.Peer {
			continue
		}
		others = append(others, o.dataPlane()...)
	}
	if fault.Peer != "" {
		name += "-" + fault.Peer
	}
	return dataplane.Drop(name, f.Member(fault.Member).dataPlane(), others, percent)
}

// dataPlane is where the member's data plane lives: its pod CIDRs and its nodes' addresses.
func (m *Member) dataPlane() []netip.Prefix {
	ps := slices.Clone(m.PodCIDRs)
	for _, n := range m.Nodes {
		for _, a := range n.Addrs {
			ps = append(ps, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return ps
}

// A stopped control plane is a frozen API server (SIGSTOP) with its kube-controller-manager and kube-scheduler
// killed, and frozen mcs-controller containers:
//
//   - The API server is frozen rather than killed because this package cannot start it again: envtest owns it
//     (and clusterset's stop stops it through envtest). Frozen, it keeps its port: clients connect and then
//     time out (a TLS handshake gives up after 10 s), as with a hung or unreachable control plane, and it
//     answers again at once when thawed, with its etcd untouched.
//   - kube-controller-manager and kube-scheduler are killed and started again with the same command line. A
//     frozen controller manager would wake up with node heartbeats it last saw minutes ago, and its node
//     lifecycle controller could mark every node of the member not ready, and so every pod, before its informers
//     catch up; a fresh one counts each node's heartbeat from its own start.
//   - The mcs-controller containers are frozen through the member's nodes (their processes, found through each
//     node's containerd): the leader stops renewing its broker Lease at once, rather than after it loses its
//     leader election on the frozen API server. The kubelet may restart a container whose liveness probe fails
//     meanwhile (after about 30 s): the new one cannot lead without its API server, and leads once it is back.
//
// Nodes, kube-proxy and every other pod are left alone.

// controlPlaneComponents are the member's processes that stop-control-plane kills and start again.
var controlPlaneComponents = []string{"kube-controller-manager", "kube-scheduler"}

// stoppedControlPlane is what stopControlPlane did to a member, for startControlPlane to undo.
type stoppedControlPlane struct {
	apiServer   int        // pid, frozen
	components  [][]string // command lines of the killed components
	controllers []frozenContainer
}

// frozenContainer is an mcs-controller container whose processes were frozen.
type frozenContainer struct {
	id   string
	pids []int
}

// stopControlPlane stops the member's control plane (see above), unless it is stopped.
func (m *Member) stopControlPlane(ctx context.Context) error {
	if m.stopped != nil {
		return nil
	}
	api, err := m.apiServerPid()
	if err != nil {
		return err
	}
	// The containers' ids come from the API server, which must still answer.
	containers, err := m.controllerContainers(ctx)
	if err != nil {
		return err
	}
	s := &stoppedControlPlane{apiServer: api}
	// From here on, a failure leaves what was done recorded, for start-control-plane to undo.
	m.stopped = s
	for _, c := range containers {
		frozen, err := c.freeze(ctx)
		s.controllers = append(s.controllers, frozen)
		if err != nil {
			return fmt.Errorf("fleet: %s: the mcs-controller: %w", m.Name, err)
		}
	}
	for _, name := range controlPlaneComponents {
		for _, pid := range memberProcesses(m.dir(), name) {
			argv, err := cmdline(pid)
			if err != nil {
				return err
			}
			if err := kill(pid); err != nil {
				return fmt.Errorf("fleet: %s: killing %s: %w", m.Name, name, err)
			}
			s.components = append(s.components, argv)
		}
	}
	// Those that start-control-plane started before were among them.
	m.restarted = nil
	if err := syscall.Kill(s.apiServer, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("fleet: %s: freezing kube-apiserver: %w", m.Name, err)
	}
	return nil
}

// startControlPlane undoes stopControlPlane, unless the control plane runs: it thaws the API server and the
// mcs-controller processes still in their containers, waits until the API server is ready, then starts
// kube-controller-manager and kube-scheduler again and waits until they are healthy.
func (m *Member) startControlPlane(ctx context.Context) error {
	s := m.stopped
	if s == nil {
		return nil
	}
	if err := m.thaw(); err != nil {
		return err
	}
	if err := m.waitAPIReady(ctx); err != nil {
		return err
	}
	// Each component leaves the list once started, so that a start that failed half-way and is asked again starts
	// only those still stopped.
	for len(s.components) > 0 {
		argv := s.components[0]
		p, err := proc.Start(m.fleet.opts.Log, m.Name+"/"+filepath.Base(argv[0]), argv[0], argv[1:]...)
		if err != nil {
			return err
		}
		m.restarted = append(m.restarted, p)
		s.components = s.components[1:]
		if err := waitHealthy(ctx, p, argv); err != nil {
			return err
		}
	}
	m.stopped = nil
	return nil
}

// thaw thaws what stopControlPlane froze: the API server, and the mcs-controller processes still in their
// containers.
func (m *Member) thaw() error {
	s := m.stopped
	if s == nil {
		return nil
	}
	var errs []error
	if err := syscall.Kill(s.apiServer, syscall.SIGCONT); err != nil {
		errs = append(errs, fmt.Errorf("fleet: %s: thawing kube-apiserver: %w", m.Name, err))
	}
	for _, c := range s.controllers {
		c.thaw()
	}
	return errors.Join(errs...)
}

// freeze freezes the container's processes (SIGSTOP) and returns them, for thaw.
func (c container) freeze(ctx context.Context) (frozenContainer, error) {
	pids, err := c.processes(ctx)
	if err != nil {
		return frozenContainer{}, err
	}
	f := frozenContainer{id: c.id, pids: pids}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return f, fmt.Errorf("fleet: freezing process %d of container %s: %w", pid, c.id, err)
		}
	}
	return f, nil
}

// thaw thaws the processes freeze froze that are still in their container: the kubelet may have restarted it
// meanwhile, and their pids may have gone to other processes.
func (c frozenContainer) thaw() {
	for _, pid := range c.pids {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil && bytes.Contains(b, []byte(c.id)) {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// stopFaults, at Stop, thaws what a stopped control plane has frozen, so that the clusterset can stop, and
// stops the components startControlPlane started.
func (m *Member) stopFaults() error {
	err := m.thaw()
	m.stopped = nil
	for _, p := range m.restarted {
		p.Stop()
	}
	m.restarted = nil
	return err
}

// container is a container of a pod on one of the member's nodes.
type container struct {
	socket string // the node's containerd
	id     string
}

// controllerContainers are the member's mcs-controller containers that run.
func (m *Member) controllerContainers(ctx context.Context) ([]container, error) {
	var pods corev1.PodList
	if err := m.Client.List(ctx, &pods, client.InNamespace(controllerPods.namespace), controllerPods.labels); err != nil {
		return nil, fmt.Errorf("fleet: %s: listing the mcs-controller pods: %w", m.Name, err)
	}
	var cs []container
	for _, p := range pods.Items {
		cs = append(cs, containersOf(p)...)
	}
	return cs, nil
}

// containersOf are the pod's containers that run.
func containersOf(p corev1.Pod) []container {
	var cs []container
	for _, st := range p.Status.ContainerStatuses {
		id, ok := strings.CutPrefix(st.ContainerID, "containerd://")
		if ok && st.State.Running != nil && p.Spec.NodeName != "" {
			cs = append(cs, container{socket: filepath.Join(dataplane.NodeRunDir(p.Spec.NodeName), "containerd.sock"), id: id})
		}
	}
	return cs
}

// KillPod kills every process of the pod's running containers with SIGKILL, as a crash would: none runs its
// shutdown (a controller keeps its leader Lease until it expires), and the kubelet restarts the containers in the
// same pod.
func (m *Member) KillPod(ctx context.Context, p corev1.Pod) error {
	cs := containersOf(p)
	if len(cs) == 0 {
		return fmt.Errorf("fleet: %s: pod %s has no running container", m.Name, p.Name)
	}
	for _, c := range cs {
		pids, err := c.processes(ctx)
		if err != nil {
			return err
		}
		for _, pid := range pids {
			if err := kill(pid); err != nil {
				return fmt.Errorf("fleet: %s: killing process %d of pod %s: %w", m.Name, pid, p.Name, err)
			}
		}
	}
	return nil
}

// processes lists the container's processes, as its node's containerd knows them.
func (c container) processes(ctx context.Context) ([]int, error) {
	out, err := exec.CommandContext(ctx, "ctr", "--address", c.socket, "-n", "k8s.io", "tasks", "ps", c.id).Output()
	if err != nil {
		return nil, fmt.Errorf("fleet: ctr tasks ps %s: %w", c.id, err)
	}
	var pids []int
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if pid, err := strconv.Atoi(f[0]); err == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("fleet: container %s has no process: %q", c.id, out)
	}
	return pids, nil
}

// memberProcesses are the processes running the program name whose command line names the member's folder
// (dir, with a trailing slash): its control plane's.
func memberProcesses(dir, name string) []int {
	var pids []int
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, path := range cmdlines {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		argv0, _, _ := bytes.Cut(b, []byte{0})
		if filepath.Base(string(argv0)) != name || !bytes.Contains(b, []byte(dir)) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cmdline is a process's command line.
func cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
}

// kill kills a process, as a crash would, and waits until its parent has reaped it: its port is free then.
func kill(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return err
	}
	return poll.Until(context.Background(), 20*time.Millisecond, 10*time.Second, func() error {
		if syscall.Kill(pid, 0) == nil {
			return fmt.Errorf("process %d is still there", pid)
		}
		return nil
	})
}

// waitHealthy waits until a control-plane component started from argv answers on its --secure-port.
func waitHealthy(ctx context.Context, p *proc.Process, argv []string) error {
	for _, a := range argv {
		if port, ok := strings.CutPrefix(a, "--secure-port="); ok {
			return p.WaitHTTP(ctx, selfSigned, "https://127.0.0.1:"+port+"/healthz", time.Minute)
		}
	}
	return nil
}

// selfSigned asks the control-plane components for their health on loopback, where they serve self-signed
// certificates.
var selfSigned = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // liveness only, on loopback
}}
