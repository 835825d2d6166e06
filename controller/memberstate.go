package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/controller/reach"
)

// memberUse is how this member imports one exporter's endpoints.
type memberUse int

const (
	useEndpoints     memberUse = iota // as published
	skipEndpoints                     // not at all: the exporter is gone
	unreadyEndpoints                  // all not ready: its data plane does not answer from here, its Lease is alive
)

// useOf decides how this member imports cluster's endpoints, from its broker Lease and, with the data-plane
// probe on, from whether its endpoints answer from here (reach.Decide). Without the probe, the Lease decides
// alone. Endpoints that do not answer are kept, not ready, while the Lease lives (a cut may heal, and its member
// still publishes), and withdrawn once it lapses too, as without the probe.
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
	state := r.reach.State(cluster)
	if state == reach.Unreachable && alive {
		return unreadyEndpoints
	}
	if reach.Decide(alive, state) == reach.Leave {
		return skipEndpoints
	}
	return useEndpoints
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

// memberConditions are the import's Stale and Unreachable conditions for its exporters at now, nil where none
// applies.
func (r *reconciler) memberConditions(exports []merge.Export, now time.Time) (stale, unreachable *metav1.Condition) {
	if r.reach == nil {
		return nil, nil
	}
	ages := r.liveness.Members(now)
	var lost, cut []string
	for _, e := range exports {
		if e.Cluster == r.id {
			continue
		}
		switch state := r.reach.State(e.Cluster); {
		case state == reach.Unreachable:
			cut = append(cut, fmt.Sprintf("%s (since %s)", e.Cluster, r.reach.Since(e.Cluster).UTC().Format(time.RFC3339)))
		case state == reach.Reachable && !r.liveness.Alive(e.Cluster):
			renewed := now.Add(-ages[e.Cluster].Age).Truncate(time.Second)
			lost = append(lost, fmt.Sprintf("%s (Lease last seen renewed at %s)", e.Cluster, renewed.UTC().Format(time.RFC3339)))
		}
	}
	if len(lost) > 0 {
		slices.Sort(lost)
		stale = &metav1.Condition{Type: imports.ConditionStale, Status: metav1.ConditionTrue, Reason: imports.ReasonControlPlaneLost,
			Message: "The control plane of " + strings.Join(lost, ", ") + " is lost, but its endpoints answer from this " +
				"cluster: they stay in use as last published."}
	}
	if len(cut) > 0 {
		slices.Sort(cut)
		unreachable = &metav1.Condition{Type: imports.ConditionUnreachable, Status: metav1.ConditionTrue, Reason: imports.ReasonDataPlaneUnreachable,
			Message: "The endpoints of " + strings.Join(cut, ", ") + " do not answer from this cluster: they are not used here."}
	}
	return stale, unreachable
}
