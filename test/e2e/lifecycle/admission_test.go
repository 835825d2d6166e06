package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/build/deploy/policy"
	"vksfleet.dev/fleet/controller/export"
	"vksfleet.dev/fleet/test/env/poll"
)

// The clusterset installs the deploy manifests' admission policy in every member: the API server itself denies a
// ServiceExport in each shared namespace, with a message that says why and how to change the list. With the
// policy's binding removed, the controller still refuses to export from them.
func TestUnsafeNamespacesDenied(t *testing.T) {
	ctx := context.Background()
	a := members["cluster-a"]
	for _, ns := range export.DefaultDeniedNamespaces {
		se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unsafe"}}
		// The API server's policy informer takes in the policy and its binding, created with the cluster, a moment
		// after they were created: this test may run first.
		var err error
		poll.T(t, wait, "a ServiceExport in "+ns+" denied by the admission policy", func() error {
			if err = a.Client.Create(ctx, se.DeepCopy(), client.DryRunAll); err == nil || !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
				return fmt.Errorf("creating it: %v", err)
			}
			return nil
		})
		for _, want := range []string{"mcs-export-namespaces", "not allowed in namespace " + ns, "--denied-export-namespaces"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the denial in %s does not say %q: %v", ns, want, err)
			}
		}
	}
	if err := a.Client.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: namespace(t), Name: "safe"}},
		client.DryRunAll); err != nil {
		t.Errorf("a ServiceExport in a namespace of its own was denied: %v", err)
	}

	// Without the binding the policy denies nothing; the controller is the last line.
	_, binding, err := policy.Objects()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Client.Delete(ctx, binding.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Client.Create(context.Background(), binding.DeepCopy()); err != nil {
			t.Errorf("restoring the policy binding: %v", err)
		}
	})
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "unsafe"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	if err := a.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Client.Delete(context.Background(), svc) })
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "unsafe"}}
	// The API server's policy informer sees the binding go shortly after the delete.
	poll.T(t, wait, "the ServiceExport in default admitted without the binding", func() error {
		return a.Client.Create(ctx, se.DeepCopy())
	})
	t.Cleanup(func() { _ = a.Client.Delete(context.Background(), se) })
	poll.T(t, wait, "Valid=False/NamespaceNotAllowed", func() error {
		c, err := exportCondition(a, "default", "unsafe", "Valid")
		if err != nil {
			return err
		}
		if c.Status != metav1.ConditionFalse || c.Reason != export.ReasonNamespaceNotAllowed ||
			!strings.Contains(c.Message, "--denied-export-namespaces") {
			return fmt.Errorf("Valid = %s/%s (%s)", c.Status, c.Reason, c.Message)
		}
		return nil
	})
	if err := everywhere(func(m *member) error {
		imp, err := readImport(m, "default", "unsafe")
		if err != nil {
			return err
		}
		return imp.gone()
	}); err != nil {
		t.Errorf("an export from default was imported: %v", err)
	}
	if err := wantCondition(a, "default", "unsafe", "Ready", metav1.ConditionFalse, "Pending"); err != nil {
		t.Error(err)
	}
}
