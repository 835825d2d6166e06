package install

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/proc"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

// kubeadmCustomised is kubeadm's Corefile as an operator changed it: a rewrite rule in its server block (alias, a
// name of the operator's, answers as kube-dns) and a stub domain of its own. Every path must keep both while it
// runs and give them back after.
var kubeadmCustomised = strings.NewReplacer(
	"    ready\n", "    ready\n    rewrite name exact "+aliasName+" kube-dns.kube-system.svc.cluster.local\n",
	// The operator also checks for a new Corefile every 2 s rather than every 30 s: each path's changes take
	// effect within seconds of reaching the replicas.
	"    reload\n", "    reload 2s\n",
).Replace(clusterset.KubeadmCorefile) + "example.internal:53 {\n    errors\n    forward . 10.9.9.9\n}\n"

// aliasName is the name the rewrite rule answers.
const aliasName = "alias.kube-system.svc.cluster.local"

// The DNS loop: a pod asks the cluster DNS for a cluster.local name and for the alias, in turn, every loopEvery.
// maxGap bounds the time without an answer: a replica that goes away takes the questions sent to it as it goes,
// never more than a second or two of them.
const (
	loopEvery = 100 * time.Millisecond
	maxGap    = 5 * time.Second
	// pathTimeout bounds a path's waits: each Corefile change reaches the replicas as the kubelet syncs the
	// mounted ConfigMap (about a minute), then their reload plugin.
	pathTimeout = 5 * time.Minute
)

// replacePath is one way our CoreDNS takes the place of a cluster's: install puts it there, remove puts the
// cluster's back.
type replacePath struct {
	name            string
	install, remove func(t *testing.T)
}

// TestDNSPathsKeepClusterDNS runs each path of ours that changes a cluster's own CoreDNS on a member with kubelets
// and kubeadm's CoreDNS (kubeadmCustomised), one after the other on the same member, each from what the one before
// restored: `kubectl mcs join --dns replace`, then `unjoin`; replace-kube-dns.sh install, then --restore; `helm
// install` in the replace mode, then `helm uninstall`. Throughout, a pod asks the kube-dns Service for a cluster.local
// name and the alias: no question may get a failed answer (NXDOMAIN, SERVFAIL, no address: a Corefile not served, or
// the rewrite lost), and no run without an answer may last maxGap. While a path's DNS runs, the Corefile is the
// cluster's own followed by our block, every replica answers clusterset.local, and the original is kept in
// install.DNSBackup; after it, the Corefile, the Deployment's pod template and replicas, and the kube-dns Service
// are the cluster's own again, and no copy is left. The paths run in this order: the script and the chart need the
// mcs-api CRDs, which join installs and unjoin leaves.
func TestDNSPathsKeepClusterDNS(t *testing.T) {
	if err := dataplane.CheckHost(); err != nil {
		t.Skipf("the DNS paths need kubelet nodes: %v", err)
	}
	helm, err := clusterset.Tool("helm")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f, err := framework.Start(ctx, framework.Options{
		ClusterSet: clusterset.Options{Members: []string{"kubeadm"}, Nodes: 1},
		Log:        proc.TestLog(t), Bare: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Errorf("stopping the fleet: %v", err)
		}
	})
	m := f.Members[0]
	customise(ctx, t, m)
	original := snapshot(ctx, t, m)

	const ns = "dnspaths"
	if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	loop, err := workload.StartLoop(ctx, m.Kube, workload.DNSLoopPod("lookups", ns, m.DNSServiceIP.String()+":53",
		[]string{"kubernetes.default.svc.cluster.local", aliasName}, loopEvery, time.Hour), timeout)
	if err != nil {
		t.Fatal(err)
	}

	script := func(args ...string) func(t *testing.T) {
		return func(t *testing.T) {
			assets, err := clusterset.AssetsDir("")
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", append([]string{filepath.Join(root, "build", "deploy", "replace-kube-dns", "replace-kube-dns.sh")}, args...)...)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+m.KubeconfigPath, "KUBECTL="+filepath.Join(assets, "kubectl"))
			run(t, cmd)
		}
	}
	const release, releaseNS = "mcs", "mcs-system"
	helmCmd := func(args ...string) func(t *testing.T) {
		return func(t *testing.T) {
			run(t, exec.Command(helm, append([]string{"--kubeconfig", m.KubeconfigPath, "--namespace", releaseNS}, args...)...))
		}
	}
	paths := []replacePath{{
		name: "join --dns replace, then unjoin",
		install: func(t *testing.T) {
			out, err := m.Join(ctx, install.DNSReplace)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"copied the Corefile and the Deployment", "every line of it kept", "replicas run the new Corefile"} {
				if !strings.Contains(out, want) {
					t.Errorf("join does not say %q:\n%s", want, out)
				}
			}
		},
		remove: func(t *testing.T) {
			out, err := f.KubectlMCS(ctx, "--context", m.Name, "unjoin", "--broker-info", f.BrokerInfoPath, "--wait", pathTimeout.String())
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "runs its original pod template again") || strings.Contains(out, "left  our CoreDNS") {
				t.Errorf("unjoin does not say it put the cluster's CoreDNS back:\n%s", out)
			}
		},
	}, {
		name:    "replace-kube-dns.sh, then --restore",
		install: script("install", f.Images.DNS),
		remove:  script("--restore"),
	}, {
		name: "helm install in the replace mode, then helm uninstall",
		install: func(t *testing.T) {
			adopt(ctx, t, m, release, releaseNS)
			helmCmd("install", release, filepath.Join(root, "build", "helm", "vksfleet-member"), "--create-namespace",
				"--set", "dns.mode=replace", "--set", "image.controller="+f.Images.Controller, "--set", "image.dns="+f.Images.DNS,
				"--timeout", pathTimeout.String())(t)
		},
		remove: helmCmd("uninstall", release, "--timeout", pathTimeout.String()),
	}}
	for _, p := range paths {
		ok := t.Run(p.name, func(t *testing.T) {
			from := time.Now().UnixMilli()
			p.install(t)
			if t.Failed() {
				return
			}
			serving(ctx, t, m)
			p.remove(t)
			if t.Failed() {
				return
			}
			restored(ctx, t, m, original)
			to := time.Now().UnixMilli()
			reqs, err := loop.Settled(ctx, from, to, timeout)
			if err != nil {
				t.Fatal(err)
			}
			checkLoop(t, m, reqs)
		})
		if !ok {
			return
		}
	}
	if err := loop.Err(); err != nil {
		t.Error(err)
	}
}

