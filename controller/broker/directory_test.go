package broker

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"vksfleet.dev/fleet/mcs/names"
)

func TestReadDirectory(t *testing.T) {
	entry := func(name, id string) corev1.ConfigMap {
		e := *DirectoryEntry(id)
		e.Name = name
		return e
	}
	valid := func(id string) corev1.ConfigMap { return entry(names.BrokerNamespace(id), id) }
	long := strings.Repeat("a", 64)
	tests := []struct {
		name    string
		entries []corev1.ConfigMap
		want    []string // namespaces
		refused int
	}{
		{"none", nil, nil, 0},
		{"sorted by namespace", []corev1.ConfigMap{valid("zeta"), valid("alpha")}, []string{names.BrokerNamespace("alpha"), names.BrokerNamespace("zeta")}, 0},
		{"an entry pointing at another namespace", []corev1.ConfigMap{entry("kube-system", "alpha"), valid("beta")}, []string{names.BrokerNamespace("beta")}, 1},
		{"an entry naming another member's namespace", []corev1.ConfigMap{entry(names.BrokerNamespace("beta"), "alpha")}, nil, 1},
		{"an invalid id", []corev1.ConfigMap{entry(names.BrokerNamespace("Bad_ID"), "Bad_ID")}, nil, 1},
		{"a label too long for DNS", []corev1.ConfigMap{entry(names.BrokerNamespace(long), long)}, nil, 1},
		{"no id", []corev1.ConfigMap{{}}, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			members, refused := ReadDirectory(tt.entries)
			var got []string
			for _, m := range members {
				if m.Namespace != names.BrokerNamespace(m.ClusterID) {
					t.Errorf("member %s has namespace %s", m.ClusterID, m.Namespace)
				}
				got = append(got, m.Namespace)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("namespaces %v, want %v", got, tt.want)
			}
			if len(refused) != tt.refused {
				t.Errorf("refused %q, want %d", refused, tt.refused)
			}
		})
	}
}

func TestReadDirectoryRegions(t *testing.T) {
	withRegion := func(id, region string) corev1.ConfigMap {
		e := *RegionEntry(id, region)
		e.Data[regionKey] = region
		return e
	}
	tests := []struct {
		name    string
		entry   corev1.ConfigMap
		want    string
		refused int
	}{
		{"valid", *RegionEntry("alpha", "eu-west"), "eu-west", 0},
		{"absent", *RegionEntry("alpha", ""), "", 0},
		{"empty", withRegion("alpha", ""), "", 0},
		{"no label value", withRegion("alpha", "eu west"), "", 1},
		{"too long", withRegion("alpha", strings.Repeat("r", 64)), "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			members, refused := ReadDirectory([]corev1.ConfigMap{tt.entry})
			if len(members) != 1 || members[0].ClusterID != "alpha" {
				t.Fatalf("members %+v, want alpha listed whatever its region", members)
			}
			if members[0].Region != tt.want {
				t.Errorf("region %q, want %q", members[0].Region, tt.want)
			}
			if len(refused) != tt.refused {
				t.Errorf("refused %q, want %d", refused, tt.refused)
			}
		})
	}
}

func TestReadDirectoryLayout(t *testing.T) {
	other := *DirectoryEntry("gamma")
	other.Data[layoutKey] = "something-else"
	members, refused := ReadDirectory([]corev1.ConfigMap{*MarkedEntry("alpha"), *DirectoryEntry("beta"), other})
	if len(refused) != 0 {
		t.Fatalf("refused %q", refused)
	}
	got := map[string]bool{}
	for _, m := range members {
		got[m.ClusterID] = m.Records
	}
	// Only the mark this release writes counts: an unknown layout is read as the previous release's, which every
	// member of this release still writes too.
	if want := map[string]bool{"alpha": true, "beta": false, "gamma": false}; !maps.Equal(got, want) {
		t.Errorf("records %v, want %v", got, want)
	}
}
