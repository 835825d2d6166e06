package broker

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"vksfleet.dev/fleet/mcs/clusterid"
	"vksfleet.dev/fleet/mcs/names"
)

// The member directory tells each member which broker namespaces to read. A member's identity may read only the
// members' namespaces it was granted (kubectl mcs join grants every pair of members), never the rest of the
// broker: where the broker is itself a member, its own workloads' EndpointSlices, ServiceImports and Leases stay
// its own. RBAC cannot list "the namespaces I may read", so `join` lists each member in the directory: one
// ConfigMap per member in DirectoryNamespace, named as the member's broker namespace and holding its cluster id.
// The entry holds the member's region too, as join found it: importers rank the member's endpoints by it, and a
// member cannot write it, whereas it writes its export records, where it could claim any region.
const (
	// DirectoryNamespace is the broker namespace of the clusterset's own objects (`kubectl mcs broker init`
	// creates it): the joiner's identity and the member directory.
	DirectoryNamespace = "mcs-broker"
	// directoryKey is the key of the cluster id in an entry.
	directoryKey = "clusterID"
	// regionKey is the key of the member's region in an entry; absent when join found none.
	regionKey = "region"
	// layoutKey marks a member whose controller writes the records of api/broker/v1alpha1 (layoutRecords): the
	// other members read those. An entry without it is a previous release's member, read in that release's
	// layout (ServiceImports, EndpointSlices and a Lease in its namespace). This release's join marks a member
	// once its controller has written its records (MarkedEntry); the previous release's join, which applies the
	// entry as the same field manager without it, takes the mark away when it rolls a member back.
	layoutKey     = "layout"
	layoutRecords = "records"
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

// MarkedEntry is the entry for the member clusterID marked as writing records (layoutKey).
func MarkedEntry(clusterID string) *corev1.ConfigMap {
	e := DirectoryEntry(clusterID)
	e.Data[layoutKey] = layoutRecords
	return e
}

// Marked says whether a directory entry marks its member as writing records.
func Marked(e *corev1.ConfigMap) bool { return e.Data[layoutKey] == layoutRecords }

// RegionEntry is the entry for the member clusterID with its region, none when region is "". Join applies it as
// a field manager of its own, so that what applies DirectoryEntry alone (granting reads again) leaves the region
// as it was.
func RegionEntry(clusterID, region string) *corev1.ConfigMap {
	e := DirectoryEntry(clusterID)
	if region != "" {
		e.Data[regionKey] = region
	}
	return e
}

// ValidRegion checks a member's region ("" for none): importers compare it with their own region ClusterProperty,
// so it must be a label value, as a node's topology.kubernetes.io/region is.
func ValidRegion(region string) error {
	if msgs := validation.IsValidLabelValue(region); len(msgs) > 0 {
		return fmt.Errorf("region %q is not a label value: %s", region, strings.Join(msgs, "; "))
	}
	return nil
}

// Listed is one member the directory lists.
type Listed struct {
	// ClusterID is the member's full id.
	ClusterID string
	// Namespace is its broker namespace.
	Namespace string
	// Region is its region as join recorded it, "" for none.
	Region string
	// Records says whether it writes records (MarkedEntry); false for a member of the previous release.
	Records bool
}

// ReadDirectory reads the directory's entries: the members they list, sorted by namespace, and why each entry that is
// not a member's was refused. The joiner writes the directory, but an entry is still checked before a member
// reads a namespace for it: its id must be valid and its name that id's broker namespace, so that no entry can
// point a member at any other namespace. A region that is no label value is left out (said in refused): the
// member is listed without one.
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
		region := e.Data[regionKey]
		if err := ValidRegion(region); err != nil {
			refused = append(refused, fmt.Sprintf("directory entry %s: %v: the member is listed in no region", e.Name, err))
			region = ""
		}
		members = append(members, Listed{ClusterID: id, Namespace: e.Name, Region: region, Records: Marked(&e)})
	}
	slices.SortFunc(members, func(a, b Listed) int { return strings.Compare(a.Namespace, b.Namespace) })
	return members, refused
}
