package install

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/build/deploy"
	"vksfleet.dev/fleet/mcs/names"
)

// The DNS modes join offers: how clusterset.local reaches the member's pods.
const (
	// DNSStandalone runs our CoreDNS as mcs-system/mcs-dns, and the cluster's DNS forwards clusterset.local to it.
	DNSStandalone = "standalone"
	// DNSReplace runs our CoreDNS in place of kube-dns, keeping its Service (build/deploy/coredns).
	DNSReplace = "replace"
	// DNSClusterLocal changes no DNS: the controller reflects every import into cluster.local as <svc>-clusterset.
	DNSClusterLocal = "cluster-local"
)

// DNSModes are the modes, the default first.
var DNSModes = []string{DNSStandalone, DNSReplace, DNSClusterLocal}

// The standalone DNS, as build/deploy/dns-standalone names it.
const (
	standaloneDNS  = "mcs-dns"
	forwardBlock   = "dns-standalone/forward.server"
	forwardAddress = "MCS_DNS"
	nodeLocalBlock = "nodelocaldns/clusterset.server"
)

// ClusterLocalPatch is the entry of a kustomization's patches that turns the controller of build/deploy/controller
// to the cluster-local mode: no DNS of ours answers clusterset.local, so Ready cannot wait for one, and every import
// is reflected into cluster.local instead. The test operation makes a change of the base's arguments fail the
// render rather than replace another argument.
const ClusterLocalPatch = `  - target: {kind: Deployment, name: mcs-controller}
    patch: |-
      - op: test
        path: /spec/template/spec/containers/0/args/5
        value: --dns-address=kube-dns.kube-system.svc:53
      - op: replace
        path: /spec/template/spec/containers/0/args/5
        value: --cluster-local-services
`

// clusterDomainPatch is the entry of a kustomization's patches that sets the controller's --cluster-domain, with
// which it completes its DNS address, to the %s given; the test operation fails the render if the base's
// arguments move, rather than replace another argument.
const clusterDomainPatch = `  - target: {kind: Deployment, name: mcs-controller}
    patch: |-
      - op: test
        path: /spec/template/spec/containers/0/args/6
        value: --cluster-domain=cluster.local
      - op: replace
        path: /spec/template/spec/containers/0/args/6
        value: --cluster-domain=%s
`

// MemberBases are the folders of build/deploy a member's manifests hold in a DNS mode: the CRDs, the controller,
// the admission policy and the mode's DNS.
func MemberBases(mode string) ([]string, error) {
	bases := []string{"crds", "controller", "policy"}
	switch mode {
	case DNSStandalone:
		return append(bases, "dns-standalone"), nil
	case DNSReplace:
		return append(bases, "coredns"), nil
	case DNSClusterLocal:
		return bases, nil
	}
	return nil, fmt.Errorf("DNS mode %q: want one of %s", mode, strings.Join(DNSModes, ", "))
}

// memberOverlay is the kustomization of a member's manifests in a DNS mode (MemberBases, and ClusterLocalPatch
// in that mode), with the images given replaced, and the controller's cluster domain when one is given.
func memberOverlay(mode, controllerRef, dnsRef, clusterDomain string) (string, error) {
	bases, err := MemberBases(mode)
	if err != nil {
		return "", err
	}
	if msgs := validation.IsDNS1123Subdomain(strings.TrimSuffix(clusterDomain, ".")); clusterDomain != "" && len(msgs) > 0 {
		return "", fmt.Errorf("cluster domain %q: %s", clusterDomain, strings.Join(msgs, "; "))
	}
	var b strings.Builder
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n")
	for _, base := range bases {
		fmt.Fprintf(&b, "  - ../deploy/%s\n", base)
	}
	if mode == DNSClusterLocal || clusterDomain != "" {
		b.WriteString("patches:\n")
	}
	if mode == DNSClusterLocal {
		b.WriteString(ClusterLocalPatch)
	}
	if clusterDomain != "" {
		fmt.Fprintf(&b, clusterDomainPatch, clusterDomain)
	}
	if controllerRef != "" || dnsRef != "" {
		b.WriteString("images:\n")
	}
	for _, img := range [][2]string{{controllerImage, controllerRef}, {dnsImage, dnsRef}} {
		if img[1] == "" {
			continue
		}
		name, tag, digest := splitRef(img[1])
		fmt.Fprintf(&b, "  - name: %q\n    newName: %q\n", img[0], name)
		if tag != "" {
			fmt.Fprintf(&b, "    newTag: %q\n", tag)
		}
		if digest != "" {
			fmt.Fprintf(&b, "    digest: %q\n", digest)
		}
	}
	return b.String(), nil
}

