package fleet

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

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/build/deploy/member"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/clusterset"
	"vksfleet.dev/fleet/test/poll"
	"vksfleet.dev/fleet/test/proc"
	"vksfleet.dev/fleet/test/workload"
)

// With nodes, a fleet installs our product as a user does (README, "Fresh install"), with the manifests that
// build/deploy renders, applied unmodified by kubectl: on the broker its roles and one identity per member; on
// each member the CRDs, the admission policy, the mcs-controller Deployment (2 replicas, leader election) and
// our CoreDNS taking over kube-dns, with the member's broker kubeconfig in the Secret the controller reads. The
// kubelets run them from the images `make images` saved. Tuning a test asks for (--lease-grace, a test's own
// flags) is a patch of the Deployment's arguments, as an operator would make it.

// Where the installed parts live, as build/deploy names them.
const (
	controllerNamespace  = "mcs-system"
	controllerDeployment = "mcs-controller"
	dnsNamespace         = metav1.NamespaceSystem
	dnsDeployment        = "coredns"
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

// The product's pods: the controller's and CoreDNS's.
var (
	controllerPods = productPods{controllerNamespace, client.MatchingLabels{"app.kubernetes.io/name": controllerDeployment}}
	dnsPods        = productPods{dnsNamespace, client.MatchingLabels{"k8s-app": "kube-dns"}}
)

// pods lists the member's pods of a part of the product.
func (m *Member) pods(ctx context.Context, sel productPods) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := m.Client.List(ctx, &pods, client.InNamespace(sel.namespace), sel.labels); err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// tools are the programs of the tools cache that the install runs.
type tools struct{ kubectl, kustomize, deploy string }

func findTools() (tools, error) {
	assets, err := clusterset.AssetsDir("")
	if err != nil {
		return tools{}, err
	}
	root, err := clusterset.RepoRoot()
	if err != nil {
		return tools{}, err
	}
	t := tools{kubectl: filepath.Join(assets, "kubectl"), kustomize: filepath.Join(assets, "kustomize"), deploy: filepath.Join(root, "build", "deploy")}
	if _, err := os.Stat(t.kustomize); err != nil {
		return t, fmt.Errorf("fleet: kustomize not found in %s: run `make tools` first", assets)
	}
	return t, nil
}

// render runs `kustomize build dir`.
func (t tools) render(ctx context.Context, dir string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, t.kustomize, "build", dir).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return nil, fmt.Errorf("kustomize build %s: %v: %s", dir, err, stderr)
	}
	return out, nil
}

// apply applies manifests to the cluster with kubectl, server-side: the clusterset's bootstrap made some of the
// objects already (CRDs, the admission policy, the kube-dns Service, as kubeadm does), and apply takes them over.
func (t tools) apply(ctx context.Context, c *clusterset.Cluster, manifests []byte) error {
	cmd := exec.CommandContext(ctx, t.kubectl, "--kubeconfig", c.KubeconfigPath, "apply", "--server-side", "--force-conflicts", "-f", "-")
	cmd.Stdin = bytes.NewReader(manifests)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply on %s: %v\n%s", c.Name, err, out)
	}
	return nil
}

