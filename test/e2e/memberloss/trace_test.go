package memberloss

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/proc"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

// tracePoll is how often a trace looks at the imported slices and kube-proxy's last sync. kube-proxy's metric
// carries the sync's own time, and its syncs are at least a second apart, so this only bounds the slices' error.
const tracePoll = 25 * time.Millisecond

// trace follows, on one importing member, the steps between a fault of cluster-b and the member's traffic leaving
// it: its elected controller's decision (its log line), its imported slices of a service no longer holding a ready
// endpoint of cluster-b (polled), its node's kube-proxy syncs (kube-proxy's last-sync metric, polled), and the
// failed requests of its loop. A figure over the target says which step took the time.
type trace struct {
	m   *framework.Member
	svc string
	// clients are the addresses of the pod whose connections are followed, one per IP family.
	clients []netip.Addr
	// places are the network namespaces whose unreach counters the report compares with counters, their values
	// when the trace began: the fleet's and the client pod's.
	places   []netPlace
	counters map[string]map[string]int64
	unread   []string // the places whose counters could not be read
	from     time.Time
	stop     context.CancelFunc
	done     sync.WaitGroup

	mu      sync.Mutex
	sliceAt time.Time // when the slices first held no ready endpoint of cluster-b
	// readyFlips are the times after sliceAt when cluster-b's endpoints turned ready again, or not ready again,
	// in turn; readyBack says which they are now.
	readyFlips []time.Time
	readyBack  bool
	// states are the slices' states (trace.slices) as they changed.
	states   []sliceState
	syncs    []time.Time // kube-proxy syncs after from
	pollErrs int
	// unanswered are the connections to the echo port that the node's conntrack showed waiting for a SYN-ACK,
	// by client address and port: when first seen, and the endpoint kube-proxy sent them to.
	unanswered map[string]synSent
	// reuses are the SYNs that the node's conntrack gave no new entry (reuse_test.go), by client address and
	// port: when each was last seen; hits are those seen since the trace began.
	reuses map[string]time.Time
	hits   []reuse
}

// sliceState is the state of a service's imported slices from a moment on.
type sliceState struct {
	at    time.Time
	state string
}

// synSent is a connection waiting for its SYN-ACK.
type synSent struct {
	at      time.Time
	backend string
	before  bool // there when the trace began
}

// startTrace starts following m's import of svc, and the connections of the pod clientPod, from now on.
func (e *env) startTrace(m *framework.Member, svc, clientPod string) *trace {
	ctx, cancel := context.WithCancel(context.Background())
	tr := &trace{m: m, svc: svc, stop: cancel, unanswered: map[string]synSent{}, reuses: map[string]time.Time{}, places: netPlaces(e.f)}
	pod := &corev1.Pod{}
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: clientPod}, pod); err == nil {
		for _, ip := range pod.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				tr.clients = append(tr.clients, a)
			}
		}
		if p, ok := podPlace(clientPod, string(pod.UID)); ok {
			tr.places = append(tr.places, p)
		} else {
			tr.unread = append(tr.unread, clientPod+" (no process in its cgroup)")
		}
	}
	var unread []string
	tr.counters, unread = snapshot(tr.places)
	tr.unread = append(tr.unread, unread...)
	// The first look at conntrack and at the marks learns what earlier steps left (SYN_SENT lasts 2 minutes), known
	// and not shown; it ends before the trace's time begins, so that no SYN of the step it traces can be taken for
	// an earlier one's (under load a look takes hundreds of ms: make test once lost a reuse 307 ms into a step so).
	tr.noteReuses(tr.reused(ctx), true)
	for client, backend := range tr.synSent(ctx) {
		tr.unanswered[client] = synSent{at: time.Now(), backend: backend, before: true}
	}
	tr.from = time.Now()
	tr.done.Go(func() { tr.follow(ctx) })
	return tr
}

