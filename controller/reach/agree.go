package reach

import (
	"slices"
	"time"
)

// Verdict is what one controller replica of this member publishes of its own probes: the node it runs on, when it
// wrote, and the members it finds unreachable.
type Verdict struct {
	Node        string
	At          time.Time
	Unreachable []string
}

// Agreement bounds a Verdict's age: a replica writes its verdicts at every change and at least every second, so
// one older than this is from a replica that stopped or cannot write, and says nothing of the members now.
const Agreement = 2 * time.Second

// futureSlack is how far ahead of the reader's clock a Verdict's time may be and still count: the replicas share
// a cluster's clocks, which NTP keeps far closer; a replica whose clock runs further ahead would otherwise keep
// its last verdict fresh long after it stopped.
const futureSlack = time.Second

// Agreed is the State of member id to act on, given this replica's own State of it (own), the node it runs on and
// the other replicas' verdicts at now. A member is unreachable only when two nodes find it so: own, and a fresh
// verdict of a replica on another node. One node alone may be the cause (its links, its conntrack table, a
// NetworkPolicy on its pod), and its verdict would move the traffic of every node of this member; so an
// Unreachable that no other node shares counts as Unknown, on which the Lease decides alone, as without the
// probe: a member whose Lease lives is used (fail open). Reachable needs no second node: it only keeps traffic
// where it is. Where no replica of this member runs on another node (a member of one node, or both replicas on one
// node, the anti-affinity being only preferred), there is no second node to ask, and this node's verdict stands,
// as it did before agreement: its clients are on that node too. A replica on another node that stopped writing
// (its verdict stale) is still a second node, whose silence corroborates nothing.
func Agreed(id string, own State, node string, peers []Verdict, now time.Time) State {
	if own != Unreachable {
		return own
	}
	if node == "" {
		return Unknown // no node to tell another from
	}
	if !slices.ContainsFunc(peers, func(p Verdict) bool { return p.Node != node }) {
		return Unreachable
	}
	for _, p := range peers {
		age := now.Sub(p.At)
		if p.Node != "" && p.Node != node && age < Agreement && age > -futureSlack && slices.Contains(p.Unreachable, id) {
			return Unreachable
		}
	}
	return Unknown
}
