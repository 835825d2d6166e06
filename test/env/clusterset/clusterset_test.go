package clusterset

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/poll"
)

const pollTimeout = 60 * time.Second

// eventually polls cond until it reports done, failing the test with the last error after pollTimeout.
func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	poll.T(t, pollTimeout, what, func() error {
		done, err := cond(context.Background())
		switch {
		case done:
			return nil
		case err == nil:
			return errors.New("not yet")
		}
		return err
	})
}

// apart runs the test apart from any data plane on this machine, holding its lock: the control planes it starts
// at once stall the request loops of a data-plane test beside it on two shared cores for seconds, which that test
// rightly counts as failed requests (`make test` runs two packages at a time).
func apart(t *testing.T) {
	t.Helper()
	lock, err := dataplane.HoldMachine(context.Background(), 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
}

func TestClusterSet(t *testing.T) {
	apart(t)
	ctx := context.Background()
	start := time.Now()
	cs, err := Start(ctx, Options{ClusterIDs: map[string]string{"cluster-c": "east.prod"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("3 members + broker started in %s", time.Since(start).Round(time.Millisecond))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cs.Stop()
		}
	})

	t.Run("members have distinct CIDRs and ClusterProperties", func(t *testing.T) { testIdentity(t, cs) })
	t.Run("deployment yields ready endpoints", func(t *testing.T) { testDeployment(t, cs.Member("cluster-a")) })
	t.Run("statefulset pods carry hostnames", func(t *testing.T) { testStatefulSet(t, cs.Member("cluster-b")) })
	t.Run("namespace deletion completes", func(t *testing.T) { testNamespaceDeletion(t, cs.Member("cluster-a")) })
	t.Run("owner references are garbage collected", func(t *testing.T) { testGarbageCollection(t, cs.Member("cluster-c")) })
	t.Run("kubeconfig has a context per cluster", func(t *testing.T) { testKubeconfig(t, cs) })

	before := childPIDs(t)
	if len(before) < 3*3+2 { // per member etcd, apiserver, kcm; the broker's etcd and apiserver
		t.Errorf("expected at least 11 child processes while running, found %d", len(before))
	}
	dirs := make([]string, 0, 4)
	for _, c := range cs.All() {
		dirs = append(dirs, c.dir)
	}
	if err := cs.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	stopped = true
	if left := childPIDs(t); len(left) > 0 {
		t.Errorf("processes left after Stop: %v", left)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("folder %s left after Stop", d)
		}
	}
}

func testIdentity(t *testing.T, cs *ClusterSet) {
	ctx := context.Background()
	if len(cs.Members) != 3 || cs.Broker == nil {
		t.Fatalf("want 3 members and a broker, got %d members, broker %v", len(cs.Members), cs.Broker != nil)
	}
	wantIDs := map[string]string{"cluster-a": "cluster-a", "cluster-b": "cluster-b", "cluster-c": "east.prod"}
	seenCIDR := map[netip.Prefix]string{}
	seenIP := map[string]string{}
	for _, c := range cs.All() {
		for _, p := range append(append([]netip.Prefix{}, c.PodCIDRs...), c.ServiceCIDRs...) {
			for q, owner := range seenCIDR {
				if p.Overlaps(q) {
					t.Errorf("%s's %s overlaps %s's %s", c.Name, p, owner, q)
				}
			}
			seenCIDR[p] = c.Name
		}
		// The apiserver really allocates from the cluster's own range, in both families.
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"},
			Spec: corev1.ServiceSpec{
				Ports:          []corev1.ServicePort{{Port: 80}},
				IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			},
		}
		if err := c.Client.Create(ctx, svc); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if len(svc.Spec.ClusterIPs) != 2 {
			t.Errorf("%s: want a dual-stack service, got ClusterIPs %v", c.Name, svc.Spec.ClusterIPs)
		}
		for i, ip := range svc.Spec.ClusterIPs {
			if !c.ServiceCIDRs[i].Contains(netip.MustParseAddr(ip)) {
				t.Errorf("%s: ClusterIP %s outside %s", c.Name, ip, c.ServiceCIDRs[i])
			}
			if owner, dup := seenIP[ip]; dup {
				t.Errorf("%s: ClusterIP %s also allocated in %s", c.Name, ip, owner)
			}
			seenIP[ip] = c.Name
		}
	}
	for _, c := range cs.Members {
		props := &aboutv1alpha1.ClusterPropertyList{}
		if err := c.Client.List(ctx, props); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		got := map[string]string{}
		for _, p := range props.Items {
			got[p.Name] = p.Spec.Value
		}
		if got[aboutv1alpha1.ClusterIDName] != wantIDs[c.Name] || got[aboutv1alpha1.ClusterSetName] != "clusterset" {
			t.Errorf("%s: ClusterProperties %v, want id %q and clusterset %q", c.Name, got, wantIDs[c.Name], "clusterset")
		}
		if c.ID != wantIDs[c.Name] {
			t.Errorf("%s: ID %q, want %q", c.Name, c.ID, wantIDs[c.Name])
		}
	}
}

func podTemplate(labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "example.invalid/app", Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		}}},
	}
}

// deployment is a Deployment of two pods labelled app=name.
func deployment(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: podTemplate(labels),
		},
	}
}

