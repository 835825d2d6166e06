package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
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

func probeSlice(cluster, name string, port int32, proto corev1.Protocol, ready *bool, addrs ...string) discoveryv1.EndpointSlice {
	family := discoveryv1.AddressTypeIPv4
	if strings.Contains(addrs[0], ":") {
		family = discoveryv1.AddressTypeIPv6
	}
	s := &discoveryv1.EndpointSlice{AddressType: family,
		Ports: []discoveryv1.EndpointPort{{Port: ptr.To(port), Protocol: ptr.To(proto)}}}
	s.Name = name
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ready}})
	}
	return *broker.Slice(cluster, types.NamespacedName{Namespace: "team", Name: name}, s)
}

// endpointTargets probes each member's addresses as its endpoints.
func endpointTargets(addrs map[string][]string) map[string]probeTarget {
	out := map[string]probeTarget{}
	for id, a := range addrs {
		out[id] = probeTarget{addrs: a}
	}
	return out
}

func TestProbeTargets(t *testing.T) {
	misplaced := probeSlice("cluster-c", "elsewhere", 80, corev1.ProtocolTCP, nil, "10.3.0.9")
	misplaced.Namespace = names.BrokerNamespace("cluster-b")
	got := probeTargets("cluster-a", []discoveryv1.EndpointSlice{
		probeSlice("cluster-a", "own", 80, corev1.ProtocolTCP, nil, "10.1.0.1"),
		probeSlice("cluster-b", "web", 8080, corev1.ProtocolTCP, ptr.To(true), "10.2.0.2", "10.2.0.1"),
		probeSlice("cluster-b", "web2", 8080, corev1.ProtocolTCP, nil, "10.2.0.1"),
		probeSlice("cluster-b", "down", 8080, corev1.ProtocolTCP, ptr.To(false), "10.2.0.3"),
		probeSlice("cluster-b", "dns", 53, corev1.ProtocolUDP, nil, "10.2.0.4"),
		probeSlice("cluster-c", "v6", 80, corev1.ProtocolTCP, nil, "fd00::1", "not-an-ip"),
		probeSlice("cluster-c", "local", 80, corev1.ProtocolTCP, nil, "127.0.0.1", "169.254.169.254"),
		misplaced,
	})
	want := map[string][]string{
		"cluster-b": {"10.2.0.1:8080", "10.2.0.2:8080"},
		"cluster-c": {"[fd00::1]:80"},
	}
	if len(got) != len(want) {
		t.Fatalf("targets %v, want %v", got, want)
	}
	for id, w := range want {
		if !slices.Equal(got[id], w) {
			t.Errorf("%s: targets %v, want %v", id, got[id], w)
		}
	}
}

// TestProbeRounds: endpoints are probed in turn, a round succeeds when any probe of it answers, and a member
// turns unreachable after probeDown failed rounds and its services are enqueued.
func TestProbeRounds(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	dead := map[string]bool{}
	var asked []string
	tracker := reach.New(probeDown, probeUp)
	p := &dataPlaneProbe{self: "cluster-a", tracker: tracker, liveness: broker.NewLiveness("cluster-a", time.Minute),
		log: logr.Discard(), next: map[string]int{}, enqueue: newTriggers(newFakeCluster(t), newFakeCluster(t)),
		targets: endpointTargets(map[string][]string{"cluster-b": {"b1:80", "b2:80", "b3:80"}}),
		dial: func(_ context.Context, addr string) error {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, addr)
			if dead[addr] {
				return errors.New("i/o timeout")
			}
			return nil
		}}
	now := time.Unix(1000, 0)
	p.probeRound(ctx, now)
	if tracker.State("cluster-b") != reach.Reachable {
		t.Fatalf("after a good round: %v", tracker.State("cluster-b"))
	}
	// One dead endpoint of two probed per round: every round still has an answer.
	dead["b1:80"] = true
	for range 6 {
		p.probeRound(ctx, now)
	}
	if tracker.State("cluster-b") != reach.Reachable {
		t.Errorf("one dead endpoint made the member %v", tracker.State("cluster-b"))
	}
	seen := map[string]bool{}
	for _, a := range asked {
		seen[a] = true
	}
	if len(seen) != 3 {
		t.Errorf("probed %v: every endpoint should come in turn", asked)
	}
	// All dead: the first failed round probes probesPerRound endpoints, the ones after it confirm with
	// confirmProbes (some endpoints twice, as there are only 3).
	dead["b2:80"], dead["b3:80"] = true, true
	for i := range probeDown {
		if got := tracker.State("cluster-b"); got != reach.Reachable {
			t.Fatalf("unreachable after %d failed rounds", i)
		}
		asked = nil
		p.probeRound(ctx, now)
		want := probesPerRound
		if i > 0 {
			want = confirmProbes
		}
		if len(asked) != want {
			t.Errorf("failed round %d probed %v, want %d probes", i+1, asked, want)
		}
	}
	if got := tracker.State("cluster-b"); got != reach.Unreachable {
		t.Errorf("after %d failed rounds: %v", probeDown, got)
	}
	// Unreachable, it is no longer suspected: rounds are back to probesPerRound until it answers again.
	asked = nil
	p.probeRound(ctx, now)
	if len(asked) != probesPerRound {
		t.Errorf("a round of an unreachable member probed %v", asked)
	}
	// One endpoint back: one good round after a failed one is not yet enough (probeUp), two are.
	dead["b1:80"], dead["b2:80"], dead["b3:80"] = false, false, false
	for range probeUp {
		if got := tracker.State("cluster-b"); got != reach.Unreachable {
			t.Fatalf("reachable again too soon: %v", got)
		}
		p.probeRound(ctx, now)
	}
	if got := tracker.State("cluster-b"); got != reach.Reachable {
		t.Errorf("after %d good rounds: %v", probeUp, got)
	}
}

