package traffic

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/workload"
)

// cutFor is how long the elected controller's node stays cut.
const cutFor = 15 * time.Second

// testLeaderNodeCut: issue 38's first trial, which failed 47 of 443 requests. cluster-a's elected controller's node
// is cut from the other members' pods, while a client on cluster-a's other node calls a service that only
// cluster-b exports, every 50 ms. The client's path to cluster-b is fine, so no request may fail: the replica on
// the other node does not agree that cluster-b is lost, and were there none, the service's only exporter would
// stay in use all the same (fail open).
func (e *env) testLeaderNodeCut(t *testing.T) {
	ctx := context.Background()
	e.deployExported(t, "solo", false, e.b)
	e.waitImportedEndpoints(t, e.a, "solo", map[string]int{"cluster-b": 2})
	leaderNode := e.leaderPod(t).Spec.NodeName
	var cut, client *clusterset.Node
	for _, n := range e.a.Nodes {
		if n.Name == leaderNode {
			cut = n
		} else if client == nil {
			client = n
		}
	}
	if cut == nil || client == nil {
		t.Fatalf("the elected controller runs on %q, not one of two nodes of cluster-a", leaderNode)
	}

	pod := workload.LoopPod("solo-client", ns,
		fmt.Sprintf("%s:%d", names.ServiceDNSName(ns, "solo"), workload.EchoPort), 50*time.Millisecond, 10*time.Minute)
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: client.Name}
	loop := e.startLoop(t, pod)
	var from int64
	poll.T(t, timeout, "the client's requests answered by cluster-b", func() error {
		reqs := loop.Requests(0, 0)
		if by := answeredBy(reqs); by["cluster-b"] < 20 {
			return fmt.Errorf("answered by %v", by)
		}
		from = reqs[len(reqs)-1].StartMs + 1
		return nil
	})

	var others []netip.Prefix
	for _, m := range []*clusterset.Cluster{e.b.Cluster, e.c.Cluster} {
		others = append(others, m.PodCIDRs...)
	}
	const fault = "leader-node-cut"
	if err := dataplane.Drop(fault, cut.PodCIDRs, others, 100); err != nil {
		t.Fatal(err)
	}
	healed := false
	defer func() {
		if !healed {
			if err := dataplane.Remove(fault); err != nil {
				t.Error(err)
			}
		}
	}()
	cutAt := time.Now()
	// The elected replica's own probes find cluster-b lost within about a second: it either finds no other node
	// agreeing, or, with no replica on another node, falls back on cluster-b's endpoints, its only ones.
	poll.T(t, timeout, "cluster-a's elected controller finds cluster-b lost, alone", func() error {
		n, err := e.a.ControllerMetric("mcs_controller_member_unreachable_uncorroborated_total", map[string]string{"cluster_id": e.b.ID})
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		si := &mcsv1beta1.ServiceImport{}
		if err := e.a.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "solo"}, si); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(si.Status.Conditions, "Unreachable"); c != nil && c.Reason == controller.ReasonFailedOpen {
			return nil
		}
		return fmt.Errorf("neither an uncorroborated verdict nor a failed-open import yet")
	})
	poll.T(t, cutFor+timeout, "the cut held for "+cutFor.String(), func() error {
		if held := time.Since(cutAt); held < cutFor {
			return fmt.Errorf("cut for %s", held.Round(time.Second))
		}
		return nil
	})
	if err := dataplane.Remove(fault); err != nil {
		t.Fatal(err)
	}
	healed = true
	e.checkNoFailure(t, loop, from, cutAt.UnixMilli(), fmt.Sprintf("cluster-a's elected controller's node cut for %s, the client on the other node", cutFor))
}
