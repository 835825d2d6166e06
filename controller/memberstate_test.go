package controller

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/controller/reach"
)

// verdictSource is one slice of cluster's whose endpoints have the given readiness (nil: unset).
func verdictSource(cluster string, ready ...*bool) imports.Source {
	s := discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: cluster}}
	for _, r := range ready {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: r, Serving: r}})
	}
	return imports.Source{Cluster: cluster, Slice: s}
}

// readiness describes each source's endpoints: "ready" when one is ready, else "not ready".
func readiness(sources []imports.Source) map[string]string {
	got := map[string]string{}
	for _, s := range sources {
		got[s.Cluster] = "not ready"
		if hasReadyEndpoint(s.Slice) {
			got[s.Cluster] = "ready"
		}
	}
	return got
}

func TestWithVerdicts(t *testing.T) {
	yes, no := ptr.To(true), ptr.To(false)
	fallback := map[string]bool{"b": true, "c": true}
	use := func(c string) memberUse {
		if fallback[c] {
			return fallbackEndpoints
		}
		return useEndpoints
	}
	tests := []struct {
		name    string
		sources []imports.Source
		want    map[string]string
		open    []string
	}{
		{"another exporter ready: the fallback is not ready",
			[]imports.Source{verdictSource("b", yes), verdictSource("x", no, yes)},
			map[string]string{"b": "not ready", "x": "ready"}, nil},
		{"this member's own endpoints count as another exporter's",
			[]imports.Source{verdictSource("a", yes), verdictSource("b", yes)},
			map[string]string{"a": "ready", "b": "not ready"}, nil},
		{"an unset readiness counts as ready",
			[]imports.Source{verdictSource("b", yes), verdictSource("x", nil)},
			map[string]string{"b": "not ready", "x": "ready"}, nil},
		{"the only exporter fails open",
			[]imports.Source{verdictSource("b", yes, no)},
			map[string]string{"b": "ready"}, []string{"b"}},
		{"every exporter a fallback: all with a ready endpoint fail open",
			[]imports.Source{verdictSource("c", yes), verdictSource("b", no), verdictSource("b", yes)},
			map[string]string{"b": "ready", "c": "ready"}, []string{"b", "c"}},
		{"others without a ready endpoint: fail open",
			[]imports.Source{verdictSource("x", no), verdictSource("b", yes)},
			map[string]string{"x": "not ready", "b": "ready"}, []string{"b"}},
		{"nothing ready anywhere: nothing to fail open on",
			[]imports.Source{verdictSource("b", no), verdictSource("x")},
			map[string]string{"b": "not ready", "x": "not ready"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, open := withVerdicts(tt.sources, use)
			if got := readiness(out); !maps.Equal(got, tt.want) {
				t.Errorf("endpoints %v, want %v", got, tt.want)
			}
			if !slices.Equal(open, tt.open) {
				t.Errorf("failed open on %v, want %v", open, tt.open)
			}
			// memberConditions reads the verdict back from what gather returned.
			if again := failOpen(out, use); !slices.Equal(again, open) {
				t.Errorf("failOpen of the result %v, want %v", again, open)
			}
			for _, s := range out {
				if use(s.Cluster) == fallbackEndpoints && !slices.Contains(open, s.Cluster) {
					for _, e := range s.Slice.Endpoints {
						if ptr.Deref(e.Conditions.Serving, true) {
							t.Errorf("%s: a fallback endpoint stays serving, which kube-proxy would fall back to", s.Cluster)
						}
					}
				}
			}
		})
	}
}

