// Package join proves the README's install section on a bare local clusterset (real kubelets, kubeadm's DNS,
// nothing of ours installed): `kubectl mcs broker init`, then `kubectl mcs join` for each member, in each DNS mode
// (our DNS in place of kube-dns, our DNS standalone behind kubeadm's, no DNS of ours and cluster-local names),
// brings a service exported in one member to the pods of the others, through kube-proxy; a second join given no
// flag but the broker-info changes nothing, its DNS mode included, as its --dry-run says beforehand, and a
// --dry-run changes nothing either; status and diagnose pass on contexts named anything;
// `kubectl mcs rotate` replaces a member's broker credential and revokes the old one without dropping a request;
// `kubectl mcs unjoin` removes the member from the broker and the other member, restores its Corefile, and leaves
// of ours only what it says it leaves; `kubectl mcs join --credentials-only` then writes the member's broker
// Secret and nothing else of it.
package join

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
	"vksfleet.dev/fleet/cli"
	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/brokercred"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/proc"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

const (
	ns      = "join"
	timeout = 2 * time.Minute
	// requests is how many requests the client pod sends once the name answers; every one must succeed.
	requests = 20
)

func TestJoinAndUnjoin(t *testing.T) {
	if err := dataplane.CheckHost(); err != nil {
		t.Skipf("joining needs kubelet nodes: %v", err)
	}
	ctx := context.Background()
	log := proc.TestLog(t)
	f, err := framework.Start(ctx, framework.Options{
		ClusterSet: clusterset.Options{Members: clusterset.MemberNames(3), Nodes: 1},
		// The manifests' own lease grace: the controllers run join's arguments unchanged, which a second join
		// must leave as they are.
		Log: log, Bare: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Errorf("stopping the fleet: %v", err)
		}
	})
	a, b, c := f.Member("cluster-a"), f.Member("cluster-b"), f.Member("cluster-c")

	// cluster-a's DNS is ours in place of kube-dns; cluster-b keeps kubeadm's, which forwards clusterset.local to
	// ours; cluster-c has no DNS of ours, and finds imports in cluster.local.
	modes := map[*framework.Member]string{a: install.DNSReplace, b: install.DNSStandalone, c: install.DNSClusterLocal}
	start := time.Now()
	outs := map[*framework.Member]string{}
	var mu sync.Mutex
	errs := make(chan error, len(f.Members))
	for _, m := range f.Members {
		go func() {
			out, err := m.Join(ctx, modes[m])
			mu.Lock()
			outs[m] = out
			mu.Unlock()
			errs <- err
		}()
	}
	for range f.Members {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Join waited for kubeadm's CoreDNS replicas to run the Corefile that forwards the zone to ours.
	if want := "all 2 replicas run the new Corefile"; !strings.Contains(outs[b], want) {
		t.Errorf("cluster-b's join does not say %q:\n%s", want, outs[b])
	}
	t.Logf("%d members joined in %v", len(f.Members), time.Since(start).Round(time.Millisecond))
	// The three joined at once: each reads the records, none lost to another's join, and, all of this release,
	// none reads another's namespace in the previous layout; each is listed as this release's.
	readers := &rbacv1.ClusterRoleBinding{}
	if err := f.Broker.Client.Get(ctx, client.ObjectKey{Name: "mcs-broker-records-readers"}, readers); err != nil {
		t.Fatal(err)
	}
	entries := &corev1.ConfigMapList{}
	if err := f.Broker.Client.List(ctx, entries, client.InNamespace(broker.DirectoryNamespace), client.MatchingLabelsSelector{Selector: broker.DirectorySelector}); err != nil {
		t.Fatal(err)
	}
	listed, _ := broker.ReadDirectory(entries.Items)
	for _, reader := range f.Members {
		group := "system:serviceaccounts:" + names.BrokerNamespace(reader.ID)
		if !slices.ContainsFunc(readers.Subjects, func(s rbacv1.Subject) bool { return s.Kind == rbacv1.GroupKind && s.Name == group }) {
			t.Errorf("%s is not among the records' readers %v", reader.Name, readers.Subjects)
		}
		if !slices.ContainsFunc(listed, func(l broker.Listed) bool { return l.ClusterID == reader.ID && l.Records }) {
			t.Errorf("%s is not listed as this release's member: %+v", reader.Name, listed)
		}
		for _, owner := range f.Members {
			if reader == owner {
				continue
			}
			key := client.ObjectKey{Namespace: names.BrokerNamespace(owner.ID), Name: "mcs-reader-" + reader.ID}
			if err := f.Broker.Client.Get(ctx, key, &rbacv1.RoleBinding{}); !apierrors.IsNotFound(err) {
				t.Errorf("%s reads %s's broker namespace in the previous layout (%v): both are this release's", reader.Name, owner.Name, err)
			}
		}
	}

	// cluster-c's mode is not the default: a join given no --dns that did not take the recorded one would change it.
	for _, m := range []*framework.Member{b, c} {
		t.Run("a second join of "+m.Name+" given no flag changes nothing", func(t *testing.T) { rejoin(t, f, m, modes[m]) })
	}

	for _, m := range f.Members {
		if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := workload.Deploy(ctx, a.Client, ns, "web", a.Name, 2, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Client.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	t.Run("a pod of cluster-b reaches web by its clusterset.local name", func(t *testing.T) {
		reach(t, b, names.ServiceDNSName(ns, "web"))
	})
	t.Run("a pod of cluster-c reaches web by its cluster-local name", func(t *testing.T) {
		reach(t, c, fmt.Sprintf("web-clusterset.%s.svc.cluster.local", ns))
	})
	t.Run("status and diagnose on contexts named anything", func(t *testing.T) { statusAndDiagnose(t, f) })

	t.Run("rotating cluster-a's credential drops no request", func(t *testing.T) { rotate(t, f, a, b) })

	if !t.Run("unjoin leaves nothing of cluster-b", func(t *testing.T) { unjoin(t, f, a, b) }) {
		return
	}
	t.Run("join --credentials-only writes cluster-b's broker Secret alone", func(t *testing.T) { credentialsOnly(t, f, b) })
}

// rejoin runs join again on m, joined in mode, given no flag but the broker-info, after a dry run of it: the dry
// run says that nothing would change, and nothing of ours changes on the member or the broker, the images and DNS
// mode included, which the first join recorded. A dry run of another image shows the change and makes none.
func rejoin(t *testing.T, f *framework.Fleet, m *framework.Member, mode string) {
	ctx := context.Background()
	before, images := versions(t, f, m), deployedImages(t, m)
	record := &corev1.ConfigMap{}
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: "mcs-system", Name: "mcs-join"}, record); err != nil {
		t.Fatalf("the first join recorded no settings: %v", err)
	}
	if record.Data["dns"] != mode || record.Data["cluster-id"] != m.ID {
		t.Errorf("the first join recorded %v, want DNS mode %s and cluster id %s", record.Data, mode, m.ID)
	}
	unchanged := func(step string) {
		t.Helper()
		after := versions(t, f, m)
		for k, v := range before {
			if after[k] != v {
				t.Errorf("%s: %s: resourceVersion %s before, %s after", step, k, v, after[k])
			}
		}
		if len(before) < 10 || len(after) != len(before) {
			t.Errorf("%s: %d objects before, %d after; want the same, at least 10", step, len(before), len(after))
		}
		if now := deployedImages(t, m); !maps.Equal(now, images) {
			t.Errorf("%s: images %v before, %v after", step, images, now)
		}
		now := &corev1.ConfigMap{}
		if err := m.Client.Get(ctx, client.ObjectKeyFromObject(record), now); err != nil || now.ResourceVersion != record.ResourceVersion {
			t.Errorf("%s: the record's resourceVersion %s before, %s after (%v)", step, record.ResourceVersion, now.ResourceVersion, err)
		}
	}
	join := func(args ...string) string {
		t.Helper()
		out, err := f.KubectlMCS(ctx, append([]string{"--context", m.Name, "join", "--broker-info", f.BrokerInfoPath}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	out := join("--dry-run")
	for _, want := range []string{"dry run, member: 0 created, 0 changed,", "dry run, broker: 0 created, 0 changed,", `recorded --cluster-id="` + m.ID + `"`, `--dns="` + mode + `"`} {
		if !strings.Contains(out, want) {
			t.Errorf("join --dry-run does not say %q:\n%s", want, out)
		}
	}
	unchanged("join --dry-run")

	const mirror = "mirror.invalid/mcs-controller:v9"
	out = join("--dry-run", "--controller-image", mirror)
	for _, want := range []string{"changed    member Deployment mcs-system/mcs-controller", "changed    member ConfigMap mcs-system/mcs-join", "+        image: " + mirror} {
		if !strings.Contains(out, want) {
			t.Errorf("join --dry-run --controller-image does not say %q:\n%s", want, out)
		}
	}
	unchanged("join --dry-run --controller-image")

	join()
	unchanged("a second join given no flag")
}

// deployedImages maps the Deployments of mcs-system and kube-system of m to their containers' images.
func deployedImages(t *testing.T, m *framework.Member) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, ns := range []string{"mcs-system", "kube-system"} {
		var list appsv1.DeploymentList
		if err := m.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, d := range list.Items {
			for _, c := range d.Spec.Template.Spec.Containers {
				out[ns+"/"+d.Name+"/"+c.Name] = c.Image
			}
		}
	}
	return out
}

// credentialsOnly runs `kubectl mcs join --credentials-only` on m, unjoined: it changes none of m's objects but
// its broker Secret, in mcs-system, which it creates, and installs nothing (no Deployment, no record of
// settings, kubeadm's Corefile as it was); the Secret's token is the member's on the broker again.
func credentialsOnly(t *testing.T, f *framework.Fleet, m *framework.Member) {
	ctx := context.Background()
	member := func() map[string]string {
		out := map[string]string{}
		for k, v := range versions(t, f, m) {
			if strings.HasPrefix(k, m.Name+" ") {
				out[k] = v
			}
		}
		return out
	}
	before := member()
	out, err := f.KubectlMCS(ctx, "--context", m.Name, "join", "--broker-info", f.BrokerInfoPath, "--credentials-only")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, m.ID+" has its credentials") {
		t.Errorf("join --credentials-only does not name %s as having its credentials:\n%s", m.ID, out)
	}
	after := member()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s: resourceVersion %s before, %s after", k, v, after[k])
		}
	}
	secret := m.Name + " SecretList mcs-system/broker-kubeconfig"
	for k := range after {
		// The namespace's default ServiceAccount is the API server's.
		if _, ok := before[k]; !ok && k != secret && k != m.Name+" ServiceAccountList mcs-system/default" {
			t.Errorf("join --credentials-only wrote %s", k)
		}
	}
	if _, ok := after[secret]; !ok {
		t.Fatalf("join --credentials-only wrote no Secret mcs-system/broker-kubeconfig:\n%s", out)
	}
	var deployments appsv1.DeploymentList
	if err := m.Client.List(ctx, &deployments, client.InNamespace("mcs-system")); err != nil || len(deployments.Items) > 0 {
		t.Errorf("%d Deployments in mcs-system (%v), want none", len(deployments.Items), err)
	}
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: "mcs-system", Name: "mcs-join"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("a record of settings: %v, want none", err)
	}
	var cm corev1.ConfigMap
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["Corefile"] != clusterset.KubeadmCorefile {
		t.Errorf("the Corefile is not kubeadm's:\n%s", cm.Data["Corefile"])
	}
	secretObj := &corev1.Secret{}
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: "mcs-system", Name: "broker-kubeconfig"}, secretObj); err != nil {
		t.Fatal(err)
	}
	cred, err := brokercred.Parse(secretObj.Data["kubeconfig"])
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cred.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		t.Fatalf("the broker refuses the new token: %v", err)
	}
	if want := "system:serviceaccount:" + names.BrokerNamespace(m.ID) + ":"; !strings.HasPrefix(review.Status.UserInfo.Username, want) {
		t.Errorf("the new token is %s's, want a ServiceAccount of %s", review.Status.UserInfo.Username, names.BrokerNamespace(m.ID))
	}
}

