// Package manifests proves the deploy manifests under build/deploy: every object the kustomize bases render is
// accepted by a real API server through server-side apply, and the mcs-controller works under exactly the RBAC
// identities they grant (its member ServiceAccount and its broker ServiceAccount) and can do no more than that on
// the broker; and that the joiner identity and a member's credential can do what join, rotate and evict need and
// nothing else (joiner_test.go), and that `kubectl mcs unjoin --broker-only` and `broker uninstall` leave nothing of
// a member, or of the clusterset, on the broker (uninstall_test.go).
package manifests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/build/deploy/member"
	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/controller"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/framework"
	"vksfleet.dev/fleet/test/framework/ctrlharness"
)

const (
	// fieldManager owns every field the test applies.
	fieldManager = "vksfleet-manifests-test"
	// brokerSecretName is the Secret the controller Deployment reads its broker kubeconfig from.
	brokerSecretName = "broker-kubeconfig"
	// timeout bounds every wait for the controllers.
	timeout = 2 * time.Minute
	// leaseGrace is short so that the controllers renew their broker Leases (an update) within a second or two.
	leaseGrace = 5 * time.Second
	// demoNamespace holds the exported service.
	demoNamespace = "demo"
)

// memberNames are the member clusters: cluster-a exports, cluster-b imports.
var memberNames = []string{"cluster-a", "cluster-b"}

// deployDir is build/deploy, relative to this package.
var deployDir = filepath.Join("..", "..", "..", "build", "deploy")

// logs records every log line of the process, controllers and client libraries alike.
var logs = &recorder{}

// TestMain routes client-go's logs (reflectors, leader election go through klog) and controller-runtime's global
// logger into logs, so that a Forbidden anywhere is seen. klog's logger must be set before goroutines log.
func TestMain(m *testing.M) {
	klog.SetLogger(logs.logger("klog"))
	log := logs.logger("controller-runtime")
	framework.Main(m, framework.Suite{Logger: &log})
}

