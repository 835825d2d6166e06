package traffic

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

// place says where a request was answered: "z0" and "z1" for cluster-a's two zones, else the cluster's name.
func place(r workload.Request) string {
	if r.Cluster == "cluster-a" {
		if i := strings.Index(r.Pod, "-z"); i >= 0 {
			return r.Pod[i+1 : i+3]
		}
	}
	return r.Cluster
}

// nearPods deploys app in m as one serve pod per placement (a zone of m, or anywhere: ""), all behind the
// Service app with trafficDistribution td, exported.
func (e *env) nearPods(t *testing.T, m *framework.Member, app string, headless bool, td *string, zones ...string) {
	t.Helper()
	ctx := context.Background()
	svc := workload.ServiceFor(app, ns, headless)
	svc.Spec.TrafficDistribution = td
	if err := m.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if _, err := workload.DeployPlaced(ctx, m.Client, ns, app, m.Name, zones...); err != nil {
		t.Fatal(err)
	}
	if err := m.Client.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, m, "app="+app, len(zones))
}

func (e *env) scale(t *testing.T, m *framework.Member, deployment string, replicas int32) {
	t.Helper()
	if err := workload.Scale(context.Background(), m.Client, ns, deployment, replicas); err != nil {
		t.Fatal(err)
	}
}

func (e *env) setDrain(t *testing.T, m *framework.Member, app string, drain bool) {
	t.Helper()
	ctx := context.Background()
	se := &mcsv1beta1.ServiceExport{}
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: app}, se); err != nil {
		t.Fatal(err)
	}
	if drain {
		se.Annotations = map[string]string{names.AnnotationDrain: "true"}
	} else {
		delete(se.Annotations, names.AnnotationDrain)
	}
	if err := m.Client.Update(ctx, se); err != nil {
		t.Fatal(err)
	}
}

// step is one change of the clusterset and where traffic must go after it.
type step struct {
	name string
	do   func(t *testing.T)
	to   string // the place that must answer afterwards
	// never is a place that must not answer any request from the change on: a farther tier than both the old
	// and the new one.
	never string
	// spread, when set, replaces to: traffic settles once every one of these places answers.
	spread []string
}

