package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/controller/reach"
	"vksfleet.dev/fleet/mcs/names"
)

func TestProbePort(t *testing.T) {
	for bind, want := range map[string]string{
		":8081":          "8081",
		"0.0.0.0:8081":   "8081",
		"[::]:8081":      "8081",
		"127.0.0.1:8081": "", // answers nobody else
		"10.1.0.5:8081":  "",
		"":               "",
		"0":              "",
		":0":             "",
		":health":        "",
	} {
		if got := probePort(bind); got != want {
			t.Errorf("probePort(%q) = %q, want %q", bind, got, want)
		}
	}
}

func TestReplicaOf(t *testing.T) {
	env := map[string]string{"POD_NAME": "mcs-controller-7d9-x2", "POD_UID": "u1", "NODE_NAME": "node-1",
		"POD_IPS": "fd00::5,10.1.0.5"}
	r := replicaOf(nil, "mcs-system", ":8081", func(k string) string { return env[k] })
	if r.name != "mcs-probe-mcs-controller-7d9-x2" || r.node != "node-1" || r.namespace != "mcs-system" {
		t.Errorf("record %s/%s on node %q", r.namespace, r.name, r.node)
	}
	if want := []string{"10.1.0.5:8081", "[fd00::5]:8081"}; !slices.Equal(r.addrs, want) {
		t.Errorf("addresses %v, want %v", r.addrs, want)
	}
	if len(r.owner) != 1 || r.owner[0].Kind != "Pod" || r.owner[0].UID != "u1" || r.owner[0].Name != "mcs-controller-7d9-x2" {
		t.Errorf("owner %+v, want the pod", r.owner)
	}
	if r := replicaOf(nil, "mcs-system", "127.0.0.1:8081", func(k string) string { return env[k] }); len(r.addrs) != 0 {
		t.Errorf("a health server on loopback gives addresses %v", r.addrs)
	}
	if r := replicaOf(nil, "", ":8081", func(k string) string { return env[k] }); r != nil {
		t.Error("a replica without a namespace has a record")
	}
}

// replicaRecord is a replica's record, as replicas.publish writes it.
func replicaRecord(pod, node string, at time.Time, addrs string, unreachable ...string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "mcs-system", Name: replicaRecordPrefix + pod,
			Labels:      map[string]string{names.LabelProbeReplica: "true"},
			Annotations: map[string]string{names.AnnotationNode: node, names.AnnotationProbeAddresses: addrs}},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: at}},
	}
	if len(unreachable) > 0 {
		l.Annotations[names.AnnotationUnreachable] = unreachable[0]
	}
	return l
}

// judgedRecord is l as this release writes it, listing the members it finds reachable.
func judgedRecord(l *coordinationv1.Lease, reachable string) *coordinationv1.Lease {
	l.Annotations[names.AnnotationReachable] = reachable
	return l
}

func TestReplicaVerdicts(t *testing.T) {
	now := time.Unix(1000, 0)
	verdicts, addrs := replicaVerdicts([]coordinationv1.Lease{
		*replicaRecord("self", "n1", now, "10.1.0.1:8081", "b"),
		*replicaRecord("peer", "n2", now.Add(-time.Second), "10.1.0.2:8081", "b,c"),
		*replicaRecord("gone", "n3", now.Add(-replicaAddressAge), "10.1.0.3:8081"),
		*judgedRecord(replicaRecord("new", "n4", now, "10.1.0.4:8081", "b"), "c,d"),
		*judgedRecord(replicaRecord("started", "n5", now, "10.1.0.5:8081"), ""),
	}, replicaRecordPrefix+"self", now)
	want := []reach.Verdict{
		{Node: "n2", At: now.Add(-time.Second), Unreachable: []string{"b", "c"}},
		{Node: "n3", At: now.Add(-replicaAddressAge)},
		{Node: "n4", At: now, Unreachable: []string{"b"}, Reachable: []string{"c", "d"}, ListsReachable: true},
		{Node: "n5", At: now, ListsReachable: true},
	}
	if !slices.EqualFunc(verdicts, want, func(a, b reach.Verdict) bool {
		return a.Node == b.Node && a.At.Equal(b.At) && slices.Equal(a.Unreachable, b.Unreachable) &&
			slices.Equal(a.Reachable, b.Reachable) && a.ListsReachable == b.ListsReachable
	}) {
		t.Errorf("verdicts %+v, want %+v", verdicts, want)
	}
	if !slices.Equal(addrs, []string{"10.1.0.2:8081", "10.1.0.4:8081", "10.1.0.5:8081"}) {
		t.Errorf("addresses %v, want only the young peer's", addrs)
	}
}

