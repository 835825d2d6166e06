package framework

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/proc"
)

// The crashes below are the short faults of a chaos run (test/e2e/chaos), each undone by its caller: a process
// killed and started again, a process frozen and thawed, a member cut from the broker and joined again. Unlike
// Fault's kinds, they leave the member's other processes alone.

// KillAPIServer kills the member's kube-apiserver with SIGKILL, as a crash would, starts it again with the same
// command line (its etcd keeps the data) and waits until it is ready. The cluster stops the new process where it
// would have stopped the first.
func (m *Member) KillAPIServer(ctx context.Context) error {
	f := m.fleet
	f.faultMu.Lock()
	defer f.faultMu.Unlock()
	if m.stopped != nil {
		return fmt.Errorf("fleet: %s: its control plane is stopped", m.Name)
	}
	pid, err := m.apiServerPid()
	if err != nil {
		return err
	}
	argv, err := cmdline(pid)
	if err != nil {
		return err
	}
	if err := kill(pid); err != nil {
		return fmt.Errorf("fleet: %s: killing kube-apiserver: %w", m.Name, err)
	}
	p, err := proc.Start(f.opts.Log, m.Name+"/kube-apiserver", argv[0], argv[1:]...)
	if err != nil {
		return err
	}
	m.AdoptAPIServer(p)
	return m.waitAPIReady(ctx)
}

// PauseAPIServer freezes the member's kube-apiserver (SIGSTOP), as a hung server: it keeps its port and answers
// nothing. resume thaws it.
func (m *Member) PauseAPIServer() (resume func() error, err error) {
	m.fleet.faultMu.Lock()
	defer m.fleet.faultMu.Unlock()
	if m.stopped != nil {
		return nil, fmt.Errorf("fleet: %s: its control plane is stopped", m.Name)
	}
	pid, err := m.apiServerPid()
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("fleet: %s: freezing kube-apiserver: %w", m.Name, err)
	}
	return func() error { return syscall.Kill(pid, syscall.SIGCONT) }, nil
}

// apiServerPid finds the member's kube-apiserver process, the first one or one KillAPIServer started.
func (m *Member) apiServerPid() (int, error) {
	api := memberProcesses(m.dir(), "kube-apiserver")
	if len(api) != 1 {
		return 0, fmt.Errorf("fleet: %s: found %d kube-apiserver processes naming %s, want 1", m.Name, len(api), m.dir())
	}
	return api[0], nil
}

// dir is the member's folder, with a trailing slash, which its control plane's command lines name.
func (m *Member) dir() string { return filepath.Dir(m.KubeconfigPath) + "/" }

// waitAPIReady waits until the member's API server answers /readyz.
func (m *Member) waitAPIReady(ctx context.Context) error {
	err := poll.Until(ctx, poll.Interval, installTimeout, func() error {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := m.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("fleet: %s: the API server: %w", m.Name, err)
	}
	return nil
}

// PausePod freezes the processes of the pod's running containers (SIGSTOP), as a hung process: the kubelet's
// probes decide what happens next. resume thaws those still in their containers.
func (m *Member) PausePod(ctx context.Context, p corev1.Pod) (resume func(), err error) {
	cs := containersOf(p)
	if len(cs) == 0 {
		return nil, fmt.Errorf("fleet: %s: pod %s has no running container", m.Name, p.Name)
	}
	var frozen []frozenContainer
	resume = func() {
		for _, c := range frozen {
			c.thaw()
		}
	}
	for _, c := range cs {
		fc, err := c.freeze(ctx)
		frozen = append(frozen, fc)
		if err != nil {
			resume()
			return nil, fmt.Errorf("fleet: %s: pod %s: %w", m.Name, p.Name, err)
		}
	}
	return resume, nil
}

// CutFromBroker drops every packet between the member's nodes and pods and the broker's address (its load
// balancer, with a highly available broker), in the data plane's fabric: the member's controllers lose the
// broker and nothing else. rejoin undoes it.
func (m *Member) CutFromBroker() (rejoin func() error, err error) {
	u, err := url.Parse(m.fleet.Broker.Config.Host)
	if err != nil {
		return nil, fmt.Errorf("fleet: the broker's address %q: %w", m.fleet.Broker.Config.Host, err)
	}
	to, err := netip.ParseAddrPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("fleet: the broker's address %q: %w", m.fleet.Broker.Config.Host, err)
	}
	name := "broker-" + m.Name
	if err := dataplane.DropTo(name, m.dataPlane(), to); err != nil {
		return nil, err
	}
	return func() error { return dataplane.Remove(name) }, nil
}
