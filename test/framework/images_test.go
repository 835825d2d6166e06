package framework

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCheckFresh(t *testing.T) {
	root := t.TempDir()
	old := time.Now().Add(-time.Hour)
	write := func(rel string, mtime time.Time) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	write("controller/merge/merge.go", old)
	write("bin/images/coredns.tar", old.Add(time.Minute))
	image, err := os.Stat(filepath.Join(root, "bin/images/coredns.tar"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkFresh(root, image); err != nil {
		t.Fatalf("image newer than every source: %v", err)
	}
	// Tests and test data are not in the image.
	write("controller/merge/merge_test.go", time.Now())
	write("plugin/multicluster/testdata/fuzz/x", time.Now())
	if err := checkFresh(root, image); err != nil {
		t.Fatalf("only tests changed: %v", err)
	}
	write("controller/merge/merge.go", time.Now())
	if err := checkFresh(root, image); err == nil || !strings.Contains(err.Error(), "controller/merge/merge.go") {
		t.Fatalf("image older than controller/merge/merge.go: %v, want an error naming it", err)
	}
}
