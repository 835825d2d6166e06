package chaos

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/framework"
)

// A kind of fault: what it hits, for how long, and how it is caused and undone. The plan (plan) is drawn from the
// seed alone, before the run, so that a seed replays the same faults in the same order at the same times; the run
// only waits, when a fault's target is not back yet, before the next fault on it.
type kind struct {
	name string
	// count is how many targets of this kind there are (etcd members, API servers); 0 for one per member.
	count int
	// slot is what the fault occupies; needs, what must be free for it to start (a pod is found through its
	// member's API server). A member's fault's slots are the member's own.
	slot, needs string
	// hold draws how long the fault lasts before it is undone; settle is how long its slot stays taken after, for
	// the target to come back (a killed CoreDNS pod's container to be Ready again, say).
	hold   func(rng *rand.Rand, run time.Duration) time.Duration
	settle time.Duration
	// cause causes the fault on target (pick draws among equal candidates, such as a member's CoreDNS pods) and
	// returns what undoes it.
	cause func(ctx context.Context, r *run, target, pick int) (undo func(context.Context) error, err error)
}

// targets is how many targets of the kind there are.
func (k kind) targets(members int) int {
	if k.count == 0 {
		return members
	}
	return k.count
}

// slotOf and needsOf name the slots of the fault on target.
func (k kind) slotOf(target int) string  { return k.slotName(k.slot, target) }
func (k kind) needsOf(target int) string { return k.slotName(k.needs, target) }

func (k kind) slotName(slot string, target int) string {
	if k.count > 0 || slot == "" {
		return slot
	}
	return fmt.Sprintf("%s-%d", slot, target)
}

