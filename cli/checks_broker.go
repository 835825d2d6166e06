package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/memberlease"
	"vksfleet.dev/fleet/mcs/names"
)

// brokerChecks are the broker's: a snapshot exists only once the broker was read, so it is reachable.
func brokerChecks(s *Snapshot) []Check {
	b := &s.Broker
	out := []Check{{Check: CheckReachable, Cluster: b.Context, Result: Pass, Message: "broker reachable"}}
	return append(out, crdCheck(b.Context, b.MissingAPIs, "kubectl mcs broker init"))
}

// crdCheck fails when CRDs are missing. The hint installs the CRDs alone (build/deploy/crds), never a whole
// manifest: the member's also replaces the cluster's Corefile, CoreDNS Deployment and kube-dns Service.
func crdCheck(context string, missing []string, setup string) Check {
	if len(missing) == 0 {
		return Check{Check: CheckCRDs, Cluster: context, Result: Pass, Message: "CRDs installed"}
	}
	return Check{Check: CheckCRDs, Cluster: context, Result: Fail,
		Message: "not served: " + strings.Join(missing, ", "),
		Hint: fmt.Sprintf("install the CRDs alone, from a checkout of the repository: kubectl --context %s apply -k build/deploy/crds; or set the cluster up with %s",
			context, setup)}
}

func leaseCheck(s *Snapshot, m *Member) Check {
	c := Check{Check: CheckLease, Cluster: m.Context}
	logs := fmt.Sprintf("the member's mcs-controller is down or cannot reach the broker: kubectl --context %s -n %s logs deploy/%s",
		m.Context, controllerNamespace, controllerDeployment)
	switch l := s.lease(m.ClusterID); {
	case !l.found:
		c.Result, c.Message = Fail, fmt.Sprintf("no Lease %s/%s on the broker", names.BrokerNamespace(m.ClusterID), names.LeaseName)
		c.Hint = logs
	case l.age < -l.grace:
		c.Result = Fail
		c.Message = fmt.Sprintf("renewed %s in the broker's future (grace %s)", round(-l.age), l.grace)
		c.Hint = "the controller's clock runs ahead of the broker's: synchronise the clocks (NTP)"
	case !l.alive():
		c.Result = Fail
		c.Message = fmt.Sprintf("renewed %s ago, past the grace of %s: its control plane is lost; members whose data-plane "+
			"probes still reach its endpoints keep them (their imports say Stale), the others withdraw them", round(l.age), l.grace)
		c.Hint = logs
	default:
		c.Result, c.Message = Pass, fmt.Sprintf("renewed %s ago (grace %s)", round(max(l.age, 0)), l.grace)
	}
	return c
}

func clockCheck(s *Snapshot, m *Member) Check {
	c := Check{Check: CheckClock, Cluster: m.Context}
	skew, grace := m.ClockOffset-s.Broker.ClockOffset, s.leaseGrace()
	if skew.Abs() > grace {
		c.Result = Fail
		c.Message = fmt.Sprintf("the API server's clock is %s off the broker's, more than the lease grace %s", round(skew), grace)
		c.Hint = "synchronise the clocks (NTP): the controllers judge each other's liveness by when they see a Lease renewed, " +
			"on their own clocks, so skew does not withdraw anyone, but the renew times, the lease ages this tool shows, Events and logs are off by it"
		return c
	}
	c.Result, c.Message = Pass, fmt.Sprintf("within %s of the broker's clock (grace %s)", round(skew.Abs()), grace)
	return c
}

// staleSlicesCheck finds imported slices whose source cluster no longer contributes: it has no Lease (it left),
// its Lease expired, or it no longer exports the service. The member's own endpoints are never stale.
func staleSlicesCheck(s *Snapshot, m *Member) Check {
	c := Check{Check: CheckStaleSlices, Cluster: m.Context}
	var stale []string
	var sources []string
	for _, sl := range m.Slices {
		src := broker.ClusterOf(&sl)
		if src == m.ClusterID {
			continue
		}
		svc := types.NamespacedName{Namespace: sl.Namespace, Name: sl.Labels[mcsv1beta1.LabelServiceName]}
		why := ""
		switch l := s.lease(src); {
		case !l.found:
			why = "which left the clusterset (no Lease)"
		case !memberlease.Fresh(l.age, l.grace+withdrawMargin) && keptStale(m.serviceImport(svc), src):
			continue // its control plane is lost, its endpoints answer here: kept on purpose
		case !memberlease.Fresh(l.age, l.grace+withdrawMargin):
			why = fmt.Sprintf("whose Lease was last renewed %s ago (grace %s)", round(l.age), l.grace)
		case !l.alive():
			continue // being withdrawn right now
		case !slices.ContainsFunc(s.exports(svc), func(e merge.Export) bool { return e.Cluster == src }):
			why = "which no longer exports it"
		default:
			continue
		}
		stale = append(stale, fmt.Sprintf("%s/%s of %s from %s, %s", sl.Namespace, sl.Name, svc, src, why))
		if !slices.Contains(sources, src) {
			sources = append(sources, src)
		}
	}
	if len(stale) == 0 {
		c.Result, c.Message = Pass, "every imported slice comes from a live exporter"
		return c
	}
	slices.Sort(stale)
	c.Result, c.Message = Fail, fmt.Sprintf("%d stale slices: %s", len(stale), strings.Join(stale, "; "))
	c.Hint = fmt.Sprintf("the member's mcs-controller deletes them when it runs (see its lease check); by hand: kubectl --context %s delete endpointslices -A -l %s=%s",
		m.Context, mcsv1beta1.LabelSourceCluster, names.LabelValue(sources[0]))
	return c
}

// keptStale says whether the import keeps src's endpoints on purpose: its Stale condition names src, whose control
// plane is lost while its endpoints answer from this member.
func keptStale(si *mcsv1beta1.ServiceImport, src string) bool {
	if si == nil {
		return false
	}
	c := meta.FindStatusCondition(si.Status.Conditions, imports.ConditionStale)
	return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, src+" (")
}

// withdrawMargin is how long past a Lease's expiry its member's slices may remain before they count as stale:
// the controllers withdraw them within about a second, and diagnose must not flag that window.
const withdrawMargin = 5 * time.Second

func round(d time.Duration) time.Duration { return d.Round(time.Second) }