// testLocality: a client in cluster-a's zone 0 calls a PreferSameZone service with pods in A/zone 0, A/zone 1,
// B (same region) and C (other region). Traffic stays in the closest tier that has a ready pod, moves tier by
// tier as pods, drains and members go, and comes back in reverse. Every move is timed and its failed requests
// counted.
func (e *env) testLocality(t *testing.T) {
	ctx := context.Background()
	td := ptr.To(corev1.ServiceTrafficDistributionPreferSameZone)
	zones := []string{e.a.Nodes[0].Zone, e.a.Nodes[1].Zone}
	e.nearPods(t, e.a, "near", false, td, zones...)
	e.nearPods(t, e.b, "near", false, td, "")
	e.nearPods(t, e.c, "near", false, td, "")
	e.waitImportedEndpoints(t, e.a, "near", map[string]int{"cluster-a": 2, "cluster-b": 1, "cluster-c": 1})

	pod := workload.LoopPod("near-client", ns,
		fmt.Sprintf("%s:%d", names.ServiceDNSName(ns, "near"), workload.EchoPort), 50*time.Millisecond, 10*time.Minute)
	pod.Spec.NodeSelector = map[string]string{corev1.LabelTopologyZone: zones[0]}
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	loop, err := workload.StartLoop(loopCtx, e.a.Kube, pod, timeout)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.a.Kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}) }()

	// Settled: 200 requests in a row, at least 99% answered in the client's own zone.
	from := e.settle(t, loop, time.Now().UnixMilli(), "z0")
	var reqs []workload.Request
	poll.T(t, timeout, "200 requests", func() error {
		if reqs = loop.Requests(from, 0); len(reqs) < 200 {
			return fmt.Errorf("%d requests so far", len(reqs))
		}
		return nil
	})
	local := 0
	for _, r := range reqs[:200] {
		if r.OK && place(r) == "z0" {
			local++
		}
	}
	t.Logf("PreferSameZone from cluster-a zone 0: %d of 200 requests answered in zone 0", local)
	if local < 198 {
		t.Errorf("%d of 200 requests answered in the client's zone, want at least 99%%", local)
	}

	e.missingHint(t, loop)

	steps := []step{
		{"zone 0's pod deleted", func(t *testing.T) { e.scale(t, e.a, "near-z0", 0) }, "z1", "", nil},
		{"cluster-a's pods all deleted", func(t *testing.T) { e.scale(t, e.a, "near-z1", 0) }, "cluster-b", "cluster-c", nil},
		// Topology changes take effect without a restart: cluster-b leaves cluster-a's region, and cluster-b and
		// cluster-c are then alike, "anywhere".
		{name: "cluster-b moved to another region", do: func(t *testing.T) { e.setRegion(t, e.b, "region-3") },
			spread: []string{"cluster-b", "cluster-c"}},
		{"cluster-b back in cluster-a's region", func(t *testing.T) { e.setRegion(t, e.b, e.b.Region) }, "cluster-b", "", nil},
		{"cluster-b's export drained", func(t *testing.T) { e.setDrain(t, e.b, "near", true) }, "cluster-c", "", nil},
		{"cluster-b's drain lifted", func(t *testing.T) { e.setDrain(t, e.b, "near", false) }, "cluster-b", "", nil},
		// Its control plane lost, its pods still answer from cluster-a: nothing moves, and the import says so.
		{"cluster-b's controller stopped (lease expires)", func(t *testing.T) {
			if err := e.b.StopController(); err != nil {
				t.Fatal(err)
			}
			e.waitStale(t, e.a, "near", e.b.ID)
		}, "cluster-b", "cluster-c", nil},
		{"cluster-b's controller back", func(t *testing.T) {
			if err := e.b.StartController(); err != nil {
				t.Fatal(err)
			}
		}, "cluster-b", "", nil},
		{"a pod back in zone 1", func(t *testing.T) { e.scale(t, e.a, "near-z1", 1) }, "z1", "cluster-c", nil},
		{"a pod back in zone 0", func(t *testing.T) { e.scale(t, e.a, "near-z0", 1) }, "z0", "cluster-c", nil},
	}
	prev := "z0"
	for _, s := range steps {
		start := time.Now().UnixMilli()
		s.do(t)
		if s.spread != nil {
			e.settleSpread(t, loop, start, s.spread)
			t.Logf("%-48s traffic spreads over %v", s.name, s.spread)
			prev = ""
			continue
		}
		end := e.settle(t, loop, start, s.to)
		if prev == "" {
			// After a spread there is no single old place to time the move from.
			t.Logf("%-48s traffic settles in %s", s.name, s.to)
			prev = s.to
			continue
		}
		moved := loop.Requests(start-1000, end)
		gap, failed, _ := workload.Failover(moved, func(r workload.Request) bool { return place(r) == prev },
			func(r workload.Request) bool { return place(r) == s.to })
		if prev == s.to && failed > 0 {
			t.Errorf("%s: traffic stays in %s, yet %d requests failed", s.name, s.to, failed)
		}
		after := int64(-1)
		if i := slices.IndexFunc(loop.Requests(start, end), func(r workload.Request) bool { return r.OK && place(r) == s.to }); i >= 0 {
			after = loop.Requests(start, end)[i].StartMs - start
		}
		t.Logf("%-48s %-9s -> %-9s moved %5d ms after the change, failover %5d ms, %d failed of %d requests",
			s.name, prev, s.to, after, gap, failed, len(loop.Requests(start, end)))
		if s.never != "" {
			for _, r := range loop.Requests(start, end) {
				if r.OK && place(r) == s.never {
					t.Errorf("%s: request %d answered by %s/%s, which must not be used while %s can answer", s.name, r.Seq, r.Cluster, r.Pod, s.to)
					break
				}
			}
		}
		prev = s.to
	}

	// Without trafficDistribution every cluster answers.
	for _, m := range e.f.Members {
		svc := &corev1.Service{}
		if err := m.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "near"}, svc); err != nil {
			t.Fatal(err)
		}
		svc.Spec.TrafficDistribution = nil
		if err := m.Client.Update(ctx, svc); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now().UnixMilli()
	poll.T(t, timeout, "every cluster answers without trafficDistribution", func() error {
		seen := map[string]int{}
		for _, r := range loop.Requests(start, 0) {
			if r.OK {
				seen[r.Cluster]++
			}
		}
		if seen["cluster-a"] == 0 || seen["cluster-b"] == 0 || seen["cluster-c"] == 0 {
			return fmt.Errorf("answered by %v", seen)
		}
		return nil
	})
}

