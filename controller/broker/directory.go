package broker

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"vksfleet.dev/fleet/mcs/clusterid"
	"vksfleet.dev/fleet/mcs/names"
)

// The member directory tells each member which broker namespaces to read. A member's identity may read only the
// members' namespaces it was granted (kubectl mcs join grants every pair of members), never the rest of the
// broker: where the broker is itself a member, its own workloads' EndpointSlices, ServiceImports and Leases stay
// its own. RBAC cannot list "the namespaces I may read", so `join` lists each member in the directory: one
// ConfigMap per member in DirectoryNamespace, named as the member's broker namespace and holding its cluster id.
const (
	// DirectoryNamespace is the broker namespace of the clusterset's own objects (`kubectl mcs broker init`
	// creates it): the joiner's identity and the member directory.
	DirectoryNamespace = "mcs-broker"
	// directoryKey is the key of the cluster id in an entry.
	directoryKey = "clusterID"
)

// DirectorySelector selects the directory's entries.
var DirectorySelector = labels.SelectorFromSet(labels.Set{names.LabelMemberDirectory: "true"})

// DirectoryEntry is the member directory's entry for the member clusterID.
func DirectoryEntry(clusterID string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: DirectoryNamespace, Name: names.BrokerNamespace(clusterID),
			Labels: map[string]string{names.LabelMemberDirectory: "true", names.LabelManagedBy: "kubectl-mcs"},
		},
		Data: map[string]string{directoryKey: clusterID},
	}
}

// Listed is one member the directory lists.
type Listed struct {
	// ClusterID is the member's full id.
	ClusterID string
	// Namespace is its broker namespace.
	Namespace string
}

// ReadDirectory reads the directory's entries: the members they list, sorted by namespace, and why each entry that is
// not a member's was refused. The joiner writes the directory, but an entry is still checked before a member
// reads a namespace for it: its id must be valid and its name that id's broker namespace, so that no entry can
// point a member at any other namespace.
func ReadDirectory(entries []corev1.ConfigMap) (members []Listed, refused []string) {
	for _, e := range entries {
		id := e.Data[directoryKey]
		if err := clusterid.Validate(id); err != nil {
			refused = append(refused, fmt.Sprintf("directory entry %s: %v", e.Name, err))
			continue
		}
		if ns := names.BrokerNamespace(id); e.Name != ns {
			refused = append(refused, fmt.Sprintf("directory entry %s names cluster %q, whose broker namespace is %s", e.Name, id, ns))
			continue
		}
		members = append(members, Listed{ClusterID: id, Namespace: e.Name})
	}
	slices.SortFunc(members, func(a, b Listed) int { return strings.Compare(a.Namespace, b.Namespace) })
	return members, refused
}
