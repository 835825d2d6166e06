// Package clusterlocal proves the mcs-controller's --cluster-local-services on a local fleet, for members whose
// DNS cannot serve clusterset.local: a ClusterSetIP and a headless import reflected into the member's own
// cluster.local as <svc>-clusterset Services, answered by the member's CoreDNS's kubernetes plugin (stock code)
// and, where the machine can run the data plane, reached from a pod through kube-proxy; a Service of the user's
// that holds the name left alone and reported; the reflection gone with the export, and every one gone once the
// mode is turned off.
package clusterlocal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/cli"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

const (
	ns       = "clusterlocal"
	timeout  = 90 * time.Second
	modeFlag = "--cluster-local-services"
)

func TestClusterLocalServices(t *testing.T) {
	ctx := context.Background()
	nodes := 1
	if err := dataplane.CheckHost(); err != nil {
		t.Logf("no data plane, so no request through kube-proxy: %v", err)
		nodes = 0
	}
	f, logf := framework.StartTest(t, 2, nodes)
	a, b := f.Member("cluster-a"), f.Member("cluster-b")
	for _, m := range f.Members {
		if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}

	// cluster-a has a Service of its own with the name taken's cluster-local Service would get.
	theirs := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-clusterset"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "mine"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if err := a.Client.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	// cluster-b exports a ClusterSetIP service, a headless StatefulSet and taken.
	for _, svc := range []struct {
		name     string
		replicas int32
		headless bool
	}{{"api", 2, false}, {"db", 2, true}, {"taken", 1, false}} {
		if err := workload.Deploy(ctx, b.Client, ns, svc.name, b.Name, svc.replicas, svc.headless); err != nil {
			t.Fatal(err)
		}
		if svc.name == "api" {
			dualStack(t, b, svc.name)
		}
		if err := b.Client.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc.name}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"api", "db", "taken"} {
		waitReadyImport(t, a, name)
	}
	poll.T(t, timeout, "db's pods ready in cluster-b", func() error {
		_, err := podIPs(b, "db")
		return err
	})

	// Off by default: an import is Ready only after the controller wrote all it writes.
	if got := clusterLocalServices(t, a); len(got) > 0 {
		t.Fatalf("without %s, cluster-local Services %v", modeFlag, got)
	}

	a.StopController()
	a.SetControllerArgs(modeFlag)
	if err := a.StartController(); err != nil {
		t.Fatal(err)
	}
	api, db := imported(t, a, "api"), imported(t, a, "db")
	if len(api.Spec.IPs) != 2 {
		t.Fatalf("api's import has the ClusterSetIPs %v, want one of each family", api.Spec.IPs)
	}
	poll.T(t, timeout, "cluster-local Services of api and db", func() error {
		for _, si := range []*mcsv1beta1.ServiceImport{api, db} {
			if err := wantClusterLocal(a, si); err != nil {
				return err
			}
		}
		return nil
	})

	// The member's CoreDNS answers the names from its kubernetes plugin, as stock CoreDNS does.
	apiName := "api-clusterset." + ns + ".svc.cluster.local"
	dbName := "db-clusterset." + ns + ".svc.cluster.local"
	dbIPs, err := podIPs(b, "db")
	if err != nil {
		t.Fatal(err)
	}
	db0, err := podIP(b, "db-0")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		name  string
		qtype uint16
		want  []string
	}{
		{apiName, dns.TypeA, api.Spec.IPs[:1]},
		{apiName, dns.TypeAAAA, api.Spec.IPs[1:]},
		{dbName, dns.TypeA, dbIPs},
		{"db-0." + dbName, dns.TypeA, []string{db0}},
	} {
		poll.T(t, timeout, fmt.Sprintf("%s %s", q.name, dns.TypeToString[q.qtype]), func() error {
			got, err := lookup(a, q.name, q.qtype)
			if err != nil {
				return err
			}
			if !slices.Equal(got, slices.Sorted(slices.Values(q.want))) {
				return fmt.Errorf("answered %v, want %v", got, q.want)
			}
			return nil
		})
	}
	t.Logf("cluster-a's DNS: %s -> the ClusterSetIPs %v, %s -> cluster-b's pods %v", apiName, api.Spec.IPs, dbName, dbIPs)

	if nodes > 0 {
		requests(t, a, dbName)
	}

	// taken: the user's Service stays as it was, the import says why it is not reflected, and an Event too.
	taken := imported(t, a, "taken")
	poll.T(t, timeout, "taken reports NameInUse", func() error {
		si := imported(t, a, "taken")
		c := meta.FindStatusCondition(si.Status.Conditions, imports.ConditionClusterLocalService)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "NameInUse" {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	poll.T(t, timeout, "a NameInUse Event on taken", func() error {
		events, err := a.Kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == "NameInUse" && e.Regarding.Name == "taken" && e.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(events.Items))
	})
	now := &corev1.Service{}
	if err := a.Client.Get(ctx, client.ObjectKeyFromObject(theirs), now); err != nil {
		t.Fatal(err)
	}
	if now.ResourceVersion != theirs.ResourceVersion || len(now.Labels) > 0 || len(now.OwnerReferences) > 0 {
		t.Errorf("the user's Service was changed: %+v", now)
	}
	if got := clusterLocalSlices(t, a, "taken"); len(got) > 0 {
		t.Errorf("slices of the controller's for the user's Service: %v", got)
	}
	// Once the user's Service is gone, the name is the import's.
	if err := a.Client.Delete(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	poll.T(t, timeout, "taken's cluster-local Service once the name is free", func() error {
		return wantClusterLocal(a, imported(t, a, "taken"))
	})

	// Unexported: the reflection goes with the import.
	if err := b.Client.Delete(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"}}); err != nil {
		t.Fatal(err)
	}
	poll.T(t, timeout, "api's import and cluster-local Service gone", func() error {
		if err := a.Client.Get(ctx, client.ObjectKeyFromObject(api), &mcsv1beta1.ServiceImport{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("ServiceImport: %v", err)
		}
		return gone(t, a, "api")
	})
	if got, err := lookup(a, apiName, dns.TypeA); err != nil || len(got) > 0 {
		t.Errorf("%s after the unexport: %v %v", apiName, got, err)
	}

	// Turned off: every cluster-local Service and slice goes, the condition too, and the imports stay as they are.
	a.StopController()
	a.SetControllerArgs()
	if err := a.StartController(); err != nil {
		t.Fatal(err)
	}
	poll.T(t, timeout, "no cluster-local Service once the mode is off", func() error {
		for _, name := range []string{"db", "taken"} {
			if err := gone(t, a, name); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(imported(t, a, name).Status.Conditions, imports.ConditionClusterLocalService); c != nil {
				return fmt.Errorf("%s still has %+v", name, c)
			}
		}
		return nil
	})
	if after := imported(t, a, "taken"); !slices.Equal(after.Spec.IPs, taken.Spec.IPs) ||
		!meta.IsStatusConditionTrue(after.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady)) {
		t.Errorf("taken's import changed with the mode: IPs %v -> %v, conditions %v", taken.Spec.IPs, after.Spec.IPs, after.Status.Conditions)
	}
	// A Service in the way, and the mode turned on and off, are no failures an operator should read about.
	log, err := os.ReadFile(logf.Name())
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(log)) {
		if strings.Contains(l, "Reconciler error") {
			t.Errorf("controller: %s", l)
		}
	}
}

// dualStack makes the member's Service name dual-stack, so that its import has a ClusterSetIP of each family.
func dualStack(t *testing.T, m *framework.Member, name string) {
	t.Helper()
	svc := &corev1.Service{}
	if err := m.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
		t.Fatal(err)
	}
	svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	if err := m.Client.Update(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
}

// requests sends one request from a pod of cluster-a to each cluster-local name: HTTP to the ClusterSetIP's name,
// through kube-proxy, and TCP echo to a headless pod's name, each answered by cluster-b.
func requests(t *testing.T, a *framework.Member, dbName string) {
	ctx := context.Background()
	if err := a.Client.Create(ctx, workload.ClientPod("client", ns)); err != nil {
		t.Fatal(err)
	}
	assets, err := clusterset.AssetsDir("")
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(assets, "kubectl")
	for _, r := range []struct{ what, cmd, want string }{
		// The short name, through the pod's search path, as a client in the namespace would use it.
		{"HTTP to api-clusterset", fmt.Sprintf("curl -sS -m 3 http://api-clusterset:%d/", workload.ServicePort), "cluster=cluster-b "},
		{"TCP to db-0." + dbName, fmt.Sprintf("echo ping | nc -w 2 db-0.%s %d", dbName, workload.EchoPort), "cluster=cluster-b pod=db-0 echo=ping"},
	} {
		// The client pod starts, and kube-proxy programs the VIP, on their own time: a failed request is retried.
		poll.T(t, timeout, r.what+" from a pod of cluster-a", func() error {
			out, stderr, code, err := workload.Kubectl(ctx, kubectl, a.KubeconfigPath, a.Name, "exec", "-n", ns, "client", "--", "sh", "-c", r.cmd)
			if err != nil || code != 0 || !strings.HasPrefix(strings.TrimSpace(out), r.want) {
				return fmt.Errorf("exit %d %v: %q %q", code, err, out, stderr)
			}
			t.Logf("%s: %s", r.what, strings.TrimSpace(out))
			return nil
		})
	}
}

// waitReadyImport waits for the member's import of name to be Ready.
func waitReadyImport(t *testing.T, m *framework.Member, name string) {
	t.Helper()
	poll.T(t, timeout, name+" imported in "+m.Name, func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := m.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, si); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady)) {
			return fmt.Errorf("not Ready: %v", si.Status.Conditions)
		}
		return nil
	})
}