// between draws a duration in [lo, hi].
func between(lo, hi time.Duration) func(*rand.Rand, time.Duration) time.Duration {
	return func(rng *rand.Rand, _ time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
}

// kinds are the faults a run draws from, each as likely as the others.
var kinds = []kind{
	{name: "etcd member killed (SIGKILL), restarted", count: 3, slot: "etcd",
		hold: between(time.Second, 10*time.Second), settle: 5 * time.Second,
		cause: func(ctx context.Context, r *run, target, _ int) (func(context.Context) error, error) {
			return brokerKill(r.f.Broker.HA.Etcd[target])
		}},
	{name: "etcd member frozen (SIGSTOP), thawed", count: 3, slot: "etcd",
		hold: between(2*time.Second, 20*time.Second), settle: 5 * time.Second,
		cause: func(ctx context.Context, r *run, target, _ int) (func(context.Context) error, error) {
			return brokerPause(r.f.Broker.HA.Etcd[target])
		}},
	{name: "broker API server killed (SIGKILL), restarted", count: 2, slot: "broker-api",
		hold: between(time.Second, 10*time.Second), settle: 5 * time.Second,
		cause: func(ctx context.Context, r *run, target, _ int) (func(context.Context) error, error) {
			return brokerKill(r.f.Broker.HA.APIServers[target])
		}},
	{name: "broker API server frozen (SIGSTOP), thawed", count: 2, slot: "broker-api",
		hold: between(2*time.Second, 20*time.Second), settle: 5 * time.Second,
		cause: func(ctx context.Context, r *run, target, _ int) (func(context.Context) error, error) {
			return brokerPause(r.f.Broker.HA.APIServers[target])
		}},
	{name: "load balancer killed (SIGKILL), restarted", count: 1, slot: "lb",
		hold: between(0, 3*time.Second), settle: 2 * time.Second,
		cause: func(ctx context.Context, r *run, _, _ int) (func(context.Context) error, error) {
			return brokerKill(r.f.Broker.HA.LoadBalancer)
		}},
	{name: "elected controller killed (SIGKILL)", slot: "controller", needs: "api",
		hold: between(0, 0), settle: 20 * time.Second,
		cause: func(ctx context.Context, r *run, target, _ int) (func(context.Context) error, error) {
			m := r.f.Members[target]
			p, err := m.LeaderPod(ctx)
			if err != nil {
				return nil, err
			}
			return nothing, m.KillPod(ctx, p)
		}},
	{name: "elected controller frozen (SIGSTOP), thawed", slot: "controller", needs: "api",
		hold: between(2*time.Second, 30*time.Second), settle: 20 * time.Second,
		cause: func(ctx context.Context, r *run, target, _ int) (func(context.Context) error, error) {
			m := r.f.Members[target]
			p, err := m.LeaderPod(ctx)
			if err != nil {
				return nil, err
			}
			return pausePod(ctx, m, p)
		}},
	{name: "CoreDNS replica killed (SIGKILL)", slot: "coredns", needs: "api",
		hold: between(0, 0), settle: 20 * time.Second,
		cause: func(ctx context.Context, r *run, target, pick int) (func(context.Context) error, error) {
			m := r.f.Members[target]
			p, err := dnsPod(ctx, m, pick)
			if err != nil {
				return nil, err
			}
			return nothing, m.KillPod(ctx, p)
		}},
	{name: "CoreDNS replica frozen (SIGSTOP), thawed", slot: "coredns", needs: "api",
		hold: between(2*time.Second, 20*time.Second), settle: 20 * time.Second,
		cause: func(ctx context.Context, r *run, target, pick int) (func(context.Context) error, error) {
			m := r.f.Members[target]
			p, err := dnsPod(ctx, m, pick)
			if err != nil {
				return nil, err
			}
			return pausePod(ctx, m, p)
		}},
	{name: "member API server killed (SIGKILL), restarted", slot: "api",
		hold: between(0, 0), settle: 5 * time.Second,
		cause: func(ctx context.Context, r *run, target, _ int) (func(context.Context) error, error) {
			return nothing, r.f.Members[target].KillAPIServer(ctx)
		}},
	{name: "member API server frozen (SIGSTOP), thawed", slot: "api",
		hold: between(2*time.Second, 20*time.Second), settle: 5 * time.Second,
		cause: func(ctx context.Context, r *run, target, _ int) (func(context.Context) error, error) {
			resume, err := r.f.Members[target].PauseAPIServer()
			return func(context.Context) error { return resume() }, err
		}},
	{name: "member cut from the broker (nftables drop)", slot: "cut",
		hold: func(rng *rand.Rand, run time.Duration) time.Duration {
			// 30 s to 2 minutes, and no more than half a short run.
			hi := min(2*time.Minute, max(30*time.Second, run/2))
			return 30*time.Second + time.Duration(rng.Int64N(int64(hi-30*time.Second)+1))
		}, settle: 5 * time.Second,
		cause: func(ctx context.Context, r *run, target, _ int) (func(context.Context) error, error) {
			rejoin, err := r.f.Members[target].CutFromBroker()
			return func(context.Context) error { return rejoin() }, err
		}},
}

func nothing(context.Context) error { return nil }

// brokerKill kills a process of the broker; undo starts it again and waits until it serves.
func brokerKill(p *clusterset.BrokerProcess) (func(context.Context) error, error) {
	p.Kill()
	return p.Restart, nil
}

// brokerPause freezes a process of the broker; undo thaws it.
func brokerPause(p *clusterset.BrokerProcess) (func(context.Context) error, error) {
	if err := p.Pause(); err != nil {
		return nil, err
	}
	return func(context.Context) error { return p.Resume() }, nil
}

// pausePod freezes a pod's containers; undo thaws them.
func pausePod(ctx context.Context, m *framework.Member, p corev1.Pod) (func(context.Context) error, error) {
	resume, err := m.PausePod(ctx, p)
	if err != nil {
		return nil, err
	}
	return func(context.Context) error { resume(); return nil }, nil
}

// dnsPod is the member's CoreDNS pod pick designates, among those running, by name.
func dnsPod(ctx context.Context, m *framework.Member, pick int) (corev1.Pod, error) {
	pods, err := m.DNSPods(ctx)
	if err != nil {
		return corev1.Pod{}, err
	}
	pods = slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.Status.Phase != corev1.PodRunning })
	if len(pods) == 0 {
		return corev1.Pod{}, fmt.Errorf("%s has no running CoreDNS pod", m.Name)
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	return pods[pick%len(pods)], nil
}

// planned is one fault of the plan.
type planned struct {
	at           time.Duration // after the start
	kind         int           // index in kinds
	target, pick int
	hold         time.Duration
}

// plan draws the run's faults from the seed alone: one every `every`, each of a kind drawn at random among those
// whose slot is free then, as far as the plan knows (holds and settles, plus a margin for restarts).
func plan(seed uint64, members int, run, every time.Duration) []planned {
	rng := rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d))
	const margin = 15 * time.Second
	free := map[string]time.Duration{} // slot: when it is free again
	var out []planned
	for at := every; at <= run; at += every {
		var open []int
		for i, k := range kinds {
			for target := range k.targets(members) {
				if free[k.slotOf(target)] <= at && free[k.needsOf(target)] <= at {
					open = append(open, i*1000+target)
				}
			}
		}
		if len(open) == 0 {
			continue
		}
		c := open[rng.IntN(len(open))]
		p := planned{at: at, kind: c / 1000, target: c % 1000, pick: rng.IntN(2)}
		k := kinds[p.kind]
		p.hold = k.hold(rng, run)
		free[k.slotOf(p.target)] = at + p.hold + k.settle + margin
		out = append(out, p)
	}
	return out
}

