package framework

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/proc"
)

// Commands are this tree's programs that suites and benchmarks run as processes of this machine: our CoreDNS, the
// mcs-controller and kubectl-mcs (a fleet without nodes runs the first two; with nodes, it runs them from the
// images `make images` saves).
var Commands = []string{
	"vksfleet.dev/fleet/cmd/coredns",
	"vksfleet.dev/fleet/cmd/controller",
	"vksfleet.dev/fleet/cmd/kubectl-mcs",
}

// buildFlags are the flags of Build's `go build`: without the git state, which a build shared by every commit
// of the same sources must not claim. The rest are go build's defaults, so that it reuses what `go test`, `go vet`
// and `make build` compiled (-trimpath would compile everything again); its binaries' stack traces name the work
// tree that built them.
var buildFlags = []string{"-buildvcs=false"}

// Build returns a folder holding this tree's build of Commands, each binary named after its package's folder
// (coredns, controller, kubectl-mcs). Every suite's programs come from here, so that a `make test` run, whose
// suites are test processes of their own and run several at once, links them once, not once per suite; a suite
// run alone (`go test ./test/e2e/<suite>`) uses the same build.
//
// The builds are kept in the repository's .cache/programs/, each in a folder named after a hash of everything it
// is made of: the Go, C and embedded files of every package of this module it links, go.mod and go.sum (which pin
// every other module), the go command's version and environment, and buildFlags. An edit therefore makes the next
// Build build anew, and a build is never taken for another. A process builds into a temporary folder and renames
// it into place under a lock that other processes wait on, so that concurrent test processes build once and never
// see half a build. Build holds a shared lock on the build it returns until the process exits, and removes the
// builds beyond the keepBuilds last used that no process holds. Only the node images (static,
// test/env/nodeimages), a previous release (from its own tree, BuildRelease), stock CoreDNS (the DNS benchmark)
// and the upstream conformance suite build elsewhere.
func Build() (string, error) { return build() }

var build = sync.OnceValues(func() (string, error) {
	root, err := clusterset.RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := buildCached(root, filepath.Join(root, ".cache", "programs"), Commands)
	if err != nil {
		return "", fmt.Errorf("building %s: %w", strings.Join(Commands, " "), err)
	}
	return dir, nil
})

