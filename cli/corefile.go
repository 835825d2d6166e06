package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/coredns/caddy/caddyfile"
)

// multiclusterDirective is the plugin's directive (plugin/multicluster.Name; importing that package would link
// CoreDNS into kubectl-mcs).
const multiclusterDirective = "multicluster"

// servesZone says how a Corefile serves the clusterset zone: "multicluster" for a multicluster stanza (the
// directive with the zone among its arguments, or without zones in a server block whose keys include the zone),
// "forward" for a server block of the zone that forwards it (kubectl mcs join's standalone DNS mode), or "" when it
// does not. The Corefile is parsed with CoreDNS's own parser, so comments, quoting and snippets count as CoreDNS
// counts them.
func servesZone(corefile string) (string, error) {
	blocks, err := caddyfile.Parse(corefileKey, strings.NewReader(corefile), nil)
	if err != nil {
		return "", fmt.Errorf("the Corefile does not parse: %w", err)
	}
	forwards := false
	for _, b := range blocks {
		if len(b.Tokens["forward"]) > 0 && slices.ContainsFunc(b.Keys, isClustersetZone) {
			forwards = true
		}
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
			return multiclusterDirective, nil
		}
	}
	if forwards {
		return "forward", nil
	}
	return "", nil
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