// follow polls until ctx ends.
func (tr *trace) follow(ctx context.Context) {
	tick := time.NewTicker(tracePoll)
	defer tick.Stop()
	for i := 0; ; i++ {
		now := time.Now()
		var syns map[string]string
		var reuses map[string]time.Time
		if i%4 == 0 {
			// A connection that fails waits a second for its SYN-ACK: every fourth poll sees it, at a quarter of the
			// cost. The reuses are stamped with their own time.
			syns, reuses = tr.synSent(ctx), tr.reused(ctx)
		}
		ready, state, sliceErr := tr.slices(ctx)
		synced, syncErr := tr.lastSync()
		tr.mu.Lock()
		if sliceErr == nil && (len(tr.states) == 0 || tr.states[len(tr.states)-1].state != state) {
			tr.states = append(tr.states, sliceState{now, state})
		}
		if sliceErr == nil && ready == 0 && tr.sliceAt.IsZero() {
			tr.sliceAt = now
		}
		if sliceErr == nil && !tr.sliceAt.IsZero() && (ready > 0) != tr.readyBack {
			tr.readyBack = ready > 0
			tr.readyFlips = append(tr.readyFlips, now)
		}
		if syncErr == nil && synced.After(tr.from) && !slices.Contains(tr.syncs, synced) {
			tr.syncs = append(tr.syncs, synced)
		}
		if sliceErr != nil || syncErr != nil {
			tr.pollErrs++
		}
		tr.noteReuses(reuses, false)
		for client, backend := range syns {
			if _, ok := tr.unanswered[client]; !ok {
				tr.unanswered[client] = synSent{at: now, backend: backend}
			}
		}
		tr.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// slices reads the member's imported slices of the service: how many ready endpoints of cluster-b they hold, and
// their state in short, "cluster:address:ready|not|terminating[@zone hints]" per endpoint, sorted.
func (tr *trace) slices(ctx context.Context) (readyOfB int, state string, err error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := tr.m.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{mcsv1beta1.LabelServiceName: tr.svc}); err != nil {
		return 0, "", err
	}
	var eps []string
	for _, s := range list.Items {
		from := s.Labels[mcsv1beta1.LabelSourceCluster]
		for _, e := range s.Endpoints {
			ready, ep := endpointState(from, e)
			if ready && from == "cluster-b" {
				readyOfB++
			}
			eps = append(eps, ep)
		}
	}
	slices.Sort(eps)
	return readyOfB, strings.Join(eps, " "), nil
}

// endpointState says whether an endpoint imported from cluster from is ready, and its state in short,
// "cluster:address:ready|not|terminating[@zone hints]", cluster without its "cluster-" prefix.
func endpointState(from string, e discoveryv1.Endpoint) (ready bool, state string) {
	ready = e.Conditions.Ready == nil || *e.Conditions.Ready
	cond := "not"
	switch {
	case ready:
		cond = "ready"
	case e.Conditions.Terminating != nil && *e.Conditions.Terminating:
		cond = "terminating"
	}
	state = strings.TrimPrefix(from, "cluster-") + ":" + strings.Join(e.Addresses, ",") + ":" + cond
	if e.Hints != nil {
		var zones []string
		for _, z := range e.Hints.ForZones {
			zones = append(zones, z.Name)
		}
		state += "@" + strings.Join(zones, ",")
	}
	return ready, state
}

// lastSync is when the member's (first) node's kube-proxy last synced its rules.
func (tr *trace) lastSync() (time.Time, error) {
	if len(tr.m.Nodes) == 0 || len(tr.m.Nodes[0].Addrs) == 0 {
		return time.Time{}, fmt.Errorf("%s has no node", tr.m.Name)
	}
	url := "http://" + netip.AddrPortFrom(tr.m.Nodes[0].Addrs[0], clusterset.ProxyMetricsPort).String() + "/metrics"
	families, err := proc.Scrape(url)
	if err != nil {
		return time.Time{}, err
	}
	// One series per IP family, each synced in turn: the latest is when both were.
	var last float64
	for _, f := range families {
		if f.GetName() == "kubeproxy_sync_proxy_rules_last_timestamp_seconds" {
			for _, m := range f.GetMetric() {
				last = max(last, m.GetGauge().GetValue())
			}
		}
	}
	if last == 0 {
		return time.Time{}, fmt.Errorf("%s: kube-proxy has not synced", url)
	}
	return time.Unix(0, int64(last*1e9)), nil
}

// synSent reads the node's conntrack table: the connections to the echo port in SYN_SENT, client address and
// port to the endpoint kube-proxy chose (the reply's source).
func (tr *trace) synSent(ctx context.Context) map[string]string {
	if len(tr.m.Nodes) == 0 {
		return nil
	}
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", tr.m.Nodes[0].NS, "cat", "/proc/net/nf_conntrack").Output()
	if err != nil {
		return nil
	}
	found := map[string]string{}
	port := fmt.Sprintf("dport=%d", workload.EchoPort)
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if !slices.Contains(f, "SYN_SENT") || !slices.Contains(f, port) {
			continue
		}
		var srcs, sports []string
		for _, kv := range f {
			if v, ok := strings.CutPrefix(kv, "src="); ok {
				srcs = append(srcs, v)
			}
			if v, ok := strings.CutPrefix(kv, "sport="); ok {
				sports = append(sports, v)
			}
		}
		// conntrack writes IPv6 addresses in full, the API in short: compared parsed.
		client, err := netip.ParseAddr(srcs[0])
		if len(srcs) == 2 && len(sports) == 2 && err == nil && slices.Contains(tr.clients, client) {
			found[client.String()+":"+sports[0]] = srcs[1]
		}
	}
	return found
}

