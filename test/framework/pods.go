package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/cli"
	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/controller"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/proc"
	"vksfleet.dev/fleet/test/env/workload"
)

// With nodes, a fleet installs our product as the README's install section does: `kubectl mcs broker init` on
// the broker, then `kubectl mcs join` on each member, which apply build/deploy's manifests unmodified: on the
// broker its roles and one identity per member; on each member the CRDs, the admission policy, the mcs-controller
// Deployment (2 replicas, leader election) and our CoreDNS, with the member's broker kubeconfig in the Secret the
// controller reads. Our CoreDNS runs in join's default DNS mode, standalone (mcs-system/mcs-dns, to which the
// cluster's own CoreDNS, kubeadm's, forwards clusterset.local), unless Options.DNS asks for replace (our CoreDNS
// taking over kube-dns). The kubelets run them from the images `make images` saved.
// Tuning a test asks for (--lease-grace, a test's own flags) is a patch of the Deployment's arguments, as an
// operator would make it.

// Where the installed parts live, as build/deploy names them.
const (
	controllerNamespace  = "mcs-system"
	controllerDeployment = "mcs-controller"
	// The cluster's DNS, behind the kube-dns Service: ours in replace mode, kubeadm's CoreDNS otherwise.
	clusterDNSNamespace  = metav1.NamespaceSystem
	clusterDNSDeployment = "coredns"
	// Our CoreDNS in standalone mode.
	standaloneDNSDeployment = "mcs-dns"
	// installTimeout bounds each wait of the install: pods start in seconds once their images are loaded.
	installTimeout = 3 * time.Minute
	// replicas is what the manifests give both Deployments.
	replicas = 2
)

// BrokerSecret is the member Secret whose key "kubeconfig" the deployed controller reads the broker kubeconfig
// from (--broker-secret).
var BrokerSecret = types.NamespacedName{Namespace: controllerNamespace, Name: "broker-kubeconfig"}

// productPods selects the pods of one part of our product on a member, by the labels build/deploy gives them.
type productPods struct {
	namespace string
	labels    client.MatchingLabels
}

// The product's pods: the controller's, and our CoreDNS's in each DNS mode; and the cluster's DNS pods.
var (
	controllerPods    = productPods{controllerNamespace, client.MatchingLabels{"app.kubernetes.io/name": controllerDeployment}}
	standaloneDNSPods = productPods{controllerNamespace, client.MatchingLabels{"app.kubernetes.io/name": standaloneDNSDeployment}}
	clusterDNSPods    = productPods{clusterDNSNamespace, client.MatchingLabels{"k8s-app": "kube-dns"}}
)

// replaceDNS says whether the fleet's joins install our CoreDNS in place of kube-dns.
func (f *Fleet) replaceDNS() bool { return f.opts.DNS == install.DNSReplace }

// dnsPods selects the pods of the Deployment DNSDeployment names: the same rule, dnsDeploymentOf's.
func (f *Fleet) dnsPods() productPods {
	if f.opts.DNS == install.DNSStandalone {
		return standaloneDNSPods
	}
	return clusterDNSPods
}

// DNSMode is the DNS mode of the fleet's joins (Options.DNS).
func (f *Fleet) DNSMode() string { return f.opts.DNS }

// DNSModeText says, for a results file, how the fleet's DNS runs.
func (f *Fleet) DNSModeText() string {
	if f.replaceDNS() {
		return "DNS mode replace: our CoreDNS (2 replicas) in place of kube-dns"
	}
	return "DNS mode standalone, join's default: kubeadm's CoreDNS (2 replicas) behind kube-dns forwards clusterset.local " +
		"to ours (mcs-system/mcs-dns, 2 replicas)"
}

// DNSDeployment is our CoreDNS's Deployment in the fleet's DNS mode.
func (f *Fleet) DNSDeployment() types.NamespacedName { return dnsDeploymentOf(f.opts.DNS) }

