package lifecycle

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
)

const wait = 30 * time.Second

func TestExportIsImportedEverywhere(t *testing.T) {
	ns := namespace(t)
	a := members["cluster-a"]
	deploy(t, a, ns, app{name: "web", replicas: 2})
	poll.T(t, wait, "local endpoints ready", func() error { return localEndpoints(a, ns, "web", 2) })
	exported := time.Now()
	exportService(t, a, ns, "web")

	poll.T(t, wait, "import in every member", func() error {
		return everywhere(func(m *member) error {
			imp, err := readImport(m, ns, "web")
			if err != nil {
				return err
			}
			if err := imp.wantEndpoints(map[string]int{a.ID: 2}); err != nil {
				return err
			}
			si := imp.si
			if si.Spec.Type != mcsv1beta1.ClusterSetIP || len(si.Spec.Ports) != 1 || si.Spec.Ports[0].Port != 80 {
				return fmt.Errorf("spec = %+v", si.Spec)
			}
			if !slices.Equal(si.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}) || len(si.Spec.IPs) != 2 {
				return fmt.Errorf("dual-stack import: families %v, ips %v", si.Spec.IPFamilies, si.Spec.IPs)
			}
			if imp.derived == nil || !slices.Equal(imp.derived.Spec.ClusterIPs, si.Spec.IPs) || imp.derived.Spec.Selector != nil {
				return fmt.Errorf("derived Service %v does not hold the ips %v", imp.derived, si.Spec.IPs)
			}
			if len(si.Status.Clusters) != 1 || si.Status.Clusters[0].Cluster != a.ID {
				return fmt.Errorf("status.clusters = %v", si.Status.Clusters)
			}
			if !meta.IsStatusConditionTrue(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady)) {
				return fmt.Errorf("not Ready: %v", si.Status.Conditions)
			}
			if si.Status.EndpointSliceObjects != mcsv1beta1.EndpointSliceObjectsPresent {
				return fmt.Errorf("status.endpointSliceObjects = %q, want Present", si.Status.EndpointSliceObjects)
			}
			for _, s := range imp.slices {
				if s.Labels[discoveryv1.LabelManagedBy] != names.ManagedBy ||
					s.Labels[discoveryv1.LabelServiceName] != imp.derived.Name {
					return fmt.Errorf("slice %s labels %v", s.Name, s.Labels)
				}
				for _, e := range s.Endpoints {
					if e.NodeName != nil || e.TargetRef != nil || e.Zone == nil || *e.Zone != a.Zone {
						return fmt.Errorf("endpoint %v: nodeName/targetRef must stay local, zone %q must travel", e.Addresses, a.Zone)
					}
				}
			}
			return nil
		})
	})
	t.Logf("ServiceExport created to ServiceImport, derived Service and slices in all 3 members: %v", time.Since(exported))
	poll.T(t, wait, "export conditions", func() error {
		for cond, reason := range map[string]string{"Valid": "Valid", "Ready": "Exported"} {
			if err := wantCondition(a, ns, "web", cond, metav1.ConditionTrue, reason); err != nil {
				return err
			}
		}
		return wantCondition(a, ns, "web", "Conflict", metav1.ConditionFalse, "NoConflicts")
	})
}