// A replica writes its record when its verdicts change and every replicaHeartbeat, not at every round.
func TestReplicaPublish(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1000, 0)
	local := newFakeCluster(t)
	r := &replicas{client: local, namespace: "mcs-system", name: replicaRecordPrefix + "p1", pod: "p1", node: "n1",
		addrs: []string{"10.1.0.1:8081"}}
	for _, step := range []struct {
		at                     time.Duration
		unreachable, reachable []string
		writes                 int32
	}{
		{0, nil, nil, 1},
		{300 * time.Millisecond, nil, nil, 1},
		{450 * time.Millisecond, nil, []string{"b"}, 2},        // judged: a change, at once
		{600 * time.Millisecond, []string{"b"}, []string{}, 3}, // a change, at once
		{900 * time.Millisecond, []string{"b"}, nil, 3},
		{1700 * time.Millisecond, []string{"b"}, nil, 4}, // the heartbeat
	} {
		if err := r.publish(ctx, step.unreachable, step.reachable, t0.Add(step.at)); err != nil {
			t.Fatal(err)
		}
		if got := local.writes.Load(); got != step.writes {
			t.Errorf("at %v: %d writes, want %d", step.at, got, step.writes)
		}
	}
	got := &coordinationv1.Lease{}
	if err := local.Get(ctx, client.ObjectKey{Namespace: "mcs-system", Name: r.name}, got); err != nil {
		t.Fatal(err)
	}
	if reachable, ok := got.Annotations[names.AnnotationReachable]; !ok || reachable != "" {
		t.Errorf("record lists %q reachable (annotation present %v), want an empty list", reachable, ok)
	}
	if got.Annotations[names.AnnotationUnreachable] != "b" || got.Annotations[names.AnnotationNode] != "n1" ||
		got.Annotations[names.AnnotationProbeAddresses] != "10.1.0.1:8081" || got.Labels[names.LabelProbeReplica] != "true" ||
		!got.Spec.RenewTime.Time.Equal(t0.Add(1700*time.Millisecond)) {
		t.Errorf("record %+v %+v", got.ObjectMeta, got.Spec)
	}
}

