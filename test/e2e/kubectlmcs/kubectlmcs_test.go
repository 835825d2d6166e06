package kubectlmcs

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	brokerv1alpha1 "vksfleet.dev/fleet/api/broker/v1alpha1"
	"vksfleet.dev/fleet/build/deploy/corefile"
	"vksfleet.dev/fleet/build/deploy/crds"
	"vksfleet.dev/fleet/cli"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/framework"
)

const ns = "demo"

// TestKubectlMCS runs on one fleet: a healthy clusterset first, then each fault diagnose is meant to find, caused
// for real, seen to fail its check, fixed, and seen to pass. The subtests run in order and each leaves the
// clusterset healthy.
func TestKubectlMCS(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, ns, clusterset.DefaultMembers...)
	serve(t, "cluster-a", ns, "web", 80, 1)
	serve(t, "cluster-b", ns, "web", 80, 2)
	for _, m := range []string{"cluster-a", "cluster-b"} {
		if r := mcs(t, "export", "web", "-n", ns, "--context", m, "--timeout", "30s"); r.code != 0 || !strings.Contains(r.stdout, "Ready=True/Exported") {
			t.Fatalf("export web in %s: exit %d, %q %q", m, r.code, r.stdout, r.stderr)
		}
	}

	t.Run("healthy", func(t *testing.T) {
		waitPassed(t)
		// Every DNS check, the service's NXDOMAIN at each exporter's cluster id included, was asked and passed.
		for _, c := range diagnose(t).Checks {
			if c.Check == cli.CheckDNS && c.Result != cli.Pass {
				t.Errorf("dns %s %s: %s (%s)", c.Cluster, c.Service, c.Result, c.Message)
			}
		}
		var status struct{ Members []cli.StatusRow }
		decode(t, mcs(t, "status", "-o", "json"), &status)
		if len(status.Members) != 3 {
			t.Fatalf("status lists %d members, want 3: %+v", len(status.Members), status.Members)
		}
		for i, row := range status.Members {
			if row.Name != clusterset.DefaultMembers[i] || !row.Reachable || !row.Alive || row.ClusterID != row.Name ||
				row.ClusterSet != "clusterset" || row.Broker != clusterset.BrokerName || row.DNS != "yes" {
				t.Errorf("status row %+v, want %s reachable, alive, on the broker, DNS serving", row, clusterset.DefaultMembers[i])
			}
		}
		var matrix struct{ Services []cli.ServiceRow }
		decode(t, mcs(t, "services", "-n", ns, "-o", "json"), &matrix)
		var cells []string
		for _, r := range matrix.Services {
			cells = append(cells, fmt.Sprintf("%s/%s@%s exported=%v imported=%v %s ips=%d %s", r.Namespace, r.Name, r.Cluster,
				r.Exported, r.Imported, r.Type, len(r.ClusterSetIPs), endpoints(r.Endpoints)))
		}
		want := []string{
			"demo/web@cluster-a exported=true imported=true ClusterSetIP ips=1 cluster-a=1/1 cluster-b=2/2",
			"demo/web@cluster-b exported=true imported=true ClusterSetIP ips=1 cluster-a=1/1 cluster-b=2/2",
			"demo/web@cluster-c exported=false imported=true ClusterSetIP ips=1 cluster-a=1/1 cluster-b=2/2",
		}
		if !slices.Equal(cells, want) {
			t.Errorf("services matrix:\n%s\nwant:\n%s", strings.Join(cells, "\n"), strings.Join(want, "\n"))
		}
		r := mcs(t, "services", "-o", "wide")
		for _, col := range []string{"NAMESPACE", "CLUSTERSET-IP", "ENDPOINTS", "LOCALITY", "PORTS", "http:80/TCP"} {
			if !strings.Contains(r.stdout, col) {
				t.Errorf("services -o wide lacks %q:\n%s", col, r.stdout)
			}
		}
		// kubectl itself finds the plugin on PATH.
		assets, err := clusterset.AssetsDir("")
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(filepath.Join(assets, "kubectl"), "mcs", "status", "--kubeconfig", kubeconfig)
		cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "CLUSTER-ID") || !strings.Contains(string(out), "cluster-c") {
			t.Errorf("kubectl mcs status: %v\n%s", err, out)
		}
		for _, args := range [][]string{{"status"}, {"services"}, {"diagnose", "web"}} {
			r := mcs(t, args...)
			t.Logf("kubectl mcs %s (exit %d):\n%s", strings.Join(args, " "), r.code, r.stdout)
		}
	})

	t.Run("contexts matched by cluster id", func(t *testing.T) {
		// Contexts named as clouds name them, and one that reaches nothing: the members are found by cluster id.
		renamed := map[string]string{
			clusterset.BrokerName: "hub", "cluster-a": "prod-east-1", "cluster-b": "gke_shop_europe-west1_b", "cluster-c": "admin@cluster-c.example",
		}
		path := rewriteKubeconfig(t, renamed, "unrelated", "https://127.0.0.1:1")
		// Its current context is a member's, and no context is named broker: the broker must be named.
		if r := mcs(t, "--kubeconfig", path, "status"); r.code != cli.ExitCouldNotRun || !strings.Contains(r.stderr, "is not the broker (name it with --context)") {
			t.Errorf("status without a broker context: exit %d, %q", r.code, r.stderr)
		}
		var status struct{ Members []cli.StatusRow }
		decode(t, mcs(t, "--kubeconfig", path, "--context", "hub", "status", "-o", "json"), &status)
		var got []string
		for _, row := range status.Members {
			got = append(got, row.Name+"="+row.ClusterID)
			if !row.Reachable || !row.Alive || row.Broker != "hub" || row.DNS != "yes" {
				t.Errorf("status row %+v, want reachable, alive, on hub, DNS serving", row)
			}
		}
		want := []string{"admin@cluster-c.example=cluster-c", "gke_shop_europe-west1_b=cluster-b", "prod-east-1=cluster-a"}
		if !slices.Equal(got, want) {
			t.Errorf("status members %v, want %v", got, want)
		}
		d := diagnose(t, "--kubeconfig", path, "--broker-context", "hub", ns+"/web")
		if !d.Passed || d.code != cli.ExitHealthy || len(d.find(cli.CheckReachable, "unrelated", "")) > 0 {
			t.Errorf("diagnose on renamed contexts: exit %d: %v", d.code, failures(d))
		}
		if r := mcs(t, "--kubeconfig", path, "--context", "hub", "-v", "status"); r.code != 0 || !strings.Contains(r.stderr, "context unrelated ignored: its cluster id could not be read") {
			t.Errorf("status -v: exit %d, stderr %q", r.code, r.stderr)
		}
		// Named in --contexts, the unreachable context is a member that fails; the members not named are left out.
		d = diagnose(t, "--kubeconfig", path, "--context", "hub", "--contexts", "prod-east-1,unrelated")
		if err := d.expect(cli.CheckReachable, "unrelated", "", cli.Fail); err != nil || d.code != cli.ExitUnhealthy {
			t.Errorf("exit %d: %v", d.code, err)
		}
		if len(d.find(cli.CheckReachable, "gke_shop_europe-west1_b", "")) > 0 {
			t.Errorf("--contexts prod-east-1,unrelated diagnosed a member not named: %+v", d.Checks)
		}
		// A member no context reaches is reported, and only UNKNOWN: diagnose still exits 0, and says so.
		delete(renamed, "cluster-c")
		without := rewriteKubeconfig(t, renamed, "unrelated", "https://127.0.0.1:1")
		r := mcs(t, "--kubeconfig", without, "--context", "hub", "status")
		if r.code != 0 || !hasLine(r.stdout, "No context", "cluster-c") {
			t.Errorf("status without cluster-c's context: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		d = diagnose(t, "--kubeconfig", without, "--context", "hub")
		if err := d.expect(cli.CheckReachable, "cluster-c", "", cli.Unknown); err != nil || d.code != cli.ExitHealthy {
			t.Errorf("exit %d: %v", d.code, err)
		}
		r = mcs(t, "--kubeconfig", without, "--context", "hub", "diagnose")
		if r.code != 0 || !strings.Contains(r.stdout, "No check failed; ") {
			t.Errorf("diagnose's summary with an UNKNOWN check: exit %d\n%s", r.code, r.stdout)
		}
	})

	t.Run("--as", func(t *testing.T) {
		// A user with no rights cannot read the broker, which alone says who the members are: the command cannot
		// run (exit 2), and says whose rights are lacking.
		r := mcs(t, "status", "--as", "nobody")
		if r.code != cli.ExitCouldNotRun || !strings.Contains(r.stderr, "forbidden") || !strings.Contains(r.stderr, `"nobody"`) {
			t.Errorf("status --as nobody: exit %d, %q", r.code, r.stderr)
		}
		t.Logf("status --as nobody: exit %d: %s", r.code, r.stderr)
		// A user who may read the broker and no member: every context is read as that user too, so none reaches
		// a member.
		reader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "kubectl-mcs-broker-reader"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{mcsv1beta1.GroupName}, Resources: []string{"serviceimports"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{brokerv1alpha1.GroupName}, Resources: brokerv1alpha1.Resources, Verbs: []string{"get", "list"}},
		}}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: reader.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "broker-reader"}}}
		for _, obj := range []client.Object{reader, binding} {
			if err := fl.Broker.Client.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
		var status struct{ Members []cli.StatusRow }
		poll.T(t, propagation, "the broker-reader's rights apply", func() error {
			r := mcs(t, "status", "--as", "broker-reader", "-o", "json")
			if r.code != 0 {
				return fmt.Errorf("exit %d: %s", r.code, r.stderr)
			}
			return json.Unmarshal([]byte(r.stdout), &status)
		})
		if len(status.Members) != 3 {
			t.Fatalf("status --as broker-reader: %+v, want the 3 members", status.Members)
		}
		for _, row := range status.Members {
			if row.Name != "" || row.ClusterID == "" || !row.Alive {
				t.Errorf("status --as broker-reader: %+v, want a live member no context reaches", row)
			}
		}
		if r := mcs(t, "status", "--as", "broker-reader", "-v"); !strings.Contains(r.stderr, "forbidden") {
			t.Errorf("status --as broker-reader -v does not say the contexts refused: %q", r.stderr)
		}
	})

	t.Run("--in-cluster", func(t *testing.T) {
		// The local clusterset marks pods running but has no kubelet to exec into: each member's probe pod is
		// created, the exec fails, the DNS check is UNKNOWN (diagnose passes) and the pod is deleted.
		d := diagnose(t, "--in-cluster", "--image", "nicolaka/netshoot", ns+"/web")
		for _, m := range clusterset.DefaultMembers {
			c := d.find(cli.CheckDNS, m, "")
			if len(c) != 1 || c[0].Result != cli.Unknown || !strings.Contains(c[0].Message, "running dig in pod default/kubectl-mcs-dns-") ||
				!strings.Contains(c[0].Hint, "--image") {
				t.Errorf("dns check of %s with --in-cluster and no kubelet: %+v", m, c)
			}
		}
		if d.code != cli.ExitHealthy {
			t.Errorf("diagnose --in-cluster: exit %d: %v", d.code, failures(d))
		}
		t.Logf("diagnose --in-cluster without a kubelet: %+v", d.find(cli.CheckDNS, "cluster-a", ""))
		for _, m := range clusterset.DefaultMembers {
			poll.T(t, propagation, "the probe pods are gone from "+m, func() error {
				pods := &corev1.PodList{}
				if err := fl.Member(m).Client.List(ctx, pods, client.InNamespace(metav1.NamespaceDefault),
					client.MatchingLabels{"app.kubernetes.io/name": "kubectl-mcs"}); err != nil {
					return err
				}
				if len(pods.Items) > 0 {
					return fmt.Errorf("%d probe pods left, the first %s", len(pods.Items), pods.Items[0].Name)
				}
				return nil
			})
		}
	})

	t.Run("export-valid", func(t *testing.T) {
		r := mcs(t, "export", "ghost", "-n", ns, "--context", "cluster-a", "--timeout", "30s")
		if r.code == 0 || !strings.Contains(r.stderr, string(mcsv1beta1.ServiceExportReasonNoService)) {
			t.Errorf("export of a missing Service: exit %d, %q %q", r.code, r.stdout, r.stderr)
		}
		waitCheck(t, cli.CheckExportValid, "cluster-a", ns+"/ghost", cli.Fail, ns+"/ghost")
		serve(t, "cluster-a", ns, "ghost", 80, 1)
		waitCheck(t, cli.CheckExportValid, "cluster-a", ns+"/ghost", cli.Pass, ns+"/ghost")
		if r := mcs(t, "unexport", "ghost", "-n", ns, "--context", "cluster-a"); r.code != 0 {
			t.Fatalf("unexport: exit %d %q", r.code, r.stderr)
		}
		err := fl.Member("cluster-a").Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ghost"}, &mcsv1beta1.ServiceExport{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("after unexport, the ServiceExport: %v", err)
		}
	})

	t.Run("export-conflict", func(t *testing.T) {
		serve(t, "cluster-a", ns, "api", 80, 1)
		serve(t, "cluster-b", ns, "api", 8080, 1)
		for _, m := range []string{"cluster-a", "cluster-b"} {
			if r := mcs(t, "export", "api", "-n", ns, "--context", m); r.code != 0 {
				t.Fatalf("export api in %s: %q", m, r.stderr)
			}
		}
		for _, m := range []string{"cluster-a", "cluster-b"} {
			c := waitCheck(t, cli.CheckExportConflict, m, ns+"/api", cli.Fail, ns+"/api")
			if !strings.Contains(c.Message, string(mcsv1beta1.ServiceExportReasonPortConflict)) {
				t.Errorf("conflict in %s: %q, want PortConflict", m, c.Message)
			}
		}
		svc := &corev1.Service{}
		b := fl.Member("cluster-b").Client
		if err := b.Get(ctx, client.ObjectKey{Namespace: ns, Name: "api"}, svc); err != nil {
			t.Fatal(err)
		}
		svc.Spec.Ports[0].Port = 80
		if err := b.Update(ctx, svc); err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"cluster-a", "cluster-b"} {
			waitCheck(t, cli.CheckExportConflict, m, ns+"/api", cli.Pass, ns+"/api")
		}
	})

	t.Run("corefile and dns", func(t *testing.T) {
		a := fl.Member("cluster-a")
		port, err := clusterset.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		// A CoreDNS for cluster-a that does not serve clusterset.local, reloading its Corefile as a cluster's
		// CoreDNS reloads its ConfigMap.
		s := corefile.Server{
			Port: port, Bind: []string{"127.0.0.1"}, Stock: corefile.Stock{Reload: true}, ReloadEvery: 2 * time.Second,
			Kubeconfig: a.KubeconfigPath, Context: a.Name,
		}
		without := s.Render()
		path := filepath.Join(t.TempDir(), "Corefile")
		p, err := framework.StartCoreDNS(ctx, io.Discard, "coredns-for-cluster-a", filepath.Join(binDir, "coredns"), path, s)
		if err != nil {
			t.Fatal(err)
		}
		s.Multicluster = &corefile.Multicluster{}
		with := s.Render()
		defer p.Stop()
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "coredns"},
			Data:       map[string]string{"Corefile": without},
		}
		if err := a.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		dnsFlag := fmt.Sprintf("--dns=cluster-a=127.0.0.1:%d", port)
		waitCheck(t, cli.CheckCorefile, "cluster-a", "", cli.Fail, dnsFlag, ns+"/web")
		waitCheck(t, cli.CheckDNS, "cluster-a", "", cli.Fail, dnsFlag, ns+"/web")
		waitCheck(t, cli.CheckDNS, "cluster-a", ns+"/web", cli.Fail, dnsFlag, ns+"/web")

		cm.Data["Corefile"] = with
		if err := a.Client.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(with), 0o644); err != nil {
			t.Fatal(err)
		}
		waitCheck(t, cli.CheckCorefile, "cluster-a", "", cli.Pass, dnsFlag, ns+"/web")
		waitCheck(t, cli.CheckDNS, "cluster-a", "", cli.Pass, dnsFlag, ns+"/web")
		waitCheck(t, cli.CheckDNS, "cluster-a", ns+"/web", cli.Pass, dnsFlag, ns+"/web")
	})

	t.Run("lease", func(t *testing.T) {
		b := fl.Member("cluster-b")
		b.StopController()
		waitCheck(t, cli.CheckLease, "cluster-b", "", cli.Fail)
		var status struct{ Members []cli.StatusRow }
		decode(t, mcs(t, "status", "-o", "json"), &status)
		if row := status.Members[1]; row.Name != "cluster-b" || row.Alive {
			t.Errorf("status of a member whose controller stopped: %+v, want not alive", row)
		}
		if err := b.StartController(); err != nil {
			t.Fatal(err)
		}
		waitCheck(t, cli.CheckLease, "cluster-b", "", cli.Pass)
	})

	t.Run("import-present and import-consistent", func(t *testing.T) {
		const late = "late"
		createNamespace(t, late, "cluster-a", "cluster-b")
		serve(t, "cluster-a", late, "app", 80, 1)
		if r := mcs(t, "export", "app", "-n", late, "--context", "cluster-a"); r.code != 0 {
			t.Fatalf("export: %q", r.stderr)
		}
		// cluster-c has no namespace late: its DNS answers the name NXDOMAIN, as SPEC section 4 requires.
		if dns := waitCheck(t, cli.CheckDNS, "cluster-c", late+"/app", cli.Pass); !strings.Contains(dns.Message, "NXDOMAIN") {
			t.Errorf("dns of late/app in cluster-c: %q", dns.Message)
		}
		c := fl.Member("cluster-c")
		c.StopController()
		// The namespace appears while cluster-c's controller is down, and cluster-b's endpoints change.
		createNamespace(t, late, "cluster-c")
		addPod(t, "cluster-b", ns, "web")
		waitCheck(t, cli.CheckImportPresent, "cluster-c", late+"/app", cli.Fail)
		waitCheck(t, cli.CheckImportConsistent, "cluster-c", ns+"/web", cli.Fail)
		for _, m := range []string{"cluster-a", "cluster-b"} {
			waitCheck(t, cli.CheckImportConsistent, m, ns+"/web", cli.Pass)
		}
		if err := c.StartController(); err != nil {
			t.Fatal(err)
		}
		waitCheck(t, cli.CheckImportPresent, "cluster-c", late+"/app", cli.Pass)
		waitCheck(t, cli.CheckImportConsistent, "cluster-c", ns+"/web", cli.Pass)
	})

	t.Run("stale-slices", func(t *testing.T) {
		a, b := fl.Member("cluster-a"), fl.Member("cluster-b")
		a.StopController()
		b.StopController()
		// cluster-b leaves: its broker records, slices and Lease go, while cluster-a's controller is down.
		brokerNS := client.InNamespace(names.BrokerNamespace(b.ID))
		for _, bc := range []client.Client{fl.Broker.Records, fl.Broker.Client} {
			for _, obj := range []client.Object{&mcsv1beta1.ServiceImport{}, &discoveryv1.EndpointSlice{}, &coordinationv1.Lease{}} {
				if err := bc.DeleteAllOf(ctx, obj, brokerNS); err != nil {
					t.Fatal(err)
				}
			}
		}
		check := waitCheck(t, cli.CheckStaleSlices, "cluster-a", "", cli.Fail)
		if !strings.Contains(check.Message, "from cluster-b, which left the clusterset") {
			t.Errorf("stale slices: %q", check.Message)
		}
		// cluster-c's controller runs and withdraws cluster-b's slices itself.
		waitCheck(t, cli.CheckStaleSlices, "cluster-c", "", cli.Pass)
		if err := a.StartController(); err != nil {
			t.Fatal(err)
		}
		waitCheck(t, cli.CheckStaleSlices, "cluster-a", "", cli.Pass)
		if err := b.StartController(); err != nil {
			t.Fatal(err)
		}
		waitPassed(t)
	})

	t.Run("crds", func(t *testing.T) {
		c := fl.Member("cluster-c").Client
		parsed, err := crds.Parse(crds.ServiceExport)
		if err != nil {
			t.Fatal(err)
		}
		crd := parsed[0]
		if err := c.Delete(ctx, crd.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		check := waitCheck(t, cli.CheckCRDs, "cluster-c", "", cli.Fail)
		if !strings.Contains(check.Message, "serviceexports.multicluster.x-k8s.io") {
			t.Errorf("crds: %q", check.Message)
		}
		poll.T(t, propagation, "recreating the CRD", func() error {
			return c.Create(ctx, crd.DeepCopy())
		})
		waitCheck(t, cli.CheckCRDs, "cluster-c", "", cli.Pass)
		waitPassed(t)
	})
}

