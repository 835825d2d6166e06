package mcsctl

import (
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Snapshot is what the plugin read from the clusterset at one moment: plain data that status, services and
// diagnose evaluate without a client.
type Snapshot struct {
	// Members are the member clusters, sorted by context.
	Members []Member
	// Broker is the broker; its Context is empty when no broker context was found.
	Broker Broker
	// Now is the local clock when the snapshot was taken.
	Now time.Time
}

// Member is one member cluster as read through its kubeconfig context.
type Member struct {
	// Context is the kubeconfig context, the member's name in every output.
	Context string
	// Error says why the member could not be read; the other fields are then empty.
	Error string
	// ClusterID and ClusterSet are the values of the KEP-2149 ClusterProperties; empty when absent.
	ClusterID, ClusterSet string
	// ClockOffset is the API server's clock minus the local clock, from its Date header (1 s resolution).
	ClockOffset time.Duration
	// MissingAPIs are the resources the project needs that the member does not serve, such as
	// "serviceexports.multicluster.x-k8s.io".
	MissingAPIs []string
	// ControllerVersion is the mcs-controller's version where the member runs it as a Deployment; empty if unknown.
	ControllerVersion string
	// Corefile is the Corefile of the ConfigMap kube-system/coredns; nil when there is none.
	Corefile *string
	// DNS is the address its DNS server is asked at, and DNSSource where that address came from.
	DNS, DNSSource string
	// Namespaces are the member's namespace names.
	Namespaces []string
	// Exports, Imports and Slices are the member's ServiceExports, its ServiceImports, and the EndpointSlices
	// the controller imported; DerivedServices are the Services holding the ClusterSetIPs.
	Exports         []mcsv1beta1.ServiceExport
	Imports         []mcsv1beta1.ServiceImport
	Slices          []discoveryv1.EndpointSlice
	DerivedServices []corev1.Service
	// DNSAnswers are the DNS probes made at DNS, by query name and type ("web.demo.svc.clusterset.local. A").
	DNSAnswers map[string]DNSAnswer
}

// DNSAnswer is the outcome of one DNS query.
type DNSAnswer struct {
	// Rcode is the response code, such as NOERROR or NXDOMAIN; empty when no answer came.
	Rcode string `json:"rcode,omitempty"`
	// Records are the answer section's values: addresses, or TXT strings.
	Records []string `json:"records,omitempty"`
	// Error says why no answer came.
	Error string `json:"error,omitempty"`
}

// Broker is the broker API server's content that concerns the plugin.
type Broker struct {
	// Context is the kubeconfig context of the broker; empty when there is none.
	Context string
	// Error says why the broker could not be read.
	Error string
	// ClockOffset is the broker's clock minus the local clock.
	ClockOffset time.Duration
	// MissingAPIs are the resources the broker needs and does not serve.
	MissingAPIs []string
	// Records, Slices and Leases are every member's export records, exported slices and Leases.
	Records []mcsv1beta1.ServiceImport
	Slices  []discoveryv1.EndpointSlice
	Leases  []coordinationv1.Lease
}

// reachable reports whether the member was read.
func (m *Member) reachable() bool { return m.Error == "" }

// hasNamespace reports whether the member has the namespace.
func (m *Member) hasNamespace(ns string) bool { return slices.Contains(m.Namespaces, ns) }