// The cluster's own DNS, as kubeadm and the kube-dns add-on name it.
const (
	coreDNSConfigMap   = "coredns"
	kubeDNSConfigMap   = "kube-dns"
	nodeLocalConfigMap = "node-local-dns"
	corefileKey        = "Corefile"
	stubDomainsKey     = "stubDomains"
	zone               = names.DNSZone
)

// forwardToStandalone makes the cluster's DNS send clusterset.local to the standalone DNS at ip: a server block
// appended to CoreDNS's Corefile (its reload plugin, in every stock Corefile, picks it up) unless a block of the
// operator's serves the zone there already (withForward), or a stub domain of kube-dns; and, where NodeLocal
// DNSCache runs, a block that sends the zone to the cluster DNS rather than upstream. It changes nothing else, and
// says what it did.
func forwardToStandalone(ctx context.Context, c client.Client, ip string) (did string, corefileChanged bool, err error) {
	var done []string
	block, err := deploy.File(forwardBlock)
	if err != nil {
		return "", false, err
	}
	var custom corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: customConfigMap}, &custom); client.IgnoreNotFound(err) != nil {
		return "", false, err
	}
	var servedBy string
	corefileChanged, found, err := editCorefile(ctx, c, coreDNSConfigMap, func(corefile string) (out string, changed bool) {
		out, changed, servedBy = withForward(corefile, strings.ReplaceAll(string(block), forwardAddress, ip), custom.Data)
		return out, changed
	})
	switch {
	case err != nil:
		return "", false, err
	case found && servedBy != "":
		did := fmt.Sprintf("CoreDNS's Corefile gets no %s block of ours: %s serves the zone already, and CoreDNS refuses a second; left as it is, it must forward to %s", zone, servedBy, ip)
		if corefileChanged {
			did += " (the block of an earlier join removed)"
		}
		done = append(done, did)
	case found:
		done = append(done, fmt.Sprintf("CoreDNS's Corefile forwards %s to %s (%s)", zone, ip, unchanged(corefileChanged)))
	default:
		changed, err := setStubDomain(ctx, c, ip)
		if err != nil {
			return "", false, err
		}
		if changed == nil {
			return "", false, fmt.Errorf("no CoreDNS (ConfigMap kube-system/%s with a Corefile) and no kube-dns (Deployment kube-system/kube-dns) to forward %s to %s: forward it in your cluster's DNS, or join with --dns replace or cluster-local", coreDNSConfigMap, zone, ip)
		}
		done = append(done, fmt.Sprintf("kube-dns's stubDomains send %s to %s (%s)", zone, ip, unchanged(*changed)))
	}
	local, err := deploy.File(nodeLocalBlock)
	if err != nil {
		return "", false, err
	}
	changed, found, err := editCorefile(ctx, c, nodeLocalConfigMap, func(corefile string) (string, bool) {
		return withBlock(corefile, blockBegin+" (kubectl mcs join appends it; unjoin removes it)\n"+string(local)+blockEnd+"\n")
	})
	if err != nil {
		return "", false, err
	}
	if found {
		done = append(done, fmt.Sprintf("NodeLocal DNSCache sends %s to the cluster DNS (%s)", zone, unchanged(changed)))
	}
	return strings.Join(done, "; "), corefileChanged, nil
}