// dnsDeploymentOf is the Deployment that serves clusterset.local after a join in the DNS mode: our CoreDNS, as
// kube-system/coredns in replace mode and mcs-system/mcs-dns in standalone mode; in cluster-local mode, which runs
// no DNS of ours, the cluster's own.
func dnsDeploymentOf(mode string) types.NamespacedName {
	if mode == install.DNSStandalone {
		return types.NamespacedName{Namespace: controllerNamespace, Name: standaloneDNSDeployment}
	}
	return types.NamespacedName{Namespace: clusterDNSNamespace, Name: clusterDNSDeployment}
}

// ControllerDeployment is the controller's Deployment.
var ControllerDeployment = types.NamespacedName{Namespace: controllerNamespace, Name: controllerDeployment}

// WatchDNSPods watches the member's pods of our CoreDNS (DNSPods).
func (m *Member) WatchDNSPods(ctx context.Context) (watch.Interface, error) {
	sel := m.fleet.dnsPods()
	return m.Kube.CoreV1().Pods(sel.namespace).Watch(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set(sel.labels)).String()})
}

// ControllerPods lists the member's mcs-controller pods (the manifests run two replicas, one elected).
func (m *Member) ControllerPods(ctx context.Context) ([]corev1.Pod, error) {
	return m.pods(ctx, controllerPods)
}

// ClusterDNSPods lists the member's pods of the cluster's DNS, behind its kube-dns Service: ours in replace mode,
// kubeadm's CoreDNS otherwise.
func (m *Member) ClusterDNSPods(ctx context.Context) ([]corev1.Pod, error) {
	return m.pods(ctx, clusterDNSPods)
}

// DNSPods lists the member's pods of our CoreDNS: behind its kube-dns Service in replace mode, mcs-system/mcs-dns
// in standalone mode.
func (m *Member) DNSPods(ctx context.Context) ([]corev1.Pod, error) {
	return m.pods(ctx, m.fleet.dnsPods())
}

// ControllerLeaderLease is the Lease of the member's controller replicas' leader election.
var ControllerLeaderLease = types.NamespacedName{Namespace: controllerNamespace, Name: controller.LeaderElectionID}

// LeaderPod is the member's controller pod that holds the leader Lease: its holder identity is the pod's name,
// "_", and a UUID of the process.
func (m *Member) LeaderPod(ctx context.Context) (corev1.Pod, error) {
	var l coordinationv1.Lease
	if err := m.Client.Get(ctx, ControllerLeaderLease, &l); err != nil {
		return corev1.Pod{}, err
	}
	name, _, _ := strings.Cut(ptr.Deref(l.Spec.HolderIdentity, ""), "_")
	pods, err := m.ControllerPods(ctx)
	if err != nil {
		return corev1.Pod{}, err
	}
	for _, p := range pods {
		if p.Name == name {
			return p, nil
		}
	}
	return corev1.Pod{}, fmt.Errorf("fleet: %s: the leader %q is none of the controller pods", m.Name, name)
}

