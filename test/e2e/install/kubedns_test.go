package install

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/build/deploy"
	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/framework"
)

const stockImage = "registry.k8s.io/coredns/coredns:v1.12.0"

// installStockKubeDNS creates what kubeadm creates for kube-dns, with the stock image's name.
func installStockKubeDNS(ctx context.Context, t *testing.T, c *clusterset.Cluster) {
	t.Helper()
	if err := clusterset.InstallKubeadmDNS(ctx, c.Client, stockImage); err != nil {
		t.Fatal(err)
	}
}

// replaceKubeDNS runs build/deploy/replace-kube-dns/replace-kube-dns.sh against c with the kubectl `make tools`
// builds.
func replaceKubeDNS(t *testing.T, c *clusterset.Cluster, args ...string) {
	t.Helper()
	assets, err := clusterset.AssetsDir("")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", append([]string{filepath.Join(root, "build", "deploy", "replace-kube-dns", "replace-kube-dns.sh")}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.KubeconfigPath, "KUBECTL="+filepath.Join(assets, "kubectl"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("replace-kube-dns.sh %v: %v\n%s", args, err, out)
	}
	t.Logf("replace-kube-dns.sh %v: %s", args, strings.TrimSpace(string(out)))
}

func corefileAndImage(ctx context.Context, t *testing.T, c *clusterset.Cluster) (string, string) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "coredns"}, cm); err != nil {
		t.Fatal(err)
	}
	d := &appsv1.Deployment{}
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "coredns"}, d); err != nil {
		t.Fatal(err)
	}
	return cm.Data["Corefile"], d.Spec.Template.Spec.Containers[0].Image
}

// startCoreDNS runs our CoreDNS (framework.StartCorefile) with the Corefile conf until the test ends, logging as
// name; with readyAddr, the ready plugin's address, it returns once the server reports ready.
func startCoreDNS(ctx context.Context, t *testing.T, name, conf, readyAddr string) {
	t.Helper()
	bin := filepath.Join(framework.BuildTest(t), "coredns")
	p, err := framework.StartCorefile(ctx, tWriter{t}, name, filepath.Join(t.TempDir(), "Corefile"), conf, readyAddr, bin)
	if err != nil {
		t.Fatalf("%v\nCorefile:\n%s", err, conf)
	}
	t.Cleanup(p.Stop)
}

// freePorts returns n distinct loopback ports free for TCP and UDP.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports, err := clusterset.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

var (
	portRe    = regexp.MustCompile(`(?m):53 \{$`)
	readyRe   = regexp.MustCompile(`(?m)^(\s*)ready$`)
	healthRe  = regexp.MustCompile(`(?m)^(\s*)health \{$`)
	metricsRe = regexp.MustCompile(`(?m)^(\s*)prometheus :9153$`)
	pluginRe  = regexp.MustCompile(`(?m)^(\s*)((?:kubernetes|multicluster) .*\{)$`)
)

// runCorefile runs our CoreDNS binary with a cluster's Corefile, changed only as running it outside the cluster
// needs: port 53 becomes a free port, health, ready and prometheus get free loopback ports, and the kubernetes and
// multicluster blocks get c's kubeconfig in place of the in-cluster service account. It returns the DNS address.
func runCorefile(ctx context.Context, t *testing.T, c *clusterset.Cluster, corefile string) string {
	t.Helper()
	ports := freePorts(t, 4)
	local := portRe.ReplaceAllString(corefile, fmt.Sprintf(":%d {", ports[0]))
	local = readyRe.ReplaceAllString(local, fmt.Sprintf("${1}ready 127.0.0.1:%d", ports[1]))
	local = healthRe.ReplaceAllString(local, fmt.Sprintf("${1}health 127.0.0.1:%d {", ports[2]))
	local = metricsRe.ReplaceAllString(local, fmt.Sprintf("${1}prometheus 127.0.0.1:%d", ports[3]))
	local = pluginRe.ReplaceAllString(local, fmt.Sprintf("${1}${2}\n${1}    kubeconfig %s %s", c.KubeconfigPath, c.Name))
	startCoreDNS(ctx, t, "coredns", local, fmt.Sprintf("127.0.0.1:%d", ports[1]))
	// Ready can answer before the DNS listeners are up: wait for an answer.
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	poll.T(t, timeout, "CoreDNS answering on "+addr, func() error {
		_, err := dig(addr, "kubernetes.default.svc.cluster.local", "A")
		return err
	})
	return addr
}