// TestDeployManifests renders the kustomize bases, server-side applies every object to a local clusterset, runs
// one controller per member under the rendered ServiceAccounts (impersonated) and checks that an export is
// imported and withdrawn with no permission denied, and that the broker identities are confined to their own
// namespaces.
func TestDeployManifests(t *testing.T) {
	start := time.Now()
	logs.reset()

	// 1. Render every base. The per-member broker identity is rendered as an operator would: an overlay of
	// member/ setting the member's broker namespace and a name suffix.
	bin := kustomizeBinary(t)
	memberObjs := render(t, bin, deployDir)
	brokerObjs := render(t, bin, filepath.Join(deployDir, "broker"))
	exampleObjs := render(t, bin, filepath.Join(deployDir, "member"))
	local := controllerIdentity(t, memberObjs)
	t.Logf("rendered %d member, %d broker and %d member-identity objects in %v; the controller runs as %s with "+
		"leader election in %s", len(memberObjs), len(brokerObjs), len(exampleObjs), time.Since(start).Round(time.Millisecond),
		local.user(), local.leaderElectionNamespace)

	ctx := context.Background()
	csStart := time.Now()
	cs, err := clusterset.Start(ctx, clusterset.Options{Members: memberNames})
	if err != nil {
		t.Fatalf("starting the clusterset: %v", err)
	}
	t.Cleanup(func() {
		if err := cs.Stop(); err != nil {
			t.Errorf("stopping the clusterset: %v", err)
		}
	})
	t.Logf("clusterset started in %v", time.Since(csStart).Round(time.Millisecond))

	identities := map[string]identity{} // member name -> its broker identity
	brokerAll := append(slices.Clone(brokerObjs), exampleObjs...)
	for _, m := range cs.Members {
		objs, id := memberOverlay(t, bin, m.ID)
		identities[m.Name] = id
		brokerAll = append(brokerAll, objs...)
	}
	checkUnique(t, "broker", brokerAll)
	checkUnique(t, "member", memberObjs)
	if t.Failed() {
		t.FailNow()
	}

	// 2. Apply everything with server-side apply: the member bundle to each member, the broker RBAC and every
	// member's broker identity to the broker.
	applyStart := time.Now()
	for _, m := range cs.Members {
		applyAll(ctx, t, m.Name, m.Client, memberObjs)
	}
	applyAll(ctx, t, clusterset.BrokerName, cs.Broker.Client, brokerAll)
	if t.Failed() {
		t.FailNow()
	}
	// What join adds to the rendered identities: each member reads the records (mcs-broker-records-readers), and the
	// directory lists them.
	for _, m := range cs.Members {
		if _, err := install.GrantReads(ctx, cs.Broker.Client, m.ID); err != nil {
			t.Fatalf("granting %s reads: %v", m.Name, err)
		}
	}
	t.Logf("applied %d objects to each member and %d to the broker in %v", len(memberObjs), len(brokerAll),
		time.Since(applyStart).Round(time.Millisecond))

	// The API server's RBAC authorizer sees new bindings through an informer: wait until each binding is in
	// effect, so that a controller's first request is not denied by a binding still on its way.
	waitForBindings(ctx, t, cs, local, identities)

	// 3. One controller per member, under exactly the rendered identities.
	runStart := time.Now()
	h := &harness{logs: logs}
	for _, m := range cs.Members {
		h.start(t, m.Name, controller.Options{
			Local:                   local.impersonate(m.Config),
			Broker:                  identities[m.Name].impersonate(cs.Broker.Config),
			LeaderElection:          true,
			LeaderElectionNamespace: local.leaderElectionNamespace,
			LeaseGrace:              leaseGrace,
			HealthProbeBindAddress:  "0",
			MetricsBindAddress:      "0",
		})
	}
	for _, m := range cs.Members {
		leaseKey := client.ObjectKey{Namespace: names.BrokerNamespace(m.ID), Name: names.LeaseName}
		h.eventually(t, m.Name+"'s controller holds its broker Lease", func() error {
			return cs.Broker.Records.Get(ctx, leaseKey, &coordinationv1.Lease{})
		})
		h.eventually(t, m.Name+"'s controller is elected leader in "+local.leaderElectionNamespace, func() error {
			leases := &coordinationv1.LeaseList{}
			if err := m.Client.List(ctx, leases, client.InNamespace(local.leaderElectionNamespace)); err != nil {
				return err
			}
			for _, l := range leases.Items {
				if ptr.Deref(l.Spec.HolderIdentity, "") != "" {
					return nil
				}
			}
			return fmt.Errorf("no held Lease among %d", len(leases.Items))
		})
	}
	t.Logf("controllers hold their broker Leases and leadership after %v", time.Since(runStart).Round(time.Millisecond))

	// 4. Export a service from cluster-a and see it imported in cluster-b.
	exportStart := time.Now()
	a, b := cs.Member("cluster-a"), cs.Member("cluster-b")
	endpoint := exportService(ctx, t, a, b)
	h.eventually(t, "cluster-a's ServiceExport is Valid and Ready", func() error {
		se := &mcsv1beta1.ServiceExport{}
		if err := a.Client.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: "web"}, se); err != nil {
			return err
		}
		for _, cond := range []mcsv1beta1.ServiceExportConditionType{
			mcsv1beta1.ServiceExportConditionValid, mcsv1beta1.ServiceExportConditionReady,
		} {
			if !meta.IsStatusConditionTrue(se.Status.Conditions, string(cond)) {
				return fmt.Errorf("condition %s is not True: %+v", cond, se.Status.Conditions)
			}
		}
		return nil
	})
	h.eventually(t, "cluster-b imports the service with a ClusterSetIP from its service range", func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := b.Client.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: "web"}, si); err != nil {
			return err
		}
		if si.Spec.Type != mcsv1beta1.ClusterSetIP || len(si.Spec.IPs) == 0 {
			return fmt.Errorf("ServiceImport has type %q and IPs %v", si.Spec.Type, si.Spec.IPs)
		}
		ip, err := netip.ParseAddr(si.Spec.IPs[0])
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(b.ServiceCIDRs, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			return fmt.Errorf("ServiceImport IP %s is not in cluster-b's service ranges %v", ip, b.ServiceCIDRs)
		}
		if len(si.Spec.Ports) != 1 || si.Spec.Ports[0].Port != 80 {
			return fmt.Errorf("ServiceImport ports are %+v, want port 80", si.Spec.Ports)
		}
		return nil
	})
	h.eventually(t, "cluster-b imports cluster-a's endpoint", func() error {
		list := &discoveryv1.EndpointSliceList{}
		if err := b.Client.List(ctx, list, client.InNamespace(demoNamespace),
			client.MatchingLabels{mcsv1beta1.LabelServiceName: "web", mcsv1beta1.LabelSourceCluster: a.ID}); err != nil {
			return err
		}
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				if slices.Contains(e.Addresses, endpoint) {
					return nil
				}
			}
		}
		return fmt.Errorf("no imported slice holds %s among %d slices", endpoint, len(list.Items))
	})
	t.Logf("export imported and Ready in %v", time.Since(exportStart).Round(time.Millisecond))

	// 5. Least privilege: what the rendered identities must not be able to do, and the quota of each member's
	// broker namespace.
	checkLeastPrivilege(ctx, t, cs, local, identities)
	checkQuota(ctx, t, cs, identities[a.Name])

	// 6. Renewals: each broker Lease is updated, not only created.
	for _, m := range cs.Members {
		key := client.ObjectKey{Namespace: names.BrokerNamespace(m.ID), Name: names.LeaseName}
		first := &coordinationv1.Lease{}
		if err := cs.Broker.Records.Get(ctx, key, first); err != nil {
			t.Fatal(err)
		}
		h.eventually(t, m.Name+"'s controller renews its broker Lease", func() error {
			lease := &coordinationv1.Lease{}
			if err := cs.Broker.Records.Get(ctx, key, lease); err != nil {
				return err
			}
			if lease.ResourceVersion == first.ResourceVersion {
				return fmt.Errorf("Lease %s unchanged since resourceVersion %s", key, first.ResourceVersion)
			}
			return nil
		})
	}

	// 7. Withdrawal: unexporting deletes the broker records and slices and every import.
	withdrawStart := time.Now()
	if err := a.Client.Delete(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: "web"}}); err != nil {
		t.Fatalf("deleting the ServiceExport: %v", err)
	}
	h.eventually(t, "the export is withdrawn from the broker and every member", func() error {
		for _, m := range cs.Members {
			err := m.Client.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: "web"}, &mcsv1beta1.ServiceImport{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s's ServiceImport: %v", m.Name, err)
			}
			imported := &discoveryv1.EndpointSliceList{}
			if err := m.Client.List(ctx, imported, client.InNamespace(demoNamespace),
				client.MatchingLabels{mcsv1beta1.LabelServiceName: "web"}); err != nil {
				return err
			}
			if len(imported.Items) > 0 {
				return fmt.Errorf("%s still has %d imported slices", m.Name, len(imported.Items))
			}
		}
		// The service's records and slices, in both layouts, not the member's sentinel record, which stays while it
		// runs.
		brokerNS := names.BrokerNamespace(a.ID)
		ofWeb := client.MatchingLabels{names.LabelServiceNamespace: demoNamespace, mcsv1beta1.LabelServiceName: "web"}
		n := 0
		for _, c := range []client.Client{cs.Broker.Records, cs.Broker.Client} {
			records := &mcsv1beta1.ServiceImportList{}
			if err := c.List(ctx, records, client.InNamespace(brokerNS), ofWeb); err != nil {
				return err
			}
			brokerSlices := &discoveryv1.EndpointSliceList{}
			if err := c.List(ctx, brokerSlices, client.InNamespace(brokerNS), ofWeb); err != nil {
				return err
			}
			n += len(records.Items) + len(brokerSlices.Items)
		}
		if n > 0 {
			return fmt.Errorf("the broker namespace %s still holds %d records and slices", brokerNS, n)
		}
		return nil
	})
	t.Logf("export withdrawn in %v", time.Since(withdrawStart).Round(time.Millisecond))

	h.failFast(t)
	h.stop(t)
	if bad := logs.forbidden(); len(bad) > 0 {
		t.Errorf("the controllers were denied permissions:\n%s", permissionReport(bad))
	}
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// kustomizeBinary is the kustomize that `make tools` builds into the tools cache.
func kustomizeBinary(t *testing.T) string {
	t.Helper()
	bin, err := clusterset.Tool("kustomize")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// render runs `kustomize build dir` and parses its output.
func render(t *testing.T, bin, dir string) []*unstructured.Unstructured {
	t.Helper()
	cmd := exec.Command(bin, "build", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
	}
	objs, err := parse(out)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	if len(objs) == 0 {
		t.Fatalf("kustomize build %s rendered nothing", dir)
	}
	return objs
}

// parse reads a multi-document YAML stream into objects, skipping empty documents.
func parse(b []byte) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var objs []*unstructured.Unstructured
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		j, err := utilyaml.ToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if s := string(bytes.TrimSpace(j)); s == "null" || s == "" || s == "{}" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if u.GetName() == "" {
			return nil, fmt.Errorf("document %d (%s) has no name", i, u.GetKind())
		}
		objs = append(objs, u)
	}
}

