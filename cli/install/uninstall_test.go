package install

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/names"
)

// TestUninstallOrder: uninstall deletes the joiner's ServiceAccount first, then each binding before what it
// binds, the CRDs only when asked, and the namespace last.
func TestUninstallOrder(t *testing.T) {
	objs, err := brokerObjects()
	if err != nil {
		t.Fatal(err)
	}
	for _, crds := range []bool{false, true} {
		order := uninstallOrder(objs, crds)
		at := map[string]int{}
		for i, o := range order {
			at[o.GetKind()+" "+o.GetName()] = i
		}
		kinds := map[string]int{}
		for _, o := range order {
			kinds[o.GetKind()]++
		}
		if got, want := len(order), len(objs)-6; !crds && (got != want || kinds[crdKind] != 0) {
			t.Errorf("without CRDs: %d objects, %d CRDs; want %d, none", got, kinds[crdKind], want)
		}
		if crds && (len(order) != len(objs) || kinds[crdKind] != 6) {
			t.Errorf("with CRDs: %d objects, %d CRDs; want %d, 6", len(order), kinds[crdKind], len(objs))
		}
		if o := order[0]; o.GetKind() != "ServiceAccount" || o.GetNamespace() != joinerNamespace || o.GetName() != joinerName {
			t.Errorf("first deleted: %s %s, want the joiner's ServiceAccount", o.GetKind(), objectName(o))
		}
		if o := order[len(order)-1]; o.GetKind() != "Namespace" || o.GetName() != joinerNamespace {
			t.Errorf("last deleted: %s %s, want namespace %s", o.GetKind(), objectName(o), joinerNamespace)
		}
		for _, before := range [][2]string{
			{"ValidatingAdmissionPolicyBinding mcs-broker-joiner", "ValidatingAdmissionPolicy mcs-broker-joiner"},
			{"ClusterRoleBinding mcs-broker-joiner", "ClusterRole mcs-broker-joiner"},
			{"RoleBinding mcs-broker-joiner", "Role mcs-broker-joiner"},
			{"ServiceAccount joiner", "ValidatingAdmissionPolicy mcs-broker-joiner"},
		} {
			first, ok1 := at[before[0]]
			then, ok2 := at[before[1]]
			if !ok1 || !ok2 || first > then {
				t.Errorf("%s deleted at %d (%v), %s at %d (%v): want the first before", before[0], first, ok1, before[1], then, ok2)
			}
		}
	}
}

// TestBrokerUninstall runs uninstall on a broker as init and join leave it, with one member joined and one
// broker namespace no directory entry names: it refuses and changes nothing; with --force it evicts both and
// deletes what init applied but the CRDs; run again, it deletes nothing; --delete-crds is refused while the CRDs
// hold an object outside the members' namespaces, and deletes them once they hold none.
func TestBrokerUninstall(t *testing.T) {
	ctx := context.Background()
	objs, err := brokerObjects()
	if err != nil {
		t.Fatal(err)
	}
	seed := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mcs-member-static-0123456789"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "mcs-member-static-0123456789", Name: "member-static"}},
		&aboutv1alpha1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1alpha1.ClusterIDName}, Spec: aboutv1alpha1.ClusterPropertySpec{Value: "hub"}},
	}
	for _, o := range objs {
		o = o.DeepCopy()
		// The API server defaults a CRD's listKind, which some of ours leave out.
		if kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind"); o.GetKind() == crdKind {
			if err := unstructured.SetNestedField(o.Object, kind+"List", "spec", "names", "listKind"); err != nil {
				t.Fatal(err)
			}
		}
		seed = append(seed, o)
	}
	c := fake.NewClientBuilder().WithScheme(brokerScheme(t)).WithObjects(seed...).Build()
	if _, err := brokerIdentity(ctx, c, "cluster-a"); err != nil {
		t.Fatal(err)
	}
	nsA := names.BrokerNamespace("cluster-a")
	record := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "web-demo"}}
	if err := c.Create(ctx, record); err != nil {
		t.Fatal(err)
	}
	exists := func(o client.Object) bool {
		t.Helper()
		err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	joiner := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: joinerNamespace, Name: joinerName}}
	crd := func(name string) client.Object {
		return &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	run := func(opts UninstallOptions) (string, error) {
		var out strings.Builder
		opts.Wait = time.Second
		err := brokerUninstall(ctx, steps{&out}, c, opts)
		return out.String(), err
	}

	out, err := run(UninstallOptions{})
	if err == nil || !strings.Contains(err.Error(), "members still joined: cluster-a, broker namespace mcs-member-static-0123456789 (no directory entry)") {
		t.Fatalf("with members joined: %v\n%s", err, out)
	}
	for _, o := range []client.Object{joiner, record, broker.DirectoryEntry("cluster-a"), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mcs-member-static-0123456789"}}} {
		if !exists(o) {
			t.Errorf("a refused uninstall deleted %T %s", o, client.ObjectKeyFromObject(o))
		}
	}

	out, err = run(UninstallOptions{Force: true})
	if err != nil {
		t.Fatalf("--force: %v\n%s", err, out)
	}
	t.Logf("uninstall --force:\n%s", out)
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsA}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mcs-member-static-0123456789"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "mcs-member-static-0123456789", Name: "member-static"}},
		record, broker.DirectoryEntry("cluster-a"), joiner,
	} {
		if exists(o) {
			t.Errorf("--force left %T %s", o, client.ObjectKeyFromObject(o))
		}
	}
	for _, o := range objs {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(o.GroupVersionKind())
		u.SetNamespace(o.GetNamespace())
		u.SetName(o.GetName())
		if got, want := exists(u), o.GetKind() == crdKind; got != want {
			t.Errorf("%s %s after uninstall: exists %v, want %v", o.GetKind(), objectName(o), got, want)
		}
	}
	for _, want := range []string{"deleted 17:\n      ServiceAccount mcs-broker/joiner\n      ValidatingAdmissionPolicyBinding", "Namespace mcs-broker", "left  the CRDs"} {
		if !strings.Contains(out, want) {
			t.Errorf("--force does not say %q:\n%s", want, out)
		}
	}

	out, err = run(UninstallOptions{Force: true})
	if err != nil || !strings.Contains(out, "ok    members: none joined") || !strings.Contains(out, "nothing left to delete") {
		t.Errorf("run again: %v\n%s", err, out)
	}

	out, err = run(UninstallOptions{DeleteCRDs: true})
	if err == nil || !strings.Contains(err.Error(), "the CRDs hold 1 ClusterProperty") || !exists(crd("clusterproperties.about.k8s.io")) {
		t.Errorf("--delete-crds beside a ClusterProperty: %v\n%s", err, out)
	}
	if err := c.Delete(ctx, &aboutv1alpha1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1alpha1.ClusterIDName}}); err != nil {
		t.Fatal(err)
	}
	out, err = run(UninstallOptions{DeleteCRDs: true})
	if err != nil || !strings.Contains(out, "deleted 6:\n      CustomResourceDefinition") {
		t.Errorf("--delete-crds: %v\n%s", err, out)
	}
	for _, o := range objs {
		if o.GetKind() == crdKind && exists(crd(o.GetName())) {
			t.Errorf("--delete-crds left CRD %s", o.GetName())
		}
	}
}

// brokerScheme is install's scheme with the mcs-api kinds, which a broker serves and a fake client must know.
func brokerScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, aboutv1alpha1.AddToScheme, mcsv1beta1.Install} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}