// TestReplaceKubeDNS installs our CoreDNS in place of a stock kubeadm kube-dns in cluster-b with
// replace-kube-dns.sh, checks the objects and the answers of the resulting Corefile, and restores the original.
func TestReplaceKubeDNS(t *testing.T) {
	ctx := context.Background()
	b := cs.Member("cluster-b")
	installStockKubeDNS(ctx, t, b)
	importService(ctx, t, b, "kubedns", "backend", "10.99.0.10")

	stockDNS := runCorefile(ctx, t, b, clusterset.KubeadmCorefile)
	clusterLocal := []struct{ name, qtype string }{
		{"kubernetes.default.svc.cluster.local", "A"},
		{"_https._tcp.kubernetes.default.svc.cluster.local", "SRV"},
		{"kube-dns.kube-system.svc.cluster.local", "A"},
		{"missing.default.svc.cluster.local", "A"},
	}
	before := map[string][]string{}
	for _, q := range clusterLocal {
		got, err := dig(stockDNS, q.name, q.qtype)
		if err != nil {
			t.Fatal(err)
		}
		before[q.name] = got
	}

	// Given no image, the script installs the coredns base's.
	tag, err := deploy.ImageTag()
	if err != nil {
		t.Fatal(err)
	}
	coreDNSImage := "ghcr.io/vksfleet/coredns:" + tag
	replaceKubeDNS(t, b, "install")
	corefile, image := corefileAndImage(ctx, t, b)
	block, err := os.ReadFile(filepath.Join(root, "build", "deploy", "replace-kube-dns", "clusterset.server"))
	if err != nil {
		t.Fatal(err)
	}
	if corefile != clusterset.KubeadmCorefile+string(block) {
		t.Errorf("the Corefile is not the stock one followed by clusterset.server:\n%s", corefile)
	}
	if !strings.HasPrefix(corefile, clusterset.KubeadmCorefile) {
		t.Error("the stock Corefile's lines changed")
	}
	if !strings.Contains(corefile, "\n    multicluster clusterset.local {\n") {
		t.Error("no multicluster stanza")
	}
	if image != coreDNSImage {
		t.Errorf("image %s, want %s", image, coreDNSImage)
	}
	checkImageFirst(ctx, t, b, coreDNSImage)
	backup := &corev1.ConfigMap{}
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: install.DNSBackup}, backup); err != nil {
		t.Fatal(err)
	}
	if d := backup.Data; d["Corefile"] != clusterset.KubeadmCorefile || d["image"] != stockImage || d["replicas"] != "2" || d["replaced"] != "true" ||
		!strings.Contains(d["template"], `"image":"`+stockImage+`"`) {
		t.Errorf("the copy of the original, in the format join and the chart keep too: %v", d)
	}
	// The coredns ServiceAccount may read what the plugin reads, and write nothing of it.
	for _, ra := range []struct {
		attrs   authorizationv1.ResourceAttributes
		allowed bool
	}{
		{authorizationv1.ResourceAttributes{Group: "multicluster.x-k8s.io", Resource: "serviceimports", Verb: "watch"}, true},
		{authorizationv1.ResourceAttributes{Group: "multicluster.x-k8s.io", Resource: "serviceimports", Verb: "list"}, true},
		{authorizationv1.ResourceAttributes{Group: "discovery.k8s.io", Resource: "endpointslices", Verb: "watch"}, true},
		{authorizationv1.ResourceAttributes{Resource: "namespaces", Verb: "list"}, true},
		{authorizationv1.ResourceAttributes{Group: "about.k8s.io", Resource: "clusterproperties", Verb: "get", Name: "cluster.clusterset.k8s.io"}, true},
		{authorizationv1.ResourceAttributes{Group: "multicluster.x-k8s.io", Resource: "serviceimports", Verb: "create"}, false},
		{authorizationv1.ResourceAttributes{Group: "discovery.k8s.io", Resource: "endpointslices", Verb: "delete"}, false},
	} {
		poll.T(t, timeout, fmt.Sprintf("coredns may %s %s: %v", ra.attrs.Verb, ra.attrs.Resource, ra.allowed), func() error {
			return wantAccess(ctx, b, ra.attrs, ra.allowed)
		})
	}

	dns := runCorefile(ctx, t, b, corefile)
	for _, q := range clusterLocal {
		if err := wantAnswers(dns, q.name, q.qtype, before[q.name]...); err != nil {
			t.Errorf("cluster.local changed: %v", err)
		}
	}
	if err := wantAnswers(dns, names.ServiceDNSName("kubedns", "backend"), "A", "10.99.0.10"); err != nil {
		t.Error(err)
	}
	if err := wantAnswers(dns, names.DNSVersionName, "TXT", strconv.Quote(names.DNSSchemaVersion)); err != nil {
		t.Error(err)
	}
	t.Logf("after install: cluster.local answers as before (%v), clusterset.local answers", before)

	replaceKubeDNS(t, b, "--restore")
	corefile, image = corefileAndImage(ctx, t, b)
	if corefile != clusterset.KubeadmCorefile || image != stockImage {
		t.Errorf("after uninstall: image %s and Corefile\n%s\nwant the originals", image, corefile)
	}
	for _, name := range []string{"system:coredns-multicluster"} {
		if err := b.Client.Get(ctx, types.NamespacedName{Name: name}, &rbacv1.ClusterRole{}); !apierrors.IsNotFound(err) {
			t.Errorf("ClusterRole %s after uninstall: %v", name, err)
		}
	}
	if err := b.Client.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: install.DNSBackup}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the saved original after uninstall: %v", err)
	}
}

