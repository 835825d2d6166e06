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
	coordinationv1 "k8s.io/api/coordination/v1"
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

// dataPlaneProbe measures, from this member's network position (a controller replica's pod), whether each other
// member's pods can be reached: a TCP connection to a few of its controller replicas at a time, taken in turn,
// at the addresses its broker Lease lists (names.AnnotationProbeAddresses), which no namespace user of that member
// writes; a member whose Lease lists none (an older release) is probed at its ready endpoints, as before. The cost
// grows with members, not endpoints: probesPerRound connections per member per round, whatever the number of
// services. Only a completed connection is an answer (observation). Every replica probes (it needs no election)
// and publishes its own verdicts (replicas); the elected one acts on a member's loss only when a replica on
// another node agrees (reach.Agreed). The elected one also brings back the services of members whose endpoints
// pass the stale limit, which no event marks.
type dataPlaneProbe struct {
	self     string
	broker   client.Reader // the broker cache
	tracker  *reach.Tracker
	liveness *broker.Liveness
	// staleAfter is the reconciler's: Options.LeaseGrace + Options.StaleLimit, 0 for no limit.
	staleAfter time.Duration
	dial       func(ctx context.Context, addr string) error
	// since measures how long a round took (time.Since when nil): see lateRound.
	since   func(time.Time) time.Duration
	enqueue *triggers
	// replicas publishes this replica's verdicts and reads the others'; nil when it cannot (no namespace), and then
	// no verdict of a loss is agreed. addresses takes the replicas' probe addresses for this member's Lease.
	replicas  *replicas
	addresses *probeAddresses
	// elected is closed once this replica leads (nil: it always does): only the leader's decisions feed imports.
	elected <-chan struct{}
	log     logr.Logger

	mu             sync.Mutex
	targets        map[string]probeTarget // member -> what to probe
	next           map[string]int         // member -> index in its targets of the next address to probe
	nextEndpoint   map[string]int         // member -> index in its endpoints of the next to confirm with
	overdue        map[string]bool        // members past the stale limit at the last round
	uncorroborated []string               // members found unreachable here alone at the last agreement
}

// probeTarget is what to probe of a member: host:port addresses, sorted, and whether they are its controller
// replicas' rather than its endpoints.
type probeTarget struct {
	addrs       []string
	controllers bool
	// namespace is the member's broker namespace, where a confirming round of a member probed at its own pods
	// (controllers) also takes a few of its exported endpoints (confirmEndpoints).
	namespace string
}

// confirmEndpoints is how many of a member's exported endpoints a confirming round probes beside its own pods: its
// controller and DNS pods are all replaced at once when its release is rolled out (or back), and a member whose
// pods are being replaced is not cut off. A namespace user's endpoints can then only keep a member in use, never
// take it out of use: they are probed only to confirm a loss its own pods suggest, and only a completed
// connection to one counts.
const confirmEndpoints = 2

func newDataPlaneProbe(self string, broker client.Reader, tracker *reach.Tracker, liveness *broker.Liveness,
	staleAfter time.Duration, enqueue *triggers, log logr.Logger) *dataPlaneProbe {
	return &dataPlaneProbe{self: self, broker: broker, tracker: tracker, liveness: liveness, staleAfter: staleAfter,
		dial: dialTCP, enqueue: enqueue, log: log.WithName("dataplane"), next: map[string]int{}, nextEndpoint: map[string]int{},
		overdue: map[string]bool{}}
}

// NeedLeaderElection is false: every replica probes, so that the leader's verdicts can be checked against another
// node's.
func (p *dataPlaneProbe) NeedLeaderElection() bool { return false }

// leading says whether this replica is the elected one, whose decisions feed the imports.
func (p *dataPlaneProbe) leading() bool {
	if p.elected == nil {
		return true
	}
	select {
	case <-p.elected:
		return true
	default:
		return false
	}
}

// dialTCP connects to addr and resets the connection at once: a close would leave the connection in TIME_WAIT,
// and with it an entry in the conntrack table of the controller's node, for 2 minutes, about 800 per other
// member. A refusal is an error (it wraps syscall.ECONNREFUSED): see observation.
func dialTCP(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: probeTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	// The connection completed, which is the answer; how it closes is not.
	_ = c.(*net.TCPConn).SetLinger(0)
	_ = c.Close()
	return nil
}

// observation turns one round of probes of a member into what the round tells of its data plane: ok when a
// connection completed, and nothing (observed false) when none did but one was refused and the member's Lease is
// not known to have lapsed. A refusal (a RST) proves a path to the address, not that the member's pods are behind
// it: a reused or vacated pod address refuses too. While the member's Lease lives, it publishes its current
// addresses, and a refusing one is no sign of a cut: counted as a failure, it would make every service of the
// member fall back (a port that is not listening, a pod between ready and listening); counted as an answer, it
// would hide a cut. Once the Lease lapsed, nothing refreshes the addresses any more, and a refusal counts as a
// failure: a member whose old addresses only refuse is left, not kept stale.
func observation(answered, refused, lapsed bool) (ok, observed bool) {
	if !answered && refused && !lapsed {
		return false, false
	}
	return answered, true
}