// waitPassed polls until diagnose passes as a whole.
func waitPassed(t *testing.T) {
	t.Helper()
	poll.T(t, propagation, "diagnose passes", func() error {
		if d := diagnose(t); !d.Passed {
			return failures(d)
		}
		return nil
	})
}

// waitCheck polls `diagnose args` until the check of cluster (and service) has the result, and returns it.
func waitCheck(t *testing.T, check, cluster, service string, want cli.Result, args ...string) cli.Check {
	t.Helper()
	var found cli.Check
	poll.T(t, propagation, fmt.Sprintf("%s of %s %s is %s", check, cluster, service, want), func() error {
		d := diagnose(t, args...)
		if err := d.expect(check, cluster, service, want); err != nil {
			return err
		}
		if want == cli.Fail && (d.code == 0 || d.find(check, cluster, service)[0].Hint == "") {
			return fmt.Errorf("a failed check with exit code %d and hint %q", d.code, d.find(check, cluster, service)[0].Hint)
		}
		found = d.find(check, cluster, service)[0]
		return nil
	})
	return found
}

func decode(t *testing.T, r result, into any) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), into); err != nil {
		t.Fatalf("decoding %q: %v", r.stdout, err)
	}
}

func endpoints(es []cli.SourceEndpoints) string {
	var parts []string
	for _, e := range es {
		parts = append(parts, fmt.Sprintf("%s=%d/%d", e.Cluster, e.Ready, e.Serving))
	}
	return strings.Join(parts, " ")
}

