package install

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/coredns/caddy/caddyfile"
)

// The lines around every block join adds to a Corefile the cluster owns, which unjoin removes; the same as
// build/deploy/replace-kube-dns/clusterset.server's, so that either tool finds the other's block.
const (
	blockBegin = "# BEGIN vksfleet multicluster"
	blockEnd   = "# END vksfleet multicluster"
)

// The plugins whose presence in a Corefile decides what join, unjoin and the chart's hooks do with it.
const (
	// multiclusterPlugin is our plugin's directive (plugin/multicluster.Name; importing that package would link
	// CoreDNS into kubectl-mcs): only our CoreDNS binary can read a Corefile that loads it.
	multiclusterPlugin = "multicluster"
	// reloadPlugin rereads the Corefile when it changes; without it, replicas read it only as they start.
	reloadPlugin = "reload"
)

// loadsPlugin says whether any server block of the Corefile loads the plugin of directive, as CoreDNS's own parser
// reads it: a comment or a zone that names it does not count.
func loadsPlugin(corefile, directive string) (bool, error) {
	blocks, err := serverBlocks(corefile)
	if err != nil {
		return false, err
	}
	for _, b := range blocks {
		if len(b.Tokens[directive]) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// serverBlocks are the Corefile's server blocks, as CoreDNS's own parser reads them.
func serverBlocks(corefile string) ([]caddyfile.ServerBlock, error) {
	blocks, err := caddyfile.Parse(corefileKey, strings.NewReader(corefile), nil)
	if err != nil {
		return nil, fmt.Errorf("the Corefile does not parse: %w", err)
	}
	return blocks, nil
}

// customConfigMap is the ConfigMap of kube-system whose keys ending in customServerSuffix AKS's CoreDNS imports
// into its Corefile as server blocks of their own: where operators put their clusterset.local block on AKS.
const (
	customConfigMap    = "coredns-custom"
	customServerSuffix = ".server"
)

// withForward returns the Corefile with block, the standalone mode's forward of the zone, as withBlock does, and
// whether that changed it; unless a server block of the Corefile's own (outside the markers) or of a server file
// of custom (the data of customConfigMap) serves the zone already. CoreDNS refuses a Corefile with two server
// blocks for one zone and port, and keeps the configuration it has: the Corefile is then left without a block of
// ours (one an earlier join added goes), and servedBy names the block that serves the zone. A Corefile that does
// not parse here (an import of a file only the CoreDNS pods have) gets the block: refusing it would stop join on a
// Corefile that CoreDNS reads.
func withForward(corefile, block string, custom map[string]string) (out string, changed bool, servedBy string) {
	rest, _ := withoutBlock(corefile)
	if served, err := servesZone(rest); err == nil && served {
		return rest, rest != corefile, "a server block of the Corefile"
	}
	for _, k := range slices.Sorted(maps.Keys(custom)) {
		if !strings.HasSuffix(k, customServerSuffix) {
			continue
		}
		if served, err := servesZone(custom[k]); err == nil && served {
			return rest, rest != corefile, fmt.Sprintf("key %s of ConfigMap %s/%s", k, dnsNamespace, customConfigMap)
		}
	}
	out, changed = withBlock(corefile, block)
	return out, changed, ""
}

// servesZone says whether a server block of the Corefile serves the zone on port 53 over plain DNS, the key a
// block of ours has: a key "clusterset.local", "clusterset.local:53" or "dns://clusterset.local.:53", in any case,
// as CoreDNS reads it. A subzone, another port or another transport is another server, which CoreDNS accepts
// next to ours.
func servesZone(corefile string) (bool, error) {
	blocks, err := serverBlocks(corefile)
	if err != nil {
		return false, err
	}
	for _, b := range blocks {
		for _, key := range b.Keys {
			if zoneKey(key) {
				return true, nil
			}
		}
	}
	return false, nil
}

// zoneKey says whether a server block's key is the zone on port 53 over plain DNS.
func zoneKey(key string) bool {
	if scheme, rest, found := strings.Cut(key, "://"); found {
		if scheme != "dns" {
			return false
		}
		key = rest
	}
	host, port := key, ""
	if h, p, err := net.SplitHostPort(key); err == nil {
		host, port = h, p
	}
	return (port == "" || port == "53") && strings.EqualFold(strings.TrimSuffix(host, "."), zone)
}

// ours says whether the Corefile is ours as a whole: one that loads multicluster outside the block between the
// markers, such as the replace base's (Corefile.example), rather than a cluster's own with our block at most.
func ours(corefile string) (bool, error) {
	rest, _ := withoutBlock(corefile)
	return loadsPlugin(rest, multiclusterPlugin)
}

// withBlock returns the Corefile with block, which starts with blockBegin and ends with a blockEnd line, in place
// of the one between those markers, or appended; and whether that changed anything. Every other line stays.
func withBlock(corefile, block string) (string, bool) {
	rest, _ := withoutBlock(corefile)
	if rest != "" && !strings.HasSuffix(rest, "\n") {
		rest += "\n"
	}
	out := rest + block
	return out, out != corefile
}

// withoutBlock returns the Corefile without the block between the markers (both lines included), and whether
// there was one. A begin marker with no end leaves the Corefile as it is: its owner edited it, and cutting to the
// end could take their lines.
func withoutBlock(corefile string) (string, bool) {
	begin := lineIndex(corefile, blockBegin)
	if begin < 0 {
		return corefile, false
	}
	end := lineIndex(corefile[begin:], blockEnd)
	if end < 0 {
		return corefile, false
	}
	end += begin
	after := end + len(blockEnd)
	if nl := strings.IndexByte(corefile[after:], '\n'); nl >= 0 {
		after += nl + 1
	} else {
		after = len(corefile)
	}
	return corefile[:begin] + corefile[after:], true
}

// lineIndex is the offset of the first line of s that starts with prefix, or -1.
func lineIndex(s, prefix string) int {
	for off := 0; off < len(s); {
		if strings.HasPrefix(s[off:], prefix) {
			return off
		}
		nl := strings.IndexByte(s[off:], '\n')
		if nl < 0 {
			return -1
		}
		off += nl + 1
	}
	return -1
}
