package framework

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// A build is keyed by what it is made of: the module's sources and embedded files, not its tests; the cache builds
// each key once, and keeps the last used builds and those a process holds.
func TestBuildCached(t *testing.T) {
	root, cache := t.TempDir(), t.TempDir()
	write := func(p, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "go.mod"), "module example.test/m\n\ngo 1.26\n")
	write(filepath.Join(root, "go.sum"), "")
	write(filepath.Join(root, "cmd/hello/main.go"), "package main\n\nimport _ \"embed\"\n\n//go:embed greeting.txt\nvar greeting string\n\nfunc main() { println(greeting) }\n")
	write(filepath.Join(root, "cmd/hello/greeting.txt"), "hello")
	pkgs := []string{"example.test/m/cmd/hello"}
	key := func() string {
		t.Helper()
		k, err := buildKey(root, pkgs)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	first := key()
	write(filepath.Join(root, "cmd/hello/main_test.go"), "package main\n")
	if key() != first {
		t.Error("a test file changed the key")
	}
	write(filepath.Join(root, "cmd/hello/greeting.txt"), "hi")
	second := key()
	if second == first {
		t.Error("an embedded file did not change the key")
	}

	dir, err := buildCached(root, cache, pkgs)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(dir) != second {
		t.Errorf("build in %s, want the folder %s", dir, second)
	}
	bin, err := os.Stat(filepath.Join(dir, "hello"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := buildCached(root, cache, pkgs)
	if err != nil || again != dir {
		t.Fatalf("second build: %s, %v; want %s", again, err, dir)
	}
	if fi, err := os.Stat(filepath.Join(dir, "hello")); err != nil || !os.SameFile(fi, bin) || !fi.ModTime().Equal(bin.ModTime()) {
		t.Errorf("the cached build was built again: %v", err)
	}

	// Older builds beyond keepBuilds go, unless a process holds them.
	old := time.Now().Add(-time.Hour)
	for i, name := range []string{"old0", "old1", "old2", "old3"} {
		write(filepath.Join(cache, name, inUse), "")
		at := old.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(filepath.Join(cache, name), at, at); err != nil {
			t.Fatal(err)
		}
	}
	holder, err := os.Open(filepath.Join(cache, "old0", inUse))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	if err := prune(cache); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(cache)
	for _, e := range entries {
		if e.IsDir() {
			left = append(left, e.Name())
		}
	}
	want := []string{second, "old0", "old2", "old3"}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("after prune: %v, want %v (the 3 last used and the held old0)", left, want)
	}
}
