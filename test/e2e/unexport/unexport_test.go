// Package unexport times what the upstream conformance suite times: in a clusterset that has just started, with the
// default lease grace of 30 s, the only export of a service is deleted, and its ServiceImport must leave every
// member promptly (the suite allows 20 s). A start must not hold withdrawals back for a grace when nothing can have
// been lost: a member that created its broker Lease, or holds no import, trusts the broker's view at once.
package unexport

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/proc"
	"vksfleet.dev/fleet/test/framework"
)

func TestUnexportInAFreshClusterset(t *testing.T) {
	bin := framework.BuildTest(t)
	ctx := context.Background()
	f, err := framework.Start(ctx, framework.Options{ClusterSet: clusterset.Options{Members: clusterset.MemberNames(2)}, BinDir: bin,
		LeaseGrace: 30 * time.Second, Log: proc.TestLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Errorf("stopping the fleet: %v", err)
		}
	})
	started := time.Now()
	a, b := f.Members[0], f.Members[1]
	for _, m := range f.Members {
		if err := mcstest.CreateNamespace(ctx, m.Client, "fresh"); err != nil {
			t.Fatal(err)
		}
	}
	objs := []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "fresh", Name: "web"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "fresh", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{mcstest.Endpoint("10.1.0.1", "", true)}},
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "fresh", Name: "web"}},
	}
	for _, o := range objs {
		if err := a.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	key := types.NamespacedName{Namespace: "fresh", Name: "web"}
	poll.T(t, time.Minute, "imported into cluster-b", func() error { return b.Client.Get(ctx, key, &mcsv1beta1.ServiceImport{}) })
	t.Logf("imported %v after the fleet started", time.Since(started))
	unexported := time.Now()
	if err := a.Client.Delete(ctx, objs[2]); err != nil {
		t.Fatal(err)
	}
	poll.T(t, time.Minute, "the ServiceImport gone from cluster-b", func() error {
		err := b.Client.Get(ctx, key, &mcsv1beta1.ServiceImport{})
		if err == nil {
			return errors.New("still there")
		}
		return client.IgnoreNotFound(err)
	})
	took := time.Since(unexported)
	t.Logf("unexported %v after the fleet started (lease grace 30 s): the import left cluster-b %v later",
		unexported.Sub(started).Round(10*time.Millisecond), took.Round(10*time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("the import left %v after the unexport, want a few seconds (the suite allows 20 s)", took)
	}
}
