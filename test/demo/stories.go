package demo

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

const conditionsColumns = `jsonpath={range .items[*]}{.metadata.name}{"\t"}{range .status.conditions[*]}{.type}={.status}/{.reason} {end}{"\n"}{end}`

// storyMigration is story 1: a consumer keeps reaching its backend, request after request, while the backend
// moves between clusters.
func (d *Demo) storyMigration(ctx context.Context) error {
	a, b, c := d.member("cluster-a"), d.member("cluster-b"), d.member("cluster-c")
	name := names.ServiceDNSName(Namespace, "backend")
	d.step("Story 1: frontend in cluster-a consumes backend in cluster-b as %s", name)
	if err := d.deploy(ctx, b, "backend", 2, false); err != nil {
		return err
	}
	if err := export(ctx, b, "backend"); err != nil {
		return err
	}
	var vip []string
	err := d.eventually(ctx, "cluster-a resolves backend to the ClusterSetIP of its ServiceImport", func(ctx context.Context) error {
		si := &mcsv1beta1.ServiceImport{}
		if err := a.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "backend"}, si); err != nil {
			return err
		}
		want := slices.DeleteFunc(slices.Clone(si.Spec.IPs), func(ip string) bool { return !isIPv4(ip) })
		got, err := addresses(a, name, dns.TypeA)
		if err != nil {
			return err
		}
		if len(want) == 0 || !slices.Equal(got, want) {
			return fmt.Errorf("DNS answers %v, ServiceImport has IPs %v", got, si.Spec.IPs)
		}
		vip = got
		return nil
	})
	if err != nil {
		return err
	}
	if err := d.eventually(ctx, "cluster-a's imported EndpointSlices hold cluster-b's backend pods", func(ctx context.Context) error {
		return d.expectEndpoints(ctx, a, "backend", b)
	}); err != nil {
		return err
	}
	d.kubectl(ctx, b, "get", "serviceexports", "-n", Namespace, "-o", conditionsColumns)
	d.kubectl(ctx, a, "get", "serviceimports", "-n", Namespace)
	d.dig(ctx, a, name, "A")

	if err := d.proxied(ctx, a, "backend"); err != nil {
		return err
	}
	d.say("frontend's only configuration is the name; it sends a request every %s, each on a new connection", loopInterval)
	if err := d.nextPhase(ctx, 1, "backend in cluster-b"); err != nil {
		return err
	}
	at := time.Now().UnixMilli()
	frontend, err := d.startLoop(ctx, a, "frontend", "", name+":"+strconv.Itoa(workload.EchoPort))
	if err != nil {
		return err
	}
	if err := d.waitTraffic(ctx, frontend, at, "frontend's last 20 requests were answered by cluster-b", lastAnswered(20, b.Name)); err != nil {
		return err
	}

	if err := d.nextPhase(ctx, 1, "exported in cluster-c too"); err != nil {
		return err
	}
	d.step("backend migrates to cluster-c: exported there, then unexported in cluster-b, then scaled to zero there; frontend is not touched")
	at = time.Now().UnixMilli()
	d.say("cluster-c runs backend too, and exports it")
	if err := d.deploy(ctx, c, "backend", 2, false); err != nil {
		return err
	}
	if err := export(ctx, c, "backend"); err != nil {
		return err
	}
	if err := d.eventually(ctx, "cluster-a's imports hold cluster-b's and cluster-c's backend pods", func(ctx context.Context) error {
		return d.expectEndpoints(ctx, a, "backend", b, c)
	}); err != nil {
		return err
	}
	if err := d.waitTraffic(ctx, frontend, at, "frontend's requests are answered by cluster-b and cluster-c", answeredBy(10, b.Name, c.Name)); err != nil {
		return err
	}

	if err := d.nextPhase(ctx, 1, "unexported in cluster-b"); err != nil {
		return err
	}
	at = time.Now().UnixMilli()
	if err := d.kubectl(ctx, b, "delete", "serviceexport", "backend", "-n", Namespace); err != nil {
		return err
	}
	if err := d.eventually(ctx, "cluster-a's imports hold cluster-c's backend pods only", func(ctx context.Context) error {
		return d.expectEndpoints(ctx, a, "backend", c)
	}); err != nil {
		return err
	}
	// The imports change first; the requests show when kube-proxy on frontend's node has caught up.
	if err := d.waitTraffic(ctx, frontend, at, "frontend's last 20 requests were answered by cluster-c", lastAnswered(20, c.Name)); err != nil {
		return err
	}

	if err := d.nextPhase(ctx, 1, "scaled to zero in cluster-b"); err != nil {
		return err
	}
	if err := d.kubectl(ctx, b, "scale", "deployment", "backend", "-n", Namespace, "--replicas=0"); err != nil {
		return err
	}
	if err := d.eventually(ctx, "cluster-b's backend pods are gone", func(ctx context.Context) error {
		pods := &corev1.PodList{}
		if err := b.Client.List(ctx, pods, client.InNamespace(Namespace), client.MatchingLabels{"app": "backend"}); err != nil {
			return err
		}
		if n := len(pods.Items); n > 0 {
			return fmt.Errorf("%d pods left", n)
		}
		return nil
	}); err != nil {
		return err
	}
	// A little more traffic, about 2 s, shows that nothing still went to the pods that are gone.
	at = time.Now().UnixMilli()
	if err := d.waitTraffic(ctx, frontend, at, "frontend's next 40 requests were answered by cluster-c", lastAnswered(40, c.Name)); err != nil {
		return err
	}
	got, err := addresses(a, name, dns.TypeA)
	if err != nil || !slices.Equal(got, vip) {
		return fmt.Errorf("the ClusterSetIP changed during the migration: %v, was %v (%v)", got, vip, err)
	}
	d.say("    ok: the ClusterSetIP %v did not change", vip)
	d.kubectl(ctx, a, "get", "serviceimports", "-n", Namespace, "backend", "-o", "jsonpath={.status.clusters}{\"\\n\"}")
	d.dig(ctx, a, name, "A")
	// What an operator sees from a laptop: every member, its controller and DNS, and every check of backend.
	if err := d.kubectlMCS(ctx, "status"); err != nil {
		return err
	}
	return d.kubectlMCS(ctx, "diagnose", Namespace+"/backend")
}

