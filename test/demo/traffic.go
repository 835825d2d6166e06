package demo

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

// The client loops (workload.LoopPod) send over TCP: each request opens a connection of its own, so kube-proxy
// picks an endpoint for every request, and the reply echoes the request's sequence number, so it cannot be
// mistaken for another's. HTTP would go through kube-proxy the same way and add nothing the demo looks at.
const (
	loopInterval = 50 * time.Millisecond
	// loopDuration outlasts any run of the demo, yet ends a loop that the demo's own end missed.
	loopDuration = 30 * time.Minute
)

// startLoop runs a client loop as pod name in m, on a node of zone unless it is empty, sending to target, and
// follows its log until ctx ends.
func (d *Demo) startLoop(ctx context.Context, m *framework.Member, name, zone, target string) (*workload.Loop, error) {
	pod := workload.LoopPod(name, Namespace, target, loopInterval, loopDuration)
	where := m.Name
	if zone != "" {
		pod.Spec.NodeSelector = map[string]string{corev1.LabelTopologyZone: zone}
		where += "'s zone " + zone
	}
	d.say("%s, a pod in %s, runs: serve %s", name, where, strings.Join(pod.Spec.Containers[0].Command[1:], " "))
	start := time.Now()
	l, err := workload.StartLoop(ctx, m.Kube, pod, d.Timeout)
	if err != nil {
		return nil, err
	}
	d.say("    ok: %s runs and its log is followed (%s)", name, time.Since(start).Round(10*time.Millisecond))
	d.loops = append(d.loops, l)
	return l, nil
}

// waitTraffic waits until check holds for the requests l started since from (unix milliseconds).
func (d *Demo) waitTraffic(ctx context.Context, l *workload.Loop, from int64, what string, check func([]workload.Request) error) error {
	return d.eventually(ctx, what, func(context.Context) error {
		if err := l.Err(); err != nil {
			return err
		}
		return check(l.Requests(from, 0))
	})
}

// place says where a request was answered: the cluster, and in cluster-a the Deployment of the pod too
// ("cluster-a/near-z0"). The client loops run in cluster-a, where the locality part of story 2 runs a Deployment
// per zone: there the zone is the tier that matters, while elsewhere the cluster is.
func place(r workload.Request) string {
	if r.Cluster != "cluster-a" {
		return r.Cluster
	}
	// A Deployment's pods are named <deployment>-<pod template hash>-<suffix>.
	parts := strings.Split(r.Pod, "-")
	if len(parts) < 3 {
		return r.Cluster + "/" + r.Pod
	}
	return r.Cluster + "/" + strings.Join(parts[:len(parts)-2], "-")
}

// answeredBy holds once each place has answered at least n requests.
func answeredBy(n int, places ...string) func([]workload.Request) error {
	return func(reqs []workload.Request) error {
		f := tally(reqs)
		for _, p := range places {
			if f.answers[p] < n {
				return fmt.Errorf("%s answered %d requests, want %d (so far: %v)", p, f.answers[p], n, f)
			}
		}
		return nil
	}
}

// lastAnswered holds once the last n requests were all answered, at where unless it is empty.
func lastAnswered(n int, where string) func([]workload.Request) error {
	return func(reqs []workload.Request) error {
		if len(reqs) < n {
			return fmt.Errorf("%d requests so far, want %d answered", len(reqs), n)
		}
		for _, r := range reqs[len(reqs)-n:] {
			if !r.OK || where != "" && place(r) != where {
				return fmt.Errorf("request %d %s", r.Seq, outcome(r))
			}
		}
		return nil
	}
}

func outcome(r workload.Request) string {
	if r.OK {
		return "answered by " + r.Cluster + "/" + r.Pod
	}
	return "failed (" + r.Reason + ")"
}

// phase is a span of the run during which one thing happens to the services. A request counts in the phase
// during which it started, since that decided which endpoints kube-proxy could send it to.
type phase struct {
	story      int
	name       string
	start, end int64 // unix milliseconds; end is 0 while the phase lasts
}

// nextPhase ends the current phase, prints its traffic, and starts the next one at the same instant, so that no
// request falls between two phases.
func (d *Demo) nextPhase(ctx context.Context, story int, name string) error {
	now := time.Now().UnixMilli()
	if err := d.closePhase(ctx, now); err != nil {
		return err
	}
	d.phases = append(d.phases, &phase{story: story, name: name, start: now})
	return nil
}