// stopForwarding removes what forwardToStandalone added, and says what it removed.
func stopForwarding(ctx context.Context, c client.Client) (string, error) {
	var did []string
	for _, name := range []string{coreDNSConfigMap, nodeLocalConfigMap} {
		changed, _, err := editCorefile(ctx, c, name, withoutBlock)
		if err != nil {
			return "", err
		}
		if changed {
			did = append(did, "the "+zone+" block of ConfigMap kube-system/"+name)
		}
	}
	var cm corev1.ConfigMap
	err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: kubeDNSConfigMap}, &cm)
	if client.IgnoreNotFound(err) != nil {
		return "", err
	}
	if err == nil {
		stubs := map[string][]string{}
		if s := cm.Data[stubDomainsKey]; s != "" {
			if err := json.Unmarshal([]byte(s), &stubs); err != nil {
				return "", fmt.Errorf("ConfigMap kube-system/%s: %s is not JSON: %w", kubeDNSConfigMap, stubDomainsKey, err)
			}
		}
		if _, ok := stubs[zone]; ok {
			delete(stubs, zone)
			b, _ := json.Marshal(stubs)
			cm.Data[stubDomainsKey] = string(b)
			if err := c.Update(ctx, &cm); err != nil {
				return "", err
			}
			did = append(did, "the "+zone+" stub domain of kube-dns")
		}
	}
	if len(did) == 0 {
		return "nothing forwarded " + zone, nil
	}
	return "removed " + strings.Join(did, " and "), nil
}

func unchanged(changed bool) string {
	if changed {
		return "updated"
	}
	return "already so"
}

// editCorefile applies edit to the Corefile of a ConfigMap in kube-system, and says whether that changed it and
// whether there was one.
func editCorefile(ctx context.Context, c client.Client, name string, edit func(string) (string, bool)) (changed, found bool, err error) {
	var cm corev1.ConfigMap
	err = c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: name}, &cm)
	if apierrors.IsNotFound(err) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	corefile, ok := cm.Data[corefileKey]
	if !ok {
		return false, false, nil
	}
	out, changed := edit(corefile)
	if !changed {
		return false, true, nil
	}
	cm.Data[corefileKey] = out
	// An update, not an apply: the Corefile is one string that the cluster's owner edits too, and the
	// resourceVersion makes a concurrent edit fail rather than be lost.
	if err := c.Update(ctx, &cm); err != nil {
		return false, true, fmt.Errorf("updating ConfigMap kube-system/%s: %w", name, err)
	}
	return true, true, nil
}

// setStubDomain adds clusterset.local to kube-dns's stubDomains, keeping the others; changed is nil when the
// cluster runs no kube-dns.
func setStubDomain(ctx context.Context, c client.Client, ip string) (*bool, error) {
	err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "kube-dns"}, &appsv1.Deployment{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: kubeDNSConfigMap}}
	err = c.Get(ctx, client.ObjectKeyFromObject(cm), cm)
	if client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	exists := err == nil
	stubs := map[string][]string{}
	if s := cm.Data[stubDomainsKey]; s != "" {
		if err := json.Unmarshal([]byte(s), &stubs); err != nil {
			return nil, fmt.Errorf("ConfigMap kube-system/%s: %s is not JSON: %w", kubeDNSConfigMap, stubDomainsKey, err)
		}
	}
	changed := !slices.Equal(stubs[zone], []string{ip})
	if !changed {
		return &changed, nil
	}
	stubs[zone] = []string{ip}
	b, err := json.Marshal(stubs)
	if err != nil {
		return nil, err
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[stubDomainsKey] = string(b)
	if exists {
		err = c.Update(ctx, cm)
	} else {
		err = c.Create(ctx, cm)
	}
	return &changed, err
}

// reloadMetric is the metric of the reload plugin, in every stock Corefile, that names the configuration a
// CoreDNS replica runs by its hash, from its first reload on.
const reloadMetric = "coredns_reload_version_info{"

// replica is what a CoreDNS replica's metrics say of its configuration.
type replica struct {
	// readable says whether its metrics could be read.
	readable bool
	// reload is its reloadMetric line, "" before its first reload.
	reload string
}