func imported(t *testing.T, m *framework.Member, name string) *mcsv1beta1.ServiceImport {
	t.Helper()
	si := &mcsv1beta1.ServiceImport{}
	if err := m.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, si); err != nil {
		t.Fatal(err)
	}
	return si
}

// wantClusterLocal checks the import's cluster-local Service, its slices and its condition: a selector-less
// headless Service, owned by the import, and slices holding the ClusterSetIPs, or the imported endpoints.
func wantClusterLocal(m *framework.Member, si *mcsv1beta1.ServiceImport) error {
	ctx := context.Background()
	name := names.ClusterLocalServiceName(ns, si.Name)
	svc := &corev1.Service{}
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
		return err
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Selector != nil || len(svc.OwnerReferences) != 1 || svc.OwnerReferences[0].UID != si.UID {
		return fmt.Errorf("Service %s: %+v", name, svc)
	}
	var want []string
	if si.Spec.Type == mcsv1beta1.ClusterSetIP {
		want = si.Spec.IPs
	} else {
		list := &discoveryv1.EndpointSliceList{}
		if err := m.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{mcsv1beta1.LabelServiceName: si.Name}); err != nil {
			return err
		}
		want = cli.ReadyAddresses(list.Items)
	}
	list := &discoveryv1.EndpointSliceList{}
	if err := m.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return err
	}
	got := slices.Sorted(slices.Values(cli.ReadyAddresses(list.Items)))
	if len(want) == 0 || !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		return fmt.Errorf("slices of %s hold %v, want %v", name, got, want)
	}
	c := meta.FindStatusCondition(si.Status.Conditions, imports.ConditionClusterLocalService)
	if c == nil || c.Status != metav1.ConditionTrue {
		// The condition is written after the objects: read the import again.
		fresh := &mcsv1beta1.ServiceImport{}
		if err := m.Client.Get(ctx, client.ObjectKeyFromObject(si), fresh); err != nil {
			return err
		}
		if c = meta.FindStatusCondition(fresh.Status.Conditions, imports.ConditionClusterLocalService); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("%s: condition %+v", si.Name, c)
		}
	}
	return nil
}