// hasLine reports whether a line of out holds every word.
func hasLine(out string, words ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		if !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(line, w) }) {
			return true
		}
	}
	return false
}

// rewriteKubeconfig writes a copy of the fleet's kubeconfig whose contexts are renamed (old name to new; contexts
// not in renamed are dropped) plus one more context reaching server, and returns its path. The current context is
// cluster-a's new name.
func rewriteKubeconfig(t *testing.T, renamed map[string]string, extra, server string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	contexts := map[string]*clientcmdapi.Context{}
	for old, name := range renamed {
		contexts[name] = cfg.Contexts[old]
	}
	cluster := cfg.Clusters["cluster-a"].DeepCopy()
	cluster.Server = server
	cfg.Clusters[extra] = cluster
	ctx := cfg.Contexts["cluster-a"].DeepCopy()
	ctx.Cluster = extra
	contexts[extra] = ctx
	cfg.Contexts, cfg.CurrentContext = contexts, renamed["cluster-a"]
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// createNamespace creates the namespace in each of the named members.
func createNamespace(t *testing.T, name string, members ...string) {
	t.Helper()
	for _, m := range members {
		clusterset.CreateNamespace(t, name, fl.Member(m).Cluster)
	}
}

// serve creates, in member, a Service on port and that many ready pods behind it.
func serve(t *testing.T, member, namespace, name string, port int32, pods int) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: port}}},
	}
	if err := fl.Member(member).Client.Create(context.Background(), svc); err != nil {
		t.Fatalf("creating Service %s/%s in %s: %v", namespace, name, member, err)
	}
	for range pods {
		addPod(t, member, namespace, name)
	}
}

// addPod adds a pod to the service's selector; the local clusterset makes it ready.
func addPod(t *testing.T, member, namespace, name string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: name + "-", Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}
	if err := fl.Member(member).Client.Create(context.Background(), pod); err != nil {
		t.Fatalf("creating a pod of %s/%s in %s: %v", namespace, name, member, err)
	}
}