// describe names an object for messages: Kind namespace/name.
func describe(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetKind() + " " + u.GetName()
	}
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// checkUnique fails when two objects bound for one cluster share a kind, namespace and name: the second apply
// would silently replace the first, as two member overlays with the same ClusterRoleBinding name would.
func checkUnique(t *testing.T, cluster string, objs []*unstructured.Unstructured) {
	t.Helper()
	seen := map[string]bool{}
	for _, u := range objs {
		key := u.GroupVersionKind().GroupKind().String() + " " + u.GetNamespace() + "/" + u.GetName()
		if seen[key] {
			t.Errorf("%s is rendered twice for the %s: the second apply would overwrite the first", describe(u), cluster)
		}
		seen[key] = true
	}
}

// identity is a ServiceAccount the manifests grant permissions to.
type identity struct {
	namespace, name string
	// leaderElectionNamespace is where the controller Deployment elects its leader (member identity only).
	leaderElectionNamespace string
}

func (id identity) user() string { return "system:serviceaccount:" + id.namespace + ":" + id.name }

// impersonate returns cfg (an administrator's) acting as the ServiceAccount, with the groups the API server
// gives ServiceAccount tokens.
func (id identity) impersonate(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: id.user(),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + id.namespace, "system:authenticated"},
	}
	return cfg
}