// gone checks that the member has no cluster-local Service or slice of the named import.
func gone(t *testing.T, m *framework.Member, name string) error {
	err := m.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: names.ClusterLocalServiceName(ns, name)}, &corev1.Service{})
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("cluster-local Service of %s: %v", name, err)
	}
	if got := clusterLocalSlices(t, m, name); len(got) > 0 {
		return fmt.Errorf("cluster-local slices of %s: %v", name, got)
	}
	return nil
}

// clusterLocalServices names the member's cluster-local Services.
func clusterLocalServices(t *testing.T, m *framework.Member) []string {
	t.Helper()
	list := &corev1.ServiceList{}
	if err := m.Client.List(context.Background(), list, client.InNamespace(ns), client.HasLabels{names.LabelClusterLocalOf}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		out = append(out, s.Name)
	}
	return out
}

// clusterLocalSlices names the controller's slices in the member for the Service that has the name of the named
// import's cluster-local Service.
func clusterLocalSlices(t *testing.T, m *framework.Member, name string) []string {
	t.Helper()
	list := &discoveryv1.EndpointSliceList{}
	if err := m.Client.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{
		discoveryv1.LabelServiceName: names.ClusterLocalServiceName(ns, name), discoveryv1.LabelManagedBy: names.ManagedBy,
	}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		out = append(out, s.Name)
	}
	return out
}

// podIPs are the addresses of the member's ready pods of app, once there are two.
func podIPs(m *framework.Member, app string) ([]string, error) {
	ips, err := workload.ReadyPodIPs(context.Background(), m.Client, ns, client.MatchingLabels{"app": app})
	if err == nil && len(ips) != 2 {
		err = fmt.Errorf("%d ready pods of %s", len(ips), app)
	}
	return ips, err
}

func podIP(m *framework.Member, pod string) (string, error) {
	p, err := m.Kube.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return p.Status.PodIP, nil
}

// lookup returns the addresses a member's DNS answers for name: none for NXDOMAIN, an error for other failures.
func lookup(m *framework.Member, name string, qtype uint16) ([]string, error) {
	ips, rcode, err := m.Addresses(name, qtype)
	if err == nil && rcode != dns.RcodeSuccess && rcode != dns.RcodeNameError {
		err = fmt.Errorf("%s %s: %s", name, dns.TypeToString[qtype], dns.RcodeToString[rcode])
	}
	return ips, err
}