// endPhases ends the last phase and prints its traffic.
func (d *Demo) endPhases(ctx context.Context) error { return d.closePhase(ctx, time.Now().UnixMilli()) }

func (d *Demo) closePhase(ctx context.Context, end int64) error {
	if len(d.phases) == 0 {
		return nil
	}
	p := d.phases[len(d.phases)-1]
	p.end = end
	err := poll.Until(ctx, poll.Interval, d.Timeout, func() error {
		for _, l := range d.loops {
			if !l.Reported(end) {
				return fmt.Errorf("%s has not reported every request of phase %q", l.Name, p.name)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, l := range d.loops {
		if reqs := l.Requests(p.start, p.end); len(reqs) > 0 {
			d.say("    traffic: %s, phase %q (%s): %v", l.Name, p.name, p.duration(), tally(reqs))
		}
	}
	return nil
}

func (p *phase) duration() time.Duration {
	return (time.Duration(p.end-p.start) * time.Millisecond).Round(100 * time.Millisecond)
}

// noFailures fails with every request that failed during the story's phases, which must all have ended.
func (d *Demo) noFailures(story int) error {
	sent := 0
	var failed []string
	for _, p := range d.phases {
		if p.story != story {
			continue
		}
		for _, l := range d.loops {
			for _, r := range l.Requests(p.start, p.end) {
				sent++
				if !r.OK {
					failed = append(failed, fmt.Sprintf("%s request %d at %s: %s in phase %q",
						l.Name, r.Seq, time.UnixMilli(r.StartMs).Format("15:04:05.000"), r.Reason, p.name))
				}
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d requests failed: %s", len(failed), sent, strings.Join(failed, "; "))
	}
	d.say("    ok: all %d requests of story %d were answered", sent, story)
	return nil
}

// figures count requests: sent, failed per reason, answered per place.
type figures struct {
	sent, failed     int
	reasons, answers map[string]int
}

func tally(reqs []workload.Request) figures {
	f := figures{sent: len(reqs), reasons: map[string]int{}, answers: map[string]int{}}
	for _, r := range reqs {
		if r.OK {
			f.answers[place(r)]++
		} else {
			f.failed++
			f.reasons[r.Reason]++
		}
	}
	return f
}

func (f figures) String() string {
	s := fmt.Sprintf("%d sent, %d failed%s", f.sent, f.failed, f.why())
	if len(f.answers) > 0 {
		s += "; answered by " + counts(f.answers)
	}
	return s
}

// why lists the reasons of the failures, if any: " (dial 1, timeout 1)".
func (f figures) why() string {
	if f.failed == 0 {
		return ""
	}
	return " (" + counts(f.reasons) + ")"
}

// counts lists a count per key, in key order: "cluster-b 30, cluster-c 31".
func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+" "+strconv.Itoa(m[k]))
	}
	return strings.Join(parts, ", ")
}

// disruption measures how l's requests fared after event, at at (unix milliseconds), up to now: the failover
// time, from the last answer before the first failure to the first answer after it, and the failures.
func disruption(l *workload.Loop, event string, at int64) string {
	reqs := l.Requests(0, 0)
	first := slices.IndexFunc(reqs, func(r workload.Request) bool { return !r.OK && r.StartMs >= at })
	if first < 0 {
		return "no request failed"
	}
	before := -1
	for i := first - 1; i >= 0; i-- {
		if reqs[i].OK {
			before = i
			break
		}
	}
	after := slices.IndexFunc(reqs[first:], func(r workload.Request) bool { return r.OK })
	s := "no failover time: no answer before or after the first failure"
	if before >= 0 && after >= 0 {
		s = fmt.Sprintf("failover in %d ms (from the last answer before the first failure to the first answer after it)",
			reqs[first+after].StartMs-reqs[before].StartMs)
	}
	last := first
	for i := first; i < len(reqs); i++ {
		if !reqs[i].OK {
			last = i
		}
	}
	f := tally(l.Requests(at, 0))
	return s + fmt.Sprintf("; %d requests failed (%s), started from %d ms to %d ms after %s",
		f.failed, counts(f.reasons), reqs[first].StartMs-at, reqs[last].StartMs-at, event)
}

// note prints a measurement and keeps it for the summary.
func (d *Demo) note(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	d.say("    %s", n)
	d.notes = append(d.notes, n)
}

// summary prints the traffic of every phase, per loop, and the measurements.
func (d *Demo) summary() {
	d.step("Traffic from cluster-a, phase by phase (a request counts in the phase during which it started)")
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STORY\tPHASE\tCLIENT\tTIME\tSENT\tFAILED\tANSWERED BY")
	for _, p := range d.phases {
		for _, l := range d.loops {
			if reqs := l.Requests(p.start, p.end); len(reqs) > 0 {
				f := tally(reqs)
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d%s\t%s\n", p.story, p.name, l.Name, p.duration(), f.sent, f.failed, f.why(), counts(f.answers))
			}
		}
	}
	tw.Flush()
	d.say("%s", strings.TrimRight(b.String(), "\n"))
	for _, n := range d.notes {
		d.say("%s", n)
	}
}

// proxied waits until kube-proxy on every node of m routes TCP to svc's ClusterSetIP, before a client loop starts
// sending to it: the stories measure what happens to traffic that flowed, not how soon a new import becomes
// routable, and a loop's first request would race kube-proxy's first sync of the import. The nftables proxier puts
// a service port in its service-ips map only once the port has ready endpoints.
func (d *Demo) proxied(ctx context.Context, m *framework.Member, svc string) error {
	return d.eventually(ctx, fmt.Sprintf("kube-proxy on every node of %s routes %s's ClusterSetIP", m.Name, svc), func(ctx context.Context) error {
		for _, n := range m.Nodes {
			if _, err := routedTo(ctx, m, n, svc); err != nil {
				return err
			}
		}
		return nil
	})
}

// endpointInChain matches an endpoint in a service chain of kube-proxy's nftables proxier, which picks one at
// random: either in a map of DNAT targets ("0 : 10.2.0.2 . 7000") or, where it needs per-endpoint rules, in a
// verdict map of endpoint chains ("0 : goto endpoint-<hash>-<namespace>/<service>/<protocol>/<port>__<address>/<port>").
var endpointInChain = regexp.MustCompile(`\d+ : (?:goto endpoint-\S*__([0-9.]+)/|([0-9.]+) \. \d+)`)

// routedTo returns the IPv4 endpoint addresses among which kube-proxy on node n of m picks for TCP to svc's
// ClusterSetIP on the echo port: after topology hints, only those of n's zone. The nftables proxier maps the
// address and port to the service's chain in its service-ips map.
func routedTo(ctx context.Context, m *framework.Member, n *clusterset.Node, svc string) ([]string, error) {
	si := &mcsv1beta1.ServiceImport{}
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: svc}, si); err != nil {
		return nil, err
	}
	i := slices.IndexFunc(si.Spec.IPs, isIPv4)
	if i < 0 {
		return nil, fmt.Errorf("ServiceImport %s has no IPv4 address: %v", svc, si.Spec.IPs)
	}
	nft := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + n.NS, "nft"}, args...)...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("nft %s on %s: %v: %s", strings.Join(args, " "), n.Name, err, out)
		}
		return string(out), nil
	}
	ips, err := nft("list", "map", "ip", "kube-proxy", "service-ips")
	if err != nil {
		return nil, err
	}
	element := fmt.Sprintf("%s . tcp . %d : goto ", si.Spec.IPs[i], workload.EchoPort)
	at := strings.Index(ips, element)
	if at < 0 {
		return nil, fmt.Errorf("kube-proxy on %s does not route %s:%d yet", n.Name, si.Spec.IPs[i], workload.EchoPort)
	}
	rest, _, _ := strings.Cut(ips[at+len(element):], ",")
	chain := strings.Fields(rest)
	if len(chain) == 0 {
		return nil, fmt.Errorf("kube-proxy on %s: no chain after %q in its service-ips map: %s", n.Name, element, ips)
	}
	rules, err := nft("list", "chain", "ip", "kube-proxy", chain[0])
	if err != nil {
		return nil, err
	}
	var endpoints []string
	for _, match := range endpointInChain.FindAllStringSubmatch(rules, -1) {
		if addr := match[1] + match[2]; !slices.Contains(endpoints, addr) {
			endpoints = append(endpoints, addr)
		}
	}
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("kube-proxy on %s routes %s:%d to no endpoint: %s", n.Name, si.Spec.IPs[i], workload.EchoPort, rules)
	}
	slices.Sort(endpoints)
	return endpoints, nil
}
