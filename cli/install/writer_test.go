package install

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"vksfleet.dev/fleet/controller/broker"
)

// service is kube-system/kube-dns as build/deploy/coredns applies it, with its session affinity.
func service(affinity string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"namespace": "kube-system", "name": "kube-dns"},
		"spec":     map[string]any{"sessionAffinity": affinity},
	}}
}

// newFake is a fake client of the API server whose applies honour DryRun, as the API server's do and the fake's
// do not: a dry run applies to a scratch copy of the live object, managed fields included.
func newFake(objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithReturnManagedFields().WithInterceptorFuncs(interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			o := (&client.ApplyOptions{}).ApplyOptions(opts)
			if len(o.DryRun) == 0 {
				return c.Apply(ctx, obj, opts...)
			}
			u, ok := obj.(runtime.Unstructured)
			if !ok {
				return fmt.Errorf("%T is not unstructured", obj)
			}
			applied := &unstructured.Unstructured{Object: u.UnstructuredContent()}
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(applied.GroupVersionKind())
			scratch := fake.NewClientBuilder().WithScheme(scheme).Build()
			err := c.Get(ctx, client.ObjectKeyFromObject(applied), live)
			switch {
			case err == nil:
				// The copy is applied as the live object's manager, so that it owns what it owned.
				managers := live.GetManagedFields()
				if len(managers) != 1 {
					return fmt.Errorf("the fake's dry run copies objects of one field manager, not %d", len(managers))
				}
				copied := &unstructured.Unstructured{Object: normalize(live.Object)}
				if err := scratch.Apply(ctx, client.ApplyConfigurationFromUnstructured(copied), client.FieldOwner(managers[0].Manager)); err != nil {
					return err
				}
			case !apierrors.IsNotFound(err):
				return err
			}
			o.DryRun = nil
			return scratch.Apply(ctx, obj, o)
		},
	}).Build()
}

// configMap is mcs-system/x holding k=v, as join would apply it.
func configMap(v string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": "mcs-system", "name": "x"},
		"data":     map[string]any{"k": v},
	}}
}

// TestWriterConflicts: join's applies take over no field another manager set to another value, and say which
// field and manager, unless forced, or for an object the replace DNS mode takes over.
func TestWriterConflicts(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		force    bool
		takeOver map[string]bool
		wantErr  bool
	}{
		{name: "not forced", wantErr: true},
		{name: "--force-conflicts", force: true},
		{name: "taken over by the replace mode", takeOver: map[string]bool{"Service kube-system/kube-dns": true}},
		{name: "another object taken over", takeOver: map[string]bool{"Deployment kube-system/coredns": true}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFake()
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(service("None")), client.FieldOwner("kubeadm")); err != nil {
				t.Fatal(err)
			}
			w := &writer{Client: c, cluster: "member", force: tc.force, takeOver: tc.takeOver}
			err := applyOne(ctx, w, service("ClientIP"), fieldOwner)
			if !tc.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var conflict *conflictError
			if !errors.As(err, &conflict) || !apierrors.IsConflict(err) {
				t.Fatalf("error %v, want a conflict", err)
			}
			for _, want := range []string{"Service kube-system/kube-dns", ".spec.sessionAffinity", `"kubeadm"`, "--force-conflicts"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q: %v", want, err)
				}
			}
			var svc corev1.Service
			if err := c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-dns"}, &svc); err != nil {
				t.Fatal(err)
			}
			if svc.Spec.SessionAffinity != corev1.ServiceAffinityNone {
				t.Errorf("the conflicting apply changed the session affinity to %s", svc.Spec.SessionAffinity)
			}
		})
	}
}

