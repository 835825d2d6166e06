package controller

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/controller/reach"
)

// ReasonFailedOpen is the reason of the Stale or Unreachable condition of an import that uses the endpoints of
// the exporters it names as published though it would rather not (reach.Fallback), because no other exporter of
// the service has a ready endpoint.
const ReasonFailedOpen = "FailedOpen"

// memberUse is how this member imports one exporter's endpoints.
type memberUse int

const (
	useEndpoints      memberUse = iota // as published
	skipEndpoints                      // not at all: the exporter is gone
	fallbackEndpoints                  // not ready, unless no other exporter has a ready endpoint (withVerdicts)
)

// useOf decides how this member imports cluster's endpoints, from its broker Lease and, with the data-plane
// probe on, from whether its endpoints answer from here and for how long its Lease has lapsed (reach.Decide).
// Without the probe, the Lease decides alone.
func (r *reconciler) useOf(cluster string) memberUse {
	if cluster == r.id {
		return useEndpoints
	}
	alive := r.liveness.Alive(cluster)
	if r.reach == nil {
		if alive {
			return useEndpoints
		}
		return skipEndpoints
	}
	overdue := false
	if !alive {
		m, seen := r.liveness.Member(cluster, time.Now())
		overdue = pastStaleLimit(m, seen, r.staleAfter)
	}
	switch reach.Decide(alive, overdue, r.reach.State(cluster)) {
	case reach.Fallback:
		return fallbackEndpoints
	case reach.Leave:
		return skipEndpoints
	}
	return useEndpoints
}

// pastStaleLimit says whether a member's endpoints have outlived the stale limit: after (Options.LeaseGrace +
// Options.StaleLimit, 0 for no limit) has passed since its Lease m was last seen renewed, or no Lease of it is
// seen at all (seen false), so that nothing vouches for them.
func pastStaleLimit(m broker.Member, seen bool, after time.Duration) bool {
	return after > 0 && !m.Alive && (!seen || m.Age > after)
}

// withVerdicts applies the verdicts of use to one service's sources, each exporter's slices as published: the
// endpoints of exporters to fall back on (fallbackEndpoints) are made not ready, unless no other exporter has a
// ready endpoint; then those with one stay as published, and open names them. A verdict of the probe's may be
// wrong, and one that left a service no ready endpoint would make an outage certain where the exporters may
// well serve: a fallback exporter loses its traffic to another exporter, never to nothing, as Envoy's panic
// threshold spreads traffic over every host once too few look healthy.
func withVerdicts(sources []imports.Source, use func(cluster string) memberUse) (out []imports.Source, open []string) {
	open = failOpen(sources, use)
	out = make([]imports.Source, len(sources))
	for i, s := range sources {
		if use(s.Cluster) == fallbackEndpoints && !slices.Contains(open, s.Cluster) {
			s.Slice = unready(s.Slice)
		}
		out[i] = s
	}
	return out, open
}

// failOpen returns, sorted, the fallback exporters among sources that have a ready endpoint when no other exporter
// has one; none otherwise. On sources that withVerdicts returned, it returns what withVerdicts did.
func failOpen(sources []imports.Source, use func(cluster string) memberUse) []string {
	var open []string
	for _, s := range sources {
		if !hasReadyEndpoint(s.Slice) {
			continue
		}
		if use(s.Cluster) != fallbackEndpoints {
			return nil
		}
		if !slices.Contains(open, s.Cluster) {
			open = append(open, s.Cluster)
		}
	}
	slices.Sort(open)
	return open
}

// hasReadyEndpoint says whether any endpoint of s is ready; an unset condition counts as ready, as kube-proxy
// takes it.
func hasReadyEndpoint(s discoveryv1.EndpointSlice) bool {
	for _, e := range s.Endpoints {
		if ptr.Deref(e.Conditions.Ready, true) {
			return true
		}
	}
	return false
}

// unready returns the slice with every endpoint neither ready nor serving: kube-proxy falls back to serving
// terminating endpoints when none is ready, and these must not be among them.
func unready(s discoveryv1.EndpointSlice) discoveryv1.EndpointSlice {
	s.Endpoints = slices.Clone(s.Endpoints)
	for i := range s.Endpoints {
		s.Endpoints[i].Conditions.Ready = ptr.To(false)
		s.Endpoints[i].Conditions.Serving = ptr.To(false)
	}
	return s
}

// failOpenLog remembers which exporters each service's last gather kept as published only because no other had
// a ready endpoint, so that failing open is logged and counted once when it starts, however often the service
// is reconciled while it lasts. The zero value is ready for use; services reconcile concurrently, one gather per
// service at a time.
type failOpenLog struct {
	mu   sync.Mutex
	open map[types.NamespacedName][]string
}