// install puts the product on the broker and every member, and waits until every member's controller and DNS
// are available.
func (f *Fleet) install(ctx context.Context) error {
	t, err := f.installBrokerRoles(ctx)
	if err != nil {
		return err
	}
	member, err := t.render(ctx, t.deploy)
	if err != nil {
		return err
	}
	errs := make([]error, len(f.Members))
	var wg sync.WaitGroup
	for i, m := range f.Members {
		wg.Go(func() {
			if errs[i] = m.join(ctx, t, member); errs[i] != nil {
				errs[i] = fmt.Errorf("fleet: installing on %s: %w", m.Name, errs[i])
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// installBrokerRoles applies build/deploy/broker (the CRDs and the roles members are bound to) on the broker, and
// returns the tools it found for the rest of the install.
func (f *Fleet) installBrokerRoles(ctx context.Context) (tools, error) {
	t, err := findTools()
	if err != nil {
		return t, err
	}
	broker, err := t.render(ctx, filepath.Join(t.deploy, "broker"))
	if err != nil {
		return t, err
	}
	return t, t.apply(ctx, f.Broker, broker)
}

// join gives the member its identity on the broker and installs the product on it.
func (m *Member) join(ctx context.Context, t tools, manifests []byte) error {
	kubeconfig, err := m.brokerIdentity(ctx, t)
	if err != nil {
		return err
	}
	// The Secret first, in the namespace the manifests then take over: a controller that found none would wait,
	// not ready, until it appears.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controllerNamespace}}
	if err := m.Client.Create(ctx, ns); err != nil {
		return fmt.Errorf("creating namespace %s: %w", controllerNamespace, err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: BrokerSecret.Namespace, Name: BrokerSecret.Name},
		Data:       map[string][]byte{"kubeconfig": kubeconfig},
	}
	if err := m.Client.Create(ctx, secret); err != nil {
		return fmt.Errorf("creating the broker Secret: %w", err)
	}
	if err := t.apply(ctx, m.Cluster, manifests); err != nil {
		return err
	}
	var d appsv1.Deployment
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: controllerNamespace, Name: controllerDeployment}, &d); err != nil {
		return err
	}
	m.baseArgs = d.Spec.Template.Spec.Containers[0].Args
	if err := m.StartController(); err != nil {
		return err
	}
	if err := m.waitAvailable(ctx, dnsNamespace, dnsDeployment, replicas); err != nil {
		return err
	}
	return m.findDNS(ctx)
}

// brokerIdentity applies the member's overlay of build/deploy/member on the broker (its broker namespace, its
// ServiceAccount and bindings) and returns a kubeconfig with a token of that ServiceAccount.
func (m *Member) brokerIdentity(ctx context.Context, t tools) ([]byte, error) {
	if err := m.applyBrokerIdentity(ctx, t); err != nil {
		return nil, err
	}
	// A month: the local clusterset lives for hours at most.
	return m.BrokerKubeconfig(ctx, 30*24*time.Hour, nil)
}

// applyBrokerIdentity applies the member's overlay of build/deploy/member on the broker: its broker namespace,
// its ServiceAccount (BrokerServiceAccount) and bindings.
func (m *Member) applyBrokerIdentity(ctx context.Context, t tools) error {
	dir, err := os.MkdirTemp(m.fleet.dir, "member-overlay-")
	if err != nil {
		return err
	}
	// kustomize accepts only relative paths to bases.
	base, err := filepath.Rel(dir, filepath.Join(t.deploy, "member"))
	if err != nil {
		return err
	}
	kustomization := member.Kustomization(base, m.ID, "-"+m.Name)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		return err
	}
	overlay, err := t.render(ctx, dir)
	if err != nil {
		return err
	}
	return t.apply(ctx, m.fleet.Broker, overlay)
}

// BrokerServiceAccount is the member's ServiceAccount on the broker, which its overlay of build/deploy/member
// names.
func (m *Member) BrokerServiceAccount() types.NamespacedName {
	return types.NamespacedName{Namespace: names.BrokerNamespace(m.ID), Name: "member-" + m.Name}
}

// BrokerKubeconfig asks the broker for a token of the member's broker ServiceAccount, valid for life (at least
// the API server's 10 minutes) and bound to the Secret bound of its broker namespace when bound is not nil, so
// that deleting that Secret revokes it; it returns a kubeconfig of the broker with that token, as an operator
// gives a member. The fleet must have given the members their broker identities (with nodes, or
// Options.BrokerIdentities).
func (m *Member) BrokerKubeconfig(ctx context.Context, life time.Duration, bound *corev1.Secret) ([]byte, error) {
	b := m.fleet.Broker
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(life / time.Second))}}
	if bound != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: bound.Name, UID: bound.UID}
	}
	sa := m.BrokerServiceAccount()
	tok, err := b.Kube.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating the broker token of %s: %w", sa, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["broker"] = &clientcmdapi.Cluster{Server: b.Config.Host, CertificateAuthorityData: b.Config.CAData}
	cfg.AuthInfos["member"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["broker"] = &clientcmdapi.Context{Cluster: "broker", AuthInfo: "member"}
	cfg.CurrentContext = "broker"
	return clientcmd.Write(*cfg)
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
	return m.waitAvailable(ctx, controllerNamespace, controllerDeployment, n)
}

// waitAvailable waits until the Deployment's rollout is complete with n available replicas and, for n = 0, until
// none of its pods is left.
func (m *Member) waitAvailable(ctx context.Context, namespace, name string, n int32) error {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	return poll.Until(ctx, 100*time.Millisecond, installTimeout, func() error {
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

// findDNS sets DNS to the IPv4 address of the member's first ready CoreDNS pod, by name: the host reaches pods
// through the clusterset's routes, while ClusterIPs exist only inside the nodes.
func (m *Member) findDNS(ctx context.Context) error {
	pods, err := m.pods(ctx, dnsPods)
	if err != nil {
		return err
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range pods {
		if !workload.PodReady(&p) {
			continue
		}
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is4() {
				m.DNS = netip.AddrPortFrom(a, 53).String()
				return nil
			}
		}
	}
	return fmt.Errorf("%s: no ready CoreDNS pod with an IPv4 address", m.Name)
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
	for _, sel := range []productPods{controllerPods, dnsPods} {
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
