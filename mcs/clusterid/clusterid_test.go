package clusterid

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		id, wantErr string
	}{
		{"cluster-a", ""},
		{"east.prod", ""},
		{"0f2b6a4e-3c1d-4b8a-9e7f-1a2b3c4d5e6f", ""},
		{strings.Repeat("a", 63) + "." + strings.Repeat("b", 63), ""}, // 127 characters
		{"", "empty"},
		{strings.Repeat("a", 63) + "." + strings.Repeat("b", 64), "shorter than 128"},
		{"East", "RFC 1123"},
		{"a_b", "RFC 1123"},
		{"-a", "RFC 1123"},
		{"a..b", "RFC 1123"},
		{strings.Repeat("a", 64), "RFC 1123"}, // a label longer than 63
	}
	for _, c := range cases {
		err := Validate(c.id)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("Validate(%q) = %v, want nil", c.id, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("Validate(%q) = %v, want an error containing %q", c.id, err, c.wantErr)
		}
	}
}

// fakeCluster is a dynamic client of a cluster holding objects.
func fakeCluster(t *testing.T, objects ...runtime.Object) *dynamicfake.FakeDynamicClient {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := aboutv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return dynamicfake.NewSimpleDynamicClient(scheme, objects...)
}

func prop(name, value string) *aboutv1alpha1.ClusterProperty {
	return &aboutv1alpha1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: aboutv1alpha1.ClusterPropertySpec{Value: value}}
}

func TestRead(t *testing.T) {
	cases := []struct {
		name            string
		objects         []runtime.Object
		wantID, wantSet string
	}{
		{"both properties", []runtime.Object{prop(aboutv1alpha1.ClusterIDName, "east.prod"), prop(aboutv1alpha1.ClusterSetName, "fleet")}, "east.prod", "fleet"},
		{"clusterset only", []runtime.Object{prop(aboutv1alpha1.ClusterSetName, "fleet")}, "", "fleet"},
		{"invalid id, as found", []runtime.Object{prop(aboutv1alpha1.ClusterIDName, "Not_Valid")}, "Not_Valid", ""},
		{"neither", nil, "", ""},
	}
	for _, c := range cases {
		id, set, err := Read(context.Background(), fakeCluster(t, c.objects...))
		if err != nil || id != c.wantID || set != c.wantSet {
			t.Errorf("%s: Read() = %q, %q, %v; want %q, %q", c.name, id, set, err, c.wantID, c.wantSet)
		}
	}
}

func TestResolve(t *testing.T) {
	kubeSystem := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: types.UID("0f2b6a4e-3c1d-4b8a")}}
	cases := []struct {
		name            string
		objects         []runtime.Object
		wantID, wantSet string
		wantErr         string
	}{
		{"both properties", []runtime.Object{kubeSystem, prop(aboutv1alpha1.ClusterIDName, "east.prod"), prop(aboutv1alpha1.ClusterSetName, "fleet")}, "east.prod", "fleet", ""},
		{"default from kube-system", []runtime.Object{kubeSystem}, "0f2b6a4e-3c1d-4b8a", "", ""},
		{"invalid id", []runtime.Object{kubeSystem, prop(aboutv1alpha1.ClusterIDName, "Not_Valid")}, "", "", "RFC 1123"},
		{"empty id", []runtime.Object{kubeSystem, prop(aboutv1alpha1.ClusterIDName, "")}, "", "", "empty"},
		{"no kube-system", nil, "", "", "kube-system"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dyn := fakeCluster(t, c.objects...)
			id, set, err := Resolve(context.Background(), dyn)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Resolve() error = %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil || id != c.wantID || set != c.wantSet {
				t.Fatalf("Resolve() = %q, %q, %v; want %q, %q", id, set, err, c.wantID, c.wantSet)
			}
			if stored, _, err := Read(context.Background(), dyn); err != nil || stored != id {
				t.Errorf("stored id = %q, %v; want %q", stored, err, id)
			}
		})
	}
}