// controllerIdentity reads the controller Deployment of the member bundle: its ServiceAccount and its leader
// election flags.
func controllerIdentity(t *testing.T, objs []*unstructured.Unstructured) identity {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() != "Deployment" || u.GetName() != "mcs-controller" {
			continue
		}
		d := &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d); err != nil {
			t.Fatalf("%s: %v", describe(u), err)
		}
		id := identity{namespace: d.Namespace, name: d.Spec.Template.Spec.ServiceAccountName}
		if id.name == "" || id.namespace == "" {
			t.Fatalf("%s names no ServiceAccount or namespace", describe(u))
		}
		if len(d.Spec.Template.Spec.Containers) != 1 {
			t.Fatalf("%s has %d containers, want 1", describe(u), len(d.Spec.Template.Spec.Containers))
		}
		args := d.Spec.Template.Spec.Containers[0].Args
		if !slices.Contains(args, "--leader-elect") && !slices.Contains(args, "--leader-elect=true") {
			t.Fatalf("%s does not enable leader election: %q", describe(u), args)
		}
		id.leaderElectionNamespace = flagValue(args, "leader-election-namespace")
		if id.leaderElectionNamespace == "" {
			t.Fatalf("%s sets no --leader-election-namespace: %q", describe(u), args)
		}
		return id
	}
	t.Fatal("the member bundle has no Deployment mcs-controller")
	return identity{}
}

// flagValue returns the value of --name=value or --name value (one or two dashes) in args.
func flagValue(args []string, name string) string {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// memberOverlay renders a member's broker identity the way the member/ base tells operators to: an overlay
// setting the member's broker namespace and a name suffix. It checks that everything landed in that namespace
// and returns the objects and the member's ServiceAccount.
func memberOverlay(t *testing.T, bin, clusterID string) ([]*unstructured.Unstructured, identity) {
	t.Helper()
	dir := t.TempDir()
	base, err := filepath.Abs(filepath.Join(deployDir, "member"))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, base) // kustomize accepts only relative paths to bases
	if err != nil {
		t.Fatal(err)
	}
	ns := names.BrokerNamespace(clusterID)
	kustomization := member.Kustomization(rel, clusterID, "-"+clusterID)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		t.Fatal(err)
	}
	objs := render(t, bin, dir)

	var sas []identity
	hasNamespace := false
	for _, u := range objs {
		switch {
		case u.GetKind() == "Namespace":
			if u.GetName() != ns {
				t.Errorf("member %s: the overlay renders Namespace %s, not the broker namespace %s", clusterID, u.GetName(), ns)
			}
			hasNamespace = true
		case u.GetKind() == "ServiceAccount":
			sas = append(sas, identity{namespace: u.GetNamespace(), name: u.GetName()})
		}
		if u.GetKind() != "Namespace" && u.GetNamespace() != "" && u.GetNamespace() != ns {
			t.Errorf("member %s: %s is not in the broker namespace %s", clusterID, describe(u), ns)
		}
	}
	if !hasNamespace {
		t.Errorf("member %s: the overlay renders no Namespace", clusterID)
	}
	if len(sas) != 1 {
		t.Fatalf("member %s: the overlay renders %d ServiceAccounts, want 1", clusterID, len(sas))
	}
	// Every binding must grant the member's own ServiceAccount, as kustomize renamed and moved it.
	for _, u := range objs {
		subjects, _, _ := unstructured.NestedSlice(u.Object, "subjects")
		for _, s := range subjects {
			subject, _ := s.(map[string]any)
			if subject["kind"] != "ServiceAccount" {
				continue
			}
			if subject["namespace"] != sas[0].namespace || subject["name"] != sas[0].name {
				t.Errorf("member %s: %s binds ServiceAccount %v/%v, not the member's %s/%s", clusterID, describe(u),
					subject["namespace"], subject["name"], sas[0].namespace, sas[0].name)
			}
		}
	}
	return objs, sas[0]
}

