package reach

import (
	"slices"
	"time"
)

// Verdict is what one controller replica of this member publishes of its own probes: the node it runs on, when it
// wrote, and the members it finds unreachable and reachable. A member in neither list is one it has not judged yet
// (a replica that just started, or one that does not probe that member).
type Verdict struct {
	Node                   string
	At                     time.Time
	Unreachable, Reachable []string
	// ListsReachable is false for the records of releases before Reachable, which say nothing of the members they
	// do not find unreachable: those all count as found reachable.
	ListsReachable bool
}

// Agreement bounds a Verdict's age: a replica writes its verdicts at every change and at least every second, so
// one older than this is from a replica that stopped or cannot write, and says nothing of the members now.
const Agreement = 2 * time.Second

// futureSlack is how far ahead of the reader's clock a Verdict's time may be and still count: the replicas share
// a cluster's clocks, which NTP keeps far closer; a replica whose clock runs further ahead would otherwise keep
// its last verdict fresh long after it stopped.
const futureSlack = time.Second

// Agreed is the State of member id to act on, given this replica's own State of it (own), the node it runs on and
// the other replicas' verdicts at now. A member is unreachable only when two nodes find it so: own, and a verdict
// of a replica on another node. One node alone may be the cause (its links, its conntrack table, a NetworkPolicy on
// its pod), and its verdict would move the traffic of every node of this member; so an Unreachable that another
// node contradicts (it finds the member reachable) counts as Unknown, on which the Lease decides alone, as without
// the probe: a member whose Lease lives is used (fail open). Reachable needs no second node: it only keeps traffic
// where it is.
//
// Fresh verdicts (under Agreement old, not far ahead) come first: one that agrees makes the member unreachable, else
// one that contradicts makes it Unknown. Then the stale ones, from replicas that stopped writing, in the same order:
// a replica whose pod is being replaced agreed a moment ago, and its replacement has judged nothing yet, so neither
// sends traffic back to a member both nodes found cut off. A replica on another node that has not judged the member
// (it just started) neither agrees nor contradicts; where no replica on another node has judged it (a member of one
// node, both replicas on one node, the anti-affinity being only preferred, or the other replaced), this node's
// verdict stands, as it did before agreement: its clients are on that node too.
func Agreed(id string, own State, node string, peers []Verdict, now time.Time) State {
	if own != Unreachable {
		return own
	}
	if node == "" {
		return Unknown // no node to tell another from
	}
	var freshSays, staleSays State
	for _, p := range peers {
		if p.Node == node {
			continue
		}
		says := Unknown // no judgement
		switch {
		case p.Node == "":
			says = Reachable // a peer of no known node may be on this one: it cannot agree
		case slices.Contains(p.Unreachable, id):
			says = Unreachable
		case !p.ListsReachable || slices.Contains(p.Reachable, id):
			says = Reachable
		}
		age := now.Sub(p.At)
		switch {
		case age <= -futureSlack:
			// A clock far ahead would keep its last verdict fresh long after it stopped: it can only contradict.
			if says == Unreachable {
				says = Reachable
			}
			freshSays = merge(freshSays, says)
		case age < Agreement:
			freshSays = merge(freshSays, says)
		default:
			staleSays = merge(staleSays, says)
		}
	}
	for _, says := range []State{freshSays, staleSays} {
		switch says {
		case Unreachable:
			return Unreachable
		case Reachable:
			return Unknown
		}
	}
	return Unreachable
}

// merge adds one verdict to those of the same freshness: an agreeing one wins, then a contradicting one.
func merge(acc, says State) State {
	if acc == Unreachable || says == Unreachable {
		return Unreachable
	}
	if acc == Reachable || says == Reachable {
		return Reachable
	}
	return Unknown
}
