package clusterid

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

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

func TestResolve(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := aboutv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	kubeSystem := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: types.UID("0f2b6a4e-3c1d-4b8a")}}
	prop := func(name, value string) *aboutv1alpha1.ClusterProperty {
		return &aboutv1alpha1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: aboutv1alpha1.ClusterPropertySpec{Value: value}}
	}
	cases := []struct {
		name            string
		objects         []client.Object
		wantID, wantSet string
		wantErr         string
	}{
		{"both properties", []client.Object{kubeSystem, prop(aboutv1alpha1.ClusterIDName, "east.prod"), prop(aboutv1alpha1.ClusterSetName, "fleet")}, "east.prod", "fleet", ""},
		{"default from kube-system", []client.Object{kubeSystem}, "0f2b6a4e-3c1d-4b8a", "", ""},
		{"invalid id", []client.Object{kubeSystem, prop(aboutv1alpha1.ClusterIDName, "Not_Valid")}, "", "", "RFC 1123"},
		{"no kube-system", nil, "", "", "kube-system"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(c.objects...).Build()
			id, set, err := Resolve(context.Background(), cl)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Resolve() error = %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil || id != c.wantID || set != c.wantSet {
				t.Fatalf("Resolve() = %q, %q, %v; want %q, %q", id, set, err, c.wantID, c.wantSet)
			}
			stored := &aboutv1alpha1.ClusterProperty{}
			if err := cl.Get(context.Background(), client.ObjectKey{Name: aboutv1alpha1.ClusterIDName}, stored); err != nil || stored.Spec.Value != id {
				t.Errorf("stored id = %q, %v; want %q", stored.Spec.Value, err, id)
			}
		})
	}
}
