// Package install proves the ways our CoreDNS and mcs-controller get into a cluster: the container images built
// by `make images`, run against a local clusterset with a real engine; our CoreDNS replacing a cluster's stock
// kube-dns in place and back (build/deploy/replace-kube-dns); every path that changes a cluster's own CoreDNS (join
// and unjoin, the script, the Helm chart) keeping its DNS answering and giving its customisations back, on a
// member with kubelets (dnspaths_test.go); and a NodeLocal DNSCache stanza in front of it (build/deploy/nodelocaldns).
package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/framework"
)

// root is the repository, relative to this package.
var root, _ = filepath.Abs(filepath.Join("..", "..", ".."))

// cs is the clusterset every test shares: cluster-a exports, cluster-b imports, and a broker.
var cs *clusterset.ClusterSet

func TestMain(m *testing.M) {
	framework.Main(m, framework.Suite{Setup: func(s *framework.Setup) (err error) {
		cs, err = s.ClusterSet(clusterset.Options{Members: []string{"cluster-a", "cluster-b"}})
		return err
	}})
}

// readable copies a member's kubeconfig (private to root) into dir as a file any user may read, for processes
// that run as another user, such as the images' 65532.
func readable(t *testing.T, c *clusterset.Cluster, dir string) string {
	t.Helper()
	b, err := os.ReadFile(c.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, c.Name+".kubeconfig")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// dig asks server (address:port) for name and type with dig, and returns the answers dig +short prints, sorted
// as dig prints them.
func dig(server, name, qtype string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := framework.Dig(ctx, server, "+short", "+tries=1", "+time=2", name, qtype)
	if err != nil {
		return nil, fmt.Errorf("dig %s %s @%s: %v: %s", name, qtype, server, err, out)
	}
	var answers []string
	for l := range strings.Lines(string(out)) {
		if l = strings.TrimSpace(l); l != "" {
			if strings.HasPrefix(l, ";") {
				return nil, fmt.Errorf("dig %s %s @%s: %s", name, qtype, server, out)
			}
			answers = append(answers, l)
		}
	}
	return answers, nil
}

// wantAnswers checks that dig's answers are exactly want, in any order.
func wantAnswers(server, name, qtype string, want ...string) error {
	got, err := dig(server, name, qtype)
	if err != nil {
		return err
	}
	if !sameSet(got, want) {
		return fmt.Errorf("%s %s: got %q, want %q", name, qtype, got, want)
	}
	return nil
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		if seen[s]--; seen[s] < 0 {
			return false
		}
	}
	return true
}