func TestTwoExportersThenUnexport(t *testing.T) {
	ns := namespace(t)
	a, b, c := members["cluster-a"], members["cluster-b"], members["cluster-c"]
	deploy(t, a, ns, app{name: "api", replicas: 1})
	deploy(t, c, ns, app{name: "api", replicas: 3})
	exportService(t, a, ns, "api")
	exportService(t, c, ns, "api")

	poll.T(t, wait, "both clusters' slices in one import", func() error {
		return everywhere(func(m *member) error {
			imp, err := readImport(m, ns, "api")
			if err != nil {
				return err
			}
			if err := imp.wantEndpoints(map[string]int{a.ID: 1, c.ID: 3}); err != nil {
				return err
			}
			if got := imp.si.Status.Clusters; len(got) != 2 {
				return fmt.Errorf("status.clusters = %v", got)
			}
			return nil
		})
	})
	before, err := readImport(b, ns, "api")
	if err != nil {
		t.Fatal(err)
	}

	unexport(t, a, ns, "api")
	poll.T(t, wait, "only C's slices left", func() error {
		return everywhere(func(m *member) error {
			imp, err := readImport(m, ns, "api")
			if err != nil {
				return err
			}
			if err := imp.wantEndpoints(map[string]int{c.ID: 3}); err != nil {
				return err
			}
			if got := imp.si.Status.Clusters; len(got) != 1 || got[0].Cluster != c.ID {
				return fmt.Errorf("status.clusters = %v", got)
			}
			return nil
		})
	})
	after, err := readImport(b, ns, "api")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before.si.Spec.IPs, after.si.Spec.IPs) {
		t.Errorf("the cluster-set IPs changed while the import lived: %v, then %v", before.si.Spec.IPs, after.si.Spec.IPs)
	}

	// The upstream conformance suite gives an unexport 20 s to remove the import everywhere; this controller
	// applies a withdrawal the view shows within a couple of seconds.
	unexported := time.Now()
	unexport(t, c, ns, "api")
	waitGone(t, ns, "api")
	took := time.Since(unexported)
	t.Logf("the last unexport removed the import from every member in %v", took.Round(10*time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("the last unexport took %v to remove the import everywhere, want a few seconds", took)
	}
}

func TestInvalidExports(t *testing.T) {
	ns := namespace(t)
	a := members["cluster-a"]
	deploy(t, a, ns, app{name: "ext", edit: func(s *corev1.Service) {
		s.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"}
	}})
	exportService(t, a, ns, "ext")
	exportService(t, a, ns, "missing")
	poll.T(t, wait, "Valid=False", func() error {
		if err := wantCondition(a, ns, "ext", "Valid", metav1.ConditionFalse, "InvalidServiceType"); err != nil {
			return err
		}
		return wantCondition(a, ns, "missing", "Valid", metav1.ConditionFalse, "NoService")
	})
	for _, name := range []string{"ext", "missing"} {
		if err := everywhere(func(m *member) error {
			imp, err := readImport(m, ns, name)
			if err != nil {
				return err
			}
			return imp.gone()
		}); err != nil {
			t.Errorf("invalid export %s was imported: %v", name, err)
		}
	}

	// The Service appearing later makes the export valid.
	deploy(t, a, ns, app{name: "missing", replicas: 1})
	poll.T(t, wait, "Valid=True once the Service exists", func() error {
		if err := wantCondition(a, ns, "missing", "Valid", metav1.ConditionTrue, "Valid"); err != nil {
			return err
		}
		imp, err := readImport(members["cluster-c"], ns, "missing")
		if err != nil {
			return err
		}
		return imp.wantEndpoints(map[string]int{a.ID: 1})
	})
}

func TestConflictsOldestWins(t *testing.T) {
	ns := namespace(t)
	a, c := members["cluster-a"], members["cluster-c"]
	deploy(t, a, ns, app{name: "db", replicas: 1})
	exportService(t, a, ns, "db")
	poll.T(t, wait, "A's export published", func() error {
		return wantCondition(a, ns, "db", "Ready", metav1.ConditionTrue, "Exported")
	})
	// C's export is younger (or, within the same second, loses the tie on cluster id) and disagrees on ports,
	// type and session affinity.
	deploy(t, c, ns, app{name: "db", replicas: 1, edit: func(s *corev1.Service) {
		s.Spec.ClusterIP = corev1.ClusterIPNone
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.Ports[0].Port = 8080
	}})
	exportService(t, c, ns, "db")

	poll.T(t, wait, "Conflict on every exporter", func() error {
		for _, m := range []*member{a, c} {
			for _, reason := range []string{"PortConflict", "TypeConflict", "SessionAffinityConflict"} {
				if err := wantCondition(m, ns, "db", "Conflict", metav1.ConditionTrue, reason); err != nil {
					return err
				}
			}
		}
		return nil
	})
	cond, err := exportCondition(c, ns, "db", "Conflict")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Conflict message: %s", cond.Message)
	poll.T(t, wait, "the oldest export wins everywhere", func() error {
		return everywhere(func(m *member) error {
			imp, err := readImport(m, ns, "db")
			if err != nil {
				return err
			}
			s := imp.si.Spec
			if s.Type != mcsv1beta1.ClusterSetIP || s.SessionAffinity != corev1.ServiceAffinityNone ||
				len(s.Ports) != 1 || s.Ports[0].Port != 80 || len(s.IPs) != 2 {
				return fmt.Errorf("spec = %+v, want A's", s)
			}
			return imp.wantEndpoints(map[string]int{a.ID: 1, c.ID: 1})
		})
	})

	// Once the conflicting export goes, the conflict clears.
	unexport(t, c, ns, "db")
	poll.T(t, wait, "NoConflicts", func() error {
		return wantCondition(a, ns, "db", "Conflict", metav1.ConditionFalse, "NoConflicts")
	})
}

