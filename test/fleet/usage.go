package fleet

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
		for _, sel := range []struct {
			figure, namespace string
			labels            map[string]string
		}{
			{"pod: mcs-controller, MiB", controllerNamespace, map[string]string{"app.kubernetes.io/name": controllerDeployment}},
			{"pod: coredns, MiB", dnsNamespace, map[string]string{"k8s-app": "kube-dns"}},
		} {
			var pods corev1.PodList
			if err := m.Client.List(ctx, &pods, client.InNamespace(sel.namespace), client.MatchingLabels(sel.labels)); err != nil {
				return err
			}
			for _, p := range pods.Items {
				b, err := m.PodMemory(p.UID)
				if err != nil {
					return err
				}
				report(sel.figure, float64(b)/mib)
			}
		}
	}
	return nil
}
