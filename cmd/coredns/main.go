// Command coredns is stock CoreDNS with the multicluster plugin, which serves the clusterset zone of the
// Multi-Cluster Services API. Every stock plugin stays available; multicluster runs right after kubernetes.
package main

import (
	"slices"

	"github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/core/plugin" // every stock plugin
	"github.com/coredns/coredns/coremain"

	"vksfleet.dev/fleet/plugin/multicluster"
)

func main() {
	dnsserver.Directives = withDirective(dnsserver.Directives, multicluster.Name, "kubernetes")
	coremain.Run()
}

// withDirective returns directives with name inserted right after after, or at the end if after is missing.
// The plugin order of a server block is this list's order, not the Corefile's.
func withDirective(directives []string, name, after string) []string {
	if slices.Contains(directives, name) {
		return directives
	}
	i := slices.Index(directives, after)
	if i < 0 {
		return append(slices.Clone(directives), name)
	}
	return slices.Insert(slices.Clone(directives), i+1, name)
}