// pods lists the member's pods of a part of the product.
func (m *Member) pods(ctx context.Context, sel productPods) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := m.Client.List(ctx, &pods, client.InNamespace(sel.namespace), sel.labels); err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// install puts the product on the broker and every member as the README's install section does, with the
// kubectl-mcs command tree run in process: `kubectl mcs broker init` on the broker, then `kubectl mcs join` for
// every member at once; it then waits until every member's controller and DNS are available.
func (f *Fleet) install(ctx context.Context) error {
	if err := f.brokerInit(ctx); err != nil {
		return err
	}
	if f.opts.Bare || !f.replaceDNS() {
		// What kubeadm leaves: its CoreDNS running behind the kube-dns Service, which join's standalone mode
		// forwards from.
		for _, m := range f.Members {
			// Our image, which every node holds, is stock CoreDNS with one plugin more, which kubeadm's Corefile
			// does not load.
			if err := clusterset.InstallKubeadmDNS(ctx, m.Client, f.Images.DNS); err != nil {
				return fmt.Errorf("fleet: %s: %w", m.Name, err)
			}
		}
		for _, m := range f.Members {
			if err := m.WaitAvailable(ctx, clusterDNSNamespace, clusterDNSDeployment, replicas, installTimeout); err != nil {
				return err
			}
		}
	}
	if f.opts.Bare {
		return nil
	}
	errs := make([]error, len(f.Members))
	var wg sync.WaitGroup
	for i, m := range f.Members {
		wg.Go(func() {
			if _, errs[i] = m.JoinWith(ctx, f.opts.KubectlMCS, f.opts.DNS, f.opts.JoinArgs...); errs[i] != nil {
				errs[i] = fmt.Errorf("fleet: installing on %s: %w", m.Name, errs[i])
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// brokerInit writes the fleet's kubeconfig (KubeconfigPath) and runs `kubectl mcs broker init` on the broker,
// which writes BrokerInfoPath.
func (f *Fleet) brokerInit(ctx context.Context) error {
	// As cmd/kubectl-mcs does: its errors come back to us.
	ctrl.SetLogger(logr.Discard())
	kubeconfig, err := f.Kubeconfig()
	if err != nil {
		return err
	}
	f.KubeconfigPath = filepath.Join(f.dir, "kubeconfig")
	if err := os.WriteFile(f.KubeconfigPath, kubeconfig, 0o600); err != nil {
		return err
	}
	f.BrokerInfoPath = filepath.Join(f.dir, "broker-info.yaml")
	return f.BrokerInit(ctx, f.opts.KubectlMCS)
}

// BrokerInit runs `kubectl mcs broker init` on the broker again with the kubectl-mcs binary bin ("": this tree's,
// in process), as an operator does before upgrading members to bin's release: it rewrites BrokerInfoPath.
func (f *Fleet) BrokerInit(ctx context.Context, bin string) error {
	_, err := f.kubectlMCSWith(ctx, bin, "--context", clusterset.BrokerName, "broker", "init", "--clusterset", f.Members[0].SetName, "--broker-info", f.BrokerInfoPath)
	return err
}

// KubectlMCS runs `kubectl mcs` in process on the fleet's kubeconfig (every member's context and the broker's, by
// name), writing its output to the fleet's log, and returns that output, and its error with the output.
func (f *Fleet) KubectlMCS(ctx context.Context, args ...string) (string, error) {
	return f.kubectlMCSWith(ctx, "", args...)
}

// kubectlMCSWith is KubectlMCS run by the kubectl-mcs binary bin, or in process when bin is "".
func (f *Fleet) kubectlMCSWith(ctx context.Context, bin string, args ...string) (string, error) {
	var out bytes.Buffer
	args = append([]string{"--kubeconfig", f.KubeconfigPath}, args...)
	var err error
	if bin == "" {
		cmd := cli.NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
		cmd.SetArgs(args)
		err = cmd.ExecuteContext(ctx)
	} else {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err = cmd.Run()
	}
	name := "kubectl mcs"
	if bin != "" {
		name = bin
	}
	if f.opts.Log != nil {
		fmt.Fprintf(f.opts.Log, "$ %s %s\n%s", name, strings.Join(args[2:], " "), out.String())
	}
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args[2:], " "), err, out.String())
	}
	return out.String(), nil
}

// ImageArgs are the flags that make this tree's `kubectl mcs join` install our images as the nodes hold them:
// run in process, built at no version, it would name the bases' tag, while `make images` tags the images with the
// tree's version.
func (f *Fleet) ImageArgs() []string {
	return []string{"--controller-image", f.Images.Controller, "--dns-image", f.Images.DNS}
}

// Join runs `kubectl mcs join` for the member in a DNS mode, with its cluster id, waits until its controller,
// with the fleet's flags, and its DNS are available, and returns join's output.
func (m *Member) Join(ctx context.Context, dnsMode string) (string, error) {
	return m.JoinWith(ctx, "", dnsMode)
}

// JoinWith is Join run by the kubectl-mcs binary bin (a previous release's, say, which installs that release's
// manifests), or in process when bin is "", with more join flags: joined again, a member is upgraded or
// downgraded to what bin installs, as a user does it. In process, join installs the images the nodes hold
// (ImageArgs), unless args name others, and takes over what the fleet itself wrote of join's objects
// (--force-conflicts): every cluster of the clusterset gets the export policy before any join, and the fleet runs
// the controller with its own flags (started), both with the test's own field manager, which join now reports as
// a conflict instead of overwriting. A previous release's join always forced, and knows no such flag.
func (m *Member) JoinWith(ctx context.Context, bin, dnsMode string, args ...string) (string, error) {
	if bin == "" {
		args = append(append(m.fleet.ImageArgs(), "--force-conflicts"), args...)
	}
	out, err := m.fleet.kubectlMCSWith(ctx, bin, append([]string{"--context", m.Name, "join", "--broker-info", m.fleet.BrokerInfoPath, "--cluster-id", m.ID,
		"--dns", dnsMode, "--wait", installTimeout.String()}, args...)...)
	if err != nil {
		return out, err
	}
	return out, m.started(ctx, dnsMode)
}

// started takes the controller Deployment's arguments as join left them, restarts the controller with the
// fleet's, and waits until it and the DNS that serves clusterset.local after a join in dnsMode are available.
func (m *Member) started(ctx context.Context, dnsMode string) error {
	var d appsv1.Deployment
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: controllerNamespace, Name: controllerDeployment}, &d); err != nil {
		return err
	}
	m.baseArgs = d.Spec.Template.Spec.Containers[0].Args
	if err := m.StartController(); err != nil {
		return err
	}
	ours := dnsDeploymentOf(dnsMode)
	if err := m.WaitAvailable(ctx, ours.Namespace, ours.Name, replicas, installTimeout); err != nil {
		return err
	}
	return m.findDNS(ctx)
}

