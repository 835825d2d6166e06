package controller

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/reach"
	"vksfleet.dev/fleet/mcs/names"
)

// The data-plane probe's timing. A round asks probesPerRound endpoints of each other member, each bounded by
// probeTimeout, every probeInterval; after a failed round the next one confirms with confirmProbes. reach.Tracker
// turns a member unreachable after probeDown failed rounds in a row (0.6-0.9 s after a cut) and reachable again
// after probeUp good ones. A lost SYN costs a connection attempt a second, more than the timeout, so on a link
// that loses 5% of its packets each way a probe fails about one time in ten: a round of 2 one in a hundred, a
// confirming round of 4 one in ten thousand, both in a row one in a million, the odds three rounds of 2 had at
// the cost of one round more.
const (
	probeInterval  = 300 * time.Millisecond
	probeTimeout   = 300 * time.Millisecond
	probesPerRound = 2
	confirmProbes  = 4
	probeDown      = 2
	probeUp        = 2
)

// dataPlaneProbe measures, from this member's network position (its controller's pod), whether each other
// member's endpoints can be reached: a TCP connection to a few of its ready endpoints at a time, taken in turn.
// The cost grows with members, not endpoints: probesPerRound connections per member per round, whatever the
// number of services. A connection accepted or refused both prove the path; only silence counts as a failure.
type dataPlaneProbe struct {
	self    string
	broker  client.Reader // the broker cache
	tracker *reach.Tracker
	dial    func(ctx context.Context, addr string) error
	enqueue *triggers
	log     logr.Logger

	mu      sync.Mutex
	targets map[string][]string // member -> host:port to probe, sorted
	next    map[string]int      // member -> index in its targets of the next endpoint to probe
}

func newDataPlaneProbe(self string, broker client.Reader, tracker *reach.Tracker, enqueue *triggers, log logr.Logger) *dataPlaneProbe {
	return &dataPlaneProbe{self: self, broker: broker, tracker: tracker, dial: dialTCP, enqueue: enqueue,
		log: log.WithName("dataplane"), next: map[string]int{}}
}

// dialTCP connects to addr and closes the connection at once; a refusal also proves the path.
func dialTCP(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: probeTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		return c.Close()
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil
	}
	return err
}

// Start probes every round until ctx ends (a manager.Runnable, run on the elected leader: the decisions feed its
// imports).
func (p *dataPlaneProbe) Start(ctx context.Context) error {
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for {
		// The endpoints are read again every round (from the cache, without copies): a member whose endpoints
		// all went is forgotten at once, not probed at their old addresses into a false Unreachable.
		if err := p.refresh(ctx); err != nil {
			p.log.Error(err, "reading the endpoints to probe")
		}
		p.probeRound(ctx, time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// refresh reads the other members' ready endpoints from the broker cache, and forgets members with none left.
func (p *dataPlaneProbe) refresh(ctx context.Context) error {
	list := &discoveryv1.EndpointSliceList{}
	if err := p.broker.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	targets := probeTargets(p.self, list.Items)
	p.mu.Lock()
	old := p.targets
	p.targets = targets
	for id := range p.next {
		if _, ok := targets[id]; !ok {
			delete(p.next, id)
		}
	}
	p.mu.Unlock()
	for id := range old {
		if _, ok := targets[id]; !ok && p.tracker.Forget(id) {
			p.changed(ctx, id)
		}
	}
	return nil
}

// probeTargets are, per other member, the addresses of its ready endpoints on their first TCP port, sorted. A
// slice counts for the member whose broker namespace holds it, as everywhere else, and only what admit.Slice takes
// of it is probed: a member cannot make every controller connect to a loopback or link-local address.
func probeTargets(self string, list []discoveryv1.EndpointSlice) map[string][]string {
	sets := map[string]map[string]bool{}
	for i := range list {
		id := broker.ClusterOf(&list[i])
		if id == self || id == "" || list[i].Namespace != names.BrokerNamespace(id) {
			continue
		}
		admitted, _, ok := admit.Slice(&list[i])
		if !ok {
			continue
		}
		s := &admitted
		port := tcpPort(s.Ports)
		if port == 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				if sets[id] == nil {
					sets[id] = map[string]bool{}
				}
				sets[id][net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))] = true
			}
		}
	}
	out := make(map[string][]string, len(sets))
	for id, set := range sets {
		for a := range set {
			out[id] = append(out[id], a)
		}
		slices.Sort(out[id])
	}
	return out
}

// tcpPort is the first TCP port of a slice, 0 when it has none.
func tcpPort(ports []discoveryv1.EndpointPort) int32 {
	for _, p := range ports {
		if p.Port != nil && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
			return *p.Port
		}
	}
	return 0
}

// probeRound probes probesPerRound endpoints of each member at once (confirmProbes for a suspected member), the
// next ones in turn, and records the round's outcome per member. A member with fewer endpoints has some probed
// twice: separate connections, lost independently.
func (p *dataPlaneProbe) probeRound(ctx context.Context, now time.Time) {
	p.mu.Lock()
	picks := map[string][]string{}
	for id, addrs := range p.targets {
		n := min(probesPerRound, len(addrs))
		if p.tracker.Suspected(id) {
			n = confirmProbes
		}
		for range n {
			picks[id] = append(picks[id], addrs[p.next[id]%len(addrs)])
			p.next[id]++
		}
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered := map[string]bool{}
	for id, addrs := range picks {
		for _, a := range addrs {
			wg.Go(func() {
				if p.dial(ctx, a) == nil {
					mu.Lock()
					answered[id] = true
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	for id := range picks {
		if p.tracker.Observe(id, answered[id], now) {
			p.changed(ctx, id)
		}
	}
}

// changed reports a member's new State and brings its services back to the workers.
func (p *dataPlaneProbe) changed(ctx context.Context, id string) {
	state := p.tracker.State(id)
	p.log.Info("member data plane changed", "member", id, "state", state.String())
	if err := p.enqueue.cluster(ctx, id); err != nil && ctx.Err() == nil {
		p.log.Error(err, "enqueueing the services of a member whose data plane changed", "member", id)
	}
}
