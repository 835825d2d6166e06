// Package k8sdns runs Kubernetes' own `[sig-network] DNS` e2e specs (e2e.test of the pinned Kubernetes, built by
// build/tools.sh's set k8se2e from build/tools/kube-e2e) against a member of a local fleet on kubelet nodes whose
// DNS is ours, in each DNS mode: replace (our CoreDNS in place of kube-dns) and standalone (kubeadm's CoreDNS
// behind kube-dns, forwarding clusterset.local to ours). TestKubernetesDNS, which `make conformance-k8s-dns`
// runs, writes results/summary.md and the suite's JUnit files. This file holds the specs left out, each with
// its reason, and reads and renders the results.
package k8sdns

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"vksfleet.dev/fleet/test/framework"
)

// focus selects the specs: every spec of the `[sig-network] DNS` groups (DNS, DNS HostNetwork, DNS configMap
// nameserver), Conformance or not.
const focus = `\[sig-network\] DNS`

// skip is a spec left out of the run, and why.
type skip struct {
	// spec is a part of the spec's text that no other spec of the focus has.
	spec string
	// reason says why the spec cannot pass on the local clusterset, whatever its DNS.
	reason string
}

// skips are the specs that ask for what the local clusterset does not have; every other spec of the focus runs.
// The local clusterset's pods and nodes reach nothing beyond this machine, and no resolver answers the nodes'
// own queries (docs/local-clusterset.md: no query leaves the machine).
var skips = []skip{{
	spec: "should provide DNS for the cluster [Provider:GCE]",
	reason: "GCE only (it skips itself on any other provider): resolves google.com and `metadata`, the GCE " +
		"metadata server's name, through the cluster DNS's upstream",
}, {
	spec: "should forward PTR records lookup to upstream nameserver",
	reason: "its first step resolves the PTR of 8.8.8.8 (dns.google) through the cluster DNS's upstream, the " +
		"Internet, before it points the upstream at its own server",
}}

// skipPattern is the ginkgo skip expression of skips.
func skipPattern() string {
	var alts []string
	for _, s := range skips {
		alts = append(alts, regexp.QuoteMeta(s.spec))
	}
	return strings.Join(alts, "|")
}

// The results of a spec.
const (
	passed  = "passed"
	failed  = "failed"
	skipped = "skipped"
)

// spec is one spec of the focus, as the run left it.
type spec struct {
	// Text is the spec's full text: its containers' and its own.
	Text string
	// Result is passed, failed or skipped.
	Result string
	// Reason is why it was skipped (ours, or the suite's own message), or its failure.
	Reason string
	// RunTime is how long the spec ran.
	RunTime time.Duration
}

// modeResult is what one DNS mode's run gave.
type modeResult struct {
	// Mode is the DNS mode (install.DNSReplace, install.DNSStandalone), and Text what it runs (Fleet.DNSModeText).
	Mode, Text string
	// Specs are the specs of the focus, in the suite's order.
	Specs []spec
	// SuiteFailures are the suite's set-up and tear-down nodes that did not pass.
	SuiteFailures []string
	// FleetReady and SuiteRan are how long the fleet took to start and the suite to run.
	FleetReady, SuiteRan time.Duration
	// Err is why the mode has no results (the fleet did not start, the suite wrote no report), if so.
	Err error
}

// counts returns how many of r's specs passed, failed and were skipped.
func (r modeResult) counts() (pass, fail, skip int) {
	for _, s := range r.Specs {
		switch s.Result {
		case passed:
			pass++
		case failed:
			fail++
		default:
			skip++
		}
	}
	return pass, fail, skip
}

// maxReason bounds a failure message in the summary: ginkgo's carry whole pod logs.
const maxReason = 600

