package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/test/fleet"
)

const conditionsColumns = `jsonpath={range .items[*]}{.metadata.name}{"\t"}{range .status.conditions[*]}{.type}={.status}/{.reason} {end}{"\n"}{end}`

// storyMigration is story 1: a consumer keeps resolving its backend while the backend moves between clusters.
func (d *Demo) storyMigration(ctx context.Context) error {
	a, b, c := d.member("cluster-a"), d.member("cluster-b"), d.member("cluster-c")
	name := "backend." + Namespace + ".svc.clusterset.local"
	d.step("Story 1: frontend in cluster-a consumes backend in cluster-b as %s", name)
	if err := deploy(ctx, b, "backend", 2, 80, false); err != nil {
		return err
	}
	if err := export(ctx, b, "backend"); err != nil {
		return err
	}
	if err := deployFrontend(ctx, a, name); err != nil {
		return err
	}
	d.say("frontend's only configuration: BACKEND_URL=http://%s", name)

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

	d.step("backend migrates to cluster-c: exported there, then unexported in cluster-b; frontend is not touched")
	watch := startWatch(a, name)
	if err := deploy(ctx, c, "backend", 2, 80, false); err != nil {
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
	if err := unexport(ctx, b, "backend"); err != nil {
		return err
	}
	if err := d.eventually(ctx, "cluster-a's imports hold cluster-c's backend pods only", func(ctx context.Context) error {
		return d.expectEndpoints(ctx, a, "backend", c)
	}); err != nil {
		return err
	}
	asked, failures := watch.finish()
	if len(failures) > 0 {
		return fmt.Errorf("%s failed to resolve %d of %d times during the migration: %s", name, len(failures), asked, strings.Join(failures, "; "))
	}
	d.say("    ok: %s resolved on every one of %d queries made during the migration", name, asked)
	got, err := addresses(a, name, dns.TypeA)
	if err != nil || !slices.Equal(got, vip) {
		return fmt.Errorf("the ClusterSetIP changed during the migration: %v, was %v (%v)", got, vip, err)
	}
	d.say("    ok: the ClusterSetIP %v did not change", vip)
	d.kubectl(ctx, a, "get", "serviceimports", "-n", Namespace, "backend", "-o", "jsonpath={.status.clusters}{\"\\n\"}")
	d.dig(ctx, a, name, "A")
	return nil
}

// storySpread is story 2: one service in every cluster, a conflict, a headless StatefulSet, and a member lost and
// regained.
func (d *Demo) storySpread(ctx context.Context) error {
	members := d.Fleet.Members
	d.step("Story 2: web is deployed and exported in all three clusters")
	for _, m := range members {
		if err := deploy(ctx, m, "web", 2, 80, false); err != nil {
			return err
		}
		if err := export(ctx, m, "web"); err != nil {
			return err
		}
	}
	name := "web." + Namespace + ".svc.clusterset.local"
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

	d.step("cluster-c changes web's port to 8080: a conflict, shown on every export")
	c := d.member("cluster-c")
	svc := &corev1.Service{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "web"}, svc); err != nil {
		return err
	}
	svc.Spec.Ports[0].Port = 8080
	if err := c.Client.Update(ctx, svc); err != nil {
		return err
	}
	for _, m := range members {
		if err := d.eventually(ctx, m.Name+"'s ServiceExport web has Conflict=True/PortConflict", func(ctx context.Context) error {
			cond, err := exportCondition(ctx, m, "web", string(mcsv1beta1.ServiceExportConditionConflict))
			if err != nil {
				return err
			}
			if cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Reason, string(mcsv1beta1.ServiceExportReasonPortConflict)) {
				return fmt.Errorf("condition %+v", cond)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	d.kubectl(ctx, c, "get", "serviceexport", "web", "-n", Namespace, "-o",
		`jsonpath={range .status.conditions[?(@.type=="Conflict")]}{.type}={.status} {.reason}: {.message}{"\n"}{end}`)

	d.step("a StatefulSet db, exported as a headless service from all three clusters")
	for _, m := range members {
		if err := deploy(ctx, m, "db", 2, 5432, true); err != nil {
			return err
		}
		if err := export(ctx, m, "db"); err != nil {
			return err
		}
	}
	for _, m := range members {
		host := fmt.Sprintf("db-0.%s.db.%s.svc.clusterset.local", m.ID, Namespace)
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
	srv := "_http._tcp.db." + Namespace + ".svc.clusterset.local"
	if err := d.eventually(ctx, "cluster-a answers "+srv+" with a record per pod of every cluster", func(ctx context.Context) error {
		r, err := query(members[0], srv, dns.TypeSRV)
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
	d.dig(ctx, members[0], fmt.Sprintf("db-0.%s.db.%s.svc.clusterset.local", d.member("cluster-b").ID, Namespace), "A")
	d.dig(ctx, members[0], srv, "SRV")

	d.step("cluster-b's controller stops: once its Lease expires, its endpoints leave the other clusters")
	b := d.member("cluster-b")
	b.StopController()
	others := []*fleet.Member{d.member("cluster-a"), d.member("cluster-c")}
	for _, m := range others {
		if err := d.eventually(ctx, m.Name+" no longer has cluster-b's web and db endpoints", func(ctx context.Context) error {
			if err := d.expectEndpoints(ctx, m, "web", others...); err != nil {
				return err
			}
			return d.expectEndpoints(ctx, m, "db", others...)
		}); err != nil {
			return err
		}
	}
	d.dig(ctx, others[0], "db."+Namespace+".svc.clusterset.local", "A")
	d.step("cluster-b's controller restarts: its endpoints return")
	if err := b.StartController(); err != nil {
		return err
	}
	for _, m := range others {
		if err := d.eventually(ctx, m.Name+" has cluster-b's web and db endpoints again", func(ctx context.Context) error {
			if err := d.expectEndpoints(ctx, m, "web", members...); err != nil {
				return err
			}
			return d.expectEndpoints(ctx, m, "db", members...)
		}); err != nil {
			return err
		}
	}
	d.dig(ctx, others[0], "db."+Namespace+".svc.clusterset.local", "A")
	return nil
}

// expectEndpoints checks that m's imported slices of svc hold exactly the ready pods of svc in each of from.
func (d *Demo) expectEndpoints(ctx context.Context, m *fleet.Member, svc string, from ...*fleet.Member) error {
	want := map[string][]string{}
	for _, src := range from {
		ips, err := localPodIPs(ctx, src, svc)
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

func podIP(ctx context.Context, m *fleet.Member, name string) (string, error) {
	p := &corev1.Pod{}
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: name}, p); err != nil {
		return "", err
	}
	if p.Status.PodIP == "" {
		return "", fmt.Errorf("pod %s/%s has no IP yet", m.Name, name)
	}
	return p.Status.PodIP, nil
}

// deployFrontend runs the consumer: its only knowledge of backend is the clusterset name.
func deployFrontend(ctx context.Context, m *fleet.Member, backend string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "frontend", Namespace: Namespace, Labels: map[string]string{"app": "frontend"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "frontend", Image: "example.invalid/frontend",
			Env: []corev1.EnvVar{{Name: "BACKEND_URL", Value: "http://" + backend}},
		}}},
	}
	return m.Client.Create(ctx, pod)
}