func TestIPFamilyConflict(t *testing.T) {
	ns := namespace(t)
	a, c := members["cluster-a"], members["cluster-c"]
	deploy(t, a, ns, app{name: "v6", replicas: 1})
	exportService(t, a, ns, "v6")
	deploy(t, c, ns, app{name: "v6", replicas: 1, edit: func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	}})
	exportService(t, c, ns, "v6")
	poll.T(t, wait, "IPv6-only import with IPFamilyConflict", func() error {
		for _, m := range []*member{a, c} {
			if err := wantCondition(m, ns, "v6", "Conflict", metav1.ConditionTrue, "IPFamilyConflict"); err != nil {
				return err
			}
		}
		return everywhere(func(m *member) error {
			imp, err := readImport(m, ns, "v6")
			if err != nil || imp.si == nil {
				return fmt.Errorf("no import: %v", err)
			}
			s := imp.si.Spec
			if !slices.Equal(s.IPFamilies, []corev1.IPFamily{corev1.IPv6Protocol}) || len(s.IPs) != 1 {
				return fmt.Errorf("families %v, ips %v; want one IPv6", s.IPFamilies, s.IPs)
			}
			return nil
		})
	})
}

// Two exporters with different but compatible ports: the import serves both, and since the constituent Services'
// ports are not identical, mcs-api v1beta1 asks for PortConflict on both exports.
func TestCompatiblePortsConflict(t *testing.T) {
	ns := namespace(t)
	a, c := members["cluster-a"], members["cluster-c"]
	deploy(t, a, ns, app{name: "web", replicas: 1})
	deploy(t, c, ns, app{name: "web", replicas: 1, edit: func(s *corev1.Service) {
		s.Spec.Ports[0].Name, s.Spec.Ports[0].Port = "https", 443
	}})
	exportService(t, a, ns, "web")
	exportService(t, c, ns, "web")
	poll.T(t, wait, "both ports imported, PortConflict on both exports", func() error {
		for _, m := range []*member{a, c} {
			if err := wantCondition(m, ns, "web", "Conflict", metav1.ConditionTrue, "PortConflict"); err != nil {
				return err
			}
		}
		return everywhere(func(m *member) error {
			imp, err := readImport(m, ns, "web")
			if err != nil || imp.si == nil {
				return fmt.Errorf("no import: %v", err)
			}
			var got []int32
			for _, p := range imp.si.Spec.Ports {
				got = append(got, p.Port)
			}
			if !slices.Equal(got, []int32{80, 443}) {
				return fmt.Errorf("ports %v, want [80 443]", got)
			}
			return nil
		})
	})
	cond, err := exportCondition(c, ns, "web", "Conflict")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`port "http" (TCP/80)`, `port "https" (TCP/443)`, "2/2 clusters disagree"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("Conflict message %q does not name %s", cond.Message, want)
		}
	}
	// C's Service takes A's port: the ports are identical again and the conflict clears.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc := &corev1.Service{}
		if err := c.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, svc); err != nil {
			return err
		}
		svc.Spec.Ports[0].Name, svc.Spec.Ports[0].Port = "http", 80
		return c.Client.Update(context.Background(), svc)
	}); err != nil {
		t.Fatal(err)
	}
	poll.T(t, wait, "NoConflicts once the ports are identical", func() error {
		for _, m := range []*member{a, c} {
			if err := wantCondition(m, ns, "web", "Conflict", metav1.ConditionFalse, "NoConflicts"); err != nil {
				return err
			}
		}
		return nil
	})
}

