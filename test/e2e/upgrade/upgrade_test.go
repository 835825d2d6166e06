// Package upgrade runs a rolling upgrade with mixed versions, as a user makes it: the clusterset starts on the
// previous release (previousRelease, built from its own tree by framework.BuildRelease and installed by its own
// kubectl-mcs: broker init, then join, which applies its manifests), then this tree's broker init runs (the
// records' CRDs and roles), each member in turn is joined again with this tree's kubectl mcs, which applies the
// current manifests (controller and CoreDNS Deployments, 2 replicas each, rolled out) and, once the member's
// controller has published its records, marks it in the member directory (the others then read its records), and
// finally the last member is joined again with the previous release's, a downgrade, which takes its mark away.
//
// Every member exports web (a Deployment of serve, ClusterSetIP); the last one also exports db (a StatefulSet,
// headless). Throughout, each member runs a request loop from a pod to web.upgrade.svc.clusterset.local through
// its DNS and kube-proxy, and two DNS loops that ask its kube-dns Service for web's and db's names, once per
// question, without retry; a watcher polls every member's imports of web and db. After each step, every member
// exports a new Service at once and the time until every member imports them all is the step's time to converge:
// records written by either version are read by the other. Once the first member is upgraded, it and the last
// member, still on the previous release, each scale a service of socat pods (zero, exported by every member) to
// nothing at once: the two releases publish an emptied service differently (an empty slice, or none), and every
// importer must drop the endpoints within zeroBound.
//
// Expected, and asserted: no failed request, no DNS question unanswered or answered without an address, no import
// lost; but for the lookups the previous release's CoreDNS pods lose as they exit (previousPodLoss), reported apart. UPGRADE_MEMBERS sets
// the members (default 2), UPGRADE_SOAK holds each step's mixed state that long before the next (default 0);
// with UPGRADE_RESULTS set, the figures are written there as Markdown (`make bench-upgrade`). With UPGRADE_RECORD
// set to a folder, the broker's objects, as the previous release wrote them once the clusterset has settled on it,
// are written there (controller/testdata/broker-previous, read by the record-format test).
package upgrade

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

// previousRelease is the release the clusterset starts on: the merge of 2026-11-26 03:19 on main, the last before
// the broker's records changed twice, so that a mixed clusterset meets both changes. Since then an exporter
// publishes an emptied source slice as an empty broker slice instead of withdrawing it (dcc4d0f), and broker
// slices carry the source slice's endpoints.kubernetes.io/last-change-trigger-time (716b67f); the data-plane
// gauge came too. Its install (kubectl mcs broker init and join, the kustomize bases, 2 controller and 2 CoreDNS
// replicas) has today's layout, so it installs and upgrades as a user's would.
const previousRelease = "4388e11e885b77a5375dfbfe5d5352327de89edf"

const (
	ns      = "upgrade"
	timeout = 3 * time.Minute
	// interval is how often each loop asks.
	interval = 50 * time.Millisecond
)

// stable are the services exported before the upgrade and kept throughout: their imports must never be lost.
type stable struct {
	name      string
	exporters []*framework.Member
	headless  bool
}

// env is the running fleet, its loops and what each step measured.
type env struct {
	f       *framework.Fleet
	rel     *framework.Release
	stables []stable
	// loops are each member's request loop to web; dnsLoops each member's DNS loops, by the name asked.
	loops    map[string]*workload.Loop
	dnsLoops map[string]map[string]*workload.Loop
	watch    *watcher
	probes   int
	rows     []row
	// zeroNote says how fast an emptied service left every importer, in the mixed clusterset.
	zeroNote string
	// lastEnd is when the last step's figures end.
	lastEnd time.Time
	// budget is how long each request and DNS question may take.
	budget time.Duration
}

// row is one step's figures.
type row struct {
	step, versions   string
	took, converge   time.Duration
	requests, failed int
	failures         []string // member, request, when and why
	// previousPods are the failed requests and DNS questions set down to a previous release's CoreDNS pod in the
	// same member stopping (previousPodLoss); the rest must be 0.
	previousPods          int
	longestGap            time.Duration
	questions, dnsTimeout int
	badAnswers            []string // "name: n reason"
	lost                  []string
}