// TestProbeRoundsInTurn: every endpoint of a member comes in turn whatever the number of endpoints against the
// probes per round.
func TestProbeRoundsInTurn(t *testing.T) {
	for n := 1; n <= 9; n++ {
		var targets []string
		for i := range n {
			targets = append(targets, fmt.Sprintf("b%d:80", i))
		}
		var mu sync.Mutex
		seen := map[string]bool{}
		p := &dataPlaneProbe{self: "cluster-a", tracker: reach.New(probeDown, probeUp), liveness: broker.NewLiveness("cluster-a", time.Minute),
			log: logr.Discard(), next: map[string]int{}, enqueue: newTriggers(newFakeCluster(t), newFakeCluster(t)),
			targets: endpointTargets(map[string][]string{"cluster-b": targets}),
			dial: func(_ context.Context, addr string) error {
				mu.Lock()
				defer mu.Unlock()
				seen[addr] = true
				return nil
			}}
		for range (n + probesPerRound - 1) / probesPerRound {
			p.probeRound(context.Background(), time.Unix(1000, 0))
		}
		if len(seen) != n {
			t.Errorf("%d endpoints: %d probed in %d rounds, want all", n, len(seen), (n+probesPerRound-1)/probesPerRound)
		}
	}
}

// TestDialTCP: only a completed connection answers, a refusal is an error that says so, and the probe resets its
// connection rather than closing it, which would leave it in TIME_WAIT, and in the node's conntrack table.
func TestDialTCP(t *testing.T) {
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		accepted <- err
	}()
	if err := dialTCP(ctx, l.Addr().String()); err != nil {
		t.Errorf("a listening port: %v", err)
	}
	if err := <-accepted; !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the server read %v after the probe, want a reset (no TIME_WAIT left behind)", err)
	}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	if err := dialTCP(ctx, addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a closed port: %v, want a refusal, which is no answer", err)
	}
}

func TestObservation(t *testing.T) {
	for _, tt := range []struct {
		answered, refused, lapsed bool
		ok, observed              bool
	}{
		{true, false, false, true, true},
		{true, true, false, true, true},    // one completed connection is enough
		{true, true, true, true, true},     // even for a lost member
		{false, false, false, false, true}, // silence is a failure
		{false, false, true, false, true},
		{false, true, false, false, false}, // a refusal alone: no sign of a cut while the Lease lives
		{false, true, true, false, true},   // but no sign of its pods either once it lapsed
	} {
		ok, observed := observation(tt.answered, tt.refused, tt.lapsed)
		if ok != tt.ok || observed != tt.observed {
			t.Errorf("observation(answered %v, refused %v, lapsed %v) = %v, %v; want %v, %v",
				tt.answered, tt.refused, tt.lapsed, ok, observed, tt.ok, tt.observed)
		}
	}
}

