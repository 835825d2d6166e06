package dataplane

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
)

// A test that must prove no connection was attempted between two sets of addresses (a client and a member that
// must get none of its requests) counts the attempts where they cross: the fabric. The requests' own outcome
// cannot tell it apart from anything else that delays one: a request that timed out may have been sent anywhere.
// A count lives in a chain of its own, in a table of its own (so that Faults and Heal leave it alone), hooked on
// forwarding before the faults' chains, so that it also counts what a fault then drops; Sweep removes it with the
// fabric's namespace.
const countTable = Prefix + "-counts"

// CountSYNs counts, from now on, the TCP SYNs (connection attempts, retransmissions included) sent from an address
// in from to one in to, on port. CountSYNs again with the same name starts that count again from zero.
func CountSYNs(name string, from, to []netip.Prefix, port uint16) error {
	var rules []string
	for _, family := range families {
		a, b := elements(from, family.is4), elements(to, family.is4)
		if a != "" && b != "" {
			rules = append(rules, fmt.Sprintf("%s saddr { %s } %s daddr { %s } tcp dport %d tcp flags & (syn | ack) == syn counter",
				family.match, a, family.match, b, port))
		}
	}
	if len(rules) == 0 {
		return fmt.Errorf("dataplane: count %s: no family has addresses on both sides", name)
	}
	return setChain(countTable, "count", name, "filter - 10", rules)
}

// SYNs returns how many SYNs the count of that name has seen since CountSYNs started it.
func SYNs(name string) (uint64, error) {
	out, err := exec.Command("ip", "netns", "exec", FabricNS, "nft", "-j", "list", "chain", "inet", countTable, name).Output()
	if err != nil {
		return 0, fmt.Errorf("dataplane: reading count %s: %w", name, err)
	}
	return countedPackets(out)
}

// countedPackets sums the packets of the counters in nft's JSON listing of a chain.
func countedPackets(listing []byte) (uint64, error) {
	var l struct {
		Nftables []struct {
			Rule *struct {
				Expr []struct {
					Counter *struct{ Packets uint64 } `json:"counter"`
				} `json:"expr"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(listing, &l); err != nil {
		return 0, fmt.Errorf("dataplane: reading nft's listing: %w", err)
	}
	var n uint64
	rules := 0
	for _, o := range l.Nftables {
		if o.Rule == nil {
			continue
		}
		rules++
		for _, e := range o.Rule.Expr {
			if e.Counter != nil {
				n += e.Counter.Packets
			}
		}
	}
	if rules == 0 {
		return 0, fmt.Errorf("dataplane: the count's chain holds no rule")
	}
	return n, nil
}

// StopCount removes the count of that name; it is an error if there is none.
func StopCount(name string) error {
	return deleteChain(countTable, "count", name)
}
