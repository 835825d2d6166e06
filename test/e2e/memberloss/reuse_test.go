package memberloss

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

// A connection is bound to an endpoint when its first packet passes the client's node: conntrack keeps the
// binding in its entry, and a SYN whose client address and port match an entry still in the table is taken for
// that connection's, whatever kube-proxy's rules say now. An entry waits 2 minutes in SYN_SENT for an answer that a
// gone endpoint never gives, and 10 s in CLOSE after the endpoint reset it; kube-proxy removes the entries of a
// gone endpoint for UDP only (kubernetes/kubernetes#101607). A client that reuses a source port in that time, as
// Linux's choice of ports does at 20 connections a second, is sent to the gone endpoint, or, when conntrack finds
// the SYN out of the old connection's window, not translated at all (the Service address then has no route), and
// fails at once or after its timeout. The traces tell those failures from the others: a rule in each node marks
// the SYNs to the echo port that found an entry (one already confirmed, or none for an invalid packet), where a
// new connection's SYN has an entry of its own, not yet confirmed, that kube-proxy's rules then translate.

// reuseTable names the nftables table of the marks, in every node; its sets hold client address and port, and
// tell the time since the last mark by what reuseTimeout has left.
const (
	reuseTable   = "memberloss-reuse"
	reuseTimeout = 10 * time.Minute
)

// markReuses adds the rule that marks reused entries to every node of the fleet.
func markReuses(f *framework.Fleet) error {
	rules := fmt.Sprintf(`table inet %[1]s {
	set v4 { type ipv4_addr . inet_service; flags dynamic,timeout; timeout %[2]ds; }
	set v6 { type ipv6_addr . inet_service; flags dynamic,timeout; timeout %[2]ds; }
	chain syn {
		type filter hook prerouting priority -150; policy accept;
		tcp dport %[3]d tcp flags & (syn | ack) == syn ct state invalid goto reused
		tcp dport %[3]d tcp flags & (syn | ack) == syn ct status confirmed goto reused
	}
	chain reused {
		meta nfproto ipv4 update @v4 { ip saddr . tcp sport }
		meta nfproto ipv6 update @v6 { ip6 saddr . tcp sport }
	}
}
`, reuseTable, int(reuseTimeout.Seconds()), workload.EchoPort)
	for _, m := range f.Members {
		for _, n := range m.Nodes {
			cmd := exec.Command("ip", "netns", "exec", n.NS, "nft", "-f", "-")
			cmd.Stdin = strings.NewReader(rules)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("marking reused conntrack entries in %s: %v: %s", n.NS, err, out)
			}
		}
	}
	return nil
}

// reuse is a SYN of the client that reused a conntrack entry: when, and from which port.
type reuse struct {
	at   time.Time
	port string
}

// reused reads the marks of the member's node: when each client address and port was last marked; nil when they
// cannot be read.
func (tr *trace) reused(ctx context.Context) map[string]time.Time {
	if len(tr.m.Nodes) == 0 {
		return nil
	}
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", tr.m.Nodes[0].NS, "nft", "list", "table", "inet", reuseTable).Output()
	if err != nil {
		return nil
	}
	return parseReuses(string(out), time.Now())
}

// reuseElement is an element of a listed set: "10.1.0.10 . 39680 expires 9m58s780ms", with "timeout 10m" before
// "expires" when it is not the set's.
var reuseElement = regexp.MustCompile(`([0-9a-fA-F:.]+) \. (\d+)(?: timeout \S+)? expires ([0-9hms]+)`)

// parseReuses reads the elements of `nft list table` read at now: client address and port, and when marked.
func parseReuses(listing string, now time.Time) map[string]time.Time {
	marks := map[string]time.Time{}
	for _, m := range reuseElement.FindAllStringSubmatch(listing, -1) {
		addr, err1 := netip.ParseAddr(m[1])
		left, err2 := time.ParseDuration(m[3])
		if err1 == nil && err2 == nil {
			marks[addr.String()+" "+m[2]] = now.Add(left - reuseTimeout)
		}
	}
	return marks
}

// noteReuses keeps the marks of the trace's client that are new, or newer, since the last look; the first look
// only learns what earlier runs left. A mark on the entry of a connection the trace saw less than resendWithin
// before is taken for that connection's own SYN, sent again by the kernel after a second without an answer, not
// a reuse: so is one on an entry the first look found, which may be a request's that began as the trace did.
// The caller holds tr.mu, and has noted the unanswered connections of earlier looks.
func (tr *trace) noteReuses(marks map[string]time.Time, first bool) {
	for key, at := range marks {
		addr, port, _ := strings.Cut(key, " ")
		client, err := netip.ParseAddr(addr)
		if err != nil || !slices.Contains(tr.clients, client) {
			continue
		}
		own, seen := tr.unanswered[addr+":"+port]
		resent := seen && at.Sub(own.at) < resendWithin
		// A mark's time is reckoned from when the listing came back, some ms after the kernel wrote it: a mark
		// seen again is new only when it moved on by more than that, and a port comes back after seconds.
		if was, ok := tr.reuses[key]; !first && !resent && (!ok || at.Sub(was) > time.Second) {
			tr.hits = append(tr.hits, reuse{at: at, port: port})
		}
		tr.reuses[key] = at
	}
}