func TestFailOpenLog(t *testing.T) {
	var l failOpenLog
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	for _, step := range []struct {
		open, started, ended []string
	}{
		{nil, nil, nil},
		{[]string{"b"}, []string{"b"}, nil},
		{[]string{"b"}, nil, nil}, // reported once, however often it is gathered
		{[]string{"b", "c"}, []string{"c"}, nil},
		{[]string{"c"}, nil, []string{"b"}},
		{nil, nil, []string{"c"}},
	} {
		started, ended := l.settle(key, step.open)
		if !slices.Equal(started, step.started) || !slices.Equal(ended, step.ended) {
			t.Errorf("settle(%v) = %v, %v; want %v, %v", step.open, started, ended, step.started, step.ended)
		}
	}
	if len(l.open) != 0 {
		t.Errorf("a service no longer failing open is remembered: %v", l.open)
	}
}

// fallbackFixture is a broker where "cut" (Lease alive, unreachable from here), "alive", "lost" (Lease lapsed 2
// minutes ago, reachable) and "old" (Lease lapsed 20 minutes ago, reachable) export services: "solo-<x>" by x
// alone, "pair-<x>" by x and alive. Each exporter has one ready endpoint.
func fallbackFixture(t *testing.T, now time.Time) *reconciler {
	t.Helper()
	var objs []client.Object
	export := func(svc, c string) {
		key := types.NamespacedName{Namespace: "ns", Name: svc}
		rec, err := broker.Record(key, merge.Export{Cluster: c, Created: now, Slices: -1, Spec: mcsv1beta1.ServiceImportSpec{
			Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}})
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, rec, broker.Slice(c, key, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: svc + "-" + c}, AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:     []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		}))
	}
	for _, c := range []string{"cut", "lost", "old"} {
		export("solo-"+c, c)
		export("pair-"+c, c)
		export("pair-"+c, "alive")
	}
	r := testReconciler(newFakeCluster(t), newFakeCluster(t, objs...))
	r.liveness = broker.NewLiveness("a", time.Minute)
	r.staleAfter = time.Minute + 10*time.Minute
	old, lost := now.Add(-20*time.Minute), now.Add(-2*time.Minute)
	// First seen now, "lost" counts from its renew time; the others from when they were first seen.
	r.liveness.Observe([]coordinationv1.Lease{brokerLease("alive", old), brokerLease("cut", old), brokerLease("old", old)}, old)
	r.liveness.Observe([]coordinationv1.Lease{brokerLease("alive", now), brokerLease("cut", now), brokerLease("lost", lost),
		brokerLease("old", old)}, now)
	r.reach = reach.New(1, 1)
	for _, c := range []string{"alive", "lost", "old"} {
		r.reach.Observe(c, true, now)
	}
	r.reach.Observe("cut", false, now)
	return r
}

