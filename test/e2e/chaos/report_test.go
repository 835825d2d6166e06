package chaos

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/test/env/workload"
)

// tolerated is how long after a CoreDNS fault of a member (its kill, or its thaw) a failed request or lookup of
// that member is put down to it: a lookup sent to a replica as it is killed, or while it is frozen, gets no answer
// within the loop's second; kube-proxy stops sending lookups to a killed replica once the kubelet has seen it go
// and to a frozen one once its readiness probe has failed, and the replica answers again once thawed.
const tolerated = 5 * time.Second

// loopFigures are what one loop lost.
type loopFigures struct {
	name               string
	sent, failed       int
	explained          int            // failures a CoreDNS fault of the member explains
	unexplained        []string       // the others, "#seq reason at time"
	reasons            map[string]int // failures by reason
	longestGap         time.Duration  // between two answered requests
	nxdomain, servfail []string       // names that answered so
}

// figures computes a loop's figures over [from, to); a DNS loop's questions are for names, in turn.
func (r *run) figures(member, name string, l *workload.Loop, names []string, from, to time.Time) loopFigures {
	reqs := l.Requests(from.UnixMilli(), to.UnixMilli())
	f := loopFigures{name: member + "/" + name, sent: len(reqs), reasons: map[string]int{}}
	if len(reqs) == 0 {
		f.unexplained = append(f.unexplained, "no request reported")
	}
	f.longestGap = workload.LongestGap(reqs)
	for _, q := range reqs {
		if q.OK {
			continue
		}
		f.failed++
		f.reasons[q.Reason]++
		at := time.UnixMilli(q.StartMs)
		what := fmt.Sprintf("#%d %s at %s", q.Seq, q.Reason, at.Format("15:04:05.000"))
		if len(names) > 0 {
			what = fmt.Sprintf("#%d %s for %s at %s", q.Seq, q.Reason, names[(q.Seq-1)%len(names)], at.Format("15:04:05.000"))
		}
		what += ", during: " + strings.Join(r.activeAt(at), "; ")
		dnsFault := r.dnsFaultAt(member, at)
		switch {
		case q.Reason == "nxdomain":
			f.nxdomain = append(f.nxdomain, what)
		case q.Reason == "servfail" && !(dnsFault && r.f.DNSMode() == install.DNSStandalone):
			// In the standalone DNS mode the cluster's DNS asks ours: a question a replica of ours lost as it
			// was killed or while it was frozen comes back from the cluster's DNS as SERVFAIL once its forward
			// gave up on it, where in the replace mode the client gets no answer. Either is the fault's loss.
			f.servfail = append(f.servfail, what)
		}
		if dnsFault {
			f.explained++
		} else {
			f.unexplained = append(f.unexplained, what)
		}
	}
	return f
}

// dnsFaultAt says whether a CoreDNS fault of the member was on at t, or ended less than tolerated before.
func (r *run) dnsFaultAt(member string, t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.faults {
		if f.member == member && kinds[f.kind].slot == "coredns" && f.onAt(t) {
			return true
		}
	}
	return false
}