// applyAll server-side applies objs to one cluster: CRDs first, until Established, then Namespaces, then the
// rest. Every object the API server rejects is reported with its kind, name and error.
func applyAll(ctx context.Context, t *testing.T, cluster string, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	rank := func(u *unstructured.Unstructured) int {
		switch u.GroupVersionKind().GroupKind().String() {
		case "CustomResourceDefinition.apiextensions.k8s.io":
			return 0
		case "Namespace":
			return 1
		}
		return 2
	}
	sorted := slices.Clone(objs)
	slices.SortStableFunc(sorted, func(x, y *unstructured.Unstructured) int { return rank(x) - rank(y) })
	var crds []string
	for _, u := range sorted {
		if rank(u) > 0 && len(crds) > 0 {
			waitEstablished(ctx, t, cluster, c, crds)
			crds = nil
		}
		err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()),
			client.FieldOwner(fieldManager), client.ForceOwnership)
		if err != nil {
			t.Errorf("%s rejects %s: %v", cluster, describe(u), err)
			continue
		}
		if rank(u) == 0 {
			crds = append(crds, u.GetName())
		}
	}
	if len(crds) > 0 {
		waitEstablished(ctx, t, cluster, c, crds)
	}
}

// waitEstablished waits until every named CRD is Established.
func waitEstablished(ctx context.Context, t *testing.T, cluster string, c client.Client, crds []string) {
	t.Helper()
	poll.T(t, 30*time.Second, cluster+": CRDs Established", func() error {
		for _, name := range crds {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				return err
			}
			established := slices.ContainsFunc(crd.Status.Conditions, func(c apiextensionsv1.CustomResourceDefinitionCondition) bool {
				return c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue
			})
			if !established {
				return fmt.Errorf("CustomResourceDefinition %s is not Established", name)
			}
		}
		return nil
	})
}

// waitForBindings waits until one permission of each rendered binding is granted: the controller's ClusterRole and
// Role in each member, the records reader ClusterRole and the writer role in each member's broker namespace.
func waitForBindings(ctx context.Context, t *testing.T, cs *clusterset.ClusterSet, local identity, brokerIDs map[string]identity) {
	t.Helper()
	allowed := func(err error) error {
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	for _, m := range cs.Members {
		localC, err := client.New(local.impersonate(m.Config), client.Options{Scheme: clusterset.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		brokerC, err := client.New(brokerIDs[m.Name].impersonate(cs.Broker.Config), client.Options{Scheme: cs.Broker.Records.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		ns := names.BrokerNamespace(m.ID)
		poll.T(t, 30*time.Second, m.Name+": the rendered bindings take effect", func() error {
			return errors.Join(
				allowed(localC.List(ctx, &mcsv1beta1.ServiceExportList{}, client.Limit(1))),
				allowed(localC.Get(ctx, client.ObjectKey{Namespace: local.leaderElectionNamespace, Name: "probe"}, &coordinationv1.Lease{})),
				allowed(brokerC.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(broker.DirectoryNamespace))),
				allowed(brokerC.List(ctx, &coordinationv1.LeaseList{}, client.Limit(1))),
				allowed(brokerC.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}}, client.DryRunAll)),
			)
		})
	}
}

// exportService creates, as a user would, namespace demo in both members and, in a, a selector-less Service web
// with a hand-made EndpointSlice and a ServiceExport. It returns the endpoint's address.
func exportService(ctx context.Context, t *testing.T, a, b *clusterset.Cluster) string {
	t.Helper()
	clusterset.CreateNamespace(t, demoNamespace, a, b)
	endpoint := a.PodCIDRs[0].Addr().Next().Next().String()
	objs := []client.Object{
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: "web"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
				Name: "http", Port: 80, Protocol: corev1.ProtocolTCP,
			}}},
		},
		&discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: demoNamespace, Name: "web-manual",
				Labels: map[string]string{discoveryv1.LabelServiceName: "web"},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{
				Addresses:  []string{endpoint},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			}},
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)}},
		},
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: "web"}},
	}
	for _, obj := range objs {
		if err := a.Client.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s in %s: %v", obj, obj.GetName(), a.Name, err)
		}
	}
	return endpoint
}

