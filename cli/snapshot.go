package cli

import (
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Snapshot is what the plugin read from the clusterset at one moment: plain data that status, services and
// diagnose evaluate without a client.
type Snapshot struct {
	// Members are the broker's member clusters: those a context reaches, sorted by context, then those none
	// reaches, sorted by cluster id.
	Members []Member
	// Broker is the broker, always read: without it the members are unknown.
	Broker Broker
	// Now is the local clock when the snapshot was taken.
	Now time.Time
}

// Member is one member cluster as read through its kubeconfig context.
type Member struct {
	// Context is the kubeconfig context, the member's name in every output; "" when no context of the
	// kubeconfig reaches the member, which is then known only by its cluster id on the broker.
	Context string
	// Error says why the member could not be read; the fields read from it are then empty.
	Error string
	// ClusterID and ClusterSet are the values of the KEP-2149 ClusterProperties.
	ClusterID, ClusterSet string
	// ClockOffset is the API server's clock minus the local clock, from its Date header (1 s resolution).
	ClockOffset time.Duration
	// MissingAPIs are the resources the project needs that the member does not serve, such as
	// "serviceexports.multicluster.x-k8s.io".
	MissingAPIs []string
	// ControllerVersion is the mcs-controller's version as its running pods report it (runningVersion), where the
	// member runs it as a Deployment; empty if unknown. DNSVersion is the same of our CoreDNS: mcs-dns in
	// mcs-system (standalone mode), else kube-system/coredns where it runs our image (replace mode).
	ControllerVersion, DNSVersion string
	// ClusterLocal says the controller runs in the cluster-local DNS mode (--cluster-local-services): it reflects
	// every import into cluster.local as <svc>-clusterset, and the member's DNS need not serve clusterset.local.
	ClusterLocal bool
	// Corefile is the Corefile of the ConfigMap kube-system/coredns; nil when there is none.
	Corefile *string
	// CoreDNSImage is the image of the Deployment kube-system/coredns; "" when there is none.
	CoreDNSImage string
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
	// DNSError says why the DNS could not be asked at all (the --in-cluster probe's pod did not run).
	DNSError string
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
	// Context is the kubeconfig context of the broker.
	Context string
	// ClockOffset is the broker's clock minus the local clock.
	ClockOffset time.Duration
	// MissingAPIs are the resources the broker needs and does not serve.
	MissingAPIs []string
	// Records, Slices and Leases are every member's export records, exported slices and Leases.
	Records []mcsv1beta1.ServiceImport
	Slices  []discoveryv1.EndpointSlice
	Leases  []coordinationv1.Lease
	// Members are the cluster ids that have a namespace or a Lease on the broker, sorted.
	Members []string
}

// reachable reports whether the member was read.
func (m *Member) reachable() bool { return m.Context != "" && m.Error == "" }

// ourCoreDNS reports whether the member's CoreDNS Deployment runs our build, the only one with the multicluster
// plugin; the deploy manifests name its image ghcr.io/vksfleet/coredns.
func (m *Member) ourCoreDNS() bool { return strings.Contains(m.CoreDNSImage, "vksfleet") }

// inClusterDNS reports whether the member's DNS is asked at its kube-dns Service's ClusterIP, which a machine
// outside the cluster rarely reaches.
func (m *Member) inClusterDNS() bool { return m.DNSSource == kubeDNSSource }

// name is how outputs name the member: its context, else its cluster id.
func (m *Member) name() string {
	if m.Context == "" {
		return m.ClusterID
	}
	return m.Context
}

// hasNamespace reports whether the member has the namespace.
func (m *Member) hasNamespace(ns string) bool { return slices.Contains(m.Namespaces, ns) }