// decisions are the times of the elected controller's "member data plane changed" lines since the trace began,
// as the kubelet stamped them.
func (tr *trace) decisions(ctx context.Context) ([]time.Time, error) {
	leader, err := tr.m.LeaderPod(ctx)
	if err != nil {
		return nil, err
	}
	since := metav1.NewTime(tr.from.Add(-time.Second))
	b, err := tr.m.Kube.CoreV1().Pods(leader.Namespace).GetLogs(leader.Name, &corev1.PodLogOptions{
		Container: leader.Spec.Containers[0].Name, SinceTime: &since, Timestamps: true}).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var at []time.Time
	lines := bufio.NewScanner(bytes.NewReader(b))
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	for lines.Scan() {
		stamp, text, _ := strings.Cut(lines.Text(), " ")
		if !strings.Contains(text, "member data plane changed") || !strings.Contains(text, "cluster-b") {
			continue
		}
		if ts, err := time.Parse(time.RFC3339Nano, stamp); err == nil && ts.After(tr.from) {
			at = append(at, ts)
		}
	}
	return at, lines.Err()
}

// report stops the trace and describes it against the loop's requests since the trace began, in ms after it.
func (tr *trace) report(ctx context.Context, reqs []workload.Request) string {
	tr.stop()
	tr.done.Wait()
	reused := tr.staleHits(reqs)
	ms := func(at time.Time) string {
		if at.IsZero() {
			return "never"
		}
		return fmt.Sprintf("+%d", at.Sub(tr.from).Milliseconds())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ", tr.m.Name)
	if ds, err := tr.decisions(ctx); err != nil {
		fmt.Fprintf(&b, "decision unknown (%v)", err)
	} else {
		var s []string
		for _, d := range ds {
			s = append(s, ms(d))
		}
		fmt.Fprintf(&b, "decided %s", strings.Join(s, ","))
	}
	tr.mu.Lock()
	fmt.Fprintf(&b, "; %s's slices without a ready endpoint of cluster-b %s", tr.svc, ms(tr.sliceAt))
	for i, at := range tr.readyFlips {
		fmt.Fprintf(&b, ", %s %s", map[bool]string{true: "ready again", false: "not ready again"}[i%2 == 0], ms(at))
	}
	b.WriteString("; slices:")
	for _, st := range tr.states {
		fmt.Fprintf(&b, " %s [%s]", ms(st.at), st.state)
	}
	b.WriteString("; kube-proxy synced")
	for _, s := range tr.syncs {
		fmt.Fprintf(&b, " %s", ms(s))
	}
	if tr.pollErrs > 0 {
		fmt.Fprintf(&b, " (%d polls failed)", tr.pollErrs)
	}
	var syns []synSent
	for _, v := range tr.unanswered {
		if !v.before {
			syns = append(syns, v)
		}
	}
	slices.SortFunc(syns, func(x, y synSent) int { return x.at.Compare(y.at) })
	b.WriteString("; SYNs unanswered:")
	for _, v := range syns {
		fmt.Fprintf(&b, " %s→%s", ms(v.at), v.backend)
	}
	tr.mu.Unlock()
	after, unread := snapshot(tr.places)
	fmt.Fprintf(&b, "; unreachables sent or received: %s", unreachDelta(tr.counters, after))
	if unread = append(tr.unread, unread...); len(unread) > 0 {
		fmt.Fprintf(&b, " (not read: %s)", strings.Join(unread, ", "))
	}
	b.WriteString("; SYNs given no new conntrack entry:")
	for _, h := range tr.hits {
		fmt.Fprintf(&b, " %s:%s", ms(h.at), h.port)
	}
	b.WriteString("; failed requests (start+latency, reason→address[ (reused entry)]):")
	for _, r := range reqs {
		if !r.OK {
			fmt.Fprintf(&b, " %d+%.0f %s→%s", r.StartMs-tr.from.UnixMilli(), r.LatencyMs, r.Reason, cmp.Or(r.Addr, "-"))
			if reused[r.Seq] {
				b.WriteString(" (reused entry)")
			}
		}
	}
	return b.String()
}
