// Package reach decides, from this member's own network position, whether each other member's endpoints can be
// reached: the data-plane signal, kept apart from the control-plane one (the broker Lease). A member whose Lease
// lapsed while its pods still answer keeps its endpoints in use, for a bounded time; a member whose pods no longer
// answer from here loses them here within seconds to any other exporter, whatever its Lease says, and other
// members decide for themselves. Either signal alone may be wrong, so alone it only moves traffic between
// exporters: it never takes away the last endpoints of a service (Fallback).
//
// The decision is a plain state machine over probe rounds, with hysteresis: one lost round moves nothing, a
// member turns unreachable after Down failed rounds in a row and reachable again after Up good ones. Every
// controller replica of a member probes, and a member is unreachable only when replicas on two nodes find it so
// (Agreed): one node's links or policies do not decide for the whole member.
package reach

import (
	"slices"
	"sync"
	"time"
)

// State is what this member knows of the path to another member's endpoints.
type State int

const (
	// Unknown: not probed yet, or nothing of the member's to probe. Decisions fall back to its Lease.
	Unknown State = iota
	// Reachable: a connection to one of its endpoints completed lately. A refusal is no answer: a reused or vacated
	// pod address refuses too.
	Reachable
	// Unreachable: Down rounds in a row got no answer from any endpoint probed.
	Unreachable
)

func (s State) String() string {
	switch s {
	case Reachable:
		return "reachable"
	case Unreachable:
		return "unreachable"
	}
	return "unknown"
}

// Tracker holds every other member's State. Without RequireAgreement its own probes decide alone (a controller
// that runs as one process); with it, State is what Agree last settled.
type Tracker struct {
	down, up int

	mu      sync.Mutex
	members map[string]*member
	agree   bool
}

type member struct {
	state      State
	fails, oks int       // the current run of failed or good rounds
	since      time.Time // when state began
	// agreed and agreedSince are State and Since under RequireAgreement.
	agreed      State
	agreedSince time.Time
}

// New returns a Tracker that marks a member unreachable after down failed rounds in a row, and reachable again
// after up good ones (a first good round makes an unknown member reachable at once).
func New(down, up int) *Tracker {
	return &Tracker{down: max(down, 1), up: max(up, 1), members: map[string]*member{}}
}

// RequireAgreement makes State what Agree settles rather than this Tracker's own probes: a member is unreachable
// only once another node's probes find it so too (Agreed).
func (t *Tracker) RequireAgreement() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.agree = true
}

// Observe records one round of probes of member at now: ok when any endpoint answered. It says whether the
// member's State changed, which under RequireAgreement only Agree does.
func (t *Tracker) Observe(id string, ok bool, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.members[id]
	if m == nil {
		m = &member{since: now}
		t.members[id] = m
	}
	was := m.state
	if ok {
		m.fails, m.oks = 0, m.oks+1
		if m.state == Unknown || (m.state == Unreachable && m.oks >= t.up) {
			m.state = Reachable
		}
	} else {
		m.oks, m.fails = 0, m.fails+1
		if m.state != Unreachable && m.fails >= t.down {
			m.state = Unreachable
		}
	}
	if m.state != was {
		m.since = now
		return !t.agree
	}
	return false
}

// Agree settles every member's State at now from this Tracker's own (Agreed): node is the node this replica runs
// on, peers the other replicas' verdicts. It returns the members whose State changed.
func (t *Tracker) Agree(node string, peers []Verdict, now time.Time) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var changed []string
	for id, m := range t.members {
		if s := Agreed(id, m.state, node, peers, now); s != m.agreed {
			m.agreed, m.agreedSince = s, now
			changed = append(changed, id)
		}
	}
	return changed
}

// Own returns the members this Tracker's own probes find unreachable and those they find reachable, sorted,
// whatever the other replicas find: what this replica publishes for the others to agree with. A member in neither
// is not judged yet.
func (t *Tracker) Own() (unreachable, reachable []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, m := range t.members {
		switch m.state {
		case Unreachable:
			unreachable = append(unreachable, id)
		case Reachable:
			reachable = append(reachable, id)
		}
	}
	slices.Sort(unreachable)
	slices.Sort(reachable)
	return unreachable, reachable
}

