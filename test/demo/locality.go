package demo

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/locality"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

// settledRequests is how many requests in a row, all answered at one place, show that traffic has settled there:
// a second of the loop's traffic, as in story 1.
const settledRequests = 20

// settledWindow is how many requests near-client sends before anything changes, all of which its own zone must
// answer: 5 s of traffic, enough to show that PreferSameZone keeps it there rather than that it happened to.
const settledWindow = 100

// localityJSONPath prints the tiers that cluster-a's controller recorded on its ServiceImport.
var localityJSONPath = `jsonpath={.metadata.annotations.mcs\.vksfleet\.dev/locality}{"\n"}`

// move is one change of the clusterset in the locality part of story 2, and where near-client's traffic must go
// after it.
type move struct {
	phase string                          // the phase's name, and the heading
	act   func(ctx context.Context) error // the change, made as a user would with kubectl
	to    string                          // the place that answers once traffic has settled
	tier  string                          // the tier cluster-a's zone 0 then uses, per its ServiceImport
	// never is a place that must answer no request from the change on, since a closer place (cluster-b, in
	// cluster-a's region) has a ready pod throughout the move.
	never string
}

// storyLocality is the last part of story 2: near, with trafficDistribution PreferSameZone, has a pod in each
// of cluster-a's zones, one in cluster-b (cluster-a's region) and one in cluster-c (another region).
// near-client, in cluster-a's zone 0, stays in the closest tier that has a ready pod; the tier widens step by
// step as pods go and cluster-b's export drains, and narrows again in reverse. Each move is timed.
func (d *Demo) storyLocality(ctx context.Context) error {
	a, b, c := d.member("cluster-a"), d.member("cluster-b"), d.member("cluster-c")
	zones := []string{a.Nodes[0].Zone, a.Nodes[1].Zone}
	name := names.ServiceDNSName(Namespace, "near")
	if err := d.nextPhase(ctx, 2, "near: settled in cluster-a's zone 0"); err != nil {
		return err
	}
	d.step("Locality: near has trafficDistribution: PreferSameZone, a pod in each zone of cluster-a (Deployments near-z0 and near-z1), one in cluster-b (%s, like cluster-a) and one in cluster-c (%s); all three export it",
		b.Region, c.Region)
	for _, m := range []*framework.Member{a, b, c} {
		placements := []string{""}
		if m == a {
			placements = zones
		}
		if err := d.deployNear(ctx, m, placements...); err != nil {
			return err
		}
	}
	if err := d.eventually(ctx, "cluster-a's imports hold the near pods of cluster-a's two zones, cluster-b and cluster-c", func(ctx context.Context) error {
		return d.expectEndpoints(ctx, a, "near", a, b, c)
	}); err != nil {
		return err
	}
	d.kubectl(ctx, a, "get", "pods", "-n", Namespace, "-l", "app=near", "-o", "wide")
	if err := d.proxied(ctx, a, "near"); err != nil {
		return err
	}
	// The slices are imported before their zone hints are settled, and kube-proxy may be a sync behind those.
	if err := d.eventually(ctx, fmt.Sprintf("kube-proxy on cluster-a's nodes of zone %s routes near's ClusterSetIP to near-z0's pod alone", zones[0]), func(ctx context.Context) error {
		want, err := workload.ReadyPodIPs(ctx, a.Client, Namespace, client.MatchingLabels{"app": "near", "part": "near-z0"})
		if err != nil {
			return err
		}
		for _, n := range a.Nodes {
			if n.Zone != zones[0] {
				continue
			}
			got, err := routedTo(ctx, a, n, "near")
			if err != nil {
				return err
			}
			if len(want) != 1 || !slices.Equal(got, want) {
				return fmt.Errorf("kube-proxy on %s routes to %v; near-z0's pod is at %v", n.Name, got, want)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	start := time.Now().UnixMilli()
	loop, err := d.startLoop(ctx, a, "near-client", zones[0], name+":"+strconv.Itoa(workload.EchoPort))
	if err != nil {
		return err
	}
	// The places of cluster-a's two zones, as place names them.
	z0, z1 := a.Name+"/near-z0", a.Name+"/near-z1"
	if err := d.settled(ctx, loop, start, z0, locality.SameZone.String(), zones[0]); err != nil {
		return err
	}
	var reqs []workload.Request
	if err := d.waitTraffic(ctx, loop, start, fmt.Sprintf("near-client sent %d requests", settledWindow), func(r []workload.Request) error {
		if reqs = r; len(reqs) < settledWindow {
			return fmt.Errorf("%d requests so far", len(reqs))
		}
		return nil
	}); err != nil {
		return err
	}
	// Every endpoint was ready and ranked before the loop's first request, so none may have gone elsewhere.
	for _, r := range reqs {
		if !r.OK || place(r) != z0 {
			return fmt.Errorf("near-client's request %d %s, before anything changed; want every one answered by %s", r.Seq, outcome(r), z0)
		}
	}
	d.note("near settled: all %d requests of near-client were answered in its own zone, by %s", len(reqs), z0)
	d.kubectl(ctx, a, "get", "events", "-n", Namespace, "--field-selector", "reason=LocalityChanged")

	scale := func(deployment string, replicas int) func(context.Context) error {
		return func(ctx context.Context) error {
			return d.kubectl(ctx, a, "scale", "deployment", deployment, "-n", Namespace, "--replicas="+strconv.Itoa(replicas))
		}
	}
	drain := func(value string) func(context.Context) error {
		return func(ctx context.Context) error {
			return d.kubectl(ctx, b, "annotate", "serviceexport", "near", "-n", Namespace, names.AnnotationDrain+value)
		}
	}
	moves := []move{
		{"near: zone 0's pod deleted", scale("near-z0", 0), z1, locality.SameCluster.String(), ""},
		{"near: cluster-a's pods all deleted", scale("near-z1", 0), b.Name, locality.SameRegion.String(), c.Name},
		{"near: cluster-b's export drained", drain(`=true`), c.Name, locality.Anywhere.String(), ""},
		{"near: cluster-b's drain lifted", drain(`-`), b.Name, locality.SameRegion.String(), ""},
		{"near: a pod back in zone 1", scale("near-z1", 1), z1, locality.SameCluster.String(), c.Name},
		{"near: a pod back in zone 0", scale("near-z0", 1), z0, locality.SameZone.String(), c.Name},
	}
	from := z0
	for _, m := range moves {
		if err := d.nextPhase(ctx, 2, m.phase); err != nil {
			return err
		}
		d.step("%s: near-client's traffic must move from %s to %s, as zone %s's tier becomes %s", m.phase, from, m.to, zones[0], m.tier)
		at := time.Now().UnixMilli()
		if err := m.act(ctx); err != nil {
			return err
		}
		if err := d.settled(ctx, loop, at, m.to, m.tier, zones[0]); err != nil {
			return err
		}
		// From a second before the change, so that the old place's last answer is in view.
		gap, failed, _ := workload.Failover(loop.Requests(at-1000, 0),
			func(r workload.Request) bool { return place(r) == from },
			func(r workload.Request) bool { return place(r) == m.to })
		d.note("%s: %s -> %s in %d ms (from %s's last answer to %s's first), %d requests failed in between",
			m.phase, from, m.to, gap, from, m.to, failed)
		if m.never != "" {
			for _, r := range loop.Requests(at, 0) {
				if r.OK && place(r) == m.never {
					return fmt.Errorf("%s: near-client's request %d was answered by %s/%s, though a closer place had a ready pod",
						m.phase, r.Seq, r.Cluster, r.Pod)
				}
			}
			d.say("    ok: %s answered none of near-client's requests since the change", m.never)
		}
		from = m.to
	}
	d.kubectl(ctx, a, "get", "events", "-n", Namespace, "--field-selector", "reason=LocalityChanged")
	return nil
}

// settled waits until near-client's last settledRequests requests since from were all answered at where, and
// until cluster-a's ServiceImport near says that zone uses tier, and prints what it says.
func (d *Demo) settled(ctx context.Context, loop *workload.Loop, from int64, where, tier, zone string) error {
	if err := d.waitTraffic(ctx, loop, from, fmt.Sprintf("near-client's last %d requests were answered by %s", settledRequests, where),
		lastAnswered(settledRequests, where)); err != nil {
		return err
	}
	a := d.member("cluster-a")
	if err := d.eventually(ctx, fmt.Sprintf("cluster-a's ServiceImport near says zone %s uses the %s tier", zone, tier), func(ctx context.Context) error {
		si := &mcsv1beta1.ServiceImport{}
		if err := a.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "near"}, si); err != nil {
			return err
		}
		ann, err := locality.Decode(si.Annotations[names.AnnotationLocality])
		if err != nil {
			return fmt.Errorf("annotation %s: %q: %w", names.AnnotationLocality, si.Annotations[names.AnnotationLocality], err)
		}
		if got := ann.Zones[zone]; got != tier {
			return fmt.Errorf("zone %s uses %q", zone, got)
		}
		return nil
	}); err != nil {
		return err
	}
	d.kubectl(ctx, a, "get", "serviceimport", "near", "-n", Namespace, "-o", localityJSONPath)
	return nil
}

// deployNear runs near in m behind a Service with trafficDistribution PreferSameZone: one serve pod per
// placement, as a Deployment of its own pinned to that zone (near-z<i>), or anywhere in m ("": Deployment near),
// and exports it.
func (d *Demo) deployNear(ctx context.Context, m *framework.Member, placements ...string) error {
	svc := workload.ServiceFor("near", Namespace, false)
	svc.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferSameZone)
	if err := m.Client.Create(ctx, svc); err != nil {
		return err
	}
	deployments, err := workload.DeployPlaced(ctx, m.Client, Namespace, "near", m.Name, placements...)
	if err != nil {
		return err
	}
	for i, name := range deployments {
		if zone := placements[i]; zone != "" {
			d.say("%s: Deployment %s, 1 pod, nodeSelector %s=%s", m.Name, name, corev1.LabelTopologyZone, zone)
		} else {
			d.say("%s: Deployment %s, 1 pod", m.Name, name)
		}
	}
	return export(ctx, m, "near")
}