// brokerLease is member id's broker Lease, renewed at renewed.
func brokerLease(id string, renewed time.Time) coordinationv1.Lease {
	return coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: names.BrokerNamespace(id), Name: names.LeaseName,
			Annotations: map[string]string{names.AnnotationClusterID: id}},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}},
	}
}

// TestProbeRoundsRefused: addresses that only refuse neither cut a member whose Lease lives nor keep in use one
// whose Lease lapsed.
func TestProbeRoundsRefused(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1000, 0)
	liveness := broker.NewLiveness("cluster-a", time.Minute)
	liveness.Observe([]coordinationv1.Lease{brokerLease("alive", t0), brokerLease("lost", t0)}, t0)
	now := t0.Add(2 * time.Minute)
	liveness.Observe([]coordinationv1.Lease{brokerLease("alive", now), brokerLease("lost", t0)}, now)
	tracker := reach.New(probeDown, probeUp)
	p := &dataPlaneProbe{self: "cluster-a", tracker: tracker, liveness: liveness, log: logr.Discard(), next: map[string]int{},
		enqueue: newTriggers(newFakeCluster(t), newFakeCluster(t)),
		targets: endpointTargets(map[string][]string{"alive": {"a1:80"}, "lost": {"l1:80"}}),
		dial: func(context.Context, string) error {
			return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}}
	for _, id := range []string{"alive", "lost"} {
		tracker.Observe(id, true, t0)
	}
	for range probeDown + 1 {
		p.probeRound(ctx, now)
	}
	if got := tracker.State("alive"); got != reach.Reachable {
		t.Errorf("a live member whose addresses refuse is %v, want still reachable", got)
	}
	if got := tracker.State("lost"); got != reach.Unreachable {
		t.Errorf("a lost member whose addresses refuse is %v, want unreachable", got)
	}
}

// TestCheckStaleLimit: the services of a lost member whose endpoints answer are brought back once, when it
// passes the stale limit, which no event marks.
func TestCheckStaleLimit(t *testing.T) {
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "team", Name: "web"}
	rec, err := broker.Record(key, merge.Export{Cluster: "cluster-b", Slices: -1,
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	liveness := broker.NewLiveness("cluster-a", time.Minute)
	liveness.Observe([]coordinationv1.Lease{brokerLease("cluster-b", t0)}, t0)
	liveness.Observe([]coordinationv1.Lease{brokerLease("cluster-b", t0)}, t0.Add(2*time.Minute))
	tracker := reach.New(probeDown, probeUp)
	tracker.Observe("cluster-b", true, t0)
	p := &dataPlaneProbe{self: "cluster-a", tracker: tracker, liveness: liveness, staleAfter: 5 * time.Minute,
		log: logr.Discard(), next: map[string]int{}, overdue: map[string]bool{},
		enqueue: newTriggers(newFakeCluster(t), newFakeCluster(t, rec)),
		targets: endpointTargets(map[string][]string{"cluster-b": {"10.2.0.1:80"}})}
	enqueued := func() (n int) {
		for {
			select {
			case e := <-p.enqueue.ch:
				if e.Object != key {
					t.Errorf("enqueued %v, want %v", e.Object, key)
				}
				n++
			default:
				return n
			}
		}
	}
	for _, step := range []struct {
		at   time.Duration
		want int
	}{
		{4 * time.Minute, 0},
		{5*time.Minute + time.Second, 1}, // past the limit
		{6 * time.Minute, 0},             // once
	} {
		p.checkStaleLimit(ctx, t0.Add(step.at))
		if got := enqueued(); got != step.want {
			t.Errorf("at %v: %d services enqueued, want %d", step.at, got, step.want)
		}
	}
}

// TestProbeRoundsLate: a round that took longer than its probes can (a starved or frozen controller) counts
// neither way for the members it could not reach, however many such rounds come; one completed connection in it
// still counts.
func TestProbeRoundsLate(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1000, 0)
	tracker := reach.New(probeDown, probeUp)
	for _, id := range []string{"silent", "answers"} {
		tracker.Observe(id, true, t0)
	}
	tracker.Observe("answers", false, t0)
	took := 2 * time.Second
	p := &dataPlaneProbe{self: "cluster-a", tracker: tracker, liveness: broker.NewLiveness("cluster-a", time.Minute),
		log: logr.Discard(), next: map[string]int{}, enqueue: newTriggers(newFakeCluster(t), newFakeCluster(t)),
		targets: endpointTargets(map[string][]string{"silent": {"s1:80"}, "answers": {"a1:80"}}),
		since:   func(time.Time) time.Duration { return took },
		dial: func(_ context.Context, addr string) error {
			if addr == "a1:80" {
				return nil
			}
			return os.ErrDeadlineExceeded
		}}
	for range probeDown + 1 {
		p.probeRound(ctx, t0)
	}
	if got := tracker.State("silent"); got != reach.Reachable {
		t.Errorf("a member silent only in late rounds is %v, want still reachable", got)
	}
	if tracker.Suspected("answers") {
		t.Errorf("a member that answered in a late round is still suspected")
	}
	took = probeTimeout
	for range probeDown {
		p.probeRound(ctx, t0)
	}
	if got := tracker.State("silent"); got != reach.Unreachable {
		t.Errorf("a member silent in rounds on time is %v, want unreachable", got)
	}
}

