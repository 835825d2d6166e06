// Package demo walks the two user stories of VKS Fleet on a running local fleet with a data plane, printing what
// a user would see (kubectl tables with conditions, dig answers, and the traffic of client loops in cluster-a,
// phase by phase, down to the locality tier that answers it and how long each move took) and checking every
// expectation. `make demo` runs it on a fresh fleet; its test runs it in
// `make test` with a short lease grace.
package demo

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

// Namespace is where the demo's services live, in every member.
const Namespace = "demo"

// Demo is one walk through the stories.
type Demo struct {
	// Fleet needs members cluster-a, cluster-b and cluster-c, with nodes (clusterset.Options.Nodes), since the
	// stories send traffic.
	Fleet *framework.Fleet
	// Out receives the narration.
	Out io.Writer
	// Timeout bounds each expectation; it must exceed the fleet's lease grace.
	Timeout time.Duration
	// Kubectl is the kubectl binary used for the printed tables.
	Kubectl string

	loops  []*workload.Loop
	phases []*phase
	notes  []string // the measurements, repeated under the summary table
}

// Run walks both stories and returns the first expectation that failed.
func (d *Demo) Run(ctx context.Context) error {
	if d.Kubectl == "" {
		assets, err := clusterset.AssetsDir("")
		if err != nil {
			return err
		}
		d.Kubectl = filepath.Join(assets, "kubectl")
	}
	for _, m := range d.Fleet.Members {
		if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	// The loops' logs are followed as long as the run lasts.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := d.storyMigration(ctx); err != nil {
		return fmt.Errorf("story 1: %w", err)
	}
	// Story 2's first phase starts as story 1's last ends, so that every request of frontend counts in a phase.
	if err := d.nextPhase(ctx, 2, "web, a conflict and db"); err != nil {
		return err
	}
	if err := d.noFailures(1); err != nil {
		return fmt.Errorf("story 1: %w", err)
	}
	if err := d.storySpread(ctx); err != nil {
		return fmt.Errorf("story 2: %w", err)
	}
	if err := d.storyFailover(ctx); err != nil {
		return fmt.Errorf("story 2: %w", err)
	}
	if err := d.storyLocality(ctx); err != nil {
		return fmt.Errorf("story 2: %w", err)
	}
	if err := d.endPhases(ctx); err != nil {
		return err
	}
	d.summary()
	d.say("\nBoth stories told; every expectation held.")
	return nil
}

func (d *Demo) member(name string) *framework.Member { return d.Fleet.Member(name) }

func (d *Demo) say(format string, args ...any) { fmt.Fprintf(d.Out, format+"\n", args...) }

// step prints a heading.
func (d *Demo) step(format string, args ...any) { d.say("\n==> "+format, args...) }

// kubectl prints a kubectl command and its output, as a user would see it. Its error matters only where the
// demo acts through kubectl; a table that fails to print fails no expectation.
func (d *Demo) kubectl(ctx context.Context, m *framework.Member, args ...string) error {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	d.say("$ kubectl --context %s %s", m.Name, strings.Join(quoted, " "))
	stdout, stderr, code, err := workload.Kubectl(ctx, d.Kubectl, m.KubeconfigPath, m.Name, args...)
	d.say("%s", strings.TrimRight(stdout+stderr, "\n"))
	if err == nil && code != 0 {
		err = fmt.Errorf("kubectl %s: exit code %d", strings.Join(args, " "), code)
	}
	if err != nil {
		d.say("(%v)", err)
	}
	return err
}

// shellQuote quotes s for a POSIX shell when it needs it, so that a printed command can be pasted as it is: a
// jsonpath's braces, quotes and backslashes would otherwise reach kubectl changed.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n\"'\\$`{}[]*?|&;<>()~#!") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// dig prints a dig query against a member's DNS and its answer section.
func (d *Demo) dig(ctx context.Context, m *framework.Member, name, qtype string) {
	host, port, _ := strings.Cut(m.DNS, ":")
	d.say("$ dig @%s -p %s %s %s +short   # %s's DNS", host, port, name, qtype, m.Name)
	out, err := framework.Dig(ctx, m.DNS, name, qtype, "+short")
	d.say("%s", strings.TrimRight(string(out), "\n"))
	if err != nil {
		d.say("(dig: %v)", err)
	}
}

// eventually polls check until it returns nil, or fails with its last error after d.Timeout.
func (d *Demo) eventually(ctx context.Context, what string, check func(context.Context) error) error {
	start := time.Now()
	if err := poll.Until(ctx, poll.Interval, d.Timeout, func() error { return check(ctx) }); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	d.say("    ok: %s (%s)", what, time.Since(start).Round(10*time.Millisecond))
	return nil
}

// addresses returns the A/AAAA addresses a name resolves to on a member; any rcode but NOERROR is an error.
func addresses(m *framework.Member, name string, qtype uint16) ([]string, error) {
	ips, rcode, err := m.Addresses(name, qtype)
	if err == nil && rcode != dns.RcodeSuccess {
		err = fmt.Errorf("%s: %s", name, dns.RcodeToString[rcode])
	}
	return ips, err
}

// importedEndpoints returns the ready endpoint addresses of a service's imported slices on a member, per source
// cluster.
func importedEndpoints(ctx context.Context, m *framework.Member, svc string) (map[string][]string, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := m.Client.List(ctx, list, client.InNamespace(Namespace), client.MatchingLabels{mcsv1beta1.LabelServiceName: svc}); err != nil {
		return nil, err
	}
	got := map[string][]string{}
	for _, s := range list.Items {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		src := s.Labels[mcsv1beta1.LabelSourceCluster]
		for _, ep := range s.Endpoints {
			if ptr.Deref(ep.Conditions.Ready, false) {
				got[src] = append(got[src], ep.Addresses...)
			}
		}
	}
	return got, nil
}

// deploy runs app as serve pods behind its Service in m, each pod answering with m's name.
func (d *Demo) deploy(ctx context.Context, m *framework.Member, app string, replicas int32, headless bool) error {
	return workload.Deploy(ctx, m.Client, Namespace, app, m.Name, replicas, headless)
}

func export(ctx context.Context, m *framework.Member, svc string) error {
	return m.Client.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: Namespace}})
}

// sameSet reports whether the importer sees exactly want per source cluster.
func sameSet(got map[string][]string, want map[string][]string) error {
	for k := range got {
		if len(got[k]) > 0 && len(want[k]) == 0 {
			return fmt.Errorf("unexpected endpoints from %s: %v", k, got[k])
		}
	}
	for k, w := range want {
		g := slices.Clone(got[k])
		slices.Sort(g)
		if !slices.Equal(g, w) {
			return fmt.Errorf("from %s: have %v, want %v", k, g, w)
		}
	}
	return nil
}

func isIPv4(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is4()
}
