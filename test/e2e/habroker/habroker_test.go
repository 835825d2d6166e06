// Package habroker runs the fleet on a highly available broker (clusterset.Options.HABroker): each member's
// controller, with a broker identity of its own (a token one of the broker's API servers issued), reaches the broker
// only through its load balancer, and keeps exporting and importing while either API server is down.
package habroker

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/proc"
	"vksfleet.dev/fleet/test/framework"
)

func TestFleetOnHABroker(t *testing.T) {
	bin := framework.BuildTest(t)
	ctx := context.Background()
	start := time.Now()
	f, err := framework.Start(ctx, framework.Options{
		ClusterSet: clusterset.Options{Members: clusterset.MemberNames(2), HABroker: true},
		BinDir:     bin, BrokerIdentities: true, Log: proc.TestLog(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Errorf("stopping the fleet: %v", err)
		}
	})
	t.Logf("fleet of 2 members on an HA broker started in %s", time.Since(start).Round(time.Millisecond))
	ha := f.Broker.HA
	if ha == nil {
		t.Fatal("the broker has no HA processes")
	}
	for _, m := range f.Members {
		kc, err := clientcmd.LoadFromFile(m.BrokerKubeconfigPath())
		if err != nil {
			t.Fatal(err)
		}
		for name, c := range kc.Clusters {
			if c.Server != ha.LoadBalancer.URL {
				t.Errorf("%s's broker kubeconfig: cluster %s at %s, want the load balancer %s", m.Name, name, c.Server, ha.LoadBalancer.URL)
			}
		}
	}
	a, b := f.Members[0], f.Members[1]
	if err := mcstest.CreateNamespace(ctx, a.Client, "web"); err != nil {
		t.Fatal(err)
	}
	if err := mcstest.CreateNamespace(ctx, b.Client, "web"); err != nil {
		t.Fatal(err)
	}
	exportAndImport(t, a, b, "before")
	for i, api := range ha.APIServers {
		api.Kill()
		exportAndImport(t, a, b, fmt.Sprintf("without-api%d", i))
		if err := api.Restart(ctx); err != nil {
			t.Fatalf("restarting %s: %v", api.Name, err)
		}
	}
}

// exportAndImport exports a Service from a and waits until b imports it, through the broker.
func exportAndImport(t *testing.T, a, b *framework.Member, name string) {
	t.Helper()
	ctx := context.Background()
	objs := []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: name}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{mcstest.Endpoint("10.1.0.1", "", true)}},
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: name}},
	}
	for _, o := range objs {
		if err := a.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	key := types.NamespacedName{Namespace: "web", Name: name}
	poll.T(t, time.Minute, name+" imported into "+b.Name, func() error { return b.Client.Get(ctx, key, &mcsv1beta1.ServiceImport{}) })
	t.Logf("%s: exported from %s, imported into %s %s later", name, a.Name, b.Name, time.Since(start).Round(time.Millisecond))
}