// BrokerServiceAccount is the member's ServiceAccount on the broker, as join names it.
func (m *Member) BrokerServiceAccount() types.NamespacedName {
	return types.NamespacedName{Namespace: names.BrokerNamespace(m.ID), Name: install.MemberServiceAccount(m.ID)}
}

// BrokerKubeconfig asks the broker, as its administrator, for a token of the member's broker ServiceAccount,
// valid for life (at least the API server's 10 minutes) and bound to the Secret bound of its broker namespace
// when bound is not nil, so that deleting that Secret revokes it; it returns the kubeconfig join would give the
// member with that token. The members must have their broker identities (with nodes, or
// Options.BrokerIdentities).
func (m *Member) BrokerKubeconfig(ctx context.Context, life time.Duration, bound *corev1.Secret) ([]byte, error) {
	info, err := install.ReadBrokerInfo(m.fleet.BrokerInfoPath)
	if err != nil {
		return nil, err
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(life / time.Second))}}
	if bound != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: bound.Name, UID: bound.UID}
	}
	sa := m.BrokerServiceAccount()
	tok, err := m.fleet.Broker.Kube.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating the broker token of %s: %w", sa, err)
	}
	return install.MemberKubeconfig(info, tok.Status.Token)
}

// scaleController sets the controller Deployment's replicas and arguments (the manifest's, then --lease-grace
// and the test's) and waits until that many replicas run the new arguments and are available, or none is left.
func (m *Member) scaleController(n int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	args := append(slices.Clip(m.baseArgs), m.extraArgs()...)
	var d appsv1.Deployment
	key := client.ObjectKey{Namespace: controllerNamespace, Name: controllerDeployment}
	err := poll.Until(ctx, 100*time.Millisecond, installTimeout, func() error {
		if err := m.Client.Get(ctx, key, &d); err != nil {
			return err
		}
		if *d.Spec.Replicas == n && slices.Equal(d.Spec.Template.Spec.Containers[0].Args, args) {
			return nil
		}
		d.Spec.Replicas = ptr.To(n)
		d.Spec.Template.Spec.Containers[0].Args = args
		return m.Client.Update(ctx, &d) // a conflict is retried
	})
	if err != nil {
		return fmt.Errorf("%s: scaling the controller to %d: %w", m.Name, n, err)
	}
	return m.WaitAvailable(ctx, controllerNamespace, controllerDeployment, n, installTimeout)
}

