package clusterset

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