// readyEndpoints lists the EndpointSlices of a service and returns its ready endpoints, with their IP family.
func readyEndpoints(ctx context.Context, c *Cluster, ns, svc string) ([]discoveryv1.Endpoint, error) {
	slices := &discoveryv1.EndpointSliceList{}
	if err := c.Client.List(ctx, slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: svc}); err != nil {
		return nil, err
	}
	var eps []discoveryv1.Endpoint
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			if ptr.Deref(ep.Conditions.Ready, false) {
				eps = append(eps, ep)
			}
		}
	}
	return eps, nil
}

func testDeployment(t *testing.T, c *Cluster) {
	ctx := context.Background()
	CreateNamespace(t, "deploy", c)
	dep := deployment("deploy", "web")
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "deploy"},
		Spec:       corev1.ServiceSpec{Selector: dep.Spec.Selector.MatchLabels, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	for _, o := range []client.Object{dep, svc} {
		if err := c.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "two ready endpoints in web's EndpointSlice", func(ctx context.Context) (bool, error) {
		eps, err := readyEndpoints(ctx, c, "deploy", "web")
		if err != nil || len(eps) != 2 {
			return false, fmt.Errorf("ready endpoints %d, err %v", len(eps), err)
		}
		for _, ep := range eps {
			if !c.PodCIDRs[0].Contains(netip.MustParseAddr(ep.Addresses[0])) {
				return false, fmt.Errorf("endpoint %v outside pod CIDR %s", ep.Addresses, c.PodCIDRs[0])
			}
			if ptr.Deref(ep.Zone, "") != c.Zone || ptr.Deref(ep.NodeName, "") != c.NodeName {
				return false, fmt.Errorf("endpoint zone %v node %v", ep.Zone, ep.NodeName)
			}
		}
		return true, nil
	})
	pods := &corev1.PodList{}
	if err := c.Client.List(ctx, pods, client.InNamespace("deploy")); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || len(p.Status.PodIPs) != 2 {
			t.Errorf("pod %s: phase %s, IPs %v; want Running with one IP per family", p.Name, p.Status.Phase, p.Status.PodIPs)
		}
	}
}

func testStatefulSet(t *testing.T, c *Cluster) {
	ctx := context.Background()
	CreateNamespace(t, "stateful", c)
	labels := map[string]string{"app": "db"}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "stateful"},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, Selector: labels, Ports: []corev1.ServicePort{{Name: "sql", Port: 5432}},
		},
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "stateful"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](3), ServiceName: "db",
			Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: podTemplate(labels),
		},
	}
	for _, o := range []client.Object{svc, sts} {
		if err := c.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "db-0..db-2 in db's EndpointSlice with their hostnames", func(ctx context.Context) (bool, error) {
		eps, err := readyEndpoints(ctx, c, "stateful", "db")
		if err != nil {
			return false, err
		}
		got := map[string]bool{}
		for _, ep := range eps {
			got[ptr.Deref(ep.Hostname, "")] = true
		}
		for i := range 3 {
			if !got["db-"+strconv.Itoa(i)] {
				return false, fmt.Errorf("hostnames %v", got)
			}
		}
		return true, nil
	})
}

func testNamespaceDeletion(t *testing.T, c *Cluster) {
	ctx := context.Background()
	CreateNamespace(t, "doomed", c)
	if err := c.Client.Create(ctx, deployment("doomed", "doomed")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "doomed pods running", func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		err := c.Client.List(ctx, pods, client.InNamespace("doomed"))
		return err == nil && len(pods.Items) == 2 && pods.Items[0].Status.Phase == corev1.PodRunning &&
			pods.Items[1].Status.Phase == corev1.PodRunning, err
	})
	if err := c.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "namespace doomed gone", func(ctx context.Context) (bool, error) {
		err := c.Client.Get(ctx, client.ObjectKey{Name: "doomed"}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), err
	})
}

func testGarbageCollection(t *testing.T, c *Cluster) {
	ctx := context.Background()
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: "default"}}
	if err := c.Client.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "dependent", Namespace: "default",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}},
	}}
	if err := c.Client.Create(ctx, dependent); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.Delete(ctx, owner); err != nil {
		t.Fatal(err)
	}
	eventually(t, "dependent collected", func(ctx context.Context) (bool, error) {
		err := c.Client.Get(ctx, client.ObjectKeyFromObject(dependent), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), err
	})
}

func testKubeconfig(t *testing.T, cs *ClusterSet) {
	b, err := cs.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cluster-a", "cluster-b", "cluster-c", "broker"} {
		if !strings.Contains(string(b), "name: "+name+"\n") {
			t.Errorf("kubeconfig lacks context %s", name)
		}
	}
}

// childPIDs lists the live processes whose parent is this test process.
func childPIDs(t *testing.T) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	var pids []int
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue // exited meanwhile
		}
		// Fields after the parenthesised command name: state, ppid, ...
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == self {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(s)))
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestPlanOldest checks that Oldest takes members only, and no kubelet nodes, whose kubelet would be newer than
// their API server.
func TestPlanOldest(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"not a member", Options{Members: []string{"cluster-a"}, Oldest: []string{"cluster-b"}}, `Oldest names "cluster-b", which is not a member`},
		{"with nodes", Options{Members: []string{"cluster-a"}, Oldest: []string{"cluster-a"}, Nodes: 1}, "cannot have Nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := plan(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("plan: %v, want %q", err, tc.want)
			}
		})
	}
}
