package install

import (
	"strings"
)

// The lines around every block join adds to a Corefile the cluster owns, which unjoin removes; the same as
// build/deploy/replace-kube-dns/clusterset.server's, so that either tool finds the other's block.
const (
	blockBegin = "# BEGIN vksfleet multicluster"
	blockEnd   = "# END vksfleet multicluster"
)

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