// Exporters with no IP family in common: the younger export, which shares none of the older one's families, is
// left out of the intersection (an IPFamilyConflict on both exports) rather than leaving none, so the import keeps
// the older export's family and stays Ready everywhere; the conflict clears once the younger export goes. A
// family mismatch, by mistake or by a hostile member, never takes a service's ClusterSetIP.
func TestDisjointFamilyIsLeftOut(t *testing.T) {
	ns := namespace(t)
	a, c := members["cluster-a"], members["cluster-c"]
	single := func(f corev1.IPFamily) func(*corev1.Service) {
		return func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
			s.Spec.IPFamilies = []corev1.IPFamily{f}
		}
	}
	deploy(t, a, ns, app{name: "split", replicas: 1, edit: single(corev1.IPv4Protocol)})
	deploy(t, c, ns, app{name: "split", replicas: 1, edit: single(corev1.IPv6Protocol)})
	exportService(t, a, ns, "split")
	exportService(t, c, ns, "split")
	poll.T(t, wait, "IPFamilyConflict on both exports, an IPv4 import Ready in every member", func() error {
		for _, m := range []*member{a, c} {
			if err := wantCondition(m, ns, "split", "Conflict", metav1.ConditionTrue, "IPFamilyConflict"); err != nil {
				return err
			}
		}
		return everywhere(func(m *member) error {
			imp, err := readImport(m, ns, "split")
			if err != nil || imp.si == nil {
				return fmt.Errorf("no import: %v", err)
			}
			if s := imp.si.Spec; !slices.Equal(s.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol}) || len(s.IPs) != 1 {
				return fmt.Errorf("families %v, ips %v; want one IPv4", s.IPFamilies, s.IPs)
			}
			return wantImportReady(m, ns, "split", metav1.ConditionTrue, "Ready")
		})
	})
	unexport(t, c, ns, "split")
	poll.T(t, wait, "NoConflicts once only the IPv4 export is left", func() error {
		return wantCondition(a, ns, "split", "Conflict", metav1.ConditionFalse, "NoConflicts")
	})
}

// wantImportReady checks the Ready condition of m's ServiceImport.
func wantImportReady(m *member, ns, name string, status metav1.ConditionStatus, reason string) error {
	imp, err := readImport(m, ns, name)
	if err != nil || imp.si == nil {
		return fmt.Errorf("no import: %v", err)
	}
	c := meta.FindStatusCondition(imp.si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady))
	if c == nil || c.Status != status || c.Reason != reason {
		return fmt.Errorf("Ready = %+v, want %s/%s", c, status, reason)
	}
	return nil
}

func TestNamespaceCreatedLater(t *testing.T) {
	a, b := members["cluster-a"], members["cluster-b"]
	ns := namespace(t, "cluster-a", "cluster-c")
	deploy(t, a, ns, app{name: "late", replicas: 1})
	exportService(t, a, ns, "late")
	poll.T(t, wait, "imported where the namespace exists", func() error {
		imp, err := readImport(members["cluster-c"], ns, "late")
		if err != nil {
			return err
		}
		return imp.wantEndpoints(map[string]int{a.ID: 1})
	})
	if err := b.Client.Get(context.Background(), types.NamespacedName{Name: ns}, &corev1.Namespace{}); err == nil {
		t.Fatalf("namespace %s exists in %s", ns, b.Name)
	}
	clusterset.CreateNamespace(t, ns, b.Cluster)
	poll.T(t, wait, "imported once the namespace exists", func() error {
		imp, err := readImport(b, ns, "late")
		if err != nil {
			return err
		}
		return imp.wantEndpoints(map[string]int{a.ID: 1})
	})
}