// storySpread is the first part of story 2: one service in every cluster, a conflict, and a headless
// StatefulSet.
func (d *Demo) storySpread(ctx context.Context) error {
	members := d.Fleet.Members
	d.step("Story 2: web is deployed and exported in all three clusters")
	for _, m := range members {
		if err := d.deploy(ctx, m, "web", 2, false); err != nil {
			return err
		}
		if err := export(ctx, m, "web"); err != nil {
			return err
		}
	}
	name := names.ServiceDNSName(Namespace, "web")
	for _, m := range members {
		if err := d.eventually(ctx, m.Name+" resolves web and its slices hold every cluster's web pods", func(ctx context.Context) error {
			if ips, err := addresses(m, name, dns.TypeA); err != nil || len(ips) == 0 {
				return fmt.Errorf("DNS: %v %v", ips, err)
			}
			return d.expectEndpoints(ctx, m, "web", members...)
		}); err != nil {
			return err
		}
	}
	d.kubectl(ctx, members[0], "get", "serviceimports", "-n", Namespace, "web")
	for _, m := range members {
		d.dig(ctx, m, name, "A")
	}

	d.step("cluster-c changes web's http port from %d to 8080: a conflict, shown on every export", workload.ServicePort)
	c := d.member("cluster-c")
	svc := &corev1.Service{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "web"}, svc); err != nil {
		return err
	}
	httpPort := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "http" })
	if httpPort < 0 {
		return fmt.Errorf("web in %s has no Service port named http: %+v", c.Name, svc.Spec.Ports)
	}
	svc.Spec.Ports[httpPort].Port = 8080
	if err := c.Client.Update(ctx, svc); err != nil {
		return err
	}
	for _, m := range members {
		if err := d.eventually(ctx, m.Name+"'s ServiceExport web has Conflict=True/PortConflict", func(ctx context.Context) error {
			return framework.WantExportCondition(ctx, m.Client, Namespace, "web", string(mcsv1beta1.ServiceExportConditionConflict),
				metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonPortConflict))
		}); err != nil {
			return err
		}
	}
	d.kubectl(ctx, c, "get", "serviceexport", "web", "-n", Namespace, "-o",
		`jsonpath={range .status.conditions[?(@.type=="Conflict")]}{.type}={.status} {.reason}: {.message}{"\n"}{end}`)

	d.step("a StatefulSet db, exported as a headless service from all three clusters")
	for _, m := range members {
		if err := d.deploy(ctx, m, "db", 2, true); err != nil {
			return err
		}
		if err := export(ctx, m, "db"); err != nil {
			return err
		}
	}
	for _, m := range members {
		host := "db-0." + m.ID + "." + names.ServiceDNSName(Namespace, "db")
		if err := d.eventually(ctx, "cluster-a resolves "+host+" to that pod", func(ctx context.Context) error {
			want, err := podIP(ctx, m, "db-0")
			if err != nil {
				return err
			}
			got, err := addresses(members[0], host, dns.TypeA)
			if err != nil || !slices.Equal(got, []string{want}) {
				return fmt.Errorf("answers %v (%v), want %s", got, err, want)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	srv := "_http._tcp." + names.ServiceDNSName(Namespace, "db")
	if err := d.eventually(ctx, "cluster-a answers "+srv+" with a record per pod of every cluster", func(ctx context.Context) error {
		r, err := members[0].Query(srv, dns.TypeSRV)
		if err != nil {
			return err
		}
		if len(r.Answer) != 2*len(members) {
			return fmt.Errorf("%d SRV records, want %d", len(r.Answer), 2*len(members))
		}
		return nil
	}); err != nil {
		return err
	}
	d.dig(ctx, members[0], "db-0."+d.member("cluster-b").ID+"."+names.ServiceDNSName(Namespace, "db"), "A")
	d.dig(ctx, members[0], srv, "SRV")
	return nil
}

// storyFailover is the rest of story 2: traffic from cluster-a to a service of cluster-b and cluster-c while
// cluster-b's pods crash, and while cluster-b's controller is down and up again.
func (d *Demo) storyFailover(ctx context.Context) error {
	members := d.Fleet.Members
	a, b, c := d.member("cluster-a"), d.member("cluster-b"), d.member("cluster-c")
	name := names.ServiceDNSName(Namespace, "failover")
	if err := d.nextPhase(ctx, 2, "failover in cluster-b and cluster-c"); err != nil {
		return err
	}
	d.step("failover is deployed and exported in cluster-b and cluster-c; failover-client in cluster-a sends to %s", name)
	for _, m := range []*framework.Member{b, c} {
		if err := d.deploy(ctx, m, "failover", 2, false); err != nil {
			return err
		}
		if err := export(ctx, m, "failover"); err != nil {
			return err
		}
	}
	if err := d.eventually(ctx, "cluster-a's imports hold cluster-b's and cluster-c's failover pods", func(ctx context.Context) error {
		return d.expectEndpoints(ctx, a, "failover", b, c)
	}); err != nil {
		return err
	}
	if err := d.proxied(ctx, a, "failover"); err != nil {
		return err
	}
	at := time.Now().UnixMilli()
	loop, err := d.startLoop(ctx, a, "failover-client", "", name+":"+strconv.Itoa(workload.EchoPort))
	if err != nil {
		return err
	}
	if err := d.waitTraffic(ctx, loop, at, "failover-client's requests are answered by cluster-b and cluster-c", answeredBy(10, b.Name, c.Name)); err != nil {
		return err
	}

	pods := &corev1.PodList{}
	if err := b.Client.List(ctx, pods, client.InNamespace(Namespace), client.MatchingLabels{"app": "failover"}); err != nil {
		return err
	}
	crashed := map[string]bool{}
	for _, p := range pods.Items {
		crashed[p.Name] = true
	}
	if err := d.nextPhase(ctx, 2, "cluster-b's failover pods killed"); err != nil {
		return err
	}
	d.step("cluster-b's failover pods crash: all deleted at once with no grace period; their Deployment replaces them")
	// Through the API rather than kubectl, so that the instant of the kill is known to the millisecond.
	d.say("$ kubectl --context %s delete pods -n %s -l app=failover --grace-period=0 --force", b.Name, Namespace)
	killed := time.Now().UnixMilli()
	if err := b.Kube.CoreV1().Pods(Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
		metav1.ListOptions{LabelSelector: "app=failover"}); err != nil {
		return err
	}
	var recovered workload.Request
	if err := d.waitTraffic(ctx, loop, killed, "cluster-b's new failover pods answer", func(reqs []workload.Request) error {
		i := slices.IndexFunc(reqs, func(r workload.Request) bool { return r.OK && r.Cluster == b.Name && !crashed[r.Pod] })
		if i < 0 {
			return fmt.Errorf("no answer from cluster-b's new pods yet (so far: %v)", tally(reqs))
		}
		recovered = reqs[i]
		return nil
	}); err != nil {
		return err
	}
	if err := d.eventually(ctx, "cluster-a's imports hold cluster-b's new failover pods and cluster-c's", func(ctx context.Context) error {
		return d.expectEndpoints(ctx, a, "failover", b, c)
	}); err != nil {
		return err
	}
	if err := d.waitTraffic(ctx, loop, killed, "failover-client's last 20 requests were answered", lastAnswered(20, "")); err != nil {
		return err
	}
	d.note("cluster-b's failover pods killed: %s", disruption(loop, "the kill", killed))
	d.note("cluster-b's failover pods killed: recovered when cluster-b's new pod %s answered, %d ms after the kill", recovered.Pod, recovered.StartMs-killed)

	if err := d.nextPhase(ctx, 2, "cluster-b's controller stopped"); err != nil {
		return err
	}
	d.step("cluster-b's controller stops: its control plane is lost, its pods still answer, so every member keeps using them and says they are stale")
	stopped := time.Now().UnixMilli()
	if err := b.StopController(); err != nil {
		return err
	}
	others := []*framework.Member{a, c}
	var staleAt int64
	for _, m := range others {
		if err := d.eventually(ctx, m.Name+"'s import of web says cluster-b is stale", func(ctx context.Context) error {
			return staleIn(ctx, m, "web", b.ID)
		}); err != nil {
			return err
		}
		staleAt = time.Now().UnixMilli()
		if err := d.eventually(ctx, m.Name+" still uses cluster-b's web and failover endpoints", func(ctx context.Context) error {
			for _, svc := range []string{"web", "failover"} {
				got, err := importedEndpoints(ctx, m, svc)
				if err != nil {
					return err
				}
				if len(got[b.ID]) == 0 {
					return fmt.Errorf("%s's import of %s holds no ready endpoint of cluster-b: %v", m.Name, svc, got)
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	// Requests keep going to cluster-b's pods after every member saw its control plane lost, and none fails.
	if err := d.waitTraffic(ctx, loop, staleAt, "failover-client's requests since cluster-b turned stale answered, cluster-b among them", func(reqs []workload.Request) error {
		if err := lastAnswered(20, "")(reqs); err != nil {
			return err
		}
		if !slices.ContainsFunc(reqs, func(r workload.Request) bool { return r.OK && r.Cluster == b.Name }) {
			return fmt.Errorf("no answer from cluster-b since it turned stale")
		}
		return nil
	}); err != nil {
		return err
	}
	d.note("cluster-b's controller stopped: %s; cluster-b's pods kept answering", disruption(loop, "the stop", stopped))
	d.dig(ctx, a, names.ServiceDNSName(Namespace, "db"), "A")

	if err := d.nextPhase(ctx, 2, "cluster-b's controller restarted"); err != nil {
		return err
	}
	d.step("cluster-b's controller restarts: its endpoints are no longer stale")
	restarted := time.Now().UnixMilli()
	if err := b.StartController(); err != nil {
		return err
	}
	for _, m := range others {
		if err := d.eventually(ctx, m.Name+" has cluster-b's web, db and failover endpoints again", func(ctx context.Context) error {
			if err := d.expectEndpoints(ctx, m, "web", members...); err != nil {
				return err
			}
			if err := d.expectEndpoints(ctx, m, "failover", b, c); err != nil {
				return err
			}
			return d.expectEndpoints(ctx, m, "db", members...)
		}); err != nil {
			return err
		}
	}
	var back workload.Request
	if err := d.waitTraffic(ctx, loop, restarted, "cluster-b answers failover-client again", func(reqs []workload.Request) error {
		i := slices.IndexFunc(reqs, func(r workload.Request) bool { return r.OK && r.Cluster == b.Name })
		if i < 0 {
			return fmt.Errorf("no answer from cluster-b yet (so far: %v)", tally(reqs))
		}
		back = reqs[i]
		return nil
	}); err != nil {
		return err
	}
	for _, m := range others {
		if err := d.eventually(ctx, m.Name+"'s import of web no longer says cluster-b is stale", func(ctx context.Context) error {
			if staleIn(ctx, m, "web", b.ID) == nil {
				return fmt.Errorf("still stale")
			}
			return nil
		}); err != nil {
			return err
		}
	}
	d.note("cluster-b's controller restarted: cluster-b answered %d ms after the restart", back.StartMs-restarted)
	d.dig(ctx, a, names.ServiceDNSName(Namespace, "db"), "A")
	return nil
}

// expectEndpoints checks that m's imported slices of svc hold exactly the ready pods of svc in each of from.
func (d *Demo) expectEndpoints(ctx context.Context, m *framework.Member, svc string, from ...*framework.Member) error {
	want := map[string][]string{}
	for _, src := range from {
		ips, err := workload.ReadyPodIPs(ctx, src.Client, Namespace, client.MatchingLabels{"app": svc})
		if err != nil {
			return err
		}
		if len(ips) == 0 {
			return fmt.Errorf("no running %s pods in %s yet", svc, src.Name)
		}
		want[src.ID] = ips
	}
	got, err := importedEndpoints(ctx, m, svc)
	if err != nil {
		return err
	}
	return sameSet(got, want)
}

func podIP(ctx context.Context, m *framework.Member, name string) (string, error) {
	p := &corev1.Pod{}
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: name}, p); err != nil {
		return "", err
	}
	if p.Status.PodIP == "" {
		return "", fmt.Errorf("pod %s/%s has no IP yet", m.Name, name)
	}
	return p.Status.PodIP, nil
}

// staleIn says why m's import of svc does not say that cluster's control plane is lost while its endpoints answer
// (the Stale condition), or nil when it does.
func staleIn(ctx context.Context, m *framework.Member, svc, cluster string) error {
	si := &mcsv1beta1.ServiceImport{}
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: svc}, si); err != nil {
		return err
	}
	c := meta.FindStatusCondition(si.Status.Conditions, imports.ConditionStale)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, cluster+" (") {
		return fmt.Errorf("the Stale condition of %s in %s is %+v", svc, m.Name, c)
	}
	return nil
}