// report logs the run's figures, writes them to CHAOS_RESULTS when it is set, and fails the test for what must
// not happen.
func (r *run) report(w *watcher, chaosStart, lastFault time.Time, converged time.Duration) {
	t := r.t
	end := lastFault.Add(converged)
	byKind := map[string]int{}
	var notCaused, undoErrs []string
	for _, f := range r.faults {
		switch {
		case f.err != nil && f.done.IsZero():
			notCaused = append(notCaused, fmt.Sprintf("%s (target %d): %v", f.kindName(), f.target, f.err))
		case f.err != nil:
			undoErrs = append(undoErrs, fmt.Sprintf("%s (target %d): %v", f.kindName(), f.target, f.err))
			byKind[f.kindName()]++
		default:
			byKind[f.kindName()]++
		}
	}
	caused := 0
	for _, n := range byKind {
		caused += n
	}
	var loops []loopFigures
	for _, key := range slices.Sorted(maps.Keys(r.loops)) {
		member, name, _ := strings.Cut(key, "/")
		var names []string
		if name == "lookups" {
			names = []string{stableFQDN(r.a), stableFQDN(r.b)}
		}
		loops = append(loops, r.figures(member, name, r.loops[key], names, chaosStart, end))
	}
	errs := w.errorsByCause()
	writes := w.totalWrites()

	var b strings.Builder
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	fmt.Fprintf(&b, "# Chaos run (`make chaos`)\n\n")
	fmt.Fprintf(&b, "Written by test/e2e/chaos on %s at commit %s: %s of faults, one every %s, seed %d (replay: `CHAOS_SEED=%d make chaos`). "+
		"Two members of one node each, on a broker of 3 etcd members and 2 API servers behind HAProxy; 2 controller and 2 CoreDNS "+
		"replicas per member; %s; a request loop and a DNS loop per member every %s; export and endpoint churn every %s per member.\n\n",
		time.Now().UTC().Format("2006-01-02"), strings.TrimSpace(string(commit)), r.cfg.duration, r.cfg.every, r.cfg.seed, r.cfg.seed, r.f.DNSModeText(), loopEvery, churnEvery)
	fmt.Fprintf(&b, "## Faults injected: %d\n\n| fault | count |\n|---|---|\n", caused)
	for _, k := range kinds {
		fmt.Fprintf(&b, "| %s | %d |\n", k.name, byKind[k.name])
	}
	if len(notCaused) > 0 {
		fmt.Fprintf(&b, "\n%d planned faults could not be caused (their target was not there): %s\n", len(notCaused), strings.Join(notCaused, "; "))
	}
	fmt.Fprintf(&b, "\n## What users lost\n\n")
	fmt.Fprintf(&b, "- Stable imports lost (a member without web-a or web-b at a look, once a second): **%d**\n", len(w.lost))
	fmt.Fprintf(&b, "- Time to converge after the last fault was undone: **%.1f s**\n", converged.Seconds())
	fmt.Fprintf(&b, "- Controller writes (both API servers, Lease renewals excepted): %.0f, **%.1f per fault**\n\n", writes, writes/float64(max(caused, 1)))
	fmt.Fprintf(&b, "| loop | sent | failed | of which during a CoreDNS fault of the member | others | longest gap | NXDOMAIN | SERVFAIL | failures by reason |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, l := range loops {
		var reasons []string
		for _, k := range slices.Sorted(maps.Keys(l.reasons)) {
			reasons = append(reasons, fmt.Sprintf("%s %d", k, l.reasons[k]))
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %.1f s | %d | %d | %s |\n", l.name, l.sent, l.failed, l.explained, len(l.unexplained),
			l.longestGap.Seconds(), len(l.nxdomain), len(l.servfail), strings.Join(reasons, ", "))
	}
	fmt.Fprintf(&b, "\n## \"Reconciler error\" lines by controller and cause\n\n| controller: cause | lines |\n|---|---|\n")
	for _, c := range slices.Sorted(maps.Keys(errs)) {
		fmt.Fprintf(&b, "| %s | %d |\n", strings.ReplaceAll(c, "|", `\|`), errs[c])
	}
	t.Log("\n" + b.String())
	if r.cfg.results != "" {
		if err := os.WriteFile(r.cfg.results, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	for _, s := range r.errs {
		t.Logf("harness: %s", s)
	}

	if len(w.lost) > 0 {
		t.Errorf("stable imports went missing: %v", w.lost)
	}
	for _, l := range loops {
		if len(l.nxdomain)+len(l.servfail) > 0 {
			t.Errorf("%s: stable names answered NXDOMAIN %v, SERVFAIL %v", l.name, l.nxdomain, l.servfail)
		}
		if len(l.unexplained) > 0 {
			t.Errorf("%s: %d failures no CoreDNS fault explains: %v", l.name, len(l.unexplained), l.unexplained)
		}
	}
	if len(undoErrs) > 0 {
		t.Errorf("faults that could not be undone: %v", undoErrs)
	}
	if planned := len(r.faults); caused < planned*9/10 {
		t.Errorf("only %d of %d planned faults were caused: %v", caused, planned, notCaused)
	}
}