// checkLeastPrivilege proves that RBAC is enforced and confines each identity: every write is a dry run, so a
// wrongly granted permission changes nothing before the test fails.
func checkLeastPrivilege(ctx context.Context, t *testing.T, cs *clusterset.ClusterSet, local identity, brokerIDs map[string]identity) {
	t.Helper()
	a, b := cs.Member("cluster-a"), cs.Member("cluster-b")
	newClient := func(cfg *rest.Config, scheme *runtime.Scheme) client.Client {
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// brokerA reads and writes the broker's built-in and mcs-api kinds (the previous release's layout, and the
	// broker's own objects); recordsA its records.
	brokerA := newClient(brokerIDs[a.Name].impersonate(cs.Broker.Config), clusterset.Scheme)
	recordsA := newClient(brokerIDs[a.Name].impersonate(cs.Broker.Config), cs.Broker.Records.Scheme())
	localA := newClient(local.impersonate(a.Config), clusterset.Scheme)
	newKube := func(cfg *rest.Config) kubernetes.Interface {
		k, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	kubeA, brokerKubeA := newKube(local.impersonate(a.Config)), newKube(brokerIDs[a.Name].impersonate(cs.Broker.Config))
	tokenRequest := func() *authenticationv1.TokenRequest {
		return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(600))}}
	}
	nsA, nsB := names.BrokerNamespace(a.ID), names.BrokerNamespace(b.ID)
	record := func(ns string) *mcsv1beta1.ServiceImport {
		return &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "least-privilege.probe"},
			Spec: mcsv1beta1.ServiceImportSpec{
				Type:  mcsv1beta1.ClusterSetIP,
				Ports: []mcsv1beta1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}},
			},
		}
	}
	dry := client.DryRunAll
	checks := []struct {
		what      string
		do        func() error
		forbidden bool
	}{
		{"cluster-a's broker identity writes a record in its own broker namespace", func() error {
			return recordsA.Create(ctx, record(nsA), dry)
		}, false},
		{"cluster-a's broker identity writes a record of the previous layout in its own broker namespace", func() error {
			return brokerA.Create(ctx, record(nsA), dry)
		}, false},
		{"cluster-a's broker identity reads cluster-b's MemberLease", func() error {
			return recordsA.Get(ctx, client.ObjectKey{Namespace: nsB, Name: names.LeaseName}, &coordinationv1.Lease{})
		}, false},
		{"cluster-a's broker identity lists the records of every namespace", func() error {
			return recordsA.List(ctx, &discoveryv1.EndpointSliceList{})
		}, false},
		// Both members are of this release: neither reads the other in the previous layout.
		{"cluster-a's broker identity reads cluster-b's Lease of the previous layout", func() error {
			return brokerA.Get(ctx, client.ObjectKey{Namespace: nsB, Name: names.LeaseName}, &coordinationv1.Lease{})
		}, true},
		{"cluster-a's broker identity reads the member directory", func() error {
			return brokerA.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(broker.DirectoryNamespace))
		}, false},
		{"cluster-a's broker identity writes the member directory", func() error {
			return brokerA.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: broker.DirectoryNamespace, Name: "least-privilege-probe"}}, dry)
		}, true},
		{"cluster-a's broker identity lists EndpointSlices in every namespace", func() error {
			return brokerA.List(ctx, &discoveryv1.EndpointSliceList{})
		}, true},
		{"cluster-a's broker identity lists the broker's own EndpointSlices in default", func() error {
			return brokerA.List(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace(metav1.NamespaceDefault))
		}, true},
		{"cluster-a's broker identity lists ServiceImports in every namespace", func() error {
			return brokerA.List(ctx, &mcsv1beta1.ServiceImportList{})
		}, true},
		{"cluster-a's broker identity lists the broker's own Leases in kube-system", func() error {
			return brokerA.List(ctx, &coordinationv1.LeaseList{}, client.InNamespace(metav1.NamespaceSystem))
		}, true},
		{"cluster-a's broker identity writes a record in cluster-b's broker namespace", func() error {
			return recordsA.Create(ctx, record(nsB), dry)
		}, true},
		{"cluster-a's broker identity writes a record of the previous layout in cluster-b's broker namespace", func() error {
			return brokerA.Create(ctx, record(nsB), dry)
		}, true},
		{"cluster-a's broker identity writes an EndpointRecord in cluster-b's broker namespace", func() error {
			return recordsA.Create(ctx, &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: nsB, Name: "least-privilege-probe"},
				AddressType: discoveryv1.AddressTypeIPv4,
			}, dry)
		}, true},
		{"cluster-a's broker identity writes an EndpointSlice in cluster-b's broker namespace", func() error {
			return brokerA.Create(ctx, &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: nsB, Name: "least-privilege-probe"},
				AddressType: discoveryv1.AddressTypeIPv4,
			}, dry)
		}, true},
		{"cluster-a's broker identity deletes cluster-b's Lease", func() error {
			return brokerA.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: names.LeaseName}}, dry)
		}, true},
		{"cluster-a's broker identity deletes cluster-b's MemberLease", func() error {
			return recordsA.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: names.LeaseName}}, dry)
		}, true},
		{"cluster-a's broker identity creates a namespace on the broker", func() error {
			return brokerA.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "least-privilege-probe"}}, dry)
		}, true},
		{"cluster-a's broker identity lists Secrets in its own broker namespace", func() error {
			return brokerA.List(ctx, &corev1.SecretList{}, client.InNamespace(nsA))
		}, true},
		{"cluster-a's controller lists Secrets in " + local.namespace, func() error {
			return localA.List(ctx, &corev1.SecretList{}, client.InNamespace(local.namespace))
		}, true},
		// resourceNames restricts list and watch to requests whose field selector names the Secret, as the
		// controller's watch of its broker kubeconfig does.
		{"cluster-a's controller lists its broker Secret by name", func() error {
			return localA.List(ctx, &corev1.SecretList{}, client.InNamespace(local.namespace),
				client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", brokerSecretName)})
		}, false},
		{"cluster-a's controller watches its broker Secret by name", func() error {
			w, err := kubeA.CoreV1().Secrets(local.namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + brokerSecretName})
			if err == nil {
				w.Stop()
			}
			return err
		}, false},
		{"cluster-a's controller lists another Secret by name in " + local.namespace, func() error {
			return localA.List(ctx, &corev1.SecretList{}, client.InNamespace(local.namespace),
				client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", "other")})
		}, true},
		{"cluster-a's broker identity renews its own token", func() error {
			id := brokerIDs[a.Name]
			_, err := brokerKubeA.CoreV1().ServiceAccounts(id.namespace).CreateToken(ctx, id.name, tokenRequest(), metav1.CreateOptions{})
			return err
		}, false},
		{"cluster-a's broker identity makes a token for cluster-b's", func() error {
			id := brokerIDs[b.Name]
			_, err := brokerKubeA.CoreV1().ServiceAccounts(id.namespace).CreateToken(ctx, id.name, tokenRequest(), metav1.CreateOptions{})
			return err
		}, true},
		{"cluster-a's controller deletes a user's ServiceExport", func() error {
			return localA.Delete(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: "web"}}, dry)
		}, true},
	}
	for _, c := range checks {
		err := c.do()
		switch {
		case c.forbidden && !apierrors.IsForbidden(err):
			t.Errorf("%s: want Forbidden, got %v", c.what, err)
		case !c.forbidden && err != nil:
			t.Errorf("%s: want success, got %v", c.what, err)
		}
	}
}