// missingHint shows kube-proxy's rule that makes the controller hint every ready endpoint: one ready endpoint of
// the derived Service without a hint, here in a slice the test adds for cluster-c's pod, and kube-proxy ignores
// every hint and spreads over all endpoints. Removing it brings the zone preference back.
func (e *env) missingHint(t *testing.T, loop *workload.Loop) {
	ctx := context.Background()
	unhinted := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "near-unhinted", Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: names.DerivedServiceName(ns, "near"), discoveryv1.LabelManagedBy: "traffic-test",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: e.podIPs(t, e.c, "app=near")[:1], Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("tcp"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](workload.EchoPort)}},
	}
	if err := e.a.Client.Create(ctx, unhinted); err != nil {
		t.Fatal(err)
	}
	// The unhinted endpoint is cluster-c's pod, which cluster-c's imported slice holds too, hinted. kube-proxy keeps
	// one copy of an address two slices hold: the one its map of slices yields last (endpointslicecache.go
	// addEndpoints), which changes from one recompute to the next. The slice is touched until a recompute keeps
	// the unhinted copy, a few seconds apart.
	all := []string{"z0", "z1", "cluster-b", "cluster-c"}
	from, touched, touches := time.Now().UnixMilli(), time.Now(), 0
	poll.T(t, timeout, fmt.Sprintf("traffic spreads over %v", all), func() error {
		err := spreadOver(loop, from, all)
		if err != nil && time.Since(touched) > 4*time.Second {
			touches++
			cur := &discoveryv1.EndpointSlice{}
			if err := e.a.Client.Get(ctx, client.ObjectKeyFromObject(unhinted), cur); err != nil {
				return err
			}
			cur.Annotations = map[string]string{"traffic-test/touch": strconv.Itoa(touches)}
			if err := e.a.Client.Update(ctx, cur); err != nil {
				return err
			}
			from, touched = time.Now().UnixMilli(), time.Now()
		}
		return err
	})
	t.Logf("one ready endpoint without a hint: kube-proxy ignores every hint and spreads over all four places (%d touches)", touches)
	if err := e.a.Client.Delete(ctx, unhinted); err != nil {
		t.Fatal(err)
	}
	e.settle(t, loop, time.Now().UnixMilli(), "z0")
}

// settleSpread waits until the last 40 requests since from were all answered, by every one of places and
// nowhere else.
func (e *env) settleSpread(t *testing.T, loop *workload.Loop, from int64, places []string) {
	t.Helper()
	poll.T(t, timeout, fmt.Sprintf("traffic spreads over %v", places), func() error { return spreadOver(loop, from, places) })
}

// spreadOver says why the last 40 requests since from were not all answered, by every one of places and nowhere
// else, or returns nil when they were.
func spreadOver(loop *workload.Loop, from int64, places []string) error {
	reqs := loop.Requests(from, 0)
	if len(reqs) < 40 {
		return fmt.Errorf("%d requests since the change", len(reqs))
	}
	seen := map[string]int{}
	for _, r := range reqs[len(reqs)-40:] {
		if !r.OK || !slices.Contains(places, place(r)) {
			return fmt.Errorf("request %d: ok=%v place=%s %s", r.Seq, r.OK, place(r), r.Reason)
		}
		seen[place(r)]++
	}
	if len(seen) != len(places) {
		return fmt.Errorf("answered by %v", seen)
	}
	return nil
}

