// Package oldest proves the oldest Kubernetes release the README supports, on a member that runs that release's
// kube-apiserver and kube-controller-manager (build/tools/kube-oldest) beside a broker of the pinned release: the
// member serves no ValidatingAdmissionPolicy; `kubectl mcs join` installs our CRDs and everything else of the
// member's manifests but the policy, says so, and completes (rollouts, then the controller's first Lease renewal);
// the controller, a process of this machine run with the arguments join deployed, exports a Service through the
// broker and imports it back (ServiceImport, derived Service, EndpointSlices, the cluster-local Service) though the
// member serves no ServiceCIDR to read its IP families from (GA in 1.33); and with no policy in the API server, the
// controller alone refuses an export from a namespace every cluster shares.
//
// No kubelet runs: the clusterset's pod loop makes pods Running and Ready in the API, so that the old release's
// own Deployment and EndpointSlice controllers roll out join's Deployments and publish the exported Service's
// endpoints. Join runs in the cluster-local DNS mode: the other modes wait for CoreDNS pods to load a Corefile,
// which only a kubelet's containers can.
package oldest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/controller/export"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/proc"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
	"vksfleet.dev/fleet/test/framework/ctrlharness"
)

const (
	member  = "cluster-old"
	ns      = "oldest"
	app     = "web"
	timeout = 2 * time.Minute
)

// TestMain discards controller-runtime's logs (framework.Main), which the clusterset's envtest and install write.
func TestMain(m *testing.M) {
	framework.Main(m, framework.Suite{})
}

func TestOldestRelease(t *testing.T) {
	ctx := context.Background()
	bin := framework.BuildTest(t)
	log := proc.TestLog(t)
	cs, err := clusterset.Start(ctx, clusterset.Options{Members: []string{member}, Oldest: []string{member}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cs.Stop(); err != nil {
			t.Errorf("stopping the clusterset: %v", err)
		}
	})
	m := cs.Members[0]
	wantOldest(t, m)

	info, err := install.BrokerInit(ctx, cs.Broker.Config, install.InitOptions{ClusterSet: "oldest", TokenExpiration: time.Hour}, log)
	if err != nil {
		t.Fatal(err)
	}
	out := join(t, m, info, bin, log)
	for _, want := range []string{
		"ok    CRDs: applied 3",
		"the cluster serves no ValidatingAdmissionPolicy (Kubernetes before 1.30), so the controller's --denied-export-namespaces alone refuses exports",
		"(2 policy objects left out)",
		"ok    rollout of mcs-system/mcs-controller: available",
		"ok    Lease on the broker: renewed by the controller",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("join's output lacks %q:\n%s", want, out)
		}
	}
	for _, crd := range []string{"serviceexports.multicluster.x-k8s.io", "serviceimports.multicluster.x-k8s.io", "clusterproperties.about.k8s.io"} {
		if err := established(ctx, m.Client, crd); err != nil {
			t.Error(err)
		}
	}

	t.Run("export and import", func(t *testing.T) { testExportImport(t, cs, m) })
	t.Run("shared namespace refused", func(t *testing.T) { testSharedNamespace(t, cs, m) })
}

// wantOldest checks that the member runs the release build/tools/kube-oldest pins, and that it serves no
// ValidatingAdmissionPolicy, the API join leaves out.
func wantOldest(t *testing.T, m *clusterset.Cluster) {
	t.Helper()
	want, err := clusterset.PinnedKubernetes("kube-oldest")
	if err != nil {
		t.Fatal(err)
	}
	v, err := m.Kube.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != want {
		t.Fatalf("the member runs Kubernetes %s, want %s (build/tools/kube-oldest)", v.GitVersion, want)
	}
	resources, err := m.Kube.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resources.APIResources {
		if r.Kind == "ValidatingAdmissionPolicy" {
			t.Fatalf("Kubernetes %s serves admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy: it is not the release without it", v.GitVersion)
		}
	}
	t.Logf("member %s runs Kubernetes %s, without ValidatingAdmissionPolicy", m.Name, v.GitVersion)
}

