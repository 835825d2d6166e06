package mcsctl

import (
	"fmt"
	"slices"
	"strings"

	"github.com/coredns/caddy/caddyfile"
)

// multiclusterDirective is the plugin's directive (plugin/multicluster.Name; importing that package would link
// CoreDNS into kubectl-mcs).
const multiclusterDirective = "multicluster"

// servesZone reports whether a Corefile has a multicluster stanza for the clusterset zone: the directive with the
// zone among its arguments, or without zones in a server block whose keys include the zone. The Corefile is
// parsed with CoreDNS's own parser, so comments, quoting and snippets count as CoreDNS counts them.
func servesZone(corefile string) (bool, error) {
	blocks, err := caddyfile.Parse(corefileKey, strings.NewReader(corefile), nil)
	if err != nil {
		return false, fmt.Errorf("the Corefile does not parse: %w", err)
	}
	for _, b := range blocks {
		tokens := b.Tokens[multiclusterDirective]
		if len(tokens) == 0 {
			continue
		}
		var zones []string
		// The directive's arguments run from its token to the end of its line or its block.
		for i := 1; i < len(tokens) && tokens[i].Line == tokens[0].Line && tokens[i].Text != "{"; i++ {
			zones = append(zones, tokens[i].Text)
		}
		if len(zones) == 0 {
			zones = b.Keys
		}
		if slices.ContainsFunc(zones, isClustersetZone) {
			return true, nil
		}
	}
	return false, nil
}

// isClustersetZone matches a zone or server block key naming the clusterset zone ("clusterset.local",
// "clusterset.local.", "dns://clusterset.local:53").
func isClustersetZone(key string) bool {
	if _, rest, ok := strings.Cut(key, "://"); ok {
		key = rest
	}
	if host, _, ok := strings.Cut(key, ":"); ok {
		key = host
	}
	return strings.EqualFold(strings.TrimSuffix(key, ".")+".", clustersetZone)
}
