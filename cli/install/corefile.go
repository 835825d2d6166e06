package install

import (
	"fmt"
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
	blocks, err := caddyfile.Parse(corefileKey, strings.NewReader(corefile), nil)
	if err != nil {
		return false, fmt.Errorf("the Corefile does not parse: %w", err)
	}
	for _, b := range blocks {
		if len(b.Tokens[directive]) > 0 {
			return true, nil
		}
	}
	return false, nil
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
