package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/proc"
)

// Binaries are the programs a fleet without nodes runs as processes of this machine (with nodes, it runs them
// from the images `make images` saves).
var Binaries = []string{
	"vksfleet.dev/fleet/cmd/coredns",
	"vksfleet.dev/fleet/cmd/controller",
}

// Build builds Binaries into dir, for a test that needs a BinDir; it must run inside the module.
func Build(dir string) error {
	if err := BuildPackages(dir, Binaries...); err != nil {
		return fmt.Errorf("building the fleet's binaries: %w", err)
	}
	return nil
}

// BuildPackages builds the module's main packages pkgs (import paths) into dir, each binary named after its
// package's folder, in one `go build`; it must run inside the module. Every suite builds our programs here; only
// the node images (static, test/env/nodeimages), a previous release (from its own tree, BuildRelease) and the
// upstream conformance suite build elsewhere.
func BuildPackages(dir string, pkgs ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
	return nil
}

// BuildTest builds Binaries into a temporary directory that is removed when t ends, and returns it; a failed build
// fails t.
func BuildTest(t testing.TB) string {
	t.Helper()
	bin := t.TempDir()
	if err := Build(bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// StartTest builds the fleet's binaries into a temporary directory and starts, for t, a fleet of the given number
// of members with nodes nodes each and a 5 s lease grace; the processes' output is shown if t fails, and t's
// cleanup stops the fleet. It returns the fleet, the binaries' directory and the file of the processes' output.
// The tune functions change those options before the start (Options.Monitoring, say).
func StartTest(t testing.TB, members, nodes int, tune ...func(*Options)) (*Fleet, string, *os.File) {
	t.Helper()
	bin := BuildTest(t)
	log := proc.TestLog(t)
	opts := Options{
		ClusterSet: clusterset.Options{Members: clusterset.MemberNames(members), Nodes: nodes},
		BinDir:     bin, LeaseGrace: 5 * time.Second, Log: log,
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
	return f, bin, log
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