// setRegion moves a member to another region as an operator would: its region ClusterProperty, which its own
// controller ranks the other members from, and its entry in the member directory, which the others rank it by,
// as `kubectl mcs join` records it again.
func (e *env) setRegion(t *testing.T, m *framework.Member, region string) {
	t.Helper()
	ctx := context.Background()
	cp := &aboutv1alpha1.ClusterProperty{}
	if err := m.Client.Get(ctx, client.ObjectKey{Name: aboutv1alpha1.RegionName}, cp); err != nil {
		t.Fatal(err)
	}
	cp.Spec.Value = region
	if err := m.Client.Update(ctx, cp); err != nil {
		t.Fatal(err)
	}
	info, err := install.ReadBrokerInfo(e.f.BrokerInfoPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := install.RecordRegion(ctx, info, m.ID, region); err != nil {
		t.Fatal(err)
	}
}

// settle waits until the last 20 requests that started after from were all answered at place, and returns when
// the last of them started.
func (e *env) settle(t *testing.T, loop *workload.Loop, from int64, at string) int64 {
	t.Helper()
	var end int64
	poll.T(t, timeout, "traffic settles in "+at, func() error {
		if err := loop.Err(); err != nil {
			return err
		}
		reqs := loop.Requests(from, 0)
		if len(reqs) < 20 {
			return fmt.Errorf("%d requests since the change", len(reqs))
		}
		for _, r := range reqs[len(reqs)-20:] {
			if !r.OK || place(r) != at {
				return fmt.Errorf("request %d: ok=%v place=%s %s", r.Seq, r.OK, place(r), r.Reason)
			}
		}
		end = reqs[len(reqs)-1].StartMs + 1
		return nil
	})
	return end
}

// waitStale waits until m's import of svc says that cluster's control plane is lost while its endpoints answer.
func (e *env) waitStale(t *testing.T, m *framework.Member, svc, cluster string) {
	t.Helper()
	poll.T(t, timeout, svc+" in "+m.Name+" says "+cluster+" is stale", func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := m.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: svc}, si); err != nil {
			return err
		}
		c := meta.FindStatusCondition(si.Status.Conditions, imports.ConditionStale)
		if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, cluster+" (") {
			return fmt.Errorf("Stale condition %+v", c)
		}
		return nil
	})
}

// testHeadlessLocality: a PreferSameZone headless service answers, in a pod of cluster-a, only the closest
// cluster tier that has a ready pod: cluster-a, then cluster-b (same region), then cluster-c.
func (e *env) testHeadlessLocality(t *testing.T) {
	td := ptr.To(corev1.ServiceTrafficDistributionPreferSameZone)
	for _, m := range e.f.Members {
		e.nearPods(t, m, "nearh", true, td, "")
	}
	name := names.ServiceDNSName(ns, "nearh")
	ips := map[string][]string{}
	for _, m := range e.f.Members {
		ips[m.Name] = e.podIPs(t, m, "app=nearh")
	}
	expect := func(what string, want []string) {
		t.Helper()
		start := time.Now()
		poll.T(t, timeout, what, func() error {
			got := strings.Fields(e.execOK(t, e.a, "client", "dig", "+short", name, "A"))
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("dig %s in a pod of cluster-a: %v, want %v", name, got, want)
			}
			return nil
		})
		t.Logf("headless %-40s answers %v after %s", what, want, time.Since(start).Round(10*time.Millisecond))
	}
	expect("cluster-a's own pod", ips["cluster-a"])
	e.scale(t, e.a, "nearh", 0)
	expect("cluster-b's pod once cluster-a has none", ips["cluster-b"])
	if err := e.b.StopController(); err != nil {
		t.Fatal(err)
	}
	e.waitStale(t, e.a, "nearh", e.b.ID)
	expect("cluster-b's pod while its control plane is lost", ips["cluster-b"])
	if err := e.b.StartController(); err != nil {
		t.Fatal(err)
	}
	expect("cluster-b's pod once cluster-b is back", ips["cluster-b"])
	e.scale(t, e.a, "nearh", 1)
	e.waitReady(t, e.a, "app=nearh", 1)
	expect("cluster-a's pod again", e.podIPs(t, e.a, "app=nearh"))
}