// lapsed says whether member id's Lease is known to have lapsed.
func (p *dataPlaneProbe) lapsed(id string) bool {
	select {
	case <-p.liveness.Observed():
		return !p.liveness.Alive(id)
	default:
		return false // no Lease seen yet
	}
}

// Start probes every round until ctx ends (a manager.Runnable, run on every replica).
func (p *dataPlaneProbe) Start(ctx context.Context) error {
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for {
		// The targets are read again every round (from the cache, without copies): a member whose endpoints
		// all went is forgotten at once, not probed at their old addresses into a false Unreachable.
		if err := p.refresh(ctx); err != nil {
			p.log.Error(err, "reading the addresses to probe")
		}
		now := time.Now()
		p.probeRound(ctx, now)
		p.agree(ctx, now)
		if p.leading() {
			p.checkStaleLimit(ctx, now)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// refresh reads what to probe of the other members from the broker cache, and forgets members with nothing left:
// the probe addresses each member's Lease lists, and only for a member whose Lease lists none (an older release),
// its ready endpoints, read from its broker namespace alone. A member with no Lease is not probed: nothing says
// where its controller runs, and the Lease decides alone.
func (p *dataPlaneProbe) refresh(ctx context.Context) error {
	leases := &coordinationv1.LeaseList{}
	if err := p.broker.List(ctx, leases, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	targets := map[string]probeTarget{}
	for i := range leases.Items {
		lease := &leases.Items[i]
		id := broker.LeaseOf(lease)
		if id == "" || id == p.self {
			continue
		}
		// A member whose Lease lapsed has lost its control plane, and its controller pods with it, as a rule: they
		// crash-loop without their API server, or were stopped; what then tells whether its data plane still serves
		// is its endpoints, as before controllers listed their own. A namespace user can only keep such a member in
		// use with them, for the stale limit at most, and only with connections that complete.
		value, ok := lease.Annotations[names.AnnotationProbeAddresses]
		if ok && !p.lapsed(id) {
			addrs, problem := admit.ProbeAddresses(value)
			if problem != nil {
				p.log.V(1).Info("probe addresses refused", "member", id, "reason", problem.Reason, "message", problem.Message)
			}
			if len(addrs) > 0 {
				targets[id] = probeTarget{addrs: addrs, controllers: true, namespace: lease.Namespace}
			}
			continue
		}
		list := &discoveryv1.EndpointSliceList{}
		if err := p.broker.List(ctx, list, client.InNamespace(lease.Namespace), client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		if addrs := probeTargets(p.self, list.Items)[id]; len(addrs) > 0 {
			targets[id] = probeTarget{addrs: addrs}
		}
	}
	p.mu.Lock()
	p.targets = targets
	for id := range p.next {
		if _, ok := targets[id]; !ok {
			delete(p.next, id)
		}
	}
	p.mu.Unlock()
	// The tracker outlives this probe (it is kept across the process's runs), so the members to forget are those it
	// knows, not only those this probe saw before: one that left between two runs would stay listed forever.
	for id := range p.tracker.States() {
		if _, ok := targets[id]; !ok && p.tracker.Forget(id) {
			p.changed(ctx, id)
		}
	}
	return nil
}

// probeTargets are, per other member, the addresses of its ready endpoints on their first TCP port, sorted: what is
// probed of a member whose Lease lists no probe addresses. A slice counts for the member whose broker namespace
// holds it, as everywhere else, and only what admit.Slice takes of it is probed: a member cannot make every
// controller connect to a loopback or link-local address.
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

// probeRound probes probesPerRound addresses of each member at once (confirmProbes for a suspected member), the
// next ones in turn, and records the round's outcome per member. A member with fewer addresses has some probed
// twice: separate connections, lost independently. A refusal by a member's controller replica is an answer: the
// address is that member's own pod, in a namespace of its operator's, and its network stack answered; a replica
// that is restarting, as one whose control plane is lost does, refuses.
func (p *dataPlaneProbe) probeRound(ctx context.Context, now time.Time) {
	start := time.Now()
	p.mu.Lock()
	picks := map[string][]string{}
	controllers := map[string]bool{}
	confirm := map[string]string{} // suspected members probed at their own pods -> their broker namespace
	for id, target := range p.targets {
		addrs := target.addrs
		controllers[id] = target.controllers
		n := min(probesPerRound, len(addrs))
		if p.tracker.Suspected(id) {
			n = confirmProbes
			if target.controllers && target.namespace != "" {
				confirm[id] = target.namespace
			}
		}
		for range n {
			picks[id] = append(picks[id], addrs[p.next[id]%len(addrs)])
			p.next[id]++
		}
	}
	p.mu.Unlock()
	backups := p.endpointPicks(ctx, confirm)
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered, refused := map[string]bool{}, map[string]bool{}
	for id, addrs := range picks {
		for _, a := range addrs {
			wg.Go(func() {
				err := p.dial(ctx, a)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					answered[id] = true
				case errors.Is(err, syscall.ECONNREFUSED):
					refused[id] = true
				}
			})
		}
	}
	for id, addrs := range backups {
		for _, a := range addrs {
			wg.Go(func() {
				// An endpoint's refusal proves nothing of the member (a vacated address refuses too).
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
	since := time.Since
	if p.since != nil {
		since = p.since
	}
	late := lateRound(since(start))
	if late {
		p.log.Info("a probe round ran late: its failures count neither way", "took", since(start).Round(time.Millisecond))
	}
	for id := range picks {
		ok, observed := observation(answered[id] || (controllers[id] && refused[id]), refused[id], p.lapsed(id))
		if late && !ok {
			observed = false
		}
		if observed && p.tracker.Observe(id, ok, now) {
			p.changed(ctx, id)
		}
	}
}

// endpointPicks returns, per member of confirm (id -> broker namespace), the next confirmEndpoints of its ready
// exported endpoints, read from the broker cache without copies: only for members a failed round made suspect, so
// that the cost of a round still grows with members, not endpoints.
func (p *dataPlaneProbe) endpointPicks(ctx context.Context, confirm map[string]string) map[string][]string {
	picks := map[string][]string{}
	for id, ns := range confirm {
		list := &discoveryv1.EndpointSliceList{}
		if err := p.broker.List(ctx, list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			continue
		}
		addrs := probeTargets(p.self, list.Items)[id]
		p.mu.Lock()
		if p.nextEndpoint == nil {
			p.nextEndpoint = map[string]int{}
		}
		for range min(confirmEndpoints, len(addrs)) {
			picks[id] = append(picks[id], addrs[p.nextEndpoint[id]%len(addrs)])
			p.nextEndpoint[id]++
		}
		p.mu.Unlock()
	}
	return picks
}

// lateAfter is how long a round of probes, each bounded by probeTimeout and run at once, may take before it counts
// as late: a process starved of CPU or frozen (a stalled node, a throttled container) cannot read the answers its
// probes got in time, and its silence would pass for a cut of every member at once.
const lateAfter = probeTimeout + 200*time.Millisecond

// lateRound says whether a round that took took ran late: its failures then say nothing of the members, and only
// the connections it completed count (a completed connection is an answer whenever it is read).
func lateRound(took time.Duration) bool { return took > lateAfter }

// checkStaleLimit brings back the services of the reachable members whose endpoints passed the stale limit since
// the last round, or no longer do: time alone moves them, which no event marks.
func (p *dataPlaneProbe) checkStaleLimit(ctx context.Context, now time.Time) {
	select {
	case <-p.liveness.Observed():
	default:
		return // no Lease seen yet: every member would look past the limit
	}
	members := p.liveness.Members(now)
	changed := map[string]bool{}
	p.mu.Lock()
	for id := range p.overdue {
		if _, ok := p.targets[id]; !ok {
			delete(p.overdue, id)
		}
	}
	for id := range p.targets {
		m, seen := members[id]
		if past := pastStaleLimit(m, seen, p.staleAfter); past != p.overdue[id] {
			p.overdue[id] = past
			changed[id] = past
		}
	}
	p.mu.Unlock()
	for id, past := range changed {
		if p.tracker.State(id) != reach.Reachable {
			continue // left, or in use, whatever the limit
		}
		if past {
			p.log.Info("member's control plane lost for longer than the stale limit: its endpoints are used only by "+
				"services that no other exporter has ready endpoints for", "member", id)
		} else {
			p.log.Info("member no longer past the stale limit", "member", id)
		}
		if err := p.enqueue.cluster(ctx, id); err != nil && ctx.Err() == nil {
			p.log.Error(err, "enqueueing the services of a member whose endpoints passed the stale limit", "member", id)
		}
	}
}

// changed reports a member's new State and, on the leader, brings its services back to the workers: another
// replica's workers do not run, and would leave the queue full.
func (p *dataPlaneProbe) changed(ctx context.Context, id string) {
	if !p.leading() {
		return
	}
	state := p.tracker.State(id)
	p.log.Info("member data plane changed", "member", id, "state", state.String())
	if err := p.enqueue.cluster(ctx, id); err != nil && ctx.Err() == nil {
		p.log.Error(err, "enqueueing the services of a member whose data plane changed", "member", id)
	}
}