// BuildTest is Build for a test: a failed build fails t.
func BuildTest(t testing.TB) string {
	t.Helper()
	dir, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// keepBuilds is how many of the last used builds stay in the cache whether or not a process holds them: enough for
// suites run one after another, or work trees that share .cache, to find theirs.
const keepBuilds = 3

// inUse is the lock file in each build's folder that the processes using the build hold shared.
const inUse = ".in-use"

// held keeps the lock on the build this process uses: the file stays open, so the lock holds, until it exits.
var held *os.File

// buildCached returns the folder of cache that holds the build of pkgs from root's sources, building it if the
// cache lacks it, and holds it for this process.
func buildCached(root, cache string, pkgs []string) (string, error) {
	key, err := buildKey(root, pkgs)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(cache, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	dir := filepath.Join(cache, key)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := buildInto(root, cache, dir, pkgs); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	// The folder's time is its last use, which prune goes by.
	now := time.Now()
	if err := os.Chtimes(dir, now, now); err != nil {
		return "", err
	}
	if held, err = os.Open(filepath.Join(dir, inUse)); err != nil {
		return "", err
	}
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_SH); err != nil {
		return "", err
	}
	return dir, prune(cache)
}

// buildInto builds pkgs into a temporary folder of cache and renames it to dir; cache's lock is held.
func buildInto(root, cache, dir string, pkgs []string) error {
	tmp, err := os.MkdirTemp(cache, "building-")
	if err != nil {
		return err
	}
	cmd := exec.Command("go", append(append([]string{"build"}, buildFlags...), append([]string{"-o", tmp + "/"}, pkgs...)...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return errors.Join(fmt.Errorf("go build: %v\n%s", err, out), os.RemoveAll(tmp))
	}
	if err := os.WriteFile(filepath.Join(tmp, inUse), nil, 0o644); err != nil {
		return errors.Join(err, os.RemoveAll(tmp))
	}
	if err := os.Rename(tmp, dir); err != nil {
		return errors.Join(err, os.RemoveAll(tmp))
	}
	return nil
}

// buildKey hashes what `go build` of pkgs in root is made of (see Build).
func buildKey(root string, pkgs []string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "flags %q\npackages %q\n", buildFlags, pkgs)
	env := exec.Command("go", "env", "GOVERSION", "GOOS", "GOARCH", "GOAMD64", "GOFLAGS", "CGO_ENABLED", "GOEXPERIMENT")
	env.Dir = root
	out, err := env.Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	fmt.Fprintf(h, "env %q\n", out)
	list := exec.Command("go", append([]string{"list", "-deps",
		"-json=Dir,Module,GoFiles,CgoFiles,CFiles,CXXFiles,HFiles,SFiles,SysoFiles,EmbedFiles"}, pkgs...)...)
	list.Dir = root
	var stderr strings.Builder
	list.Stderr = &stderr
	out, err = list.Output()
	if err != nil {
		return "", fmt.Errorf("go list: %v\n%s", err, stderr.String())
	}
	files := []string{"go.mod", "go.sum"}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			Dir    string
			Module *struct{ Main bool }

			GoFiles, CgoFiles, CFiles, CXXFiles, HFiles, SFiles, SysoFiles, EmbedFiles []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("go list: %w", err)
		}
		// The standard library is the go command's version; other modules are pinned by go.sum.
		if p.Module == nil || !p.Module.Main {
			continue
		}
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			return "", err
		}
		for _, names := range [][]string{p.GoFiles, p.CgoFiles, p.CFiles, p.CXXFiles, p.HFiles, p.SFiles, p.SysoFiles, p.EmbedFiles} {
			for _, name := range names {
				files = append(files, filepath.Join(rel, name))
			}
		}
	}
	slices.Sort(files)
	for _, name := range slices.Compact(files) {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "file %q %d\n", name, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// prune removes the cache's builds beyond the keepBuilds last used that no process holds, and what a build cut
// short left; the cache's lock is held.
func prune(cache string) error {
	entries, err := os.ReadDir(cache)
	if err != nil {
		return err
	}
	var builds []cached
	var errs []error
	for _, e := range entries {
		switch {
		case !e.IsDir():
		case strings.HasPrefix(e.Name(), "building-"):
			// Only a build under the lock writes one, and this process holds the lock.
			errs = append(errs, os.RemoveAll(filepath.Join(cache, e.Name())))
		default:
			fi, err := e.Info()
			if err != nil {
				errs = append(errs, err)
				continue
			}
			builds = append(builds, cached{name: e.Name(), used: fi.ModTime()})
		}
	}
	for _, name := range unused(builds) {
		errs = append(errs, removeUnheld(filepath.Join(cache, name)))
	}
	return errors.Join(errs...)
}

// cached is a build in the cache and its last use.
type cached struct {
	name string
	used time.Time
}

// unused names the builds beyond the keepBuilds last used, the candidates for removal.
func unused(builds []cached) []string {
	builds = slices.Clone(builds)
	slices.SortFunc(builds, func(a, b cached) int { return b.used.Compare(a.used) })
	var out []string
	for _, b := range builds[min(keepBuilds, len(builds)):] {
		out = append(out, b.name)
	}
	return out
}

// removeUnheld removes the build in dir unless a process holds it.
func removeUnheld(dir string) error {
	f, err := os.Open(filepath.Join(dir, inUse))
	if err != nil {
		// Not a build of ours: left alone.
		return nil
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); errors.Is(err, syscall.EWOULDBLOCK) {
		return nil
	} else if err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// BuildPackages builds the main packages pkgs (import paths) into dir, each binary named after its package's
// folder, in one `go build`; it must run inside the module. It is for programs outside Commands, such as stock
// CoreDNS for the DNS benchmark.
func BuildPackages(dir string, pkgs ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
	return nil
}

// StartTest starts, for t, a fleet of the given number of members with nodes nodes each and a 5 s lease grace,
// running this tree's Build; the processes' output is shown if t fails, and t's cleanup stops the fleet. It
// returns the fleet and the file of the processes' output. The tune functions change those options before the
// start (Options.Monitoring, say).
func StartTest(t testing.TB, members, nodes int, tune ...func(*Options)) (*Fleet, *os.File) {
	t.Helper()
	log := proc.TestLog(t)
	opts := Options{
		ClusterSet: clusterset.Options{Members: clusterset.MemberNames(members), Nodes: nodes},
		BinDir:     BuildTest(t), LeaseGrace: 5 * time.Second, Log: log,
	}
	for _, f := range tune {
		f(&opts)
	}
	f, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Errorf("stopping the fleet: %v", err)
		}
	})
	return f, log
}

// Runs is how many times a benchmark's test repeats its scenarios, as the environment variable name says (a
// positive number), or 1 without it.
func Runs(t testing.TB, name string) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}
