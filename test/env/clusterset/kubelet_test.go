package clusterset

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

func TestCgroupCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   []string
		wantErr string
	}{
		{name: "every v1 hierarchy", files: hierarchyFiles(cgroupHierarchies...)},
		{name: "memory and pids missing", files: hierarchyFiles("cpu", "cpuacct", "cpuset", "devices"), wantErr: "missing: memory, pids"},
		{name: "nothing mounted", wantErr: "missing: cpu, cpuacct, cpuset, memory, pids, devices"},
		{name: "cgroup v2", files: []string{"cgroup.controllers"}, wantErr: "cgroup v2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(root, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := cgroupCheck(root)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("cgroupCheck: %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("cgroupCheck: %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

func hierarchyFiles(names ...string) []string {
	var files []string
	for _, n := range names {
		files = append(files, filepath.Join(n, "cgroup.procs"))
	}
	return files
}

// TestNodePatch applies nodePatch to the Node as its kubelet registers it, and as it is once patched, the way the API
// server applies a strategic merge patch: the zone and region labels join the kubelet's own, and the pod CIDRs are
// set, or set again to the same values.
func TestNodePatch(t *testing.T) {
	n := &Node{Name: "cluster-a-node-0", Zone: "cluster-a-zone-0", Region: "region-1",
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24"), netip.MustParsePrefix("fd00:10:1::/80")}}
	registered := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{corev1.LabelHostname: n.Name}}}
	patched := registered
	patched.Labels = map[string]string{corev1.LabelHostname: n.Name, corev1.LabelTopologyZone: n.Zone, corev1.LabelTopologyRegion: n.Region}
	patched.Spec.PodCIDR, patched.Spec.PodCIDRs = "10.1.0.0/24", []string{"10.1.0.0/24", "fd00:10:1::/80"}
	patch, err := nodePatch(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		node corev1.Node
	}{
		{"as registered", registered},
		{"already patched", patched},
	} {
		t.Run(tc.name, func(t *testing.T) {
			original, err := json.Marshal(tc.node)
			if err != nil {
				t.Fatal(err)
			}
			out, err := strategicpatch.StrategicMergePatch(original, patch, corev1.Node{})
			if err != nil {
				t.Fatal(err)
			}
			var got corev1.Node
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range patched.Labels {
				if got.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, got.Labels[k], v)
				}
			}
			if got.Spec.PodCIDR != patched.Spec.PodCIDR || !slices.Equal(got.Spec.PodCIDRs, patched.Spec.PodCIDRs) {
				t.Errorf("pod CIDRs %q %v, want %q %v", got.Spec.PodCIDR, got.Spec.PodCIDRs, patched.Spec.PodCIDR, patched.Spec.PodCIDRs)
			}
		})
	}
}
