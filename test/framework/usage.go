package framework

import (
	"context"
	"fmt"

	"vksfleet.dev/fleet/test/env/proc"
)

// mib is a mebibyte.
const mib = 1 << 20

// Usage reads the memory of a fleet with nodes and reports each reading by figure name, in MiB: per node, the RSS
// of its kubelet, containerd and kube-proxy and the memory of all its pods; per pod of ours, the controller's
// and CoreDNS's. A figure is reported once per node or pod.
func (f *Fleet) Usage(ctx context.Context, report func(figure string, mib float64)) error {
	for _, m := range f.Members {
		for _, n := range m.Nodes {
			u, err := n.Usage()
			if err != nil {
				return err
			}
			for name, pu := range u {
				report("node: "+name+" RSS, MiB", float64(pu.RSS)/mib)
			}
			pods, err := n.PodsMemory()
			if err != nil {
				return err
			}
			report("node: all its pods, MiB", float64(pods)/mib)
		}
		for _, part := range []struct {
			figure string
			pods   productPods
		}{{"pod: mcs-controller, MiB", controllerPods}, {"pod: coredns, MiB", m.fleet.dnsPods()}} {
			pods, err := m.pods(ctx, part.pods)
			if err != nil {
				return err
			}
			for _, p := range pods {
				b, err := m.PodMemory(p.UID)
				if err != nil {
					return err
				}
				report(part.figure, float64(b)/mib)
			}
		}
	}
	return nil
}

// ProcessUsage reads what the member's controller and CoreDNS processes use, in a fleet without nodes, where they
// run on the host.
func (m *Member) ProcessUsage() (controller, coredns proc.Usage, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.controller == nil || m.coredns == nil {
		return controller, coredns, fmt.Errorf("%s: its controller or CoreDNS runs no process of its own", m.Name)
	}
	if controller, err = m.controller.Usage(); err != nil {
		return controller, coredns, err
	}
	coredns, err = m.coredns.Usage()
	return controller, coredns, err
}