// checkQuota fills cluster-a's broker namespace up to its MemberLease quota as an administrator, and checks that
// cluster-a's identity may then create no more: the quota is enforced there, on the records' kinds too, with its
// usage computed by the broker's quota controller.
func checkQuota(ctx context.Context, t *testing.T, cs *clusterset.ClusterSet, id identity) {
	t.Helper()
	a := cs.Member("cluster-a")
	ns := names.BrokerNamespace(a.ID)
	var quota corev1.ResourceQuota
	poll.T(t, 30*time.Second, "the quota controller computes cluster-a's broker quota", func() error {
		quotas := &corev1.ResourceQuotaList{}
		if err := cs.Broker.Client.List(ctx, quotas, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(quotas.Items) != 1 {
			return fmt.Errorf("%d ResourceQuotas in %s, want 1", len(quotas.Items), ns)
		}
		quota = quotas.Items[0]
		if _, ok := quota.Status.Used[memberLeaseQuota]; !ok {
			return fmt.Errorf("quota %s/%s has no MemberLease usage yet: %+v", ns, quota.Name, quota.Status)
		}
		return nil
	})
	limit := quota.Spec.Hard[memberLeaseQuota]
	var filler []client.Object
	t.Cleanup(func() {
		for _, o := range filler {
			if err := cs.Broker.Records.Delete(ctx, o); err != nil {
				t.Errorf("deleting %s: %v", o.GetName(), err)
			}
		}
	})
	poll.T(t, 30*time.Second, "an administrator fills cluster-a's MemberLease quota", func() error {
		leases := &coordinationv1.LeaseList{}
		if err := cs.Broker.Records.List(ctx, leases, client.InNamespace(ns)); err != nil {
			return err
		}
		if int64(len(leases.Items)) >= limit.Value() {
			return nil
		}
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("quota-filler-%d", len(filler))}}
		if err := cs.Broker.Records.Create(ctx, l); err != nil {
			return err
		}
		filler = append(filler, l)
		return fmt.Errorf("%d Leases of %d", len(leases.Items)+1, limit.Value())
	})
	brokerA, err := client.New(id.impersonate(cs.Broker.Config), client.Options{Scheme: cs.Broker.Records.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	err = brokerA.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "over-quota"}}, client.DryRunAll)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") {
		t.Errorf("cluster-a's identity creates a MemberLease over its quota of %s: want Forbidden (exceeded quota), got %v", limit.String(), err)
	}
}