// settle records that key fails open on the exporters open (sorted) and returns those it did not before, and
// those it no longer does.
func (l *failOpenLog) settle(key types.NamespacedName, open []string) (started, ended []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	before := l.open[key]
	for _, c := range open {
		if !slices.Contains(before, c) {
			started = append(started, c)
		}
	}
	for _, c := range before {
		if !slices.Contains(open, c) {
			ended = append(ended, c)
		}
	}
	switch {
	case len(open) == 0:
		delete(l.open, key)
	case l.open == nil:
		l.open = map[types.NamespacedName][]string{key: open}
	default:
		l.open[key] = open
	}
	return started, ended
}

// reportFailOpen reports where the gather of key starts or stops failing open: in the log, and per exporter in
// mcs_controller_member_failed_open_total. The import's Stale or Unreachable condition says so while it lasts.
func (r *reconciler) reportFailOpen(key types.NamespacedName, open []string) {
	started, ended := r.failOpens.settle(key, open)
	for _, c := range started {
		failedOpenTotal.WithLabelValues(r.id, c).Inc()
	}
	if len(started) > 0 {
		r.log.Info("failing open: no other exporter has ready endpoints, so the endpoints of members judged unreachable "+
			"from here, or lost for longer than the stale limit, stay in use as published", "service", key, "members", open)
	}
	if len(ended) > 0 {
		r.log.Info("no longer failing open", "service", key, "members", ended)
	}
}

// memberConditions are the import's Stale and Unreachable conditions for its exporters at now, given the sources
// gather returned, nil where none applies. Each takes the reason FailedOpen while an exporter it names is used
// only because no other has a ready endpoint. The messages name times that do not move while the state stands:
// a message that changed with the clock would write the status at every reconcile.
func (r *reconciler) memberConditions(exports []merge.Export, sources []imports.Source, now time.Time) (stale, unreachable *metav1.Condition) {
	if r.reach == nil {
		return nil, nil
	}
	open := failOpen(sources, r.useOf)
	members := r.liveness.Members(now)
	var lost, overdue, overdueOpen, cut, cutOpen []string
	for _, e := range exports {
		if e.Cluster == r.id {
			continue
		}
		inUse := slices.Contains(open, e.Cluster)
		switch state := r.reach.State(e.Cluster); {
		case state == reach.Unreachable:
			since := fmt.Sprintf("%s (since %s)", e.Cluster, r.reach.Since(e.Cluster).UTC().Format(time.RFC3339))
			if inUse {
				cutOpen = append(cutOpen, since)
			} else {
				cut = append(cut, since)
			}
		case state == reach.Reachable && !r.liveness.Alive(e.Cluster):
			seen := e.Cluster + " (no Lease seen)"
			m, ok := members[e.Cluster]
			if ok {
				renewed := now.Add(-m.Age).Truncate(time.Second)
				seen = fmt.Sprintf("%s (Lease last seen renewed at %s)", e.Cluster, renewed.UTC().Format(time.RFC3339))
			}
			switch {
			case !pastStaleLimit(m, ok, r.staleAfter):
				lost = append(lost, seen)
			case inUse:
				overdueOpen = append(overdueOpen, seen)
			default:
				overdue = append(overdue, seen)
			}
		}
	}
	stale = memberCondition(imports.ConditionStale, imports.ReasonControlPlaneLost, []sentence{
		{overdueOpen, true, "The control plane of %s has been lost for longer than the stale limit, but no other exporter " +
			"has ready endpoints: its endpoints stay in use as last published."},
		{lost, false, "The control plane of %s is lost, but its endpoints answer from this cluster: they stay in use as last published."},
		{overdue, false, "The control plane of %s has been lost for longer than the stale limit: its endpoints are used here " +
			"only while no other exporter has ready endpoints."},
	})
	unreachable = memberCondition(imports.ConditionUnreachable, imports.ReasonDataPlaneUnreachable, []sentence{
		{cutOpen, true, "The endpoints of %s are judged unreachable from this cluster, but no other exporter has ready " +
			"endpoints: they stay in use as published."},
		{cut, false, "The endpoints of %s do not answer from this cluster: they are not used here."},
	})
	return stale, unreachable
}

// sentence is one sentence of a member condition's message: format, with the members it is about, and whether
// they are in use only because no other exporter has a ready endpoint.
type sentence struct {
	members    []string
	failedOpen bool
	format     string
}

// memberCondition returns the condition of type typ, True, whose message says each sentence that names members,
// nil when none does. Its reason is FailedOpen when a sentence about members failed open does, else reason.
func memberCondition(typ, reason string, sentences []sentence) *metav1.Condition {
	var message []string
	for _, s := range sentences {
		if len(s.members) == 0 {
			continue
		}
		if s.failedOpen {
			reason = ReasonFailedOpen
		}
		slices.Sort(s.members)
		message = append(message, fmt.Sprintf(s.format, strings.Join(s.members, ", ")))
	}
	if len(message) == 0 {
		return nil
	}
	return &metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: strings.Join(message, " ")}
}