// run runs a command, failing t with its output if it fails.
func run(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	t.Logf("%s:\n%s", strings.Join(cmd.Args, " "), out)
}

// customise gives m's CoreDNS kubeadmCustomised, and waits until every replica answers the alias.
func customise(ctx context.Context, t *testing.T, m *framework.Member) {
	t.Helper()
	var cm corev1.ConfigMap
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["Corefile"] = kubeadmCustomised
	if err := m.Client.Update(ctx, &cm); err != nil {
		t.Fatal(err)
	}
	poll.T(t, pathTimeout, "every CoreDNS replica answering "+aliasName, func() error {
		return eachReplica(ctx, m, func(server string) error { return wantAnswers(server, aliasName, "A", m.DNSServiceIP.String()) })
	})
}

// eachReplica runs check against every ready replica of m's cluster DNS (kube-dns), by its pod address, and fails
// when one fails or none is ready.
func eachReplica(ctx context.Context, m *framework.Member, check func(server string) error) error {
	pods, err := m.ClusterDNSPods(ctx)
	if err != nil {
		return err
	}
	n := 0
	for _, p := range pods {
		if !workload.PodReady(&p) || p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			continue
		}
		if err := check(p.Status.PodIP + ":53"); err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("no CoreDNS replica is ready")
	}
	return nil
}

// dnsState is what a path must give back of a cluster's DNS.
type dnsState struct {
	corefile string
	template corev1.PodTemplateSpec
	replicas int32
	// kubeDNS is the kube-dns Service's UID and ClusterIP: the Service kubelets point pods at must never go.
	kubeDNS string
}

// snapshot reads m's DNS state.
func snapshot(ctx context.Context, t *testing.T, m *framework.Member) dnsState {
	t.Helper()
	var s dnsState
	var cm corev1.ConfigMap
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, &cm); err != nil {
		t.Fatal(err)
	}
	s.corefile = cm.Data["Corefile"]
	var d appsv1.Deployment
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, &d); err != nil {
		t.Fatal(err)
	}
	s.template, s.replicas = d.Spec.Template, *d.Spec.Replicas
	var svc corev1.Service
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-dns"}, &svc); err != nil {
		t.Fatal(err)
	}
	s.kubeDNS = string(svc.UID) + " " + svc.Spec.ClusterIP
	return s
}