// memberLeaseQuota is the quota of MemberLeases in a member's broker namespace (build/deploy/member).
const memberLeaseQuota = "count/memberleases.broker.mcs.vksfleet.dev"

// harness runs the controllers and watches their logs.
type harness struct {
	logs    *recorder
	runners []*runner
}

// runner is one controller running in the background.
type runner struct {
	name string
	*ctrlharness.Run
	reported bool // its error was reported
}

// start runs a controller for the named member, logging into the harness's recorder, until stop or cleanup.
func (h *harness) start(t *testing.T, name string, opts controller.Options) {
	log := h.logs.logger(name)
	opts.Logger = &log
	h.runners = append(h.runners, &runner{name: name, Run: ctrlharness.InProcess(opts)})
	t.Cleanup(func() { h.stop(t) })
}

// stop stops every controller and waits for it to return, reporting errors.
func (h *harness) stop(t *testing.T) {
	t.Helper()
	for _, r := range h.runners {
		r.Cancel()
	}
	for _, r := range h.runners {
		select {
		case <-r.Done():
			if r.Err() != nil && !r.reported {
				t.Errorf("%s's controller: %v", r.name, r.Err())
				r.reported = true
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s's controller did not stop within 30s", r.name)
		}
	}
}

// failFast fails the test at once when a controller was denied anything or stopped on its own.
func (h *harness) failFast(t *testing.T) {
	t.Helper()
	if bad := h.logs.forbidden(); len(bad) > 0 {
		t.Fatalf("the controllers were denied permissions:\n%s", permissionReport(bad))
	}
	for _, r := range h.runners {
		select {
		case <-r.Done():
			t.Fatalf("%s's controller stopped: %v\nlast log lines:\n%s", r.name, r.Err(), h.logs.tail(30))
		default:
		}
	}
}

// eventually polls check every 100 ms until it returns nil, failing the test with its last error and the last
// log lines after timeout, and at once when failFast would.
func (h *harness) eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	err := poll.Until(context.Background(), poll.Interval, timeout, func() error {
		h.failFast(t)
		return check()
	})
	if err != nil {
		t.Fatalf("%s: %v\nlast log lines:\n%s", what, err, h.logs.tail(30))
	}
}

// recorder keeps every log line of the controllers and client libraries.
type recorder struct {
	mu    sync.Mutex
	lines []string
}

// logger returns a logger writing into the recorder, each line prefixed with source.
func (r *recorder) logger(source string) logr.Logger {
	return funcr.New(func(prefix, args string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.lines = append(r.lines, strings.TrimSpace(source+" "+prefix+" "+args))
	}, funcr.Options{})
}

// reset forgets the lines recorded so far.
func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = nil
}

// forbidden returns the lines that report a Forbidden answer from an API server.
func (r *recorder) forbidden() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var bad []string
	for _, l := range r.lines {
		if strings.Contains(strings.ToLower(l), "forbidden") {
			bad = append(bad, l)
		}
	}
	return bad
}

// tail returns the last n lines.
func (r *recorder) tail(n int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines[max(0, len(r.lines)-n):], "\n")
}

// denial matches the API server's RBAC denial message.
var denial = regexp.MustCompile(`User \\*"([^"\\]+)\\*" cannot (\S+) resource \\*"([^"\\]+)\\*" in API group \\*"([^"\\]*)\\*"(?: in the namespace \\*"([^"\\]+)\\*"| at the cluster scope)?`)

// permissionReport names each distinct missing permission found in the lines, then lists the lines themselves.
func permissionReport(lines []string) string {
	var missing []string
	for _, l := range lines {
		for _, m := range denial.FindAllStringSubmatch(l, -1) {
			where := "cluster-wide"
			if m[5] != "" {
				where = "in namespace " + m[5]
			}
			group := m[4]
			if group == "" {
				group = "core"
			}
			p := fmt.Sprintf("  %s lacks %s on %s (group %s) %s", m[1], m[2], m[3], group, where)
			if !slices.Contains(missing, p) {
				missing = append(missing, p)
			}
		}
	}
	const maxLines = 20
	shown := lines[:min(len(lines), maxLines)]
	return "missing permissions:\n" + strings.Join(missing, "\n") + "\nlog lines (" + strconv.Itoa(len(lines)) +
		"):\n" + strings.Join(shown, "\n")
}