// versions maps what join writes to resourceVersions: on the member, everything in mcs-system, our DNS in
// kube-system, the ClusterProperties and CRDs; on the broker, the member's namespace and what is in it.
func versions(t *testing.T, f *framework.Fleet, m *framework.Member) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	brokerNS := names.BrokerNamespace(m.ID)
	for _, l := range []struct {
		cluster *clusterset.Cluster
		gvk     schema.GroupVersionKind
		opts    []client.ListOption
	}{
		{m.Cluster, corev1.SchemeGroupVersion.WithKind("SecretList"), []client.ListOption{client.InNamespace("mcs-system")}},
		{m.Cluster, corev1.SchemeGroupVersion.WithKind("ServiceAccountList"), []client.ListOption{client.InNamespace("mcs-system")}},
		{m.Cluster, appsv1.SchemeGroupVersion.WithKind("DeploymentList"), []client.ListOption{client.InNamespace("mcs-system")}},
		{m.Cluster, appsv1.SchemeGroupVersion.WithKind("DeploymentList"), []client.ListOption{client.InNamespace("kube-system")}},
		{m.Cluster, corev1.SchemeGroupVersion.WithKind("ConfigMapList"), []client.ListOption{client.InNamespace("kube-system")}},
		{m.Cluster, corev1.SchemeGroupVersion.WithKind("ServiceList"), []client.ListOption{client.InNamespace("kube-system")}},
		{m.Cluster, rbacv1.SchemeGroupVersion.WithKind("ClusterRoleList"), nil},
		{m.Cluster, rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBindingList"), nil},
		{m.Cluster, aboutv1alpha1.GroupVersion.WithKind("ClusterPropertyList"), nil},
		{m.Cluster, apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinitionList"), nil},
		{f.Broker, corev1.SchemeGroupVersion.WithKind("NamespaceList"), nil},
		{f.Broker, corev1.SchemeGroupVersion.WithKind("ServiceAccountList"), []client.ListOption{client.InNamespace(brokerNS)}},
		{f.Broker, corev1.SchemeGroupVersion.WithKind("SecretList"), []client.ListOption{client.InNamespace(brokerNS)}},
		{f.Broker, rbacv1.SchemeGroupVersion.WithKind("RoleBindingList"), []client.ListOption{client.InNamespace(brokerNS)}},
		{f.Broker, rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBindingList"), nil},
	} {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(l.gvk)
		if err := l.cluster.Client.List(ctx, list, l.opts...); err != nil {
			t.Fatalf("listing %s on %s: %v", l.gvk.Kind, l.cluster.Name, err)
		}
		for _, o := range list.Items {
			out[fmt.Sprintf("%s %s %s/%s", l.cluster.Name, l.gvk.Kind, o.Namespace, o.Name)] = o.ResourceVersion
		}
	}
	return out
}

// reach sends requests from a pod of m to web by the name host through kube-proxy, once the name answers, and
// requires every one answered by cluster-a.
func reach(t *testing.T, m *framework.Member, host string) {
	ctx := context.Background()
	if err := m.Client.Create(ctx, workload.ClientPod("client", ns)); err != nil {
		t.Fatal(err)
	}
	kubectl := kubectlPath(t)
	url := fmt.Sprintf("http://%s:%d/", host, workload.ServicePort)
	exec := func(cmd string) (string, error) {
		out, stderr, code, err := workload.Kubectl(ctx, kubectl, m.KubeconfigPath, m.Name, "exec", "-n", ns, "client", "--", "sh", "-c", cmd)
		if err != nil || code != 0 {
			return out, fmt.Errorf("exit %d %v: %q %q", code, err, out, stderr)
		}
		return out, nil
	}
	// Both of web's pods are ready, and imported as such.
	poll.T(t, timeout, "web's 2 endpoints ready in "+m.Name, func() error {
		var slices discoveryv1.EndpointSliceList
		if err := m.Client.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelManagedBy: names.ManagedBy, mcsv1beta1.LabelServiceName: "web"}); err != nil {
			return err
		}
		ready := 0
		for _, s := range slices.Items {
			if s.AddressType != discoveryv1.AddressTypeIPv4 {
				continue
			}
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					ready++
				}
			}
		}
		if ready != 2 {
			return fmt.Errorf("%d ready IPv4 endpoints imported", ready)
		}
		return nil
	})
	// Each replica of the cluster's DNS reloads its Corefile on its own time (kubeadm's reload plugin checks every
	// 30 s, after the kubelet updated the mounted ConfigMap): wait until every one answers the name.
	name := host
	poll.T(t, timeout, "every DNS replica of "+m.Name+" answers "+name, func() error {
		var pods corev1.PodList
		if err := m.Client.List(ctx, &pods, client.InNamespace("kube-system"), client.MatchingLabels{"k8s-app": "kube-dns"}); err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return fmt.Errorf("no DNS pod")
		}
		for _, p := range pods.Items {
			out, err := exec(fmt.Sprintf("dig +short +time=2 +tries=1 @%s %s A", p.Status.PodIP, name))
			if err != nil {
				return err
			}
			if strings.TrimSpace(out) == "" {
				return fmt.Errorf("%s (%s) has no answer yet", p.Name, p.Status.PodIP)
			}
		}
		return nil
	})
	// The client pod and kube-proxy's rules arrive on their own time: the first request is retried.
	poll.T(t, timeout, "web answers in "+m.Name, func() error {
		_, err := exec("curl -sS -m 3 " + url)
		return err
	})
	out, err := exec(fmt.Sprintf("for i in $(seq %d); do curl -sS -m 3 %s 2>&1 || echo FAILED; done", requests, url))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	answered := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "cluster=cluster-a ") && !strings.Contains(l, "FAILED") {
			answered++
		}
	}
	t.Logf("%d requests from %s, %d answered by cluster-a", len(lines), m.Name, answered)
	if len(lines) != requests || answered != requests {
		t.Errorf("want %d requests, all answered by cluster-a; got:\n%s", requests, out)
	}
}