// TestProbeAgree: the elected replica acts on a member's loss only while a replica on another node finds it lost
// too (or found it so, before it stopped); alone, it counts it once and the member stays in use. Every replica publishes its own
// verdicts, and another replica's decisions enqueue nothing.
func TestProbeAgree(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1000, 0)
	key := types.NamespacedName{Namespace: "team", Name: "web"}
	rec, err := broker.Record(key, merge.Export{Cluster: "cluster-b", Slices: -1,
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP}})
	if err != nil {
		t.Fatal(err)
	}
	peer := replicaRecord("p2", "n2", t0, "10.1.0.2:8081")
	local := newFakeCluster(t, peer)
	tracker := reach.New(probeDown, probeUp)
	tracker.RequireAgreement()
	elected := make(chan struct{})
	p := &dataPlaneProbe{self: "cluster-a", tracker: tracker, log: logr.Discard(), elected: elected,
		enqueue:   newTriggers(newFakeCluster(t), newFakeCluster(t, rec)),
		replicas:  &replicas{client: local, namespace: "mcs-system", name: replicaRecordPrefix + "p1", pod: "p1", node: "n1", addrs: []string{"10.1.0.1:8081"}},
		addresses: &probeAddresses{}}
	enqueued := func() (n int) {
		for {
			select {
			case <-p.enqueue.ch:
				n++
			default:
				return n
			}
		}
	}
	uncorroborated := func() float64 {
		var m dto.Metric
		if err := uncorroboratedTotal.WithLabelValues("cluster-a", "cluster-b").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	setPeer := func(at time.Time, unreachable ...string) {
		l := &coordinationv1.Lease{}
		if err := local.Get(ctx, client.ObjectKeyFromObject(peer), l); err != nil {
			t.Fatal(err)
		}
		l.Spec.RenewTime = &metav1.MicroTime{Time: at}
		delete(l.Annotations, names.AnnotationUnreachable)
		if len(unreachable) > 0 {
			l.Annotations[names.AnnotationUnreachable] = unreachable[0]
		}
		if err := local.Update(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	tracker.Observe("cluster-b", true, t0)
	for round := range probeDown {
		tracker.Observe("cluster-b", false, t0.Add(time.Duration(round+1)*probeInterval))
	}
	now := t0.Add(time.Second)

	// Not elected: it publishes its verdicts and settles the States, ready to lead, but enqueues nothing: another
	// replica's workers do not run.
	p.agree(ctx, now)
	own := &coordinationv1.Lease{}
	if err := local.Get(ctx, client.ObjectKey{Namespace: "mcs-system", Name: replicaRecordPrefix + "p1"}, own); err != nil {
		t.Fatal(err)
	}
	if own.Annotations[names.AnnotationUnreachable] != "cluster-b" {
		t.Errorf("the replica's record says %q unreachable, want cluster-b", own.Annotations[names.AnnotationUnreachable])
	}
	if got := tracker.State("cluster-b"); got == reach.Unreachable || enqueued() != 0 {
		t.Errorf("a replica not elected decided cluster-b %v alone, or enqueued", got)
	}
	if got := p.addresses.get(); !slices.Equal(got, []string{"10.1.0.1:8081", "10.1.0.2:8081"}) {
		t.Errorf("probe addresses %v, want both replicas'", got)
	}

	// Elected, alone: cluster-b stays in use, counted once.
	close(elected)
	before := uncorroborated()
	p.agree(ctx, now)
	p.agree(ctx, now.Add(probeInterval))
	if got := tracker.State("cluster-b"); got == reach.Unreachable {
		t.Error("unreachable on this node's word alone")
	}
	if got := uncorroborated() - before; got != 1 {
		t.Errorf("counted %v times, want once", got)
	}

	// The other node agrees: cluster-b is unreachable, and its services are looked at again.
	at := now.Add(2 * probeInterval)
	setPeer(at, "cluster-b")
	enqueued()
	p.agree(ctx, at)
	if got := tracker.State("cluster-b"); got != reach.Unreachable || enqueued() != 1 {
		t.Errorf("with another node's agreement: %v", got)
	}

	// The other node's verdict goes stale (its replica stopped, its pod being replaced): it agreed, and nothing
	// contradicts it, so traffic does not go back to cluster-b meanwhile.
	p.agree(ctx, at.Add(reach.Agreement))
	if got := tracker.State("cluster-b"); got != reach.Unreachable || enqueued() != 0 {
		t.Errorf("with a stale agreeing verdict: %v", got)
	}

	// The other node finds cluster-b reachable: fail open again.
	later := at.Add(2 * reach.Agreement)
	setPeer(later)
	l := &coordinationv1.Lease{}
	if err := local.Get(ctx, client.ObjectKeyFromObject(peer), l); err != nil {
		t.Fatal(err)
	}
	l.Annotations[names.AnnotationReachable] = "cluster-b"
	if err := local.Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	p.agree(ctx, later)
	if got := tracker.State("cluster-b"); got == reach.Unreachable || enqueued() != 1 {
		t.Errorf("with a contradicting verdict: %v", got)
	}
}

// TestProbeTakesTheLead: a replica that was not elected has settled the States with the others all along, so the
// moment it leads, before its first round as leader, a member both nodes found cut off is unreachable: the
// reconciles a new leader starts at once do not import it again.
func TestProbeTakesTheLead(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1000, 0)
	local := newFakeCluster(t, judgedRecord(replicaRecord("p2", "n2", t0, "10.1.0.2:8081", "cluster-b"), ""))
	tracker := reach.New(probeDown, probeUp)
	tracker.RequireAgreement()
	elected := make(chan struct{})
	p := &dataPlaneProbe{self: "cluster-a", tracker: tracker, log: logr.Discard(), elected: elected,
		enqueue:   newTriggers(newFakeCluster(t), newFakeCluster(t)),
		replicas:  &replicas{client: local, namespace: "mcs-system", name: replicaRecordPrefix + "p1", pod: "p1", node: "n1"},
		addresses: &probeAddresses{}}
	for round := range probeDown {
		tracker.Observe("cluster-b", false, t0.Add(time.Duration(round)*probeInterval))
	}
	p.agree(ctx, t0.Add(time.Second))
	close(elected)
	if got := tracker.State("cluster-b"); got != reach.Unreachable {
		t.Errorf("on taking the lead, cluster-b is %v; want unreachable, as both nodes found it", got)
	}
}

// TestDNSProbeAddresses: the DNS Service a --dns-address names, and its ready pods on that port, which go on the
// Lease beside the replicas' (they outlive a stopped controller's pods).
func TestDNSProbeAddresses(t *testing.T) {
	for addr, want := range map[string]string{
		"kube-dns.kube-system.svc.cluster.local.:53": "kube-system/kube-dns:53",
		"mcs-dns.mcs-system.svc:53":                  "mcs-system/mcs-dns:53",
		"10.96.0.10:53":                              "",
		"127.0.0.1:5353":                             "",
		"kube-dns:53":                                "",
	} {
		svc, port, ok := dnsService(addr)
		if got := svc.String() + ":" + port; ok != (want != "") || ok && got != want {
			t.Errorf("dnsService(%q) = %s, %v; want %q", addr, got, ok, want)
		}
	}
	slice := discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{
		{Addresses: []string{"10.1.0.2"}},
		{Addresses: []string{"10.1.1.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
		{Addresses: []string{"fd00::2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
	}}
	if got, want := dnsAddresses([]discoveryv1.EndpointSlice{slice}, "53"), []string{"10.1.0.2:53", "[fd00::2]:53"}; !slices.Equal(got, want) {
		t.Errorf("dnsAddresses = %v, want %v", got, want)
	}
}
