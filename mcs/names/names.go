// Package names derives every object name and label the controller writes, on the broker and in members, from
// cluster ids and service keys; the CoreDNS plugin and kubectl-mcs read them through the same names. Cluster ids
// may hold dots and run to 127 characters, so they cannot be used as namespace names or label values as they are;
// the functions here keep the results valid, unique and stable.
package names

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// KeyPrefix starts the key of every label and annotation of this project: exported metadata may not carry it
// (a member could otherwise steer what others import), so the controller refuses keys with it.
const KeyPrefix = "mcs.vksfleet.dev/"

// Labels and annotations the controller writes and reads; the CoreDNS plugin reads some of them.
const (
	// ManagedBy is the endpointslice.kubernetes.io/managed-by value on imported slices and the
	// app.kubernetes.io/managed-by value on everything else the controller creates.
	ManagedBy = "mcs-controller.vksfleet.dev"
	// LabelManagedBy marks the controller's objects on the broker and its derived Services.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelImportManagedBy marks, with the value ManagedBy, the ServiceImports the controller creates, so that it
	// never writes or deletes another implementation's (Submariner Lighthouse, Cilium). A ServiceImport carries the
	// exportedLabels of the winning export, which may hold app.kubernetes.io/managed-by: this key is under
	// KeyPrefix, which exported metadata may not carry.
	LabelImportManagedBy = "mcs.vksfleet.dev/managed-by"
	// LabelServiceNamespace carries the exported service's namespace on broker objects, which live in the
	// member's broker namespace instead.
	LabelServiceNamespace = "mcs.vksfleet.dev/service-namespace"
	// AnnotationClusterID carries the full cluster id wherever a label can only hold LabelValue(id).
	AnnotationClusterID = "mcs.vksfleet.dev/cluster-id"
	// AnnotationCredential, on a member's broker Lease, names the broker credential the member's controller uses
	// (brokercred.Credential.ID: a bound Secret's name or a hash, never the credential), so that an operator who
	// rotates it sees when the new one took before revoking the old.
	AnnotationCredential = "mcs.vksfleet.dev/credential"
	// AnnotationUnreachable, on a member's broker Lease, lists (comma-separated, sorted) the members whose
	// endpoints do not answer from that member's data-plane probe, so that `kubectl mcs status` shows each
	// member's data plane as every other member sees it. Absent when all answer.
	AnnotationUnreachable = "mcs.vksfleet.dev/unreachable"
	// AnnotationReachable, on a controller replica's probe record (a Lease mcs-probe-<pod> in the controller's
	// namespace), lists (comma-separated, sorted) the members whose data plane that replica's probes find reachable,
	// so that the elected replica tells a replica that has not judged a member yet (one just started) from one that
	// finds it reachable. Present, empty when it finds none, on every record since it was introduced.
	AnnotationReachable = "mcs.vksfleet.dev/reachable"
	// AnnotationProbeAddresses, on a member's broker Lease, lists (comma-separated host:port, sorted) the addresses
	// of its controller replicas that other members' data-plane probes connect to: pods in the controller's own
	// namespace, which no namespace user of the member writes, unlike its exported endpoints. On a replica's
	// record (LabelProbeReplica), that replica's own.
	AnnotationProbeAddresses = "mcs.vksfleet.dev/probe-addresses"
	// LabelProbeReplica marks the Lease each controller replica writes in the controller's namespace with its own
	// probes' verdicts (AnnotationUnreachable), its node (AnnotationNode) and its probe addresses, so that the
	// elected replica acts on a member's loss only when a replica on another node agrees.
	LabelProbeReplica = "mcs.vksfleet.dev/probe-replica"
	// AnnotationNode names, on a replica's record, the node the replica runs on.
	AnnotationNode = "mcs.vksfleet.dev/node"
	// AnnotationDecisions, on a member's broker Lease, is the JSON of what that member's controller decided about
	// the other members that their Leases cannot tell again (the data-plane verdicts, renewals seen off the
	// renewer's clock), so that the next process to lead it resumes from them. Absent when there is none.
	AnnotationDecisions = "mcs.vksfleet.dev/decisions"
	// AnnotationRecordsPublished, "true" on a member's MemberLease, says that its controller has published every
	// export it had at its start as records: `kubectl mcs join`, upgrading a member of the previous release, marks
	// it in the member directory only then, since the other members then read its records instead of its objects
	// of the previous layout.
	AnnotationRecordsPublished = "mcs.vksfleet.dev/records-published"
	// AnnotationExportCreated is the ServiceExport creationTimestamp (RFC 3339) on a broker export record.
	AnnotationExportCreated = "mcs.vksfleet.dev/export-created"
	// AnnotationExportedLabels is the JSON of the ServiceExport's spec.exportedLabels on a broker record.
	AnnotationExportedLabels = "mcs.vksfleet.dev/exported-labels"
	// AnnotationExportedAnnotations is the JSON of spec.exportedAnnotations on a broker record.
	AnnotationExportedAnnotations = "mcs.vksfleet.dev/exported-annotations"
	// AnnotationSlices is the number of EndpointSlices the exporting cluster publishes with a broker export record,
	// so that an importer knows when it has all of them.
	AnnotationSlices = "mcs.vksfleet.dev/slices"
	// AnnotationRegion is the exporting cluster's region on a broker export record.
	AnnotationRegion = "mcs.vksfleet.dev/region"
	// AnnotationDrain, set to "true" on a ServiceExport by an operator, drains that cluster's export: its
	// endpoints are used only when no other cluster has a ready endpoint. Its broker record carries it too.
	AnnotationDrain = "mcs.vksfleet.dev/drain"
	// AnnotationLocality is, on an imported ServiceImport, the JSON of the tiers this member uses (see
	// package locality): per node zone for kube-proxy's hints, and for the member's headless DNS answers.
	AnnotationLocality = "mcs.vksfleet.dev/locality"
	// LabelClusterLocalOf names, on a cluster-local Service and its EndpointSlices, the imported service they
	// reflect into cluster.local.
	LabelClusterLocalOf = "mcs.vksfleet.dev/cluster-local-of"
	// LabelMemberDirectory marks the ConfigMaps of the broker's member directory (see broker.DirectoryNamespace),
	// which `kubectl mcs join` writes and the controller reads.
	LabelMemberDirectory = "mcs.vksfleet.dev/member-directory"
	// LeaseName is the name of each member's Lease in its broker namespace.
	LeaseName = "member"
)

