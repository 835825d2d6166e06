package controller

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"vksfleet.dev/fleet/controller/admit"
)

// refusal is one value a service's import leaves out, with the cluster that wrote it; whole when it is the
// cluster's export record, which takes its export out of the import.
type refusal struct {
	from    string
	problem admit.Problem
	whole   bool
}

// identity is what tells one refusal from another across gathers: a limit's refusal is the same while the member
// stays over it, whichever of its slices is the first left out (the message names it, and it moves while a
// member's thousands of slices arrive in any order), so that a flood is one log line, count and Event, not one per
// slice.
func (r refusal) identity() refusal {
	if slices.Contains(admit.LimitReasons, r.problem.Reason) {
		r.problem.Message = ""
	}
	return r
}

// refusalLog remembers what each service's last gather refused, so that a refusal that stands across reconciles
// is logged and counted once, when it appears, and again only if it goes away and comes back: a service
// reconciled every few seconds would otherwise repeat the same line and inflate the counter. The zero value is
// ready for use; services reconcile concurrently, one gather per service at a time.
type refusalLog struct {
	mu      sync.Mutex
	pending map[types.NamespacedName][]refusal
	last    map[types.NamespacedName]map[refusal]bool
}

// add records a refusal of the gather of key that is under way.
func (l *refusalLog) add(key types.NamespacedName, r refusal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		l.pending = map[types.NamespacedName][]refusal{}
	}
	l.pending[key] = append(l.pending[key], r)
}

// settle ends the gather of key: it returns the refusals the previous gather of key did not have, in the order
// they were added, and remembers this gather's.
func (l *refusalLog) settle(key types.NamespacedName) []refusal {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.pending[key]
	delete(l.pending, key)
	var fresh []refusal
	seen := map[refusal]bool{}
	for _, r := range now {
		id := r.identity()
		if !l.last[key][id] && !seen[id] {
			fresh = append(fresh, r)
		}
		seen[id] = true
	}
	if len(seen) == 0 {
		delete(l.last, key)
		return nil
	}
	if l.last == nil {
		l.last = map[types.NamespacedName]map[refusal]bool{}
	}
	l.last[key] = seen
	return fresh
}
