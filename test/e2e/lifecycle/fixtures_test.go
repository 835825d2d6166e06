package lifecycle

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/framework"
)

// namespace creates a namespace with a name unique to the test in the given members (when none are given, the
// members of the clusterset proper) and deletes it everywhere at the end.
func namespace(t *testing.T, in ...string) string {
	t.Helper()
	ns := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(ns) > 50 {
		ns = ns[:50]
	}
	ns = strings.Trim(ns, "-")
	if len(in) == 0 {
		in = slices.Collect(maps.Keys(members))
	}
	for _, name := range in {
		clusterset.CreateNamespace(t, ns, all[name].Cluster)
	}
	t.Cleanup(func() {
		for _, m := range all {
			_ = m.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		}
	})
	return ns
}

// app describes a test workload: a Deployment of replicas pods behind a Service, exported or not.
type app struct {
	name     string
	replicas int32
	// edit changes the Service before it is created.
	edit func(*corev1.Service)
}

// deploy creates the Deployment and Service of a in m.
func deploy(t *testing.T, m *member, ns string, a app) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": a.name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: a.name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(a.replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: "registry.example/app:1",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				}}},
			},
		},
	}
	if err := m.Client.Create(ctx, d); err != nil {
		t.Fatalf("creating deployment in %s: %v", m.Name, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: a.name, Labels: map[string]string{"service-label": "local"}},
		Spec: corev1.ServiceSpec{
			Selector:       labels,
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			Ports:          []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
	if a.edit != nil {
		a.edit(svc)
	}
	if err := m.Client.Create(ctx, svc); err != nil {
		t.Fatalf("creating service in %s: %v", m.Name, err)
	}
}

// scale sets the replicas of a Deployment.
func scale(t *testing.T, m *member, ns, name string, replicas int32) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &appsv1.Deployment{}
		if err := m.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		d.Spec.Replicas = ptr.To(replicas)
		return m.Client.Update(context.Background(), d)
	}); err != nil {
		t.Fatalf("scaling %s/%s in %s: %v", ns, name, m.Name, err)
	}
}

// exportService creates a ServiceExport, edited by the optional edits.
func exportService(t *testing.T, m *member, ns, name string, edits ...func(*mcsv1beta1.ServiceExport)) {
	t.Helper()
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, e := range edits {
		e(se)
	}
	if err := m.Client.Create(context.Background(), se); err != nil {
		t.Fatalf("exporting %s/%s in %s: %v", ns, name, m.Name, err)
	}
}

func unexport(t *testing.T, m *member, ns, name string) {
	t.Helper()
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := m.Client.Delete(context.Background(), se); err != nil {
		t.Fatalf("unexporting %s/%s in %s: %v", ns, name, m.Name, err)
	}
}

// localEndpoints checks that a Service's own slices in m hold n ready IPv4 endpoints.
func localEndpoints(m *member, ns, name string, n int) error {
	list := &discoveryv1.EndpointSliceList{}
	if err := m.Client.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return err
	}
	ready := 0
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if s.AddressType == discoveryv1.AddressTypeIPv4 && ptr.Deref(e.Conditions.Ready, false) {
				ready++
			}
		}
	}
	if ready != n {
		return fmt.Errorf("%d ready local endpoints, want %d", ready, n)
	}
	return nil
}

// imported is a member's import of one service, as read from its API server.
type imported struct {
	si      *mcsv1beta1.ServiceImport
	derived *corev1.Service
	slices  []discoveryv1.EndpointSlice
}

// readImport reads m's import of ns/name; si is nil when there is none.
func readImport(m *member, ns, name string) (imported, error) {
	ctx := context.Background()
	var imp imported
	si := &mcsv1beta1.ServiceImport{}
	switch err := m.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, si); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return imp, err
	default:
		imp.si = si
	}
	svc := &corev1.Service{}
	switch err := m.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: names.DerivedServiceName(ns, name)}, svc); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return imp, err
	default:
		imp.derived = svc
	}
	list := &discoveryv1.EndpointSliceList{}
	if err := m.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{mcsv1beta1.LabelServiceName: name}); err != nil {
		return imp, err
	}
	imp.slices = list.Items
	return imp, nil
}

// readyEndpoints counts the ready endpoints of the given address type per source cluster label.
func (imp imported) readyEndpoints(family discoveryv1.AddressType) map[string]int {
	n := map[string]int{}
	for _, s := range imp.slices {
		if s.AddressType != family {
			continue
		}
		for _, e := range s.Endpoints {
			if ptr.Deref(e.Conditions.Ready, false) {
				n[s.Labels[mcsv1beta1.LabelSourceCluster]]++
			}
		}
	}
	return n
}

// wantEndpoints checks that both families have exactly the given ready endpoints per source cluster id.
func (imp imported) wantEndpoints(want map[string]int) error {
	if imp.si == nil {
		return fmt.Errorf("no ServiceImport")
	}
	for _, family := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
		if got := imp.readyEndpoints(family); !maps.Equal(got, want) {
			return fmt.Errorf("%s ready endpoints per cluster = %v, want %v", family, got, want)
		}
	}
	return nil
}

// gone checks that nothing of the import is left.
func (imp imported) gone() error {
	if imp.si != nil || imp.derived != nil || len(imp.slices) > 0 {
		return fmt.Errorf("import left: ServiceImport %v, derived Service %v, %d slices", imp.si != nil, imp.derived != nil, len(imp.slices))
	}
	return nil
}

// exportCondition returns a condition of a ServiceExport in m, and an error when it has none.
func exportCondition(m *member, ns, name, condition string) (*metav1.Condition, error) {
	c, err := framework.ExportCondition(context.Background(), m.Client, ns, name, condition)
	if err == nil && c == nil {
		err = fmt.Errorf("no %s condition on ServiceExport %s/%s in %s", condition, ns, name, m.Name)
	}
	return c, err
}

// wantCondition checks a ServiceExport condition's status and that its reason contains reason.
func wantCondition(m *member, ns, name, condition string, status metav1.ConditionStatus, reason string) error {
	if err := framework.WantExportCondition(context.Background(), m.Client, ns, name, condition, status, reason); err != nil {
		return fmt.Errorf("%s: %w", m.Name, err)
	}
	return nil
}

// everywhere runs check on every member and joins the errors.
func everywhere(check func(m *member) error) error {
	var msgs []string
	for _, name := range slices.Sorted(maps.Keys(members)) {
		if err := check(members[name]); err != nil {
			msgs = append(msgs, name+": "+err.Error())
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%s", strings.Join(msgs, "; "))
	}
	return nil
}
