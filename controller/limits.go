package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/export"
)

// limits are what one member's export of one service, and all its exports, may bring into this member's imports,
// and what one namespace's exports may take of this member's broker quota (Options.MaxEndpointsPerService,
// MaxEndpointsPerMember, MaxSlicesPerNamespace), with the state the last two need across services.
type limits struct {
	endpointsPerService, slicesPerService int
	// members divide MaxEndpointsPerMember among each member's services, namespaces MaxSlicesPerNamespace among
	// each namespace's exports.
	members, namespaces *share
	// limited is what the last reconcile of each service left unpublished of its export, for its Ready condition.
	mu      sync.Mutex
	limited map[types.NamespacedName]*export.Limited
}

func newLimits(o Options) *limits {
	return &limits{
		endpointsPerService: o.MaxEndpointsPerService,
		slicesPerService:    admit.SlicesPerService(o.MaxEndpointsPerService),
		members:             newShare(o.MaxEndpointsPerMember),
		namespaces:          newShare(o.MaxSlicesPerNamespace),
		limited:             map[types.NamespacedName]*export.Limited{},
	}
}

// setLimited remembers what a limit leaves unpublished of the service's export (nil: nothing).
func (l *limits) setLimited(key types.NamespacedName, limited *export.Limited) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if limited == nil {
		delete(l.limited, key)
	} else {
		l.limited[key] = limited
	}
}

// limitedOf is what setLimited last remembered for the service.
func (l *limits) limitedOf(key types.NamespacedName) *export.Limited {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limited[key]
}

// share divides a limit of each group (a member's endpoints, a namespace's broker slices) among the group's
// services, first come, first served: a service keeps what it holds, and takes more only from what the group's
// other services leave. Which services of a group past its limit go short depends on the order they come in;
// the total never passes the limit, though services reconcile concurrently.
type share struct {
	limit  int
	mu     sync.Mutex
	held   map[string]map[types.NamespacedName]int
	total  map[string]int
	seeded bool
}

func newShare(limit int) *share {
	return &share{limit: limit, held: map[string]map[types.NamespacedName]int{}, total: map[string]int{}}
}

// take makes the service hold, of the group's limit, the longest prefix of sizes that fits in what the group's
// other services leave (admit.Fit), and returns how many of sizes that is.
func (s *share) take(group string, key types.NamespacedName, sizes []int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, used := admit.Fit(sizes, len(sizes), s.limit-(s.total[group]-s.held[group][key]))
	s.set(group, key, used)
	return n
}

// keepOnly releases what the service holds in every group but those keep names.
func (s *share) keepOnly(key types.NamespacedName, keep map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for group, held := range s.held {
		if _, ok := held[key]; ok && !keep[group] {
			s.set(group, key, 0)
		}
	}
}

// seed sets, once, what each service holds to what read finds, before any take: what is already published. A read
// that fails is tried again at the next seed.
func (s *share) seed(read func() (map[string]map[types.NamespacedName]int, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seeded {
		return nil
	}
	found, err := read()
	if err != nil {
		return err
	}
	for group, services := range found {
		for key, n := range services {
			s.set(group, key, n)
		}
	}
	s.seeded = true
	return nil
}

// set makes the service hold n of the group's limit; s.mu is held.
func (s *share) set(group string, key types.NamespacedName, n int) {
	s.total[group] += n - s.held[group][key]
	switch {
	case n > 0 && s.held[group] == nil:
		s.held[group] = map[types.NamespacedName]int{key: n}
	case n > 0:
		s.held[group][key] = n
	default:
		delete(s.held[group], key)
		if len(s.held[group]) == 0 {
			delete(s.held, group)
			delete(s.total, group)
		}
	}
}