// The DNS vocabulary the controller, the CoreDNS plugin and kubectl-mcs share: the controller waits for the
// zone's answers before an import is Ready, the plugin serves it, and kubectl-mcs asks it; a copy of any of these
// in one of them would let the three drift apart.
const (
	// DNSZone is the clusterset's DNS zone (KEP-1645), without the final dot.
	DNSZone = "clusterset.local"
	// DNSVersionLabel is the label under the zone whose TXT record answers the schema version: a server that
	// answers dns-version.<zone> serves the zone, with or without services.
	DNSVersionLabel = "dns-version"
	// DNSSchemaVersion is the version of the DNS schema (the names and records of the zone) the plugin
	// implements, answered in dns-version.<zone> TXT, so that a client can tell which schema a server follows.
	DNSSchemaVersion = "1.0.0"
)

// ServiceDNSName is the clusterset name of a service, <service>.<namespace>.svc.clusterset.local, as users write
// it (a DNS question adds the final dot), in the case given: DNS compares names without case, and callers that key
// answers by name lower-case it.
func ServiceDNSName(namespace, service string) string {
	return service + "." + namespace + ".svc." + DNSZone
}

// DNSVersionName is the name whose TXT record answers DNSSchemaVersion, dns-version.clusterset.local, as users
// write it (a DNS question adds the final dot).
const DNSVersionName = DNSVersionLabel + "." + DNSZone

// maxLabel is the longest DNS label and label value.
const maxLabel = 63

// hash returns n hex digits of the SHA-256 of the parts joined by "/".
func hash(n int, parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "/")))
	return hex.EncodeToString(sum[:])[:n]
}

// brokerNamespacePrefix starts every broker namespace name.
const brokerNamespacePrefix = "mcs-member-"

// IsBrokerNamespace says whether a namespace holds a member's broker objects. When a member is itself the broker,
// its controller must neither export from nor import into these namespaces.
func IsBrokerNamespace(namespace string) bool {
	return strings.HasPrefix(namespace, brokerNamespacePrefix)
}