// unjoin takes b out and checks that nothing of b stays on the broker, that a no longer imports from it, and that
// b holds nothing of ours but what unjoin says it leaves.
func unjoin(t *testing.T, f *framework.Fleet, a, b *framework.Member) {
	ctx := context.Background()
	// b imports web before: unjoin must remove that import.
	poll.T(t, timeout, "web imported in "+b.Name, func() error {
		return b.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &mcsv1beta1.ServiceImport{})
	})
	if _, err := f.KubectlMCS(ctx, "--context", b.Name, "unjoin", "--broker-info", f.BrokerInfoPath); err != nil {
		t.Fatal(err)
	}
	gone := func(c client.Client, o client.Object) error {
		err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return fmt.Errorf("%T %s is still there", o, client.ObjectKeyFromObject(o))
		}
		return err
	}
	for what, check := range map[string]func() error{
		"cluster-b's broker namespace": func() error {
			return gone(f.Broker.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: names.BrokerNamespace(b.ID)}})
		},
		"cluster-b's entry in the member directory": func() error {
			return gone(f.Broker.Client, broker.DirectoryEntry(b.ID))
		},
		"cluster-b among the records' readers": func() error {
			readers := &rbacv1.ClusterRoleBinding{}
			if err := f.Broker.Client.Get(ctx, client.ObjectKey{Name: "mcs-broker-records-readers"}, readers); err != nil {
				return err
			}
			group := "system:serviceaccounts:" + names.BrokerNamespace(b.ID)
			if slices.ContainsFunc(readers.Subjects, func(s rbacv1.Subject) bool { return s.Name == group }) {
				return fmt.Errorf("%s is still a subject of mcs-broker-records-readers", group)
			}
			return nil
		},
		"mcs-system in cluster-b": func() error {
			return gone(b.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mcs-system"}})
		},
		"the controller's ClusterRole in cluster-b": func() error {
			return gone(b.Client, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "mcs-controller"}})
		},
		"web's import in cluster-b": func() error {
			return gone(b.Client, &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}})
		},
		"the standalone DNS in cluster-b": func() error {
			return gone(b.Client, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "mcs-dns"}})
		},
		"the forward in cluster-b's Corefile": func() error {
			var cm corev1.ConfigMap
			if err := b.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, &cm); err != nil {
				return err
			}
			if cm.Data["Corefile"] != clusterset.KubeadmCorefile {
				return fmt.Errorf("the Corefile is not kubeadm's again:\n%s", cm.Data["Corefile"])
			}
			return nil
		},
		"imported slices in cluster-b": func() error {
			var slices discoveryv1.EndpointSliceList
			if err := b.Client.List(ctx, &slices, client.MatchingLabels{discoveryv1.LabelManagedBy: names.ManagedBy}); err != nil {
				return err
			}
			if len(slices.Items) > 0 {
				return fmt.Errorf("%d imported slices left", len(slices.Items))
			}
			return nil
		},
	} {
		// unjoin waited for what it deleted: each is gone at once.
		if err := check(); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	// cluster-a still serves web; cluster-b's Lease is gone with its namespace, so nothing of it is imported.
	if err := a.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &mcsv1beta1.ServiceImport{}); err != nil {
		t.Errorf("cluster-a lost its own export's import: %v", err)
	}
}