// parseReport reads ginkgo's JSON report (--ginkgo.json-report) into the specs whose text matches the focus,
// with the reason of every one skipped (skips' reason, or the suite's own message), and the suite's nodes that
// did not pass. Ginkgo reports every spec of the binary; those outside the focus are left out.
func parseReport(b []byte) ([]spec, []string, error) {
	nodes, err := framework.GinkgoNodes(b)
	if err != nil {
		return nil, nil, err
	}
	focused := regexp.MustCompile(focus)
	var specs []spec
	var suite []string
	for _, n := range nodes {
		text := n.Text()
		message := framework.Compact(n.Failure.Message, maxReason)
		if !n.IsSpec() {
			if n.State != passed && n.State != skipped {
				suite = append(suite, fmt.Sprintf("%s [%s]: %s", strings.TrimSpace(n.LeafNodeType+" "+text), n.State, message))
			}
			continue
		}
		if !focused.MatchString(text) {
			continue
		}
		s := spec{Text: text, RunTime: n.RunTime, Reason: message}
		switch n.State {
		case passed:
			s.Result, s.Reason = passed, ""
		case skipped, "pending":
			s.Result = skipped
			if i := slices.IndexFunc(skips, func(k skip) bool { return strings.Contains(text, k.spec) }); i >= 0 {
				s.Reason = skips[i].reason
			}
			if s.Reason == "" {
				s.Reason = "skipped by the suite, which gave no reason"
			}
		default: // failed, panicked, interrupted, aborted, timedout
			s.Result = failed
			s.Reason = n.State + ": " + message
		}
		specs = append(specs, s)
	}
	return specs, suite, nil
}

// unusedSkips returns the skips that match none of specs: a spec renamed or gone upstream, whose entry would
// otherwise stay in the list for nothing.
func unusedSkips(specs []spec) []string {
	var unused []string
	for _, k := range skips {
		if !slices.ContainsFunc(specs, func(s spec) bool { return strings.Contains(s.Text, k.spec) }) {
			unused = append(unused, k.spec)
		}
	}
	return unused
}

// runInfo is what the summary says of the whole run.
type runInfo struct {
	// Date is when the run ended; Commit the tree's `git describe --always --dirty`; Kubernetes the version of
	// k8s.io/kubernetes that e2e.test and agnhost are built from.
	Date               time.Time
	Commit, Kubernetes string
}

// summarize renders results/summary.md.
func summarize(info runInfo, modes []modeResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Kubernetes' `[sig-network] DNS` e2e specs: VKS Fleet %s\n\n", info.Commit)
	fmt.Fprintf(&b, "Run %s by `make conformance-k8s-dns`, at commit %s: the unmodified specs of Kubernetes %s "+
		"(`e2e.test` built from `k8s.io/kubernetes/test/e2e/network` at that version, `--ginkgo.focus='%s'`), "+
		"each DNS mode against a fresh local fleet of one member with 2 kubelet nodes. The pods' images are "+
		"stand-ins built without a registry (`test/env/nodeimages/k8sdns.go`): agnhost built from the same "+
		"Kubernetes source, with busybox, Debian's dash, dig, nslookup and getent, and our CoreDNS as `/coredns`; "+
		"glibc-dns-testing (formerly jessie-dnsutils) of busybox, dash, dig, nslookup and getent. In replace mode the "+
		"specs ask our CoreDNS, which serves cluster.local with the stock kubernetes plugin beside multicluster; in "+
		"standalone mode they ask kubeadm's CoreDNS (run from our image: the nodes pull nothing) with join's forward "+
		"block for clusterset.local in its Corefile. The suite's JUnit files are beside this one (`junit-<mode>.xml`).\n",
		info.Date.UTC().Format("2006-01-02 15:04 MST"), info.Commit, info.Kubernetes, focus)
	for _, m := range modes {
		fmt.Fprintf(&b, "\n## %s\n\n", m.Mode)
		if m.Text != "" {
			fmt.Fprintf(&b, "%s.\n\n", m.Text)
		}
		if m.Err != nil {
			fmt.Fprintf(&b, "- no results: %s\n", framework.Compact(m.Err.Error(), maxReason))
			continue
		}
		pass, fail, skip := m.counts()
		fmt.Fprintf(&b, "- specs: %d passed, %d failed, %d skipped, of %d\n", pass, fail, skip, len(m.Specs))
		fmt.Fprintf(&b, "- the fleet was ready in %s (with any wait for another fleet on this machine to stop); the "+
			"suite ran in %s\n", round(m.FleetReady), round(m.SuiteRan))
		for _, f := range m.SuiteFailures {
			fmt.Fprintf(&b, "- suite node not passed: %s\n", f)
		}
		b.WriteString("\n| spec | result | time | reason |\n|---|---|---:|---|\n")
		for _, s := range sorted(m.Specs) {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell(s.Text), s.Result, round(s.RunTime), cell(s.Reason))
		}
	}
	return b.String()
}

// sorted returns specs ordered by text: the suite runs them in a random order.
func sorted(specs []spec) []spec {
	return slices.SortedFunc(slices.Values(specs), func(a, b spec) int { return strings.Compare(a.Text, b.Text) })
}

// cell escapes what would break a Markdown table's cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func round(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }
