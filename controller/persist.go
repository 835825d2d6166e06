package controller

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/reach"
	"vksfleet.dev/fleet/mcs/clusterid"
)

// The decisions a process keeps across its runs (decisions) are lost with the process: a restart, or the other
// replica taking the lead over. The leader writes those the members' Leases cannot tell again on its own broker
// Lease at each renewal (names.AnnotationDecisions), the member's own object, which only it may write, and the next
// process to lead reads them back at its first renewal, before its first look at the Leases, which every
// reconcile waits for. Started from nothing instead, it would import a member cut off from here ready again until
// the probe's rounds fail again, withdraw a member whose Lease lapsed though its endpoints answer, and judge the
// first look at each Lease by the renewer's clock, which may revive a dead member for a grace or kill a live one.
//
// Only the exceptions are written, since every member's broker cache holds every Lease and sees each renewal: the
// data-plane verdicts that change a decision (Unreachable, and Reachable for a member whose Lease lapsed) and the
// renewals seen off the renewer's clock (broker.Liveness.Memory). A clusterset whose members answer and whose
// clocks agree writes nothing.

// maxRemembered bounds the members written: a Lease's annotations share the API server's 256 KiB, and every member
// reads every renewal. About 200 bytes each at most (a 63-character id and three times), they stay under 20 KiB.
// Past it the unreachable members come first; the others are decided afresh at the next start, as before.
const maxRemembered = 100

// resumeWithin is how old decisions may be and still be resumed from: two graces. The leader writes them every
// third of a grace, and a replica takes over from a leader that died once the leader election's own Lease lapses
// (15 s by default, half the default grace), then waits for its broker cache. Older, the process that wrote them
// was away long enough for the probe and the Leases to say more than they would.
func resumeWithin(grace time.Duration) time.Duration { return 2 * grace }

// memory is the JSON of names.AnnotationDecisions: at, on the writer's clock, and per other member what it decided.
type memory struct {
	At      time.Time               `json:"at"`
	Members map[string]memberMemory `json:"members"`
}

// memberMemory is what a process decided about one member: the renewal it saw (broker.Renewal), its data-plane
// verdict (reach.State's name) and since when, or both.
type memberMemory struct {
	Renewed     time.Time `json:"renewed,omitzero"`
	Seen        time.Time `json:"seen,omitzero"`
	Unconfirmed bool      `json:"unconfirmed,omitempty"`
	Reach       string    `json:"reach,omitempty"`
	Since       time.Time `json:"since,omitzero"`
}

// verdict is a data-plane verdict of reach.Tracker: its State and since when.
type verdict struct {
	state reach.State
	since time.Time
}

// verdictsOf returns every verdict t holds.
func verdictsOf(t *reach.Tracker) map[string]verdict {
	out := map[string]verdict{}
	for id, s := range t.States() {
		out[id] = verdict{state: s, since: t.Since(id)}
	}
	return out
}

// rememberAt is what to write at now of the renewals a Liveness remembers and of the verdicts (nil without the
// probe): the verdicts that change a decision (reach.Decide), none of a live member's Reachable, and at most
// maxRemembered members. No verdict is since after now, which decodeMemory would reject: a probe round may end
// between the renewal's clock reading and this.
func rememberAt(renewals map[string]broker.Renewal, verdicts map[string]verdict, alive func(string) bool, now time.Time) memory {
	members := map[string]memberMemory{}
	for id, r := range renewals {
		members[id] = memberMemory{Renewed: r.RenewTime, Seen: r.SeenAt, Unconfirmed: r.Unconfirmed}
	}
	for id, v := range verdicts {
		if v.state == reach.Unknown || (v.state == reach.Reachable && alive(id)) {
			continue
		}
		m := members[id]
		m.Reach, m.Since = v.state.String(), v.since
		if m.Since.After(now) {
			m.Since = now
		}
		members[id] = m
	}
	if len(members) > maxRemembered {
		ids := slices.SortedFunc(maps.Keys(members), func(a, b string) int {
			return cmp.Or(cmp.Compare(rememberFirst(members[a]), rememberFirst(members[b])), cmp.Compare(a, b))
		})
		for _, id := range ids[maxRemembered:] {
			delete(members, id)
		}
	}
	return memory{At: now, Members: members}
}

// rememberFirst orders what to keep past maxRemembered: a member cut off from here first (resumed afresh, its
// endpoints would be used for a few probe rounds), then one kept in use while its Lease lapsed, then renewals.
func rememberFirst(m memberMemory) int {
	switch m.Reach {
	case reach.Unreachable.String():
		return 0
	case reach.Reachable.String():
		return 1
	}
	return 2
}

// encode is m as names.AnnotationDecisions: "" when it holds no member.
func (m memory) encode() string {
	if len(m.Members) == 0 {
		return ""
	}
	b, _ := json.Marshal(m) // times and strings: it cannot fail
	return string(b)
}

// decodeMemory reads names.AnnotationDecisions from the Lease of member self. The Lease is the member's own, but
// a process of another version, or a hand, may have written it: anything out of shape rejects the whole.
func decodeMemory(s, self string) (memory, error) {
	var m memory
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return memory{}, err
	}
	if m.At.IsZero() {
		return memory{}, errors.New("no time written")
	}
	if len(m.Members) > maxRemembered {
		return memory{}, fmt.Errorf("%d members, more than the %d a controller writes", len(m.Members), maxRemembered)
	}
	for id, mm := range m.Members {
		if err := mm.validate(id, self, m.At); err != nil {
			return memory{}, fmt.Errorf("member %q: %w", id, err)
		}
	}
	return m, nil
}

// validate checks what was written of member id by member self at at.
func (m memberMemory) validate(id, self string, at time.Time) error {
	switch {
	case clusterid.Validate(id) != nil:
		return errors.New("not a cluster id")
	case id == self:
		return errors.New("the member itself")
	case m.Renewed.IsZero() != m.Seen.IsZero():
		return errors.New("a renewal needs both its renew time and when it was seen")
	case m.Unconfirmed && m.Renewed.IsZero():
		return errors.New("unconfirmed without a renewal")
	case m.Seen.After(at):
		return errors.New("seen after it was written")
	case m.Reach != "" && m.Reach != reach.Reachable.String() && m.Reach != reach.Unreachable.String():
		return fmt.Errorf("unknown data-plane verdict %q", m.Reach)
	case (m.Reach == "") != m.Since.IsZero():
		return errors.New("a data-plane verdict needs both its state and since when")
	case m.Since.After(at):
		return errors.New("a verdict since after it was written")
	case m.Renewed.IsZero() && m.Reach == "":
		return errors.New("nothing decided")
	}
	return nil
}

// resumable is what a process resumes from of m at now: the renewals, the verdicts and when they were written, on
// this process's clock; nothing (ok false) when m was written more than within ago. Written on a clock ahead of
// this one (another node's, at a leader change), m's times move back by as much: it was written no later than now.
func resumable(m memory, now time.Time, within time.Duration) (renewals map[string]broker.Renewal, verdicts map[string]verdict,
	at time.Time, ok bool) {
	age := now.Sub(m.At)
	if age > within {
		return nil, nil, time.Time{}, false
	}
	shift := min(age, 0)
	renewals, verdicts = map[string]broker.Renewal{}, map[string]verdict{}
	for id, mm := range m.Members {
		if !mm.Renewed.IsZero() {
			renewals[id] = broker.Renewal{RenewTime: mm.Renewed, SeenAt: mm.Seen.Add(shift), Unconfirmed: mm.Unconfirmed}
		}
		if mm.Reach != "" {
			state := reach.Reachable
			if mm.Reach == reach.Unreachable.String() {
				state = reach.Unreachable
			}
			verdicts[id] = verdict{state: state, since: mm.Since.Add(shift)}
		}
	}
	return renewals, verdicts, m.At.Add(shift), true
}

// remember is this process's decisions at now as names.AnnotationDecisions (broker.Renewer.Decisions).
func (d *decisions) remember(now time.Time) string {
	var verdicts map[string]verdict
	if d.reach != nil {
		verdicts = verdictsOf(d.reach)
	}
	return rememberAt(d.liveness.Memory(), verdicts, d.liveness.Alive, now).encode()
}

// resume takes up the decisions a previous process wrote on this member's Lease, read at now by this process's
// first renewal (broker.Renewer.Resume): liveness takes the renewals at its first look at the Leases, and the
// tracker the verdicts of the members it has no verdict of yet. Without the probe, verdicts are not resumed: no
// round would ever confirm or contradict them.
func (d *decisions) resume(annotation string, now time.Time) {
	m, err := decodeMemory(annotation, d.id)
	if err != nil {
		d.log.Error(err, "ignoring the decisions on this member's broker Lease: out of shape")
		return
	}
	renewals, verdicts, at, ok := resumable(m, now, resumeWithin(d.grace))
	if !ok {
		d.log.Info("not resuming the decisions on this member's broker Lease: written too long ago", "written", m.At)
		return
	}
	d.liveness.Resume(renewals, at)
	resumed := 0
	if d.reach != nil {
		for id, v := range verdicts {
			if d.reach.Resume(id, v.state, v.since) {
				resumed++
			}
		}
	}
	d.log.Info("resuming from the decisions of the last process to lead", "written", m.At, "renewals", len(renewals),
		"verdicts", resumed)
}