func TestExportedLabelsAndAnnotations(t *testing.T) {
	ns := namespace(t)
	a := members["cluster-a"]
	deploy(t, a, ns, app{name: "labelled", replicas: 1})
	exportService(t, a, ns, "labelled", func(se *mcsv1beta1.ServiceExport) {
		se.Labels = map[string]string{"export-label": "stays"}
		se.Annotations = map[string]string{"export-annotation": "stays"}
		se.Spec.ExportedLabels = map[string]string{"team": "blue"}
		se.Spec.ExportedAnnotations = map[string]string{"example.com/owner": "blue-team"}
	})
	poll.T(t, wait, "exactly the exported labels and annotations", func() error {
		return everywhere(func(m *member) error {
			imp, err := readImport(m, ns, "labelled")
			if err != nil || imp.si == nil {
				return fmt.Errorf("no import: %v", err)
			}
			// The exported labels, and the controller's mark of the ServiceImports it made (the exported ones may not
			// carry its prefix).
			if want := map[string]string{"team": "blue", names.LabelImportManagedBy: names.ManagedBy}; !maps.Equal(imp.si.Labels, want) {
				return fmt.Errorf("labels = %v, want %v", imp.si.Labels, want)
			}
			if want := map[string]string{"example.com/owner": "blue-team"}; !maps.Equal(imp.si.Annotations, want) {
				return fmt.Errorf("annotations = %v, want %v", imp.si.Annotations, want)
			}
			return nil
		})
	})
}

func TestScalingIsReflected(t *testing.T) {
	ns := namespace(t)
	a, b := members["cluster-a"], members["cluster-b"]
	deploy(t, a, ns, app{name: "scale", replicas: 1})
	exportService(t, a, ns, "scale")
	for _, replicas := range []int32{5, 2} {
		scale(t, a, ns, "scale", replicas)
		poll.T(t, wait, fmt.Sprintf("%d endpoints in B", replicas), func() error {
			imp, err := readImport(b, ns, "scale")
			if err != nil {
				return err
			}
			return imp.wantEndpoints(map[string]int{a.ID: int(replicas)})
		})
	}
	// A pod turning unready travels as a condition, and back.
	pods := &corev1.PodList{}
	if err := a.Client.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"app": "scale"}); err != nil {
		t.Fatal(err)
	}
	var running []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp.IsZero() && p.Status.Phase == corev1.PodRunning {
			running = append(running, p.Name)
		}
	}
	if len(running) != 2 {
		t.Fatalf("running pods = %v, want 2", running)
	}
	for _, ready := range []bool{false, true} {
		flipped := time.Now()
		if err := a.SetPodReady(context.Background(), ns, running[0], ready); err != nil {
			t.Fatal(err)
		}
		want := map[string]int{a.ID: 1}
		if ready {
			want[a.ID] = 2
		}
		poll.T(t, wait, fmt.Sprintf("pod ready=%v in B", ready), func() error {
			imp, err := readImport(b, ns, "scale")
			if err != nil {
				return err
			}
			return imp.wantEndpoints(want)
		})
		t.Logf("pod ready=%v in A to B's imported slice updated: %v", ready, time.Since(flipped))
	}
}

func TestHeadlessStatefulSet(t *testing.T) {
	ns := namespace(t)
	a, b := members["cluster-a"], members["cluster-b"]
	labels := map[string]string{"app": "db"}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, Selector: labels,
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			Ports:          []corev1.ServicePort{{Name: "sql", Port: 5432}},
		},
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			ServiceName: "db", Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "registry.example/db:1"}}},
			},
		},
	}
	for _, obj := range []client.Object{svc, sts} {
		if err := a.Client.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	exportService(t, a, ns, "db")
	poll.T(t, wait, "headless import with hostnames in B", func() error {
		imp, err := readImport(b, ns, "db")
		if err != nil {
			return err
		}
		if err := imp.wantEndpoints(map[string]int{a.ID: 2}); err != nil {
			return err
		}
		if imp.si.Spec.Type != mcsv1beta1.Headless || len(imp.si.Spec.IPs) > 0 || imp.derived != nil {
			return fmt.Errorf("type %s, ips %v, derived Service %v: want a Headless import without either", imp.si.Spec.Type, imp.si.Spec.IPs, imp.derived != nil)
		}
		if !meta.IsStatusConditionTrue(imp.si.Status.Conditions, "Ready") {
			return fmt.Errorf("not Ready: %v", imp.si.Status.Conditions)
		}
		var hosts []string
		for _, s := range imp.slices {
			for _, e := range s.Endpoints {
				if s.AddressType == "IPv4" && e.Hostname != nil {
					hosts = append(hosts, *e.Hostname)
				}
			}
		}
		slices.Sort(hosts)
		if !slices.Equal(hosts, []string{"db-0", "db-1"}) {
			return fmt.Errorf("hostnames %v, want db-0 and db-1", hosts)
		}
		return nil
	})
}
