// Package demo walks the two user stories of VKS Fleet on a running local fleet, printing what a user would see
// (kubectl tables with conditions, dig answers) and checking every expectation. `make demo` runs it on a fresh
// fleet; its test runs it in `make test` with a short lease grace.
package demo

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/test/clusterset"
	"vksfleet.dev/fleet/test/fleet"
	"vksfleet.dev/fleet/test/poll"
)

// Namespace is where the demo's services live, in every member.
const Namespace = "demo"

// Demo is one walk through the stories.
type Demo struct {
	// Fleet needs members cluster-a, cluster-b and cluster-c.
	Fleet *fleet.Fleet
	// Out receives the narration.
	Out io.Writer
	// Timeout bounds each expectation; it must exceed the fleet's lease grace.
	Timeout time.Duration
	// Kubectl is the kubectl binary used for the printed tables.
	Kubectl string
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
	if err := d.storyMigration(ctx); err != nil {
		return fmt.Errorf("story 1: %w", err)
	}
	if err := d.storySpread(ctx); err != nil {
		return fmt.Errorf("story 2: %w", err)
	}
	d.say("\nBoth stories told; every expectation held.")
	return nil
}

func (d *Demo) member(name string) *fleet.Member { return d.Fleet.Member(name) }

func (d *Demo) say(format string, args ...any) { fmt.Fprintf(d.Out, format+"\n", args...) }

// step prints a heading.
func (d *Demo) step(format string, args ...any) { d.say("\n==> "+format, args...) }

// kubectl prints a kubectl command and its output, as a user would see it.
func (d *Demo) kubectl(ctx context.Context, m *fleet.Member, args ...string) {
	full := append([]string{"--kubeconfig", m.KubeconfigPath, "--context", m.Name}, args...)
	d.say("$ kubectl --context %s %s", m.Name, strings.Join(args, " "))
	out, err := exec.CommandContext(ctx, d.Kubectl, full...).CombinedOutput()
	d.say("%s", strings.TrimRight(string(out), "\n"))
	if err != nil {
		d.say("(kubectl: %v)", err)
	}
}

// dig prints a dig query against a member's DNS and its answer section.
func (d *Demo) dig(ctx context.Context, m *fleet.Member, name, qtype string) {
	host, port, _ := strings.Cut(m.DNS, ":")
	d.say("$ dig @%s -p %s %s %s +short   # %s's DNS", host, port, name, qtype, m.Name)
	out, err := exec.CommandContext(ctx, "dig", "@"+host, "-p", port, name, qtype, "+short").CombinedOutput()
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

// query asks a member's DNS over UDP with miekg/dns.
func query(m *fleet.Member, name string, qtype uint16) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Timeout: 2 * time.Second}
	r, _, err := c.Exchange(q, m.DNS)
	return r, err
}

// addresses returns the A/AAAA addresses a name resolves to on a member.
func addresses(m *fleet.Member, name string, qtype uint16) ([]string, error) {
	r, err := query(m, name, qtype)
	if err != nil {
		return nil, err
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("%s: %s", name, dns.RcodeToString[r.Rcode])
	}
	var ips []string
	for _, rr := range r.Answer {
		switch v := rr.(type) {
		case *dns.A:
			ips = append(ips, v.A.String())
		case *dns.AAAA:
			ips = append(ips, v.AAAA.String())
		}
	}
	slices.Sort(ips)
	return ips, nil
}

// importedEndpoints returns the ready endpoint addresses of a service's imported slices on a member, per source
// cluster.
func importedEndpoints(ctx context.Context, m *fleet.Member, svc string) (map[string][]string, error) {
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

// localPodIPs returns the IPv4 addresses of the ready pods with the label app=name in a member.
func localPodIPs(ctx context.Context, m *fleet.Member, app string) ([]string, error) {
	pods := &corev1.PodList{}
	if err := m.Client.List(ctx, pods, client.InNamespace(Namespace), client.MatchingLabels{"app": app}); err != nil {
		return nil, err
	}
	var ips []string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			ips = append(ips, p.Status.PodIP)
		}
	}
	slices.Sort(ips)
	return ips, nil
}

// deploy creates a Deployment (or a StatefulSet when headless) of app with replicas pods and its Service.
func deploy(ctx context.Context, m *fleet.Member, app string, replicas int32, port int32, headless bool) error {
	labels := map[string]string{"app": app}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: app, Image: "example.invalid/" + app, Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		}}},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: Namespace},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{
			Name: "http", Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(8080),
		}}},
	}
	var workload client.Object = &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: Namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl,
		},
	}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
		workload = &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: Namespace},
			Spec: appsv1.StatefulSetSpec{
				Replicas: ptr.To(replicas), ServiceName: app,
				Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl,
			},
		}
	}
	for _, o := range []client.Object{svc, workload} {
		if err := m.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("%s: creating %s: %w", m.Name, o.GetName(), err)
		}
	}
	return nil
}

func export(ctx context.Context, m *fleet.Member, svc string) error {
	return m.Client.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: Namespace}})
}

func unexport(ctx context.Context, m *fleet.Member, svc string) error {
	return m.Client.Delete(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: Namespace}})
}

// exportCondition returns a ServiceExport condition on a member, or nil.
func exportCondition(ctx context.Context, m *fleet.Member, svc, condType string) (*metav1.Condition, error) {
	se := &mcsv1beta1.ServiceExport{}
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: svc}, se); err != nil {
		return nil, err
	}
	return meta.FindStatusCondition(se.Status.Conditions, condType), nil
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

// watchResolution asks name on m every 50 ms, from startWatch until finish is called and at least minQueries
// were asked, and records the answers that were not a NOERROR with at least one address.
type watchResolution struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	asked    int
	failures []string
}

// watchQueries is how many queries a watch makes at the least, so that a quick migration is still observed over
// a few seconds.
const watchQueries = 100

func startWatch(m *fleet.Member, name string) *watchResolution {
	w := &watchResolution{stop: make(chan struct{})}
	w.wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		stopped := false
		for !stopped || w.asked < watchQueries {
			select {
			case <-w.stop:
				stopped = true
			case <-tick.C:
				w.asked++
				if ips, err := addresses(m, name, dns.TypeA); err != nil || len(ips) == 0 {
					w.failures = append(w.failures, fmt.Sprintf("%s: %v %v", time.Now().Format("15:04:05.000"), ips, err))
				}
			}
		}
	})
	return w
}

func (w *watchResolution) finish() (asked int, failures []string) {
	close(w.stop)
	w.wg.Wait()
	return w.asked, w.failures
}

func isIPv4(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is4()
}