// join runs `kubectl mcs join` on the member, in the cluster-local DNS mode, and returns its output. Once join has
// applied the controller's Deployment, the controller starts as a process of this machine with the Deployment's
// arguments (and the member's kubeconfig, and probe addresses of its own), as its pods would: join then sees its
// first Lease renewal on the broker.
func join(t *testing.T, m *clusterset.Cluster, info install.BrokerInfo, bin string, log io.Writer) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
	defer cancel()
	var out bytes.Buffer
	type result struct {
		id  string
		err error
	}
	done := make(chan result, 1)
	go func() {
		id, err := install.Join(ctx, m.Config, info, install.JoinOptions{
			ClusterID: m.ID, TokenExpiration: time.Hour, DNS: install.DNSClusterLocal, Wait: timeout,
		}, io.MultiWriter(&out, log))
		done <- result{id, err}
	}()
	var d appsv1.Deployment
	var ended *result // join returned before the Deployment was there
	err := poll.Until(ctx, poll.Interval, timeout, func() error {
		select {
		case r := <-done:
			ended = &r
			return nil
		default:
		}
		return m.Client.Get(ctx, client.ObjectKey{Namespace: "mcs-system", Name: "mcs-controller"}, &d)
	})
	if ended != nil {
		t.Fatalf("join returned before the controller's Deployment was applied: %v\n%s", ended.err, out.String())
	}
	if err != nil {
		cancel() // join writes to out until it returns
		t.Fatalf("%v (join: %v)\n%s", err, (<-done).err, out.String())
	}
	ports, err := clusterset.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	deployed := d.Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(deployed, "--cluster-local-services") {
		t.Fatalf("the controller's Deployment has the arguments %v, not the cluster-local mode's", deployed)
	}
	p, err := ctrlharness.StartProcess(log, m.Name+"/controller", filepath.Join(bin, "controller"), ctrlharness.Flags{
		Deployed: deployed, Kubeconfig: m.KubeconfigPath,
		HealthProbeBindAddress: fmt.Sprintf("127.0.0.1:%d", ports[0]), MetricsBindAddress: fmt.Sprintf("127.0.0.1:%d", ports[1]),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	r := <-done
	if r.err != nil {
		t.Fatalf("join: %v\n%s", r.err, out.String())
	}
	if r.id != m.ID {
		t.Errorf("join gave the member the id %q, want %q", r.id, m.ID)
	}
	return out.String()
}

// established says why the CRD does not serve its kinds.
func established(ctx context.Context, c client.Client, name string) error {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
		return err
	}
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("CRD %s is not established: %+v", name, crd.Status.Conditions)
}