// BrokerNamespace is the namespace a member owns on the broker. It keeps a readable prefix of the id and adds a
// hash of the full id, so that ids differing only in dots or beyond the prefix never share a namespace.
func BrokerNamespace(clusterID string) string {
	readable := strings.ReplaceAll(clusterID, ".", "-")
	if len(readable) > 30 {
		readable = readable[:30]
	}
	return brokerNamespacePrefix + strings.Trim(readable, "-") + "-" + hash(10, clusterID)
}

// LabelValue is the cluster id as a label value: the id itself when it fits in 63 characters (ids are DNS
// subdomains, whose characters are all valid in label values), else a prefix and a hash of it.
func LabelValue(clusterID string) string {
	if len(clusterID) <= maxLabel {
		return clusterID
	}
	return strings.TrimRight(clusterID[:maxLabel-11], "-.") + "-" + hash(10, clusterID)
}

// RecordName is the name of a service's export record in its exporter's broker namespace. Namespace and service
// names are DNS labels, so joining them with a dot is unique and a valid object name.
func RecordName(namespace, service string) string { return namespace + "." + service }

// maxObjectName is the longest name of an object (an RFC 1123 subdomain).
const maxObjectName = 253

// BrokerSliceName is the name of an exported EndpointSlice on the broker: the record name, the source slice's
// name and, for the parts of a source slice split at 100 endpoints, the part's index. A source name with a dot
// would make the parts ambiguous ("x.1" is also part 1 of "x"), and a long one would not fit: such a name is
// replaced by a hash of it.
func BrokerSliceName(namespace, service, sourceSlice string, part int) string {
	src := sourceSlice
	if strings.Contains(src, ".") || len(RecordName(namespace, service))+len(src)+len(".")+len(".1000") > maxObjectName {
		src = "h-" + hash(20, sourceSlice)
	}
	name := RecordName(namespace, service) + "." + src
	if part > 0 {
		name += "." + strconv.Itoa(part)
	}
	return name
}

// DerivedServiceName is the name of the selector-less Service that holds an import's cluster-set IPs. It starts
// with a prefix of the service name, for operators, and ends with a hash of the service key, for uniqueness.
func DerivedServiceName(namespace, service string) string {
	prefix := service
	if len(prefix) > 40 {
		prefix = prefix[:40]
	}
	return prefix + "-mcs-" + hash(10, namespace, service)
}

// clusterLocalSuffix ends the name of every cluster-local Service and EndpointSlice. It keeps a cluster-local
// Service apart from the Service of the same name as the import, which exporting clusters have and users keep
// their own meaning for, and from derived Services and imported slices, whose names end in hex digits.
const clusterLocalSuffix = "-clusterset"

// ClusterLocalServiceName is the name of the Service that reflects an import into cluster.local, which stock DNS
// answers as <name>.<namespace>.svc.cluster.local: the service name and "-clusterset" ("web" gives
// "web-clusterset"). A service name longer than 52 characters would pass the 63 of a Service name: its first 41
// characters (without trailing dashes), a dash and 10 hex digits of the SHA-256 of "<namespace>/<service>" come
// before the suffix instead.
func ClusterLocalServiceName(namespace, service string) string {
	if len(service)+len(clusterLocalSuffix) <= maxLabel {
		return service + clusterLocalSuffix
	}
	prefix := strings.TrimRight(service[:maxLabel-len(clusterLocalSuffix)-11], "-")
	return prefix + "-" + hash(10, namespace, service) + clusterLocalSuffix
}

// IsClusterLocalServiceName says whether a Service's name has the form of a cluster-local Service's, so that a
// Service of someone else's that takes such a name can be matched with the import that wants it.
func IsClusterLocalServiceName(name string) bool { return strings.HasSuffix(name, clusterLocalSuffix) }

// ClusterLocalSliceName is the name of a cluster-local Service's EndpointSlice made from base: the imported slice
// it copies, or the service name and the address family of the ClusterSetIPs it holds.
func ClusterLocalSliceName(base string) string { return base + clusterLocalSuffix }

// ImportedSliceName is the name of an EndpointSlice imported from the given cluster's broker slice.
func ImportedSliceName(service, clusterID, brokerSlice string) string {
	prefix := service
	if len(prefix) > 40 {
		prefix = prefix[:40]
	}
	return prefix + "-" + hash(12, clusterID, brokerSlice)
}