// fault is a fault as it happened.
type fault struct {
	planned
	member      string // for a member's fault
	start, done time.Time
	err         error // why it could not be caused or undone
}

// kindName is the fault's kind.
func (f fault) kindName() string { return kinds[f.kind].name }

// inject runs the plan: each fault at its time, or once its target is back, undone after its hold.
func (r *run) inject(ctx context.Context) {
	start := time.Now()
	var mu sync.Mutex
	busy := map[string]chan struct{}{} // slot: closed once free
	var wg sync.WaitGroup
	for _, p := range plan(r.cfg.seed, len(r.f.Members), r.cfg.duration, r.cfg.every) {
		k := kinds[p.kind]
		if wait := time.Until(start.Add(p.at)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		for _, s := range []string{k.slotOf(p.target), k.needsOf(p.target)} {
			mu.Lock()
			ch := busy[s]
			mu.Unlock()
			if ch != nil {
				<-ch
			}
		}
		f := fault{planned: p, start: time.Now()}
		if k.count == 0 {
			f.member = r.f.Members[p.target].Name
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		undo, err := k.cause(cctx, r, p.target, p.pick)
		cancel()
		if err != nil {
			f.err = fmt.Errorf("causing it: %w", err)
			r.record(f)
			continue
		}
		freed := make(chan struct{})
		mu.Lock()
		busy[k.slotOf(p.target)] = freed
		mu.Unlock()
		wg.Go(func() {
			defer close(freed)
			t := time.NewTimer(p.hold)
			<-t.C
			uctx, cancel := context.WithTimeout(ctx, timeout)
			if err := undo(uctx); err != nil {
				f.err = fmt.Errorf("undoing it: %w", err)
			}
			cancel()
			f.done = time.Now()
			r.record(f)
			t.Reset(k.settle)
			<-t.C
		})
	}
	wg.Wait()
}

// record keeps a fault that happened, and logs it.
func (r *run) record(f fault) {
	r.mu.Lock()
	r.faults = append(r.faults, f)
	r.mu.Unlock()
	r.t.Logf("fault %s", f)
}

// String says what the fault was, on what and when.
func (f fault) String() string {
	on := f.member
	if on == "" {
		on = fmt.Sprintf("#%d", f.target)
	}
	s := fmt.Sprintf("%s on %s from %s", f.kindName(), on, f.start.Format("15:04:05.000"))
	if !f.done.IsZero() {
		s += " to " + f.done.Format("15:04:05.000")
	}
	if f.err != nil {
		s += fmt.Sprintf(" (%v)", f.err)
	}
	return s
}

// activeAt lists the faults on at t (onAt).
func (r *run) activeAt(t time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var on []string
	for _, f := range r.faults {
		if f.onAt(t) {
			on = append(on, f.String())
		}
	}
	return on
}

// onAt says whether the fault was caused and on at t, or undone less than tolerated before.
func (f fault) onAt(t time.Time) bool {
	return f.err == nil && !t.Before(f.start) && t.Before(f.done.Add(tolerated))
}

func TestPlan(t *testing.T) {
	const run, every = 10 * time.Minute, 5 * time.Second
	p := plan(42, 2, run, every)
	if !slices.Equal(p, plan(42, 2, run, every)) {
		t.Error("the same seed planned different faults")
	}
	if slices.Equal(p, plan(43, 2, run, every)) {
		t.Error("another seed planned the same faults")
	}
	if len(p) < 100 {
		t.Errorf("%d faults planned in %s, want at least 100", len(p), run)
	}
	seen := map[int]bool{}
	busy := map[string]time.Duration{} // slot: busy until, without the margin
	for _, f := range p {
		k := kinds[f.kind]
		seen[f.kind] = true
		if f.at > run || f.target >= k.targets(2) {
			t.Errorf("%+v: out of the run or of the targets", f)
		}
		for _, s := range []string{k.slotOf(f.target), k.needsOf(f.target)} {
			if s != "" && busy[s] > f.at {
				t.Errorf("%s on %s at %s while the slot is taken until %s", k.name, s, f.at, busy[s])
			}
		}
		busy[k.slotOf(f.target)] = f.at + f.hold + k.settle
	}
	if len(seen) != len(kinds) {
		t.Errorf("%d of the %d kinds planned in %s", len(seen), len(kinds), run)
	}
}
