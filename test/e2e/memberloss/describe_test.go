package memberloss

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/test/env/workload"
)

// describe says what every member holds: its nodes and, in the test's namespace, its pods, its exports'
// conditions and its imported slices. A wait that times out logs it, so that a failure in CI says which link of
// the chain broke (a node not ready, a pod not scheduled or not ready, an export not Ready, an import missing
// its endpoints).
func (e *env) describe(ctx context.Context) string {
	var b strings.Builder
	for _, m := range e.f.Members {
		fmt.Fprintf(&b, "\n%s:", m.Name)
		nodes := &corev1.NodeList{}
		if err := m.Client.List(ctx, nodes); err != nil {
			fmt.Fprintf(&b, " nodes: %v;", err)
		}
		for _, n := range nodes.Items {
			ready := "Ready unknown"
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					ready = fmt.Sprintf("Ready=%s (%s)", c.Status, c.Reason)
				}
			}
			var taints []string
			for _, taint := range n.Spec.Taints {
				taints = append(taints, taint.Key+":"+string(taint.Effect))
			}
			fmt.Fprintf(&b, "\n  node %s: %s, taints [%s]", n.Name, ready, strings.Join(taints, " "))
		}
		// The test's pods, and the controller's and CoreDNS's: a restarted controller is one that was not exporting.
		for _, in := range []string{ns, "mcs-system"} {
			pods := &corev1.PodList{}
			if err := m.Client.List(ctx, pods, client.InNamespace(in)); err != nil {
				fmt.Fprintf(&b, "\n  pods in %s: %v", in, err)
			}
			for _, p := range pods.Items {
				fmt.Fprintf(&b, "\n  pod %s/%s on %q: %s", in, p.Name, p.Spec.NodeName, podState(p))
			}
		}
		exports := &mcsv1beta1.ServiceExportList{}
		if err := m.Client.List(ctx, exports, client.InNamespace(ns)); err != nil {
			fmt.Fprintf(&b, "\n  exports: %v", err)
		}
		for _, x := range exports.Items {
			var conds []string
			for _, c := range x.Status.Conditions {
				conds = append(conds, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
			}
			fmt.Fprintf(&b, "\n  export %s: %s", x.Name, strings.Join(conds, " "))
		}
		slicesList := &discoveryv1.EndpointSliceList{}
		if err := m.Client.List(ctx, slicesList, client.InNamespace(ns), client.HasLabels{mcsv1beta1.LabelSourceCluster}); err != nil {
			fmt.Fprintf(&b, "\n  imported slices: %v", err)
		}
		imported := map[string][]string{}
		for _, s := range slicesList.Items {
			svc := s.Labels[mcsv1beta1.LabelServiceName]
			for _, ep := range s.Endpoints {
				_, state := endpointState(s.Labels[mcsv1beta1.LabelSourceCluster], ep)
				imported[svc] = append(imported[svc], state)
			}
		}
		for _, svc := range slices.Sorted(maps.Keys(imported)) {
			slices.Sort(imported[svc])
			fmt.Fprintf(&b, "\n  imported %s: %s", svc, strings.Join(imported[svc], " "))
		}
	}
	return b.String()
}

// podState says a pod's phase, readiness, address and its containers' restarts with the last one's reason.
func podState(p corev1.Pod) string {
	ready := "not ready"
	if workload.PodReady(&p) {
		ready = "ready"
	}
	if p.DeletionTimestamp != nil {
		ready += ", deleting"
	}
	state := fmt.Sprintf("%s, %s, ip %s", p.Status.Phase, ready, p.Status.PodIP)
	for _, c := range p.Status.ContainerStatuses {
		if c.RestartCount == 0 {
			continue
		}
		state += fmt.Sprintf(", %s restarted %d times", c.Name, c.RestartCount)
		if t := c.LastTerminationState.Terminated; t != nil {
			state += fmt.Sprintf(" (last: %s, exit %d, at %s)", t.Reason, t.ExitCode, t.FinishedAt.Format("15:04:05"))
		}
		if w := c.State.Waiting; w != nil {
			state += ", waiting: " + w.Reason
		}
	}
	return state
}