func TestRollingUpgrade(t *testing.T) {
	if err := dataplane.CheckHost(); err != nil {
		t.Skip(err)
	}
	ctrl.SetLogger(logr.Discard())
	members := 2
	if v := os.Getenv("UPGRADE_MEMBERS"); v != "" {
		var err error
		if members, err = strconv.Atoi(v); err != nil || members < 2 {
			t.Fatalf("UPGRADE_MEMBERS=%q: want 2 or more", v)
		}
	}
	soak := time.Duration(0)
	if v := os.Getenv("UPGRADE_SOAK"); v != "" {
		var err error
		if soak, err = time.ParseDuration(v); err != nil {
			t.Fatalf("UPGRADE_SOAK=%q: %v", v, err)
		}
	}
	start := time.Now()
	rel, err := framework.BuildRelease(context.Background(), previousRelease, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("previous release %s built or found in %s", rel.Tag, time.Since(start).Round(100*time.Millisecond))
	start = time.Now()
	f, _ := framework.StartTest(t, members, 1, func(o *framework.Options) {
		o.KubectlMCS, o.JoinArgs = rel.KubectlMCS, rel.JoinArgs()
		// The manifests' own lease grace: an upgrade changes nothing else of the Deployments.
		o.LeaseGrace = 0
		o.ClusterSet.Images = append(o.ClusterSet.Images, rel.Images...)
	})
	t.Logf("fleet of %d members x 1 node on %s up in %s", members, rel.Tag, time.Since(start).Round(100*time.Millisecond))
	// Registered after the fleet's: the loops, watches and pollers end before the fleet stops (an API server waits
	// for its watches and log streams as it stops).
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The figures allow a request or question a second. `make test` allows two: it runs beside other packages'
	// clusters on two shared cores, where a stall of over a second is the machine's, and a request or question
	// that is lost fails within any budget.
	budget := 2 * time.Second
	if os.Getenv("UPGRADE_RESULTS") != "" {
		budget = time.Second
	}
	e := &env{f: f, rel: rel, loops: map[string]*workload.Loop{}, dnsLoops: map[string]map[string]*workload.Loop{}, budget: budget}
	version := map[string]string{}
	for _, m := range f.Members {
		version[m.Name] = rel.Tag
		e.checkVersion(t, m, rel.ControllerImage, rel.DNSImage)
	}
	last := f.Members[len(f.Members)-1]
	e.stables = []stable{{name: "web", exporters: f.Members}, {name: "db", exporters: []*framework.Member{last}, headless: true}}
	e.deploy(t, ctx)
	e.watch = newWatcher(e)
	poll.T(t, timeout, "every member imports web and db whole", e.watch.complete)
	go e.watch.run(ctx)
	for _, m := range f.Members {
		go e.watch.followDNS(ctx, m)
	}
	e.startLoops(t, ctx)
	if dir := os.Getenv("UPGRADE_RECORD"); dir != "" {
		e.record(t, dir)
	}
	e.step(t, "all on "+rel.Tag+" (baseline)", version, soak, nil)

	// This tree's images, as `make images` tagged them, which its join (in process) installs.
	controllerImage, dnsImage := f.Images.Controller, f.Images.DNS
	_, tag, _ := strings.Cut(controllerImage, ":")
	current := "current (" + tag + ")"
	// As the upgrade notes say: this release's broker init first (the records' CRDs and readers' binding), which
	// changes nothing the previous release's members use.
	e.step(t, "broker init of "+current, version, soak, func() {
		if err := f.BrokerInit(ctx, ""); err != nil {
			t.Fatal(err)
		}
	})
	for i, m := range f.Members {
		e.step(t, "upgrade "+m.Name, version, soak, func() {
			if _, err := m.Join(ctx, f.DNSMode()); err != nil {
				t.Fatal(err)
			}
			e.checkVersion(t, m, controllerImage, dnsImage)
			version[m.Name] = current
		})
		if i == 0 {
			// Mixed: the upgraded member and the last, still on the previous release, each empty a service.
			e.zeroNote = e.zeroed(t, []*framework.Member{m, last}, version)
			t.Log(e.zeroNote)
		}
	}
	// The rollback as operations.md has it: the previous release's join, with an administrator's broker-info, since
	// this release's joiner may not do all that release's join does; the broker keeps this release's roles, which
	// hold every right the previous release's members use.
	admin, err := f.AdminBrokerInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.step(t, "downgrade "+last.Name, version, soak, func() {
		if _, err := last.JoinWith(ctx, rel.KubectlMCS, f.DNSMode(), append(rel.JoinArgs(), "--broker-info", admin)...); err != nil {
			t.Fatal(err)
		}
		e.checkVersion(t, last, rel.ControllerImage, rel.DNSImage)
		version[last.Name] = rel.Tag
	})
	e.writeResults(t, members, soak)
	for _, r := range e.rows {
		if r.failed > 0 || r.dnsTimeout > 0 || len(r.badAnswers) > 0 || len(r.lost) > 0 {
			t.Errorf("%s: %d failed requests %v, %d DNS questions unanswered, DNS answers without an address %v, imports lost %v",
				r.step, r.failed, r.failures, r.dnsTimeout, r.badAnswers, r.lost)
		}
	}
}

// checkVersion checks that the member's controller and CoreDNS Deployments run these images, rolled out.
func (e *env) checkVersion(t *testing.T, m *framework.Member, controller, dns string) {
	t.Helper()
	ctl, ours := framework.ControllerDeployment, e.f.DNSDeployment()
	for _, d := range []struct{ ns, name, image string }{{ctl.Namespace, ctl.Name, controller}, {ours.Namespace, ours.Name, dns}} {
		var dep appsv1.Deployment
		if err := m.Client.Get(context.Background(), client.ObjectKey{Namespace: d.ns, Name: d.name}, &dep); err != nil {
			t.Fatal(err)
		}
		if got := dep.Spec.Template.Spec.Containers[0].Image; got != d.image {
			t.Fatalf("%s: %s/%s runs %s, want %s", m.Name, d.ns, d.name, got, d.image)
		}
		if err := m.WaitAvailable(context.Background(), d.ns, d.name, 2, timeout); err != nil {
			t.Fatal(err)
		}
	}
	// The rollout is over once the pods it replaced are gone too: a CoreDNS pod answers through its lameduck.
	poll.T(t, timeout, m.Name+"'s replaced controller and CoreDNS pods gone", func() error {
		for _, list := range []func(context.Context) ([]corev1.Pod, error){m.ControllerPods, m.DNSPods} {
			pods, err := list(context.Background())
			if err != nil {
				return err
			}
			for _, p := range pods {
				if p.DeletionTimestamp != nil {
					return fmt.Errorf("%s still terminating", p.Name)
				}
			}
		}
		return nil
	})
}

// deploy creates web in every member and db in the last, and exports them; web's export carries a label and an
// annotation, which travel in its broker records.
func (e *env) deploy(t *testing.T, ctx context.Context) {
	for _, m := range e.f.Members {
		if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range e.f.Members {
		deployZero(t, ctx, m)
	}
	for _, s := range e.stables {
		for _, m := range s.exporters {
			if err := workload.Deploy(ctx, m.Client, ns, s.name, m.Name, 2, s.headless); err != nil {
				t.Fatal(err)
			}
			se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.name}}
			if s.name == "web" {
				se.Spec.ExportedLabels = map[string]string{"tier": "front"}
				se.Spec.ExportedAnnotations = map[string]string{"example.com/owner": "team-a"}
			}
			if err := m.Client.Create(ctx, se); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// deployZero runs zero in m, exported: one socat pod, which exits the moment it gets SIGTERM (zeroed scales it
// to nothing).
func deployZero(t *testing.T, ctx context.Context, m *framework.Member) {
	t.Helper()
	tmpl := workload.SocatPod("zero", m.Name)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "zero", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: tmpl.Labels,
			Ports: []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: workload.EchoPort, TargetPort: intstr.FromString("tcp")}}},
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "zero", Namespace: ns},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Template: tmpl, Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}},
	}
	for _, o := range []client.Object{svc, d, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "zero"}}} {
		if err := m.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// zeroBound is how long an importer may show endpoints of a service its exporter scaled to zero: this tree's
// exporter publishes the emptied slice, applied at once; the previous release's withdraws it, which importers hold
// back for a second or so (see the README's Locality and availability).
const zeroBound = 15 * time.Second

// zeroed scales zero to nothing in the given members at once, one on each release in a mixed clusterset, and
// returns, per exporter, how long until no member imported a ready endpoint of it from that exporter: the two
// forms of an emptied service (an empty broker slice, or a withdrawn one) read by importers of both releases.
func (e *env) zeroed(t *testing.T, exporters []*framework.Member, version map[string]string) string {
	t.Helper()
	ctx := context.Background()
	poll.T(t, timeout, "every member imports zero whole", func() error {
		for _, m := range e.f.Members {
			if err := imported(ctx, m, stable{name: "zero", exporters: e.f.Members}); err != nil {
				return err
			}
		}
		return nil
	})
	start := time.Now()
	for _, x := range exporters {
		if err := workload.Scale(ctx, x.Client, ns, "zero", 0); err != nil {
			t.Fatal(err)
		}
	}
	var out []string
	for _, x := range exporters {
		poll.T(t, zeroBound, fmt.Sprintf("no member imports a ready endpoint of zero from %s (%s)", x.Name, version[x.Name]), func() error {
			for _, m := range e.f.Members {
				if err := imported(ctx, m, stable{name: "zero", exporters: []*framework.Member{x}}); err == nil {
					return fmt.Errorf("%s still imports a ready endpoint of zero from %s", m.Name, x.Name)
				}
			}
			return nil
		})
		out = append(out, fmt.Sprintf("%s (%s) scaled zero to nothing: no member imported its endpoints %.1f s later",
			x.Name, version[x.Name], time.Since(start).Seconds()))
	}
	return strings.Join(out, "; ")
}

// startLoops starts, in every member, the request loop to web and the DNS loops for web's and db's names, and
// waits until each answered its last 10.
func (e *env) startLoops(t *testing.T, ctx context.Context) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 3*len(e.f.Members))
	for _, m := range e.f.Members {
		e.dnsLoops[m.Name] = map[string]*workload.Loop{}
		pods := []*corev1.Pod{workload.WithTimeout(workload.LoopPod("web-loop", ns, fmt.Sprintf("web.%s.svc.clusterset.local:%d", ns, workload.EchoPort), interval, 2*time.Hour), e.budget)}
		for _, s := range e.stables {
			pods = append(pods, workload.WithTimeout(workload.DNSLoopPod(s.name+"-dns-loop", ns, m.DNSServiceIP.String()+":53", []string{s.name + "." + ns + ".svc.clusterset.local"}, interval, 2*time.Hour), e.budget))
		}
		for i, p := range pods {
			wg.Go(func() {
				l, err := workload.StartLoop(ctx, m.Kube, p, timeout)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if i == 0 {
					e.loops[m.Name] = l
				} else {
					e.dnsLoops[m.Name][e.stables[i-1].name] = l
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	from := time.Now().UnixMilli()
	poll.T(t, timeout, "every loop's last 10 answered", func() error {
		for _, l := range e.allLoops() {
			if err := l.Err(); err != nil {
				return err
			}
			reqs := l.Requests(from, 0)
			if len(reqs) < 10 {
				return fmt.Errorf("%s: %d requests so far", l.Name, len(reqs))
			}
			if failed := workload.Failures(reqs[len(reqs)-10:]); len(failed) > 0 {
				return fmt.Errorf("%s: failed: %v", l.Name, failed)
			}
		}
		return nil
	})
}

// allLoops are every member's loops.
func (e *env) allLoops() []*workload.Loop {
	var ls []*workload.Loop
	for _, m := range e.f.Members {
		ls = append(ls, e.loops[m.Name])
		for _, s := range e.stables {
			ls = append(ls, e.dnsLoops[m.Name][s.name])
		}
	}
	return ls
}

// step runs do (nil for none), has every member export a new Service and waits until every member imports them
// all, holds the state soak long, and records the figures of the whole span.
func (e *env) step(t *testing.T, name string, version map[string]string, soak time.Duration, do func()) {
	t.Helper()
	began := time.Now()
	// The figures span from the end of the step before, so that no request goes uncounted.
	from := began
	if !e.lastEnd.IsZero() {
		from = e.lastEnd
	}
	lostBefore := len(e.watch.losses())
	if do != nil {
		do()
	}
	rolled := time.Now()
	converged := e.converge(t)
	if soak > 0 {
		t.Logf("%s: holding %s", name, soak)
		hold := time.NewTimer(soak)
		<-hold.C
	}
	end := time.Now()
	e.lastEnd = end
	r := row{step: name, took: rolled.Sub(began), converge: converged}
	var vs []string
	for _, m := range e.f.Members {
		vs = append(vs, m.Name+" "+version[m.Name])
	}
	r.versions = strings.Join(vs, ", ")
	for _, m := range e.f.Members {
		reqs, err := e.loops[m.Name].Settled(context.Background(), from.UnixMilli(), end.UnixMilli(), timeout)
		if err != nil {
			t.Fatal(err)
		}
		r.requests += len(reqs)
		for _, q := range reqs {
			if q.OK {
				continue
			}
			at := time.UnixMilli(q.StartMs)
			desc := fmt.Sprintf("%s #%d at %s: %s%s", m.Name, q.Seq, stamp(at), q.Reason, e.nearestDNSEvent(m.Name, at, from, end))
			if p := e.previousPod(m.Name, q, from, end); p != "" {
				r.previousPods++
				desc += " [" + p + "]"
			} else {
				r.failed++
			}
			r.failures = append(r.failures, desc)
		}
		r.longestGap = max(r.longestGap, workload.LongestGap(reqs))
		for _, s := range e.stables {
			qs, err := e.dnsLoops[m.Name][s.name].Settled(context.Background(), from.UnixMilli(), end.UnixMilli(), timeout)
			if err != nil {
				t.Fatal(err)
			}
			r.questions += len(qs)
			by := map[string]int{}
			for _, q := range qs {
				if !q.OK {
					at := time.UnixMilli(q.StartMs)
					desc := fmt.Sprintf("%s's DNS loop for %s #%d at %s: %s%s", m.Name, s.name, q.Seq, stamp(at), q.Reason,
						e.nearestDNSEvent(m.Name, at, from, end))
					if p := e.previousPod(m.Name, q, from, end); p != "" {
						desc += " [" + p + "]"
					}
					r.failures = append(r.failures, desc)
				}
				switch {
				case q.OK:
				case e.previousPodLoss(m.Name, q, from, end):
					r.previousPods++
				case lookupLost(q.Reason):
					r.dnsTimeout++
				default:
					by[q.Reason]++
				}
			}
			for _, reason := range slices.Sorted(maps.Keys(by)) {
				r.badAnswers = append(r.badAnswers, fmt.Sprintf("%s in %s: %d %s", s.name, m.Name, by[reason], reason))
			}
		}
	}
	r.lost = e.watch.losses()[lostBefore:]
	for _, ev := range e.watch.eventsBetween(from, end) {
		t.Logf("  %s %s/%s %s", stamp(ev.at), ev.member, ev.pod, ev.what)
	}
	t.Logf("%s [%s]: rolled out in %s, converged %s later; %d requests, %d failed, %d lost to the previous release's CoreDNS pods stopping %v, longest gap %s; %d DNS questions, %d unanswered, other failures %v; imports lost %v",
		name, r.versions, r.took.Round(100*time.Millisecond), r.converge.Round(100*time.Millisecond), r.requests, r.failed, r.previousPods, r.failures, r.longestGap,
		r.questions, r.dnsTimeout, r.badAnswers, r.lost)
	e.rows = append(e.rows, r)
}

// How close to a previous release's CoreDNS pod stopping a failure may begin to be set down to it: up to the
// budget and half a second before (the request was under way), and previousPodAfter after, since kube-proxy
// drops the pod's conntrack entries once its endpoint is no longer serving, within about 2 s.
const (
	previousPodSlack = 500 * time.Millisecond
	previousPodAfter = 2500 * time.Millisecond
)

// lookupLost says whether a request or question failed for want of a DNS answer, by the serve loop's reasons: the
// lookup failed ("dns") or ran out of time ("dns-timeout", also a DNS loop's unanswered question), took so long
// that the request ran out of time after it ("dns-slow"), or reached a CoreDNS pod that no longer listens
// ("dns-refused": ICMP port unreachable, as from a pod whose server stopped while kube-proxy still sent it
// questions).
func lookupLost(reason string) bool {
	return reason == "dns" || reason == "dns-timeout" || reason == "dns-slow" || reason == "dns-refused"
}

// previousPodLoss says whether a failed request or question is one the previous release's CoreDNS pods lose as
// they stop: a lookup that failed (lookupLost) in a member
// as one of its CoreDNS pods of the previous release stopped answering. Those pods stay Ready until they exit;
// kube-proxy keeps the UDP conntrack entries that point at them until then, and a query that reuses one (the same
// client address and source port within the entry's 30 s) reaches the pod after it stopped. This tree's CoreDNS
// leaves the endpoints first (plugin/multicluster's Ready, the Deployment's readiness probe); nothing applied at
// upgrade time changes how the previous release's running pods leave.
func (e *env) previousPodLoss(member string, q workload.Request, from, to time.Time) bool {
	return e.previousPod(member, q, from, to) != ""
}

// previousPod names the stopping pod of the previous release that previousPodLoss sets q down to, with how far
// apart they were, or returns "". In the standalone DNS mode, where the cluster's DNS (kubeadm's CoreDNS) asks
// ours, a question ours lost comes back from the cluster's DNS as SERVFAIL once its forward gives up, and may be
// lost from the moment the pod starts terminating: the forward plugin keeps its UDP sockets to the mcs-dns
// Service, and so the conntrack entries that lead to the pod, until kube-proxy removes them.
func (e *env) previousPod(member string, q workload.Request, from, to time.Time) string {
	forwarded := e.f.DNSMode() == install.DNSStandalone
	if q.OK || !(lookupLost(q.Reason) || forwarded && q.Reason == "servfail") {
		return ""
	}
	at := time.UnixMilli(q.StartMs)
	before := e.budget + previousPodSlack
	stopping := func(what string) bool {
		return what == "not ready" || what == "gone" || forwarded && what == "terminating"
	}
	for _, ev := range e.watch.eventsBetween(from.Add(-previousPodAfter), to.Add(before)) {
		if ev.member == member && ev.image == e.rel.DNSImage && stopping(ev.what) &&
			at.After(ev.at.Add(-before)) && at.Before(ev.at.Add(previousPodAfter)) {
			return fmt.Sprintf("previous release's %s %s at %s", ev.pod, ev.what, stamp(ev.at))
		}
	}
	return ""
}

// stamp is a time of day to the millisecond, UTC.
func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// nearestDNSEvent says which change of member's CoreDNS pods came last before at, within [from, to), and how long
// before; "" when none did.
func (e *env) nearestDNSEvent(member string, at, from, to time.Time) string {
	var last *podEvent
	for _, ev := range e.watch.eventsBetween(from, to) {
		if ev.member == member && !ev.at.After(at) {
			last = &ev
		}
	}
	if last == nil {
		return ""
	}
	return fmt.Sprintf(" (%s after %s %s)", at.Sub(last.at).Round(10*time.Millisecond), last.pod, last.what)
}

// converge has every member export a new Service in front of its web pods at once and returns how long it took
// until every member imported every one of them with ready endpoints.
func (e *env) converge(t *testing.T) time.Duration {
	t.Helper()
	ctx := context.Background()
	e.probes++
	start := time.Now()
	var probes []stable
	for _, m := range e.f.Members {
		name := fmt.Sprintf("probe-%d-%s", e.probes, m.Name)
		svc := workload.ServiceFor("web", ns, false)
		svc.Name = name
		for _, o := range []client.Object{svc, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}} {
			if err := m.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		probes = append(probes, stable{name: name, exporters: []*framework.Member{m}})
	}
	poll.T(t, timeout, "every member imports every new export", func() error {
		for _, m := range e.f.Members {
			for _, p := range probes {
				if err := imported(ctx, m, p); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return time.Since(start)
}

// imported checks that m imports s: its ServiceImport (with a ClusterSetIP unless headless) and, from each
// exporter, an imported slice with a ready endpoint.
func imported(ctx context.Context, m *framework.Member, s stable) error {
	var si mcsv1beta1.ServiceImport
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.name}, &si); err != nil {
		return fmt.Errorf("%s: ServiceImport %s: %w", m.Name, s.name, err)
	}
	if !s.headless && len(si.Spec.IPs) == 0 {
		return fmt.Errorf("%s: ServiceImport %s has no ClusterSetIP", m.Name, s.name)
	}
	var slices discoveryv1.EndpointSliceList
	if err := m.Client.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{mcsv1beta1.LabelServiceName: s.name}); err != nil {
		return err
	}
	for _, x := range s.exporters {
		ready := 0
		for _, sl := range slices.Items {
			if sl.Labels[mcsv1beta1.LabelSourceCluster] != names.LabelValue(x.ID) {
				continue
			}
			for _, ep := range sl.Endpoints {
				if ptr.Deref(ep.Conditions.Ready, true) {
					ready++
				}
			}
		}
		if ready == 0 {
			return fmt.Errorf("%s: no ready endpoint of %s from %s", m.Name, s.name, x.Name)
		}
	}
	return nil
}

// watcher polls every member's imports of the stable services and counts each one lost: its ServiceImport gone,
// or an exporter's ready endpoints all gone.
type watcher struct {
	e       *env
	mu      sync.Mutex
	missing map[string]bool
	lost    []string
	events  []podEvent
}

func newWatcher(e *env) *watcher { return &watcher{e: e, missing: map[string]bool{}} }

// complete says why some import is not whole yet.
func (w *watcher) complete() error {
	for _, m := range w.e.f.Members {
		for _, s := range w.e.stables {
			if err := imported(context.Background(), m, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// run polls every 200 ms until ctx ends.
func (w *watcher) run(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, m := range w.e.f.Members {
			for _, s := range w.e.stables {
				key := m.Name + "/" + s.name
				err := imported(ctx, m, s)
				if ctx.Err() != nil {
					return
				}
				w.mu.Lock()
				if err != nil && !w.missing[key] {
					w.lost = append(w.lost, fmt.Sprintf("%s at %s: %v", key, stamp(time.Now()), err))
				}
				w.missing[key] = err != nil
				w.mu.Unlock()
			}
		}
	}
}

// podEvent is a change of one of a member's CoreDNS pods, when the watch brought it.
type podEvent struct {
	at          time.Time
	member, pod string
	image       string // the pod's CoreDNS image
	what        string // "seen", "ready", "not ready", "terminating", "gone"
}

// followDNS records the changes of m's CoreDNS pods until ctx ends, watching them anew whenever a watch ends.
func (w *watcher) followDNS(ctx context.Context, m *framework.Member) {
	type state struct{ ready, terminating bool }
	// A pod that stops is "not ready" while terminating, as it stops answering (the previous release's) or as it
	// starts its lameduck (this tree's).
	seen := map[string]state{}
	for ctx.Err() == nil {
		wi, err := m.WatchDNSPods(ctx)
		if err != nil {
			// The member's API server is out of reach for now: try again in a second.
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range wi.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			was, known := seen[p.Name]
			now := state{ready: workload.PodReady(p), terminating: p.DeletionTimestamp != nil}
			var what []string
			switch {
			case ev.Type == watch.Deleted:
				what = append(what, "gone")
				delete(seen, p.Name)
			default:
				if !known {
					what = append(what, "seen")
				}
				if now.ready != was.ready {
					what = append(what, map[bool]string{true: "ready", false: "not ready"}[now.ready])
				}
				if now.terminating && !was.terminating {
					what = append(what, "terminating")
				}
				seen[p.Name] = now
			}
			w.mu.Lock()
			for _, x := range what {
				w.events = append(w.events, podEvent{at: time.Now(), member: m.Name, pod: p.Name, image: p.Spec.Containers[0].Image, what: x})
			}
			w.mu.Unlock()
		}
	}
}

// eventsBetween are the CoreDNS pod changes in [from, to).
func (w *watcher) eventsBetween(from, to time.Time) []podEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	var in []podEvent
	for _, e := range w.events {
		if !e.at.Before(from) && e.at.Before(to) {
			in = append(in, e)
		}
	}
	return in
}

// losses are the imports lost so far, each when it went and why.
func (w *watcher) losses() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lost)
}

// record writes the broker's objects as the previous release wrote them, one YAML file per kind, with what changes
// from run to run (uids, resource versions, managed fields) left out.
func (e *env) record(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := recordBroker(context.Background(), e.f.Broker.Client, dir, e.rel); err != nil {
		t.Fatal(err)
	}
	t.Logf("broker objects of %s recorded in %s", e.rel.Tag, dir)
}

// writeResults writes the figures as Markdown where UPGRADE_RESULTS says.
func (e *env) writeResults(t *testing.T, members int, soak time.Duration) {
	path := os.Getenv("UPGRADE_RESULTS")
	if path == "" {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Rolling upgrade with mixed versions (`make bench-upgrade`)\n\nWritten by test/e2e/upgrade on %s. %d members x 1 node, "+
		"2 controller and 2 CoreDNS replicas each, %s, started on the previous release %s (commit %s, installed by its own "+
		"kubectl-mcs), each member upgraded in turn by joining it again with this tree's kubectl mcs (its manifests "+
		"rolled out), then the last downgraded by joining it again with the previous release's. Every member exports "+
		"web (ClusterSetIP), the last also db (headless). In each member, a request every %s from a pod to "+
		"web.%s.svc.clusterset.local:%d (name resolved for each, %s per request, through kube-proxy), and a DNS question "+
		"every %s for web's and for db's name to its kube-dns Service (UDP, one try, %s). After each step every member "+
		"exports a new Service; converged is when every member imports them all. Each step is held %s more; its figures run "+
		"from the end of the step before (the emptied service of the mixed check counts in the step after it).\n\n",
		time.Now().UTC().Format(time.RFC3339), members, e.f.DNSModeText(), e.rel.Tag, e.rel.Commit, interval, ns, workload.EchoPort, e.budget, interval, e.budget, soak)
	b.WriteString("| step | versions after it | rolled out in | converged after | requests | failed | longest gap | DNS questions | unanswered | NXDOMAIN, SERVFAIL or no address | lost to a previous-release CoreDNS pod stopping | imports lost |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range e.rows {
		fmt.Fprintf(&b, "| %s | %s | %.1f s | %.1f s | %d | %d | %d ms | %d | %d | %s | %d | %s |\n", r.step, r.versions, r.took.Seconds(),
			r.converge.Seconds(), r.requests, r.failed, r.longestGap.Milliseconds(), r.questions, r.dnsTimeout,
			orNone(r.badAnswers), r.previousPods, orNone(r.lost))
	}
	fmt.Fprintf(&b, "\nAn emptied service in the mixed clusterset (after the first upgrade): %s.\n", e.zeroNote)
	b.WriteString("\nFailed requests and lookups, each with the last change of its member's CoreDNS pods before it:\n\n")
	for _, r := range e.rows {
		for _, f := range r.failures {
			fmt.Fprintf(&b, "- %s: %s\n", r.step, f)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Error(err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "0"
	}
	return strconv.Itoa(len(s)) + ": " + strings.Join(s, "; ")
}