// statusAndDiagnose runs `kubectl mcs status` and `kubectl mcs diagnose join/web --in-cluster` on a kubeconfig
// whose contexts are renamed as an operator's may be, with one more of an unrelated cluster that does not answer,
// and requires exit 0 from both: the members are found on the broker and matched to contexts by cluster id.
// cluster-c, in the cluster-local mode, serves no clusterset.local name, so diagnose leaves it out (--contexts).
func statusAndDiagnose(t *testing.T, f *framework.Fleet) {
	cfg, err := clientcmd.LoadFromFile(f.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	renamed := map[string]string{"broker": "hub-prod", "cluster-a": "eu-west-1/admin", "cluster-b": "us-east@ops", "cluster-c": "apac"}
	for from, to := range renamed {
		cfg.Contexts[to] = cfg.Contexts[from]
		delete(cfg.Contexts, from)
	}
	cfg.Clusters["laptop"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	cfg.Contexts["kind-laptop"] = &clientcmdapi.Context{Cluster: "laptop", AuthInfo: "cluster-a"}
	cfg.CurrentContext = "kind-laptop"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, args := range [][]string{
		{"--context", "hub-prod", "status"},
		// The probe's image is our controller's as the nodes hold it: built at no version, the command in process
		// defaults to the bases' tag.
		{"--context", "hub-prod", "--contexts", "eu-west-1/admin,us-east@ops", "--image", f.Images.Controller, "diagnose", ns + "/web", "--in-cluster"},
	} {
		var out bytes.Buffer
		cmd := cli.NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
		cmd.SetArgs(append([]string{"--kubeconfig", path}, args...))
		err := cmd.ExecuteContext(ctx)
		t.Logf("kubectl mcs %s:\n%s", strings.Join(args, " "), out.String())
		if code := cli.ExitCode(err); code != 0 {
			t.Errorf("kubectl mcs %s: exit %d (%v)", strings.Join(args, " "), code, err)
		}
		// From a pod, every check can be made: none may be left UNKNOWN.
		if args[len(args)-1] == "--in-cluster" && strings.Contains(out.String(), "UNKNOWN") {
			t.Errorf("kubectl mcs %s left checks UNKNOWN", strings.Join(args, " "))
		}
	}
}

// rotate runs `kubectl mcs rotate` on a while a pod of b sends requests to a's web, and checks that none failed,
// that a's controller renewed its Lease with the new credential, and that the broker refuses the old token.
func rotate(t *testing.T, f *framework.Fleet, a, b *framework.Member) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	secret := &corev1.Secret{}
	if err := a.Client.Get(ctx, client.ObjectKey{Namespace: "mcs-system", Name: "broker-kubeconfig"}, secret); err != nil {
		t.Fatal(err)
	}
	old, err := brokercred.Parse(secret.Data["kubeconfig"])
	if err != nil {
		t.Fatal(err)
	}
	loop, err := workload.StartLoop(ctx, b.Kube, workload.LoopPod("rotation-loop", ns, fmt.Sprintf("%s:%d", names.ServiceDNSName(ns, "web"), workload.EchoPort),
		50*time.Millisecond, 10*time.Minute), timeout)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().UnixMilli()
	poll.T(t, timeout, "the loop's first answers", func() error {
		if n := len(loop.Requests(start, 0)); n < 10 {
			return fmt.Errorf("%d requests so far", n)
		}
		return nil
	})
	out, err := f.KubectlMCS(ctx, "--context", a.Name, "rotate", "--broker-info", f.BrokerInfoPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl mcs rotate:\n%s", out)
	rotated := time.Now()
	lease := &coordinationv1.Lease{}
	poll.T(t, timeout, "cluster-a's Lease renewed after the rotation", func() error {
		if err := f.Broker.Records.Get(ctx, client.ObjectKey{Namespace: names.BrokerNamespace(a.ID), Name: names.LeaseName}, lease); err != nil {
			return err
		}
		if lease.Spec.RenewTime == nil || !lease.Spec.RenewTime.After(rotated) {
			return fmt.Errorf("last renewed at %v", lease.Spec.RenewTime)
		}
		return nil
	})
	if got := lease.Annotations[names.AnnotationCredential]; got == old.ID() || got == "" {
		t.Errorf("the Lease names credential %q, the old one is %q", got, old.ID())
	}
	// The API server may keep a token's authentication for a few seconds.
	poll.T(t, timeout, "the broker refuses the old token", func() error {
		c, err := client.New(old.Config, client.Options{})
		if err != nil {
			return err
		}
		err = c.Create(ctx, &authenticationv1.SelfSubjectReview{})
		if apierrors.IsUnauthorized(err) {
			return nil
		}
		return fmt.Errorf("a request with the old token gave %v, want 401 Unauthorized", err)
	})
	end := time.Now().UnixMilli()
	reqs, err := loop.Settled(context.Background(), start, end, timeout)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, r := range reqs {
		if !r.OK {
			failed++
		}
	}
	t.Logf("%d requests from cluster-b to web in cluster-a during the rotation (%d ms), %d failed", len(reqs), end-start, failed)
	if failed > 0 || len(reqs) < 20 {
		t.Errorf("%d of %d requests failed; want none failed, and at least 20", failed, len(reqs))
	}
}

func kubectlPath(t *testing.T) string {
	t.Helper()
	assets, err := clusterset.AssetsDir("")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(assets, "kubectl")
}
