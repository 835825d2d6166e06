package cli

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/memberlease"
	"vksfleet.dev/fleet/mcs/names"
)

// leaseState is a member's broker Lease judged on the broker's clock: a snapshot cannot see renewals happen, as
// the controllers do (they judge by when they saw the renew time change, on their own clocks).
type leaseState struct {
	found bool
	// age is how long ago it was renewed; negative when the renewal lies in the broker's future.
	age time.Duration
	// grace is the Lease's duration, the holder's --lease-grace.
	grace time.Duration
}

func (l leaseState) alive() bool { return l.found && memberlease.Fresh(l.age, l.grace) }

// lease finds the Lease of the cluster id in its own broker namespace: one elsewhere is not the member's.
func (s *Snapshot) lease(clusterID string) leaseState {
	for i := range s.Broker.Leases {
		l := &s.Broker.Leases[i]
		if l.Name != names.LeaseName || l.Namespace != names.BrokerNamespace(clusterID) || broker.ClusterOf(l) != clusterID {
			continue
		}
		st := leaseState{found: true, grace: memberlease.GraceOf(l)}
		if l.Spec.RenewTime != nil {
			st.age = s.Now.Add(s.Broker.ClockOffset).Sub(l.Spec.RenewTime.Time)
		} else {
			st.age = time.Duration(1<<63 - 1)
		}
		return st
	}
	return leaseState{grace: memberlease.DefaultGrace}
}

// leaseGrace is the grace the clusterset uses: the longest of the Leases', else the controller's default.
func (s *Snapshot) leaseGrace() time.Duration {
	grace := time.Duration(0)
	for _, m := range s.Members {
		if l := s.lease(m.ClusterID); l.found {
			grace = max(grace, l.grace)
		}
	}
	if grace == 0 {
		return memberlease.DefaultGrace
	}
	return grace
}

// exports are the broker records of the service, each from its own cluster's namespace as the controllers
// accept them; broken records are left out.
func (s *Snapshot) exports(svc types.NamespacedName) []merge.Export {
	var out []merge.Export
	for i := range s.Broker.Records {
		r := &s.Broker.Records[i]
		if key, ok := broker.ServiceOf(r); !ok || key != svc {
			continue
		}
		e, err := broker.ParseRecord(r)
		if err != nil || r.Namespace != names.BrokerNamespace(e.Cluster) {
			continue
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b merge.Export) int { return strings.Compare(a.Cluster, b.Cluster) })
	return out
}

// brokerSlices are the service's slices on the broker that cluster exported.
func (s *Snapshot) brokerSlices(svc types.NamespacedName, cluster string) []discoveryv1.EndpointSlice {
	var out []discoveryv1.EndpointSlice
	for _, sl := range s.Broker.Slices {
		if key, ok := broker.ServiceOf(&sl); ok && key == svc && broker.ClusterOf(&sl) == cluster &&
			sl.Namespace == names.BrokerNamespace(cluster) {
			out = append(out, sl)
		}
	}
	return out
}

// services are every service exported or imported anywhere, sorted; ns and name filter when not empty.
func (s *Snapshot) services(ns, name string) []types.NamespacedName {
	seen := map[types.NamespacedName]bool{}
	add := func(key types.NamespacedName) {
		if (ns == "" || key.Namespace == ns) && (name == "" || key.Name == name) {
			seen[key] = true
		}
	}
	for i := range s.Broker.Records {
		if key, ok := broker.ServiceOf(&s.Broker.Records[i]); ok {
			add(key)
		}
	}
	for _, m := range s.Members {
		for _, e := range m.Exports {
			add(types.NamespacedName{Namespace: e.Namespace, Name: e.Name})
		}
		for _, si := range m.Imports {
			add(types.NamespacedName{Namespace: si.Namespace, Name: si.Name})
		}
	}
	out := make([]types.NamespacedName, 0, len(seen))
	for key := range seen {
		out = append(out, key)
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	return out
}

func (m *Member) export(svc types.NamespacedName) *mcsv1beta1.ServiceExport {
	for i := range m.Exports {
		if m.Exports[i].Namespace == svc.Namespace && m.Exports[i].Name == svc.Name {
			return &m.Exports[i]
		}
	}
	return nil
}

func (m *Member) serviceImport(svc types.NamespacedName) *mcsv1beta1.ServiceImport {
	for i := range m.Imports {
		if m.Imports[i].Namespace == svc.Namespace && m.Imports[i].Name == svc.Name {
			return &m.Imports[i]
		}
	}
	return nil
}

// importedSlices are the slices the controller imported for the service, found like the DNS plugin finds them.
func (m *Member) importedSlices(svc types.NamespacedName) []discoveryv1.EndpointSlice {
	var out []discoveryv1.EndpointSlice
	for _, sl := range m.Slices {
		if sl.Namespace == svc.Namespace && sl.Labels[mcsv1beta1.LabelServiceName] == svc.Name {
			out = append(out, sl)
		}
	}
	return out
}

func (m *Member) derivedService(svc types.NamespacedName) *corev1.Service {
	want := names.DerivedServiceName(svc.Namespace, svc.Name)
	for i := range m.DerivedServices {
		if m.DerivedServices[i].Namespace == svc.Namespace && m.DerivedServices[i].Name == want {
			return &m.DerivedServices[i]
		}
	}
	return nil
}

// endpointCounts counts ready and serving endpoints per source cluster, sorted by cluster; a nil condition
// counts as true, as the EndpointSlice API says.
func endpointCounts(in []discoveryv1.EndpointSlice) []SourceEndpoints {
	counts := map[string]*SourceEndpoints{}
	for _, sl := range in {
		c := broker.ClusterOf(&sl)
		if counts[c] == nil {
			counts[c] = &SourceEndpoints{Cluster: c}
		}
		for _, ep := range sl.Endpoints {
			counts[c].Total++
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				counts[c].Ready++
			}
			if ep.Conditions.Serving == nil || *ep.Conditions.Serving {
				counts[c].Serving++
			}
		}
	}
	out := make([]SourceEndpoints, 0, len(counts))
	for _, c := range counts {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b SourceEndpoints) int { return strings.Compare(a.Cluster, b.Cluster) })
	return out
}

// SourceEndpoints counts the endpoints a member imported from one source cluster.
type SourceEndpoints struct {
	Cluster string `json:"cluster"`
	Ready   int    `json:"ready"`
	Serving int    `json:"serving"`
	Total   int    `json:"total"`
}

// unreachableFrom returns the members whose broker Lease says their data-plane probe finds the member clusterID's
// endpoints silent, sorted.
func (s *Snapshot) unreachableFrom(clusterID string) []string {
	var from []string
	for i := range s.Broker.Leases {
		l := &s.Broker.Leases[i]
		if observer := broker.LeaseOf(l); observer != "" && slices.Contains(broker.UnreachableFrom(l), clusterID) {
			from = append(from, observer)
		}
	}
	slices.Sort(from)
	return from
}