// TestWriterDryRun: a dry run writes nothing, and says of each object whether join would create, change or leave
// it, or conflict with another field manager.
func TestWriterDryRun(t *testing.T) {
	ctx := context.Background()
	c := newFake()
	for _, o := range []*unstructured.Unstructured{configMap("1"), service("None")} {
		owner := fieldOwner
		if o.GetKind() == "Service" {
			owner = "kubeadm"
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner(owner)); err != nil {
			t.Fatal(err)
		}
	}
	versions := func() map[string]string {
		var cms corev1.ConfigMapList
		var svcs corev1.ServiceList
		if err := c.List(ctx, &cms); err != nil {
			t.Fatal(err)
		}
		if err := c.List(ctx, &svcs); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, o := range cms.Items {
			out["ConfigMap "+o.Name] = o.ResourceVersion
		}
		for _, o := range svcs.Items {
			out["Service "+o.Name] = o.ResourceVersion
		}
		return out
	}
	before := versions()
	p := &plan{}
	w := &writer{Client: c, cluster: "member", plan: p}
	created := configMap("1")
	created.SetName("y")
	widget := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"}}}
	for _, o := range []*unstructured.Unstructured{configMap("1"), created, service("ClientIP"), widget} {
		if err := applyOne(ctx, w, o, fieldOwner); err != nil {
			t.Fatal(err)
		}
	}
	changed := configMap("2")
	changed.SetName("x")
	if err := applyOne(ctx, w, changed, fieldOwner); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, ch := range p.changes {
		got[ch.kind+" "+ch.name] = ch.what()
	}
	want := map[string]string{
		// Applied twice, unchanged then changed: the plan keeps both writes' changes.
		"ConfigMap mcs-system/x":       actionChanged,
		"ConfigMap mcs-system/y":       actionCreated,
		"Service kube-system/kube-dns": actionConflict,
		"Widget w":                     actionCreated,
	}
	if len(got) != len(want) {
		t.Errorf("plan %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if after := versions(); len(after) != len(before) || after["ConfigMap x"] != before["ConfigMap x"] || after["Service kube-dns"] != before["Service kube-dns"] {
		t.Errorf("the dry run wrote: resourceVersions %v before, %v after", before, after)
	}
	var out strings.Builder
	err := p.finish(&out)
	if err == nil || !strings.Contains(err.Error(), "1 objects conflict") {
		t.Errorf("finish: %v, want the conflict counted", err)
	}
	for _, want := range []string{"-  k: \"1\"", "+  k: \"2\"", `conflict with "kubeadm"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the plan does not say %q:\n%s", want, out.String())
		}
	}
}

// TestForwardDryRun: a dry run of the standalone mode's edit of the cluster's Corefile changes nothing, and shows
// the block it would append.
func TestForwardDryRun(t *testing.T) {
	ctx := context.Background()
	const corefile = ".:53 {\n    forward . /etc/resolv.conf\n    reload\n}\n"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: coreDNSConfigMap}, Data: map[string]string{corefileKey: corefile}}
	c := newFake(cm)
	p := &plan{}
	if _, _, err := forwardToStandalone(ctx, &writer{Client: c, cluster: "member", plan: p}, "10.96.0.99"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data[corefileKey] != corefile {
		t.Errorf("the dry run changed the Corefile:\n%s", cm.Data[corefileKey])
	}
	var out strings.Builder
	if err := p.finish(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"changed    member ConfigMap kube-system/coredns", "forward . 10.96.0.99", blockBegin} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the plan does not say %q:\n%s", want, out.String())
		}
	}
}

// TestBrokerDryRun: the dry run of a member's directory entry, which two field managers write (GrantReads lists
// the member, recordRegion adds its region), plans one object with both writes; run for real, without force, the
// two managers do not conflict.
func TestBrokerDryRun(t *testing.T) {
	ctx := context.Background()
	c := newFake(recordReadersBinding())
	p := &plan{}
	dry := &writer{Client: c, cluster: "broker", plan: p}
	if _, err := GrantReads(ctx, dry, "a"); err != nil {
		t.Fatal(err)
	}
	if err := recordRegion(ctx, dry, "a", "eu-west"); err != nil {
		t.Fatal(err)
	}
	var entries corev1.ConfigMapList
	if err := c.List(ctx, &entries); err != nil || len(entries.Items) > 0 {
		t.Fatalf("the dry run wrote %d ConfigMaps (%v)", len(entries.Items), err)
	}
	entry := objectName(broker.DirectoryEntry("a"))
	var found bool
	for _, ch := range p.changes {
		if ch.kind != "ConfigMap" || ch.name != entry {
			continue
		}
		found = true
		data, _ := ch.after["data"].(map[string]any)
		if ch.what() != actionCreated || len(data) != 3 || !strings.Contains(strings.Join(valuesOf(data), " "), "eu-west") {
			t.Errorf("the directory entry would be %s with data %v; want created, with the member, its layout and its region", ch.what(), data)
		}
	}
	if !found {
		t.Fatalf("the plan has no directory entry %s: %+v", entry, p.changes)
	}
	real := &writer{Client: c, cluster: "broker"}
	if _, err := GrantReads(ctx, real, "a"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := recordRegion(ctx, real, "a", "eu-west"); err != nil {
			t.Fatal(err)
		}
		if _, err := GrantReads(ctx, real, "a"); err != nil {
			t.Fatal(err)
		}
	}
}

// recordReadersBinding is recordReaders as build/deploy/broker makes it, without subjects.
func recordReadersBinding() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: recordReaders},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: recordsReaderRole}}
}

func valuesOf(m map[string]any) []string {
	var out []string
	for _, v := range m {
		s, _ := v.(string)
		out = append(out, s)
	}
	return out
}