// checkImageFirst checks that the Corefile of c, which loads multicluster, was written after every CoreDNS pod ran
// image: its ConfigMap's resourceVersion is later than every pod's. One API server's resourceVersions are its etcd's
// revisions, which grow with every write of any object.
func checkImageFirst(ctx context.Context, t *testing.T, c *clusterset.Cluster, image string) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "coredns"}, cm); err != nil {
		t.Fatal(err)
	}
	written, err := strconv.ParseUint(cm.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := c.Client.List(ctx, &pods, client.InNamespace("kube-system"), client.MatchingLabels{"k8s-app": "kube-dns"}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) == 0 {
		t.Fatal("no CoreDNS pod")
	}
	for _, p := range pods.Items {
		rv, err := strconv.ParseUint(p.ResourceVersion, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.Containers[0].Image != image || p.Status.Phase != corev1.PodRunning || rv > written {
			t.Errorf("CoreDNS pod %s (%s, %s, resourceVersion %d) is not one that ran our image before the Corefile (resourceVersion %d) was written",
				p.Name, p.Spec.Containers[0].Image, p.Status.Phase, rv, written)
		}
	}
}

func wantAccess(ctx context.Context, c *clusterset.Cluster, attrs authorizationv1.ResourceAttributes, allowed bool) error {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "system:serviceaccount:kube-system:coredns", ResourceAttributes: &attrs,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
	}}
	res, err := c.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if res.Status.Allowed != allowed {
		return fmt.Errorf("allowed %v (%s)", res.Status.Allowed, res.Status.Reason)
	}
	return nil
}

// importService creates a ClusterSetIP ServiceImport with one ready endpoint in c, as the controller would.
func importService(ctx context.Context, t *testing.T, c *clusterset.Cluster, ns, name, vip string) *discoveryv1.EndpointSlice {
	t.Helper()
	if err := mcstest.CreateNamespace(ctx, c.Client, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	port := mcstest.Port("tcp", corev1.ProtocolTCP, 80)
	if err := c.Client.Create(ctx, mcstest.Import(ns, name, mcsv1beta1.ClusterSetIP, []string{vip}, port)); err != nil {
		t.Fatal(err)
	}
	slice := mcstest.Slice(ns, name, "cluster-a", discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{mcstest.SlicePort("tcp", corev1.ProtocolTCP, 80)}, mcstest.Endpoint("10.1.0.50", "", true))
	if err := c.Client.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}
	return slice
}

// tWriter writes a process's output to the test log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