// serving checks m while a path's DNS runs: the Corefile is the cluster's own followed by our block, the original is
// kept, and every replica answers clusterset.local and the alias.
func serving(ctx context.Context, t *testing.T, m *framework.Member) {
	t.Helper()
	zone, err := os.ReadFile(filepath.Join(root, "build", "deploy", "replace-kube-dns", "clusterset.server"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, &cm); err != nil {
		t.Fatal(err)
	}
	if got, want := cm.Data["Corefile"], kubeadmCustomised+string(zone); got != want {
		t.Errorf("the Corefile is not the cluster's own followed by our block:\n%s", got)
	}
	var backup corev1.ConfigMap
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: install.DNSBackup}, &backup); err != nil {
		t.Fatalf("no copy of the original: %v", err)
	}
	if backup.Data["Corefile"] != kubeadmCustomised || backup.Data["replaced"] != "true" {
		t.Errorf("the copy of the original: %v", backup.Data)
	}
	poll.T(t, pathTimeout, "every CoreDNS replica answering "+names.DNSVersionName, func() error {
		return eachReplica(ctx, m, func(server string) error {
			if err := wantAnswers(server, names.DNSVersionName, "TXT", strconv.Quote(names.DNSSchemaVersion)); err != nil {
				return err
			}
			return wantAnswers(server, aliasName, "A", m.DNSServiceIP.String())
		})
	})
}

// restored checks that m's DNS is as it was before a path, and that no copy is left.
func restored(ctx context.Context, t *testing.T, m *framework.Member, want dnsState) {
	t.Helper()
	got := snapshot(ctx, t, m)
	if got.corefile != want.corefile {
		t.Errorf("the Corefile is not the cluster's own again:\n%s", got.corefile)
	}
	if !apiequality.Semantic.DeepEqual(got.template, want.template) || got.replicas != want.replicas {
		t.Errorf("the Deployment's pod template and replicas are not the cluster's own again: %d replicas, %+v", got.replicas, got.template)
	}
	if got.kubeDNS != want.kubeDNS {
		t.Errorf("the kube-dns Service is %s, was %s", got.kubeDNS, want.kubeDNS)
	}
	err := m.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: install.DNSBackup}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the copy of the original after: %v", err)
	}
	poll.T(t, pathTimeout, "every CoreDNS replica answering "+aliasName, func() error {
		return eachReplica(ctx, m, func(server string) error { return wantAnswers(server, aliasName, "A", m.DNSServiceIP.String()) })
	})
}

// checkLoop checks the DNS loop's questions of a path: every answer an address (the alias's, kube-dns's), and no
// run without one as long as maxGap.
func checkLoop(t *testing.T, m *framework.Member, reqs []workload.Request) {
	t.Helper()
	if len(reqs) == 0 {
		t.Fatal("the DNS loop asked nothing")
	}
	failed := map[string]int{}
	for _, r := range reqs {
		switch {
		case !r.OK:
			failed[r.Reason]++
		case r.Cluster == aliasName && r.Pod != m.DNSServiceIP.String():
			t.Errorf("#%d: %s answered %s, not kube-dns's %s", r.Seq, aliasName, r.Pod, m.DNSServiceIP)
		}
	}
	for reason, n := range failed {
		// An answer without an address; the others are questions no replica answered (dns-timeout, dns-refused).
		if reason == "nxdomain" || reason == "servfail" || reason == "nodata" || strings.HasPrefix(reason, "rcode-") {
			t.Errorf("%d questions answered %s: the cluster's DNS served without the name", n, reason)
		}
	}
	gap := workload.LongestGap(reqs)
	if gap > maxGap {
		t.Errorf("no answer for %v, longer than %v", gap, maxGap)
	}
	t.Logf("DNS loop: %d questions, failed %v, longest gap %v", len(reqs), failed, gap)
}

// adopt gives the cluster's DNS objects the chart takes over the marks Helm requires before it takes over an object
// it did not make, as docs/install.md tells an operator to.
func adopt(ctx context.Context, t *testing.T, m *framework.Member, release, namespace string) {
	t.Helper()
	for _, o := range []struct{ apiVersion, kind, ns, name string }{
		{"v1", "ServiceAccount", "kube-system", "coredns"},
		{"rbac.authorization.k8s.io/v1", "ClusterRole", "", "system:coredns"},
		{"rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "", "system:coredns"},
		{"apps/v1", "Deployment", "kube-system", "coredns"},
		{"v1", "Service", "kube-system", "kube-dns"},
	} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(o.apiVersion)
		u.SetKind(o.kind)
		if err := m.Client.Get(ctx, client.ObjectKey{Namespace: o.ns, Name: o.name}, u); err != nil {
			t.Fatal(err)
		}
		labels, annotations := u.GetLabels(), u.GetAnnotations()
		if labels == nil {
			labels = map[string]string{}
		}
		if annotations == nil {
			annotations = map[string]string{}
		}
		labels["app.kubernetes.io/managed-by"] = "Helm"
		annotations["meta.helm.sh/release-name"], annotations["meta.helm.sh/release-namespace"] = release, namespace
		u.SetLabels(labels)
		u.SetAnnotations(annotations)
		if err := m.Client.Update(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
}