// resendWithin bounds when a connection's own SYN comes again: a second after the first, and the request gives
// up at its own second.
const resendWithin = 2 * time.Second

// staleHits says which failed requests of reqs a reused conntrack entry explains: each reuse explains one request
// that failed as unreachable or without an answer (the two ways a SYN sent to a gone endpoint, or to the Service
// address untranslated, fails) and started up to reuseSlack before it.
func (tr *trace) staleHits(reqs []workload.Request) map[int]bool {
	explained := map[int]bool{}
	for _, h := range tr.hits {
		hit := h.at.UnixMilli()
		for _, r := range reqs {
			if !r.OK && !explained[r.Seq] && (r.Reason == "dial-unreachable" || r.Reason == "dial-timeout") &&
				hit >= r.StartMs && hit-r.StartMs < reuseSlack.Milliseconds() {
				explained[r.Seq] = true
				break
			}
		}
	}
	return explained
}

// reuseSlack bounds the time from a request's start to its SYN as the marks tell it: the name is resolved first,
// and a mark's time is reckoned from when its listing came back.
const reuseSlack = 250 * time.Millisecond

func TestStaleHits(t *testing.T) {
	now := time.UnixMilli(1_700_000_010_000)
	listing := `table inet memberloss-reuse {
	set v4 {
		type ipv4_addr . inet_service
		size 65535
		flags dynamic,timeout
		timeout 10m
		elements = { 10.1.0.10 . 39680 expires 9m58s780ms,
			     10.1.0.11 . 39682 timeout 5m expires 4m59s },
			     10.1.0.10 . 40000 expires 9m50s
	}
	set v6 {
		elements = { fd00:10:1::a . 41000 expires 9m59s900ms }
	}
}`
	marks := parseReuses(listing, now)
	want := map[string]time.Time{"10.1.0.10 39680": now.Add(-1220 * time.Millisecond), "10.1.0.11 39682": now.Add(-5*time.Minute - time.Second),
		"10.1.0.10 40000": now.Add(-10 * time.Second), "fd00:10:1::a 41000": now.Add(-100 * time.Millisecond)}
	if fmt.Sprint(marks) != fmt.Sprint(want) {
		t.Errorf("marks %v, want %v", marks, want)
	}
	tr := &trace{clients: []netip.Addr{netip.MustParseAddr("10.1.0.10"), netip.MustParseAddr("fd00:10:1::a")}, reuses: map[string]time.Time{},
		unanswered: map[string]synSent{
			"10.1.0.10:41500": {at: now.Add(-1100 * time.Millisecond)},                // began a second before its mark: its own SYN again
			"10.1.0.10:39680": {at: now.Add(-70 * time.Second)},                       // began long before: its entry reused
			"10.1.0.10:42000": {at: now.Add(-1100 * time.Millisecond), before: true}}} // found by the first look: may be its own
	tr.noteReuses(map[string]time.Time{"10.1.0.10 40000": now.Add(-10 * time.Second)}, true) // left by an earlier run
	marks["10.1.0.10 41500"] = now.Add(-80 * time.Millisecond)
	marks["10.1.0.10 42000"] = now.Add(-80 * time.Millisecond)
	tr.noteReuses(marks, false)
	tr.noteReuses(marks, false) // seen again, not new
	var ports []string
	for _, h := range tr.hits {
		ports = append(ports, h.port)
	}
	if slices.Sort(ports); strings.Join(ports, ",") != "39680,41000" {
		t.Errorf("hits on %v, want 39680 and 41000 (not 39682, another client's, nor 40000, seen first, nor 41500 and 42000, maybe resent)", ports)
	}
	at := func(port string) int64 {
		for _, h := range tr.hits {
			if h.port == port {
				return h.at.UnixMilli()
			}
		}
		return 0
	}
	h1, h2 := at("39680"), at("41000")
	reqs := []workload.Request{
		{Seq: 1, StartMs: h1 - 300, Reason: "dial-unreachable"}, // too long before
		{Seq: 2, StartMs: h1 - 40, Reason: "dial-refused"},      // not how a reused entry fails
		{Seq: 3, StartMs: h1 - 30, Reason: "dial-unreachable"},
		{Seq: 4, StartMs: h1 - 10, Reason: "dial-unreachable"}, // the reuse explained 3 already
		{Seq: 5, StartMs: h2 - 20, Reason: "dial-timeout"},
		{Seq: 6, StartMs: h2 + 200, Reason: "dial-timeout"}, // after every mark
	}
	if got := tr.staleHits(reqs); fmt.Sprint(got) != fmt.Sprint(map[int]bool{3: true, 5: true}) {
		t.Errorf("explained %v, want requests 3 and 5", got)
	}
}
