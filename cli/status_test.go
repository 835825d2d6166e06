package cli

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"vksfleet.dev/fleet/mcs/names"
)

// TestStatusUnreachableFrom: each member's row lists the members whose Leases report its endpoints unreachable,
// and ignores what is not a cluster id.
func TestStatusUnreachableFrom(t *testing.T) {
	s := fixture(t)
	s.Broker.Leases[1].Annotations[names.AnnotationUnreachable] = "cluster-a,../../etc"
	rows := Status(s)
	if got := rows[0].UnreachableFrom; !slices.Equal(got, []string{"cluster-b"}) {
		t.Errorf("cluster-a unreachable from %v, want [cluster-b]", got)
	}
	if got := rows[1].UnreachableFrom; len(got) != 0 {
		t.Errorf("cluster-b unreachable from %v, want none", got)
	}
	table := statusTable(rows)
	if cell := table.Rows[0].Cells[7]; cell != "cluster-b" {
		t.Errorf("Unreachable-From cell %q, want cluster-b", cell)
	}
}

// TestPodsVersion: a Deployment's version is what its running pods run, by the kubelet's report.
func TestPodsVersion(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase, running bool, reported, spec string) corev1.Pod {
		st := corev1.ContainerStatus{Name: "controller", Image: reported}
		if running {
			st.State.Running = &corev1.ContainerStateRunning{}
		}
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: spec}}},
			Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{st}}}
	}
	const v1, v2 = "ghcr.io/vksfleet/mcs-controller:v0.1.0", "ghcr.io/vksfleet/mcs-controller:v0.2.0-3-gb35ea41"
	deleting := pod("old", corev1.PodRunning, true, v1, v1)
	deleting.DeletionTimestamp = &metav1.Time{Time: epoch}
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		want string
	}{
		{"both replicas at one version", []corev1.Pod{pod("a", corev1.PodRunning, true, v2, v2), pod("b", corev1.PodRunning, true, v2, v2)}, "v0.2.0-3-gb35ea41"},
		{"a rollout under way", []corev1.Pod{pod("a", corev1.PodRunning, true, v2, v2), pod("b", corev1.PodRunning, true, v1, v1)}, "v0.1.0,v0.2.0-3-gb35ea41"},
		{"a new pod not running yet, an old one leaving", []corev1.Pod{pod("a", corev1.PodPending, false, "", v2), deleting, pod("b", corev1.PodRunning, true, v1, v1)}, "v0.1.0"},
		{"a container restarting", []corev1.Pod{pod("a", corev1.PodRunning, false, v2, v2)}, notRunning},
		{"a runtime that reports the image by id", []corev1.Pod{pod("a", corev1.PodRunning, true, "sha256:"+strings.Repeat("ab", 32), v2)}, "v0.2.0-3-gb35ea41"},
		{"pinned by digest", []corev1.Pod{pod("a", corev1.PodRunning, true, "mirror.example/mcs-controller@sha256:cd", "mirror.example/mcs-controller@sha256:cd")}, "sha256:cd"},
		{"no pod", nil, notRunning},
	} {
		if got := podsVersion(tc.pods, "controller"); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestRunningVersion reads a Deployment's pods by its selector, and falls back to the Deployment's own tag where
// pods may not be listed.
func TestRunningVersion(t *testing.T) {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "mcs-system", Name: "mcs-controller"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "mcs-controller"}},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: "controller", Image: "ghcr.io/vksfleet/mcs-controller:v0.3.0"}}}}}}
	running := func(name, ns string, labels map[string]string, image string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: image}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
				{Name: "controller", Image: image, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	}
	ours := map[string]string{"app.kubernetes.io/name": "mcs-controller"}
	objs := []client.Object{
		running("mcs-controller-1", "mcs-system", ours, "ghcr.io/vksfleet/mcs-controller:v0.2.0"),
		running("other", "mcs-system", map[string]string{"app.kubernetes.io/name": "other"}, "x:v9"),
		running("elsewhere", "default", ours, "x:v8"),
	}
	c := fake.NewClientBuilder().WithObjects(objs...).Build()
	if got, err := runningVersion(context.Background(), c, dep); err != nil || got != "v0.2.0" {
		t.Errorf("runningVersion = %q, %v; want v0.2.0, the running pod's", got, err)
	}
	forbidden := interceptor.NewClient(c, interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New("no"))
		}})
	if got, err := runningVersion(context.Background(), forbidden, dep); err != nil || got != "v0.3.0" {
		t.Errorf("runningVersion without pods/list = %q, %v; want v0.3.0, the Deployment's", got, err)
	}
	broken := interceptor.NewClient(c, interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("connection refused")
		}})
	if _, err := runningVersion(context.Background(), broken, dep); err == nil {
		t.Error("runningVersion hid a failed list")
	}
}

// TestStatusVersions: the rows and the table show the controller's and the DNS's versions.
func TestStatusVersions(t *testing.T) {
	s := fixture(t)
	s.Members[0].ControllerVersion, s.Members[0].DNSVersion = "v0.2.0", "v0.1.0,v0.2.0"
	rows := Status(s)
	if rows[0].Controller != "v0.2.0" || rows[0].DNSVersion != "v0.1.0,v0.2.0" {
		t.Errorf("row %+v", rows[0])
	}
	table := statusTable(rows)
	cells := map[string]any{}
	for i, c := range table.ColumnDefinitions {
		cells[c.Name] = table.Rows[0].Cells[i]
	}
	if cells["Controller"] != "v0.2.0" || cells["DNS-Version"] != "v0.1.0,v0.2.0" {
		t.Errorf("cells %v", cells)
	}
	if cell := statusTable(Status(fixture(t))).Rows[1].Cells[10]; cell != "-" {
		t.Errorf("DNS-Version of a member that does not say: %q, want -", cell)
	}
}