// Uncorroborated returns the members this Tracker's own probes find unreachable but State does not: no other
// node agrees (always none without RequireAgreement).
func (t *Tracker) Uncorroborated() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ids []string
	for id, m := range t.members {
		if t.agree && m.state == Unreachable && m.agreed != Unreachable {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Resume takes member's State as a previous process decided it, since since, unless this Tracker has decided one
// (a good round, or Down failed ones): a process that starts afresh would otherwise use for a few rounds the
// endpoints of a member cut off from here (Decide with Unknown falls back to the Lease). The hysteresis holds as
// after a verdict of its own: a resumed Unreachable member needs Up good rounds to turn reachable again, a resumed
// Reachable one Down failed rounds. Under RequireAgreement the State resumed is also the settled one until the
// next Agree, which the first reconciles may come before. It says whether the State changed.
func (t *Tracker) Resume(id string, s State, since time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.members[id]
	if s == Unknown || (m != nil && m.state != Unknown) {
		return false
	}
	if m == nil {
		m = &member{}
		t.members[id] = m
	}
	m.state, m.since = s, since
	m.agreed, m.agreedSince = s, since
	return true
}

// Suspected says whether member's last round failed while it is not yet unreachable: the next round should
// confirm with more probes, so that fewer rounds in a row can decide with the same odds of a false alarm.
func (t *Tracker) Suspected(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.members[id]
	return m != nil && m.fails > 0 && m.state != Unreachable
}

// Forget drops what is known of member, which has nothing left to probe; it says whether its State was known.
func (t *Tracker) Forget(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.members[id]
	delete(t.members, id)
	return ok && m.current(t.agree) != Unknown
}

// current is the member's State: its own, or under agreement the settled one.
func (m *member) current(agree bool) State {
	if agree {
		return m.agreed
	}
	return m.state
}

// State returns member's State.
func (t *Tracker) State(id string) State {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.members[id]; m != nil {
		return m.current(t.agree)
	}
	return Unknown
}

// Since returns when member's State began, zero when unknown.
func (t *Tracker) Since(id string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch m := t.members[id]; {
	case m == nil:
		return time.Time{}
	case t.agree:
		return m.agreedSince
	default:
		return m.since
	}
}

// States returns every known member's State.
func (t *Tracker) States() map[string]State {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]State, len(t.members))
	for id, m := range t.members {
		out[id] = m.current(t.agree)
	}
	return out
}

// Decision is what an importing member does with another member's endpoints.
type Decision int

const (
	// Use: the endpoints are imported and answered.
	Use Decision = iota
	// UseStale: the member's control plane is lost (its Lease lapsed) but its endpoints answer: they stay in use,
	// as last published, and the import says they are stale.
	UseStale
	// Fallback: one signal speaks against the endpoints but not both: the member's Lease lives but its endpoints
	// do not answer from here, or its control plane has been lost for longer than the stale limit though they
	// answer. They are imported not ready while another exporter of the service has a ready endpoint, and used as
	// published while none has (fail open, as Envoy's panic threshold): a verdict that may be wrong moves traffic
	// between exporters, and never leaves a service without endpoints on its own.
	Fallback
	// Leave: the endpoints are not used from this member: the member is gone (its Lease lapsed) and nothing proves
	// its endpoints still serve: they do not answer from here, or were never probed. Two signals agree.
	Leave
)

// Decide combines the two signals for one member: alive is its Lease, overdue whether it lapsed longer than the
// stale limit ago, state what this member's probes found.
func Decide(alive, overdue bool, state State) Decision {
	switch {
	case alive && state == Unreachable:
		return Fallback
	case alive:
		return Use
	case state == Reachable && overdue:
		return Fallback
	case state == Reachable:
		return UseStale
	}
	return Leave
}