// dnsReplicas reads what every running replica of the cluster's CoreDNS says of its configuration, from its
// metrics through the API server's pod proxy.
func dnsReplicas(ctx context.Context, kube kubernetes.Interface, c client.Client) (map[string]replica, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(metav1.NamespaceSystem), client.MatchingLabels{"k8s-app": "kube-dns"}); err != nil {
		return nil, err
	}
	out := map[string]replica{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		metrics, err := kube.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, "9153", "metrics", nil).DoRaw(ctx)
		if err != nil {
			out[p.Name] = replica{}
			continue
		}
		r := replica{readable: true}
		for line := range strings.SplitSeq(string(metrics), "\n") {
			if strings.HasPrefix(line, reloadMetric) {
				r.reload = line
			}
		}
		out[p.Name] = r
	}
	return out, nil
}

// unreadableWait bounds how long replicasBefore and waitReloaded wait for the metrics of a replica that does not
// serve them (yet, or just then).
const unreadableWait = 15 * time.Second

// replicasBefore reads the replicas as dnsReplicas does, before the Corefile changes, reading again for up to
// unreadableWait while some replicas' metrics answer and others' do not yet: a replica that started a moment ago
// (our image's rollout, in the replace mode) may not serve them yet, and one left unread now could not be
// confirmed after the change. Where no replica's metrics answer, the cluster does not expose them: no wait.
func replicasBefore(ctx context.Context, kube kubernetes.Interface, c client.Client) (map[string]replica, error) {
	var out map[string]replica
	err := waitFor(ctx, unreadableWait, func() (err error) {
		if out, err = dnsReplicas(ctx, kube, c); err != nil {
			return err
		}
		var unread []string
		for pod, r := range out {
			if !r.readable {
				unread = append(unread, pod)
			}
		}
		if len(unread) == 0 || len(unread) == len(out) {
			return nil
		}
		return fmt.Errorf("no metrics yet on port 9153 of %s", strings.Join(unread, ", "))
	})
	if out == nil {
		return nil, err
	}
	return out, nil // the unread ones stay unconfirmed, and waitReloaded says so
}

// waitReloaded waits until every replica of the cluster's CoreDNS that ran before the Corefile changed runs
// another configuration: each rereads it on its own time (the kubelet updates the mounted ConfigMap, then the
// reload plugin checks it every 30 s). A replica whose metrics cannot be read is left unconfirmed, and said so:
// clusters expose metrics differently; one read before the change is read again for up to unreadableWait first.
func waitReloaded(ctx context.Context, kube kubernetes.Interface, c client.Client, before map[string]replica, wait time.Duration) (string, error) {
	var unconfirmed []string
	n := 0
	start := time.Now()
	err := waitFor(ctx, wait, func() error {
		now, err := dnsReplicas(ctx, kube, c)
		if err != nil {
			return err
		}
		unconfirmed, n = nil, len(now)
		for pod, r := range now {
			old, ran := before[pod]
			switch {
			case !ran:
				// Not running when the Corefile changed: it reads the new one as it starts.
			case !r.readable && old.readable && time.Since(start) < unreadableWait:
				// It answered before the change: a moment's failure to read it is not a cluster without metrics.
				return fmt.Errorf("CoreDNS pod %s: no metrics on port 9153 just now", pod)
			case !r.readable || !old.readable:
				unconfirmed = append(unconfirmed, pod)
			case r.reload == "" || r.reload == old.reload:
				return fmt.Errorf("CoreDNS pod %s has not reloaded its Corefile since the %s block was added", pod, zone)
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "no CoreDNS replica runs yet: each will start with the new Corefile", nil
	}
	if len(unconfirmed) > 0 {
		slices.Sort(unconfirmed)
		return fmt.Sprintf("%d of %d replicas confirmed; no metrics on port 9153 of %s to confirm the others by", n-len(unconfirmed), n, strings.Join(unconfirmed, ", ")), nil
	}
	return fmt.Sprintf("all %d replicas run the new Corefile", n), nil
}