// WaitAvailable waits, at most within, until the member's Deployment's rollout is complete with n available
// replicas and, for n = 0, until none of its pods is left.
func (m *Member) WaitAvailable(ctx context.Context, namespace, name string, n int32, within time.Duration) error {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	return poll.Until(ctx, 100*time.Millisecond, within, func() error {
		var d appsv1.Deployment
		if err := m.Client.Get(ctx, key, &d); err != nil {
			return err
		}
		s := d.Status
		if s.ObservedGeneration < d.Generation || s.UpdatedReplicas != n || s.Replicas != n || s.AvailableReplicas != n {
			return fmt.Errorf("%s/%s: %d replicas, %d updated, %d available, want %d", namespace, name, s.Replicas, s.UpdatedReplicas, s.AvailableReplicas, n)
		}
		if n > 0 {
			return nil
		}
		var pods corev1.PodList
		if err := m.Client.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%s/%s: %d pods still there", namespace, name, len(pods.Items))
		}
		return nil
	})
}

// findDNS sets DNS to the first address of ClusterDNSAddrs.
func (m *Member) findDNS(ctx context.Context) error {
	addrs, err := m.ClusterDNSAddrs(ctx)
	if err != nil {
		return err
	}
	m.DNS = addrs[0]
	return nil
}

// ClusterDNSAddrs returns, sorted by pod name, the IPv4 address and port 53 of each ready pod of the member's
// cluster DNS (kube-dns), which its pods ask, and which forwards clusterset.local to ours in standalone mode: the
// host reaches pods through the clusterset's routes, while ClusterIPs exist only inside the nodes. It fails when
// no pod is ready.
func (m *Member) ClusterDNSAddrs(ctx context.Context) ([]string, error) {
	pods, err := m.ClusterDNSPods(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	var addrs []string
	for _, p := range pods {
		if !workload.PodReady(&p) {
			continue
		}
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is4() {
				addrs = append(addrs, netip.AddrPortFrom(a, 53).String())
				break
			}
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s: no ready cluster DNS pod with an IPv4 address", m.Name)
	}
	return addrs, nil
}

// podMetric adds up a controller metric over the member's running controller pods; only the leader's counts.
func (m *Member) podMetric(name string, want map[string]string) (float64, error) {
	pods, err := m.pods(context.Background(), controllerPods)
	if err != nil {
		return 0, err
	}
	var sum float64
	running := 0
	for _, p := range pods {
		a, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		running++
		families, err := proc.Scrape("http://" + netip.AddrPortFrom(a, 8080).String() + "/metrics")
		if err != nil {
			return 0, err
		}
		sum += proc.Sum(families, name, want)
	}
	if running == 0 {
		return 0, fmt.Errorf("%s: no controller pod runs", m.Name)
	}
	return sum, nil
}

// writePodLogs copies the logs of the member's controller and CoreDNS pods to w, each line prefixed as the host
// processes' are.
func (m *Member) writePodLogs(ctx context.Context, w io.Writer) {
	// Both DNS: ours in either mode, and the cluster's, which forwards to ours in standalone mode.
	for _, sel := range []productPods{controllerPods, clusterDNSPods, standaloneDNSPods} {
		pods, err := m.pods(ctx, sel)
		if err != nil {
			fmt.Fprintf(w, "[%s] listing pods: %v\n", m.Name, err)
			continue
		}
		for _, p := range pods {
			b, err := m.Kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				fmt.Fprintf(w, "[%s/%s] logs: %v\n", m.Name, p.Name, err)
				continue
			}
			pw := proc.PrefixWriter(w, m.Name+"/"+p.Name)
			_, _ = pw.Write(b)
		}
	}
}

// AdminBrokerInfo writes, beside BrokerInfoPath, a broker-info file whose token is a broker administrator's (a
// ServiceAccount bound to cluster-admin, for an hour), and returns its path: what a previous release's join needs
// to roll a member back on a broker of this release, whose joiner may not do all that release's join does.
func (f *Fleet) AdminBrokerInfo(ctx context.Context) (string, error) {
	info, err := install.ReadBrokerInfo(f.BrokerInfoPath)
	if err != nil {
		return "", err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "rollback-admin"}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "rollback-admin"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}}}
	for _, o := range []client.Object{sa, crb} {
		if err := f.Broker.Client.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
			return "", err
		}
	}
	tok, err := f.Broker.Kube.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	info.Token = tok.Status.Token
	path := filepath.Join(f.dir, "broker-info-admin.yaml")
	return path, info.Write(path)
}