// testExportImport exports a Deployment's Service and waits for its record and slices on the broker, and for the
// member's import of it: the ServiceImport with a ClusterSetIP, the derived Service that holds it, the imported
// EndpointSlices with the pods' addresses, and the cluster-local Service.
func testExportImport(t *testing.T, cs *clusterset.ClusterSet, m *clusterset.Cluster) {
	ctx := context.Background()
	if err := mcstest.CreateNamespace(ctx, m.Client, ns); err != nil {
		t.Fatal(err)
	}
	if err := workload.Deploy(ctx, m.Client, ns, app, m.Name, 2, false); err != nil {
		t.Fatal(err)
	}
	if err := m.Client.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app}}); err != nil {
		t.Fatal(err)
	}
	var podIPs []string
	poll.T(t, timeout, "the old release's EndpointSlice controller publishes both pods", func() (err error) {
		podIPs, err = sliceAddresses(ctx, m.Client, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: app})
		if err == nil && len(podIPs) != 2 { // a single-stack Service: one address per pod
			err = fmt.Errorf("the Service's slices hold %v", podIPs)
		}
		return err
	})
	for _, cond := range []string{string(mcsv1beta1.ServiceExportConditionValid), string(mcsv1beta1.ServiceExportConditionReady)} {
		poll.T(t, timeout, "ServiceExport "+cond+"=True", func() error {
			return framework.WantExportCondition(ctx, m.Client, ns, app, cond, metav1.ConditionTrue, "")
		})
	}

	brokerNS := names.BrokerNamespace(m.ID)
	poll.T(t, timeout, "the export's record and slices on the broker", func() error {
		if err := cs.Broker.Records.Get(ctx, client.ObjectKey{Namespace: brokerNS, Name: names.RecordName(ns, app)}, &mcsv1beta1.ServiceImport{}); err != nil {
			return err
		}
		got, err := sliceAddresses(ctx, cs.Broker.Records, client.InNamespace(brokerNS))
		if err == nil && !slices.Equal(got, podIPs) {
			err = fmt.Errorf("the broker's slices hold %v, want %v", got, podIPs)
		}
		return err
	})

	var si mcsv1beta1.ServiceImport
	poll.T(t, timeout, "the import: ServiceImport, derived Service, EndpointSlices, cluster-local Service", func() error {
		if err := m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: app}, &si); err != nil {
			return err
		}
		if si.Spec.Type != mcsv1beta1.ClusterSetIP || len(si.Spec.IPs) == 0 || len(si.Spec.Ports) != 3 {
			return fmt.Errorf("ServiceImport spec %+v", si.Spec)
		}
		var derived corev1.Service
		if err := m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: names.DerivedServiceName(ns, app)}, &derived); err != nil {
			return err
		}
		if !slices.Equal(derived.Spec.ClusterIPs, si.Spec.IPs) {
			return fmt.Errorf("the derived Service has the ClusterIPs %v, the import %v", derived.Spec.ClusterIPs, si.Spec.IPs)
		}
		got, err := sliceAddresses(ctx, m.Client, client.InNamespace(ns), client.MatchingLabels{
			mcsv1beta1.LabelServiceName: app, discoveryv1.LabelManagedBy: names.ManagedBy,
		})
		if err != nil {
			return err
		}
		if !slices.Equal(got, podIPs) {
			return fmt.Errorf("the imported slices hold %v, want %v", got, podIPs)
		}
		var local corev1.Service
		return m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: names.ClusterLocalServiceName(ns, app)}, &local)
	})
	t.Logf("imported %s/%s with the ClusterSetIPs %v and the endpoints %v", ns, app, si.Spec.IPs, podIPs)
}

// testSharedNamespace exports a Service of the namespace default: with no admission policy the API server admits
// the ServiceExport, and the controller says Valid=False/NamespaceNotAllowed and publishes nothing of it.
func testSharedNamespace(t *testing.T, cs *clusterset.ClusterSet, m *clusterset.Cluster) {
	ctx := context.Background()
	const name = "unsafe"
	shared := metav1.NamespaceDefault
	if !slices.Contains(export.DefaultDeniedNamespaces, shared) {
		t.Fatalf("%s is not among the namespaces the controller refuses by default, %v", shared, export.DefaultDeniedNamespaces)
	}
	svc := workload.ServiceFor(name, shared, false)
	if err := m.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := m.Client.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: shared, Name: name}}); err != nil {
		t.Fatalf("the ServiceExport in %s, with no admission policy to deny it: %v", shared, err)
	}
	poll.T(t, timeout, "Valid=False/NamespaceNotAllowed", func() error {
		return framework.WantExportCondition(ctx, m.Client, shared, name, string(mcsv1beta1.ServiceExportConditionValid), metav1.ConditionFalse, export.ReasonNamespaceNotAllowed)
	})
	var se mcsv1beta1.ServiceExport
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: shared, Name: name}, &se); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionValid)); !strings.Contains(c.Message, "--denied-export-namespaces") {
		t.Errorf("Valid=False does not name the flag that refuses it: %q", c.Message)
	}
	// The condition is written once the export was judged: by then a record would be on the broker.
	err := cs.Broker.Records.Get(ctx, client.ObjectKey{Namespace: names.BrokerNamespace(m.ID), Name: names.RecordName(shared, name)}, &mcsv1beta1.ServiceImport{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the broker record of %s/%s: %v, want none", shared, name, err)
	}
}

// sliceAddresses lists EndpointSlices and returns their endpoints' addresses, sorted.
func sliceAddresses(ctx context.Context, c client.Client, opts ...client.ListOption) ([]string, error) {
	var list discoveryv1.EndpointSliceList
	if err := c.List(ctx, &list, opts...); err != nil {
		return nil, err
	}
	var addrs []string
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			addrs = append(addrs, e.Addresses...)
		}
	}
	slices.Sort(addrs)
	return addrs, nil
}