// probedLease is member id's broker Lease, with the probe addresses it lists unless addrs is nil.
func probedLease(id string, addrs *string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: names.BrokerNamespace(id), Name: names.LeaseName,
		Annotations: map[string]string{names.AnnotationClusterID: id}}}
	if addrs != nil {
		l.Annotations[names.AnnotationProbeAddresses] = *addrs
	}
	return l
}

// TestProbeRefresh: a member whose Lease lists probe addresses is probed there, and nowhere its namespaces' users
// publish; an older member, whose Lease lists none, at its endpoints; a member that lists only addresses no probe
// may connect to, or has no Lease, not at all.
func TestProbeRefresh(t *testing.T) {
	objs := []client.Object{
		probedLease("cluster-a", ptr.To("10.1.0.5:8081")),
		probedLease("cluster-b", ptr.To("10.2.0.6:8081,127.0.0.1:8081,10.2.0.5:8081")),
		probedLease("cluster-c", nil),
		probedLease("cluster-d", ptr.To("169.254.169.254:80")),
	}
	for _, s := range []discoveryv1.EndpointSlice{
		probeSlice("cluster-b", "blackholed", 80, corev1.ProtocolTCP, nil, "192.0.2.1", "192.0.2.2"),
		probeSlice("cluster-c", "web", 80, corev1.ProtocolTCP, nil, "10.3.0.1"),
		probeSlice("cluster-d", "web", 80, corev1.ProtocolTCP, nil, "10.4.0.1"),
		probeSlice("cluster-e", "web", 80, corev1.ProtocolTCP, nil, "10.5.0.1"),
	} {
		objs = append(objs, &s)
	}
	p := newDataPlaneProbe("cluster-a", newFakeCluster(t, objs...), reach.New(probeDown, probeUp),
		broker.NewLiveness("cluster-a", time.Minute), 0, newTriggers(newFakeCluster(t), newFakeCluster(t)), logr.Discard())
	if err := p.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]probeTarget{
		"cluster-b": {addrs: []string{"10.2.0.5:8081", "10.2.0.6:8081"}, controllers: true},
		"cluster-c": {addrs: []string{"10.3.0.1:80"}},
	}
	if len(p.targets) != len(want) {
		t.Fatalf("targets %v, want %v", p.targets, want)
	}
	for id, w := range want {
		if got := p.targets[id]; !slices.Equal(got.addrs, w.addrs) || got.controllers != w.controllers {
			t.Errorf("%s: %+v, want %+v", id, got, w)
		}
	}
}

// TestProbeRefreshLapsed: a member whose Lease lapsed has lost its controller pods with its control plane, as a
// rule (stopped, or crash-looping without their API server): it is probed at its endpoints, which tell whether its
// data plane still serves, so that it is kept in use, stale, while they answer.
func TestProbeRefreshLapsed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	lease := probedLease("cluster-b", ptr.To("10.2.0.5:8081"))
	slice := probeSlice("cluster-b", "web", 80, corev1.ProtocolTCP, nil, "10.2.1.7")
	liveness := broker.NewLiveness("cluster-a", time.Minute)
	renewed := brokerLease("cluster-b", t0)
	liveness.Observe([]coordinationv1.Lease{renewed}, t0)
	p := newDataPlaneProbe("cluster-a", newFakeCluster(t, lease, &slice), reach.New(probeDown, probeUp), liveness, 0,
		newTriggers(newFakeCluster(t), newFakeCluster(t)), logr.Discard())
	for _, c := range []struct {
		at   time.Time
		want probeTarget
	}{
		{t0.Add(time.Second), probeTarget{addrs: []string{"10.2.0.5:8081"}, controllers: true}},
		{t0.Add(2 * time.Minute), probeTarget{addrs: []string{"10.2.1.7:80"}}},
	} {
		liveness.Observe([]coordinationv1.Lease{renewed}, c.at)
		if err := p.refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := p.targets["cluster-b"]; !slices.Equal(got.addrs, c.want.addrs) || got.controllers != c.want.controllers {
			t.Errorf("%s after its last renewal: %+v, want %+v", c.at.Sub(t0), got, c.want)
		}
	}
}