// failedOpen reads mcs_controller_member_failed_open_total of observer about member.
func failedOpen(t *testing.T, observer, member string) float64 {
	t.Helper()
	var m dto.Metric
	if err := failedOpenTotal.WithLabelValues(observer, member).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestGatherFailsOpen: the probe alone moves a service's traffic from an exporter it judges unreachable to
// another, but never leaves a service without ready endpoints: the only exporter's stay in use as published,
// and the import says so, once in the log and metric, and in its Unreachable condition while it lasts.
func TestGatherFailsOpen(t *testing.T) {
	now := time.Now()
	r := fallbackFixture(t, now)
	counted := failedOpen(t, "a", "cut")
	for _, tt := range []struct {
		svc    string
		want   map[string]string
		reason string
		says   string
	}{
		{"solo-cut", map[string]string{"cut": "ready"}, ReasonFailedOpen,
			"are judged unreachable from this cluster, but no other exporter has ready endpoints: they stay in use as published."},
		{"pair-cut", map[string]string{"cut": "not ready", "alive": "ready"}, imports.ReasonDataPlaneUnreachable,
			"do not answer from this cluster: they are not used here."},
	} {
		key := types.NamespacedName{Namespace: "ns", Name: tt.svc}
		for range 2 {
			exports, sources, err := r.gather(context.Background(), key, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := readiness(sources); !maps.Equal(got, tt.want) {
				t.Errorf("%s: endpoints %v, want %v", tt.svc, got, tt.want)
			}
			stale, unreachable := r.memberConditions(exports, sources, now)
			if stale != nil || unreachable == nil || unreachable.Reason != tt.reason ||
				!strings.HasPrefix(unreachable.Message, "The endpoints of cut (since ") || !strings.HasSuffix(unreachable.Message, tt.says) {
				t.Errorf("%s: conditions Stale %+v, Unreachable %+v; want Unreachable/%s saying %q", tt.svc, stale, unreachable, tt.reason, tt.says)
			}
		}
	}
	if n := failedOpen(t, "a", "cut") - counted; n != 1 {
		t.Errorf("mcs_controller_member_failed_open_total counted %v, want 1: one import failed open, gathered twice", n)
	}
}

// TestGatherStaleLimit: a lost member whose endpoints answer keeps them in use up to the stale limit; past it,
// only services that no other exporter has ready endpoints for keep using them, and the import says which.
func TestGatherStaleLimit(t *testing.T) {
	now := time.Now()
	r := fallbackFixture(t, now)
	for _, tt := range []struct {
		svc    string
		want   map[string]string
		reason string
		says   string
	}{
		{"solo-lost", map[string]string{"lost": "ready"}, imports.ReasonControlPlaneLost,
			"is lost, but its endpoints answer from this cluster: they stay in use as last published."},
		{"pair-lost", map[string]string{"lost": "ready", "alive": "ready"}, imports.ReasonControlPlaneLost,
			"is lost, but its endpoints answer from this cluster: they stay in use as last published."},
		{"solo-old", map[string]string{"old": "ready"}, ReasonFailedOpen,
			"has been lost for longer than the stale limit, but no other exporter has ready endpoints: its endpoints stay in use as last published."},
		{"pair-old", map[string]string{"old": "not ready", "alive": "ready"}, imports.ReasonControlPlaneLost,
			"has been lost for longer than the stale limit: its endpoints are used here only while no other exporter has ready endpoints."},
	} {
		key := types.NamespacedName{Namespace: "ns", Name: tt.svc}
		exports, sources, err := r.gather(context.Background(), key, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := readiness(sources); !maps.Equal(got, tt.want) {
			t.Errorf("%s: endpoints %v, want %v", tt.svc, got, tt.want)
		}
		stale, unreachable := r.memberConditions(exports, sources, now)
		if unreachable != nil || stale == nil || stale.Reason != tt.reason || !strings.HasSuffix(stale.Message, tt.says) {
			t.Errorf("%s: conditions Stale %+v, Unreachable %+v; want Stale/%s saying %q", tt.svc, stale, unreachable, tt.reason, tt.says)
		}
		// Missing waits for the slices of exporters not skipped: a fallback exporter's are there.
		if missing := imports.Missing(exports, sources, r.id, func(c string) bool { return r.useOf(c) != skipEndpoints }); missing != "" {
			t.Errorf("%s: missing %s", tt.svc, missing)
		}
	}
}

func TestPastStaleLimit(t *testing.T) {
	members := map[string]broker.Member{
		"alive":  {Alive: true, Age: time.Hour}, // frozen alive while this member cannot reach the broker
		"recent": {Age: 5 * time.Minute},
		"old":    {Age: 12 * time.Minute},
	}
	for _, tt := range []struct {
		id    string
		after time.Duration
		want  bool
	}{
		{"alive", 11 * time.Minute, false},
		{"recent", 11 * time.Minute, false},
		{"old", 11 * time.Minute, true},
		{"old", 0, false},                    // no limit
		{"no-lease", 11 * time.Minute, true}, // nothing vouches for it
	} {
		m, seen := members[tt.id]
		if got := pastStaleLimit(m, seen, tt.after); got != tt.want {
			t.Errorf("pastStaleLimit(%s, %v) = %v, want %v", tt.id, tt.after, got, tt.want)
		}
	}
}
