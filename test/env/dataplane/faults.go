package dataplane

import (
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
)

// Faults between members' data planes live in one nftables table of the fabric, the only place every packet
// between two nodes crosses: a chain per fault, hooked on forwarding, drops the packets between two sets of
// prefixes, in both directions. The host's own traffic (the host link, where the API servers listen) is never
// in a set, so a fault never touches the control planes. Deleting the table heals every fault at once, and Sweep
// removes it with the fabric's namespace.
//
// Loss is drawn by nftables (numgen random) rather than by tc netem, which machines of this kind cannot run:
// their kernel has no sch_netem and no modules to load. A drawn loss is also confined to the members' packets,
// where a qdisc on a node's link would also lose the node's traffic with its API server.
const faultTable = Prefix + "-faults"

// faultName is what a fault's name may be: it becomes an nftables chain name.
var faultName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,127}$`)

// Drop makes the fabric drop percent of the packets (0 < percent <= 100, in steps of 0.01) exchanged between an
// address in side and one in others, in both directions, at random; 100 is a cut. Drop again with the same name
// replaces that fault.
func Drop(name string, side, others []netip.Prefix, percent float64) error {
	if !(percent > 0 && percent <= 100) {
		return fmt.Errorf("dataplane: fault %s: a loss of %v%% is not in (0, 100]", name, percent)
	}
	// In ten-thousandths: a loss of 0.5 % is as expressible as 5 %.
	odds := ""
	if n := int(math.Round(percent * 100)); n < 10000 {
		odds = fmt.Sprintf(" numgen random mod 10000 < %d", n)
	}
	var rules []string
	for _, family := range families {
		a, b := elements(side, family.is4), elements(others, family.is4)
		if a == "" || b == "" {
			continue
		}
		for _, dir := range [][2]string{{a, b}, {b, a}} {
			rules = append(rules, fmt.Sprintf("%s saddr { %s } %s daddr { %s }%s drop", family.match, dir[0], family.match, dir[1], odds))
		}
	}
	return setFault(name, rules)
}

// DropTo makes the fabric drop every TCP packet between an address in side and the server at to, in both
// directions: side is cut from that one server of the host (the broker's load balancer, say), and reaches every
// other address as before. Drop again with the same name replaces that fault.
func DropTo(name string, side []netip.Prefix, to netip.AddrPort) error {
	var rules []string
	for _, family := range families {
		a := elements(side, family.is4)
		if a == "" || to.Addr().Is4() != family.is4 {
			continue
		}
		rules = append(rules,
			fmt.Sprintf("%s saddr { %s } %s daddr %s tcp dport %d drop", family.match, a, family.match, to.Addr(), to.Port()),
			fmt.Sprintf("%s saddr %s tcp sport %d %s daddr { %s } drop", family.match, to.Addr(), to.Port(), family.match, a))
	}
	if len(rules) == 0 {
		return fmt.Errorf("dataplane: fault %s: no address of %s's family to cut from it", name, to)
	}
	return setFault(name, rules)
}

// families are the address families a fault's rules match, by nftables' name for each.
var families = []struct {
	match string
	is4   bool
}{{"ip", true}, {"ip6", false}}

// setFault puts the fault's rules in a chain of its own, replacing those of the fault of the same name.
func setFault(name string, rules []string) error {
	return setChain(faultTable, "fault", name, "filter", rules)
}

// setChain puts rules in chain name of table, a base chain on forwarding at priority, replacing those it held.
// what says what the chain is for, in errors.
func setChain(table, what, name, priority string, rules []string) error {
	if !faultName.MatchString(name) {
		return fmt.Errorf("dataplane: %s name %q: want lower-case letters, digits and dashes", what, name)
	}
	chain := fmt.Sprintf("inet %s %s", table, name)
	script := []string{
		"table inet " + table + " {}",
		"add chain " + chain + " { type filter hook forward priority " + priority + "; policy accept; }",
		"flush chain " + chain,
	}
	for _, r := range rules {
		script = append(script, "add rule "+chain+" "+r)
	}
	return nft(strings.Join(script, "\n") + "\n")
}

// Remove undoes the fault of that name, leaving the others in place; it is an error if there is none.
func Remove(name string) error {
	return deleteChain(faultTable, "fault", name)
}

// deleteChain deletes chain name of table; it is an error if there is none. what says what the chain is for, in
// errors.
func deleteChain(table, what, name string) error {
	if !faultName.MatchString(name) {
		return fmt.Errorf("dataplane: %s name %q: want lower-case letters, digits and dashes", what, name)
	}
	return nft(fmt.Sprintf("delete chain inet %s %s\n", table, name))
}

// elements is an nftables set's elements: the prefixes of one family.
func elements(ps []netip.Prefix, is4 bool) string {
	var out []string
	for _, p := range ps {
		if p.Addr().Is4() == is4 {
			out = append(out, p.Masked().String())
		}
	}
	return strings.Join(out, ", ")
}

// Heal removes every fault Drop put in place. It is safe to call when there is none.
func Heal() error {
	// Declaring the table first makes the delete succeed whether or not it was there.
	return nft("table inet " + faultTable + " {}\ndelete table inet " + faultTable + "\n")
}

// Faults lists the names of the faults in place; none once healed.
func Faults() ([]string, error) {
	out, err := exec.Command("ip", "netns", "exec", FabricNS, "nft", "-j", "list", "chains", "inet").Output()
	if err != nil {
		return nil, fmt.Errorf("dataplane: listing the fabric's chains: %w", err)
	}
	var listing struct {
		Nftables []struct {
			Chain *struct{ Table, Name string } `json:"chain"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &listing); err != nil {
		return nil, fmt.Errorf("dataplane: reading nft's chains: %w", err)
	}
	var names []string
	for _, o := range listing.Nftables {
		if o.Chain != nil && o.Chain.Table == faultTable {
			names = append(names, o.Chain.Name)
		}
	}
	return names, nil
}

// nft runs an nftables script in the fabric's namespace, as one transaction.
func nft(script string) error {
	cmd := exec.Command("ip", "netns", "exec", FabricNS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("dataplane: nft in %s: %v: %s\n%s", FabricNS, err, strings.TrimSpace(string(out)), script)
	}
	return nil
}