// TestProbeRoundsControllerRefused: a member's controller replica that refuses (restarting, as one does while its
// control plane is lost) proves the path to the member's pods, Lease alive or lapsed; silence does not.
func TestProbeRoundsControllerRefused(t *testing.T) {
	t0 := time.Unix(1000, 0)
	liveness := broker.NewLiveness("cluster-a", time.Minute)
	liveness.Observe(nil, t0) // seen: no member's Lease lives
	tracker := reach.New(probeDown, probeUp)
	p := &dataPlaneProbe{self: "cluster-a", tracker: tracker, liveness: liveness, log: logr.Discard(), next: map[string]int{},
		enqueue: newTriggers(newFakeCluster(t), newFakeCluster(t)),
		targets: map[string]probeTarget{
			"refuses": {addrs: []string{"r1:8081"}, controllers: true},
			"silent":  {addrs: []string{"s1:8081"}, controllers: true},
		},
		dial: func(_ context.Context, addr string) error {
			if addr == "r1:8081" {
				return fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
			}
			return os.ErrDeadlineExceeded
		}}
	for round := range probeDown {
		p.probeRound(context.Background(), t0.Add(time.Duration(round)*probeInterval))
	}
	if got := tracker.State("refuses"); got != reach.Reachable {
		t.Errorf("a refusing controller replica: %v, want reachable", got)
	}
	if got := tracker.State("silent"); got != reach.Unreachable {
		t.Errorf("a silent controller replica: %v, want unreachable", got)
	}
}

// TestProbeConfirmsWithEndpoints: a member probed at its own pods that all go silent (its release rolled out: the
// controller and DNS pods replaced at once) stays reachable while a confirming round reaches one of its exported
// endpoints; silent everywhere, it is unreachable. Its endpoints are asked only to confirm.
func TestProbeConfirmsWithEndpoints(t *testing.T) {
	slice := probeSlice("cluster-b", "web", 80, corev1.ProtocolTCP, nil, "10.2.1.7")
	for _, c := range []struct {
		name      string
		endpoints bool // whether the endpoint answers
		want      reach.State
	}{
		{"its pods replaced, its endpoints answer", true, reach.Reachable},
		{"silent everywhere", false, reach.Unreachable},
	} {
		t.Run(c.name, func(t *testing.T) {
			tracker := reach.New(probeDown, probeUp)
			t0 := time.Unix(1000, 0)
			tracker.Observe("cluster-b", true, t0)
			var dialed []string
			p := &dataPlaneProbe{self: "cluster-a", tracker: tracker, liveness: broker.NewLiveness("cluster-a", time.Minute),
				broker: newFakeCluster(t, &slice), log: logr.Discard(), next: map[string]int{},
				enqueue: newTriggers(newFakeCluster(t), newFakeCluster(t)),
				targets: map[string]probeTarget{"cluster-b": {addrs: []string{"10.2.0.5:8081"}, controllers: true,
					namespace: names.BrokerNamespace("cluster-b")}},
				dial: func(_ context.Context, addr string) error {
					dialed = append(dialed, addr)
					if addr == "10.2.1.7:80" && c.endpoints {
						return nil
					}
					return os.ErrDeadlineExceeded
				}}
			for round := range probeDown + 1 {
				p.probeRound(context.Background(), t0.Add(time.Duration(round+1)*probeInterval))
			}
			if got := tracker.State("cluster-b"); got != c.want {
				t.Errorf("cluster-b is %v, want %v (dialed %v)", got, c.want, dialed)
			}
			if dialed[0] != "10.2.0.5:8081" {
				t.Errorf("the first round dialed %s, want its own pod only", dialed[0])
			}
		})
	}
}
