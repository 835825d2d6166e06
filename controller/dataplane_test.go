package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"vksfleet.dev/fleet/controller/broker"
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
	p := &dataPlaneProbe{self: "cluster-a", tracker: tracker, log: logr.Discard(), next: map[string]int{},
		enqueue: newTriggers(newFakeCluster(t), newFakeCluster(t)),
		targets: map[string][]string{"cluster-b": {"b1:80", "b2:80", "b3:80"}},
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
		p := &dataPlaneProbe{self: "cluster-a", tracker: reach.New(probeDown, probeUp), log: logr.Discard(), next: map[string]int{},
			enqueue: newTriggers(newFakeCluster(t), newFakeCluster(t)),
			targets: map[string][]string{"cluster-b": targets},
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
