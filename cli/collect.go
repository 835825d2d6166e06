package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
	brokerv1alpha1 "vksfleet.dev/fleet/api/broker/v1alpha1"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/clusterid"
	"vksfleet.dev/fleet/mcs/mcsversion"
	"vksfleet.dev/fleet/mcs/names"
)

// Where the deploy manifests (build/deploy) put the controller and CoreDNS; the manifests are YAML, so these
// names exist only there and here.
const (
	controllerNamespace  = "mcs-system"
	controllerDeployment = "mcs-controller"
	corednsConfigMap     = "coredns"
	corefileKey          = "Corefile"
	kubeDNSService       = "kube-dns"
	corednsDeployment    = "coredns"
	// standaloneDNSDeployment is our CoreDNS in the standalone DNS mode, in controllerNamespace.
	standaloneDNSDeployment = "mcs-dns"
)

// kubeDNSSource is Member.DNSSource when the DNS address is the kube-dns Service's ClusterIP.
const kubeDNSSource = "Service kube-system/" + kubeDNSService

// source is one member to read: its context, its cluster id as the context reported it, and how to reach it.
type source struct {
	memberMatch
	config *rest.Config
	// dns is the DNS address given for it (flag or environment), and dnsSource says which.
	dns, dnsSource string
	// inCluster skips the kube-dns Service lookup: the DNS probe runs in a pod (--in-cluster).
	inCluster bool
}

// collect reads every member concurrently into a snapshot of the broker already read; a member that fails is
// recorded with its error, never left out.
func collect(ctx context.Context, members []source, b Broker, now func() time.Time) *Snapshot {
	s := &Snapshot{Members: make([]Member, len(members)), Broker: b}
	var wg sync.WaitGroup
	for i, src := range members {
		wg.Go(func() { s.Members[i] = readMember(ctx, src, now) })
	}
	wg.Wait()
	s.Now = now()
	return s
}

// clockOffset asks the API server for /version and compares its Date header with the local clock at the
// request's midpoint; it doubles as the reachability probe.
func clockOffset(ctx context.Context, cfg *rest.Config, now func() time.Time) (time.Duration, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/version", nil)
	if err != nil {
		return 0, err
	}
	before := now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	after := now()
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		return 0, fmt.Errorf("no Date header from %s: %w", cfg.Host, err)
	}
	// Date truncates to the second: compare with the midpoint truncated likewise, so that a perfect clock
	// reads 0 rather than up to -1 s.
	mid := before.Add(after.Sub(before) / 2).Truncate(time.Second)
	return date.Sub(mid), nil
}

// servedAPIs returns the mcs-api group version serving ServiceImports (zero if none) and the needed resources
// the server lacks, among ServiceExport, ServiceImport and, when want is set, ClusterProperty.
func servedAPIs(cfg *rest.Config, clusterProperty bool) (schema.GroupVersion, []string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return schema.GroupVersion{}, nil, err
	}
	var gv schema.GroupVersion
	var missing []string
	want := []schema.GroupVersionResource{
		mcsv1beta1.SchemeGroupVersion.WithResource(mcsv1beta1.ServiceImportPluralName),
		mcsv1beta1.SchemeGroupVersion.WithResource(mcsv1beta1.ServiceExportPluralName),
	}
	if clusterProperty {
		want = append(want, aboutv1alpha1.GroupVersion.WithResource("clusterproperties"))
	}
	for _, r := range want {
		versions := []schema.GroupVersion{r.GroupVersion()}
		if r.Group == mcsv1beta1.GroupName {
			versions = append(versions, mcsv1alpha1.SchemeGroupVersion)
		}
		found := false
		for _, v := range versions {
			ok, err := mcsversion.Serves(dc, v.WithResource(r.Resource))
			if err != nil {
				return gv, nil, err
			}
			if ok {
				found = true
				if r.Resource == mcsv1beta1.ServiceImportPluralName && gv.Empty() {
					gv = v
				}
				break
			}
		}
		if !found {
			missing = append(missing, r.GroupResource().String())
		}
	}
	return gv, missing, nil
}

// newClient is a client for the server's mcs-api version, v1beta1 when it serves none (lists of mcs-api kinds
// are then skipped).
func newClient(cfg *rest.Config, gv schema.GroupVersion) (client.Client, error) {
	if gv.Empty() {
		gv = mcsv1beta1.SchemeGroupVersion
	}
	scheme, err := mcsversion.NewScheme(gv)
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

func readMember(ctx context.Context, src source, now func() time.Time) Member {
	m := Member{Context: src.context, ClusterID: src.clusterID, ClusterSet: src.clusterSet}
	if src.context == "" {
		return m
	}
	if src.err != nil {
		m.Error = src.err.Error()
		return m
	}
	var err error
	if m.ClockOffset, err = clockOffset(ctx, src.config, now); err != nil {
		m.Error = err.Error()
		return m
	}
	if err := fillMember(ctx, &m, src); err != nil {
		m.Error = err.Error()
	}
	return m
}

func fillMember(ctx context.Context, m *Member, src source) error {
	gv, missing, err := servedAPIs(src.config, true)
	if err != nil {
		return err
	}
	m.MissingAPIs = missing
	c, err := newClient(src.config, gv)
	if err != nil {
		return err
	}
	nsList := &corev1.NamespaceList{}
	if err := c.List(ctx, nsList); err != nil {
		return err
	}
	for _, ns := range nsList.Items {
		if ns.DeletionTimestamp == nil {
			m.Namespaces = append(m.Namespaces, ns.Name)
		}
	}
	if !gv.Empty() {
		exports := &mcsv1beta1.ServiceExportList{}
		if err := c.List(ctx, exports); ignoreAbsent(err) != nil {
			return err
		}
		imports := &mcsv1beta1.ServiceImportList{}
		if err := c.List(ctx, imports); err != nil {
			return err
		}
		m.Exports, m.Imports = exports.Items, imports.Items
	}
	// Imported slices only: those of cluster-local Services (--cluster-local-services) come from no cluster.
	slices := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, slices, client.MatchingLabels{discoveryv1.LabelManagedBy: names.ManagedBy},
		client.HasLabels{mcsv1beta1.LabelServiceName}); err != nil {
		return err
	}
	derived := &corev1.ServiceList{}
	if err := c.List(ctx, derived, client.MatchingLabels{names.LabelManagedBy: names.ManagedBy}); err != nil {
		return err
	}
	m.Slices, m.DerivedServices = slices.Items, derived.Items
	cm := &corev1.ConfigMap{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: corednsConfigMap}, cm); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		if corefile, ok := cm.Data[corefileKey]; ok {
			m.Corefile = &corefile
		}
	}
	dep := &appsv1.Deployment{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: controllerNamespace, Name: controllerDeployment}, dep); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		if m.ControllerVersion, err = runningVersion(ctx, c, dep); err != nil {
			return err
		}
		if len(dep.Spec.Template.Spec.Containers) > 0 {
			m.ClusterLocal = clusterLocalMode(dep.Spec.Template.Spec.Containers[0].Args)
		}
	}
	coredns := &appsv1.Deployment{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: corednsDeployment}, coredns); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case len(coredns.Spec.Template.Spec.Containers) > 0:
		m.CoreDNSImage = coredns.Spec.Template.Spec.Containers[0].Image
	}
	// Our DNS: mcs-dns in mcs-system (standalone), else kube-system/coredns where it runs our image (replace).
	standalone := &appsv1.Deployment{}
	switch err := c.Get(ctx, client.ObjectKey{Namespace: controllerNamespace, Name: standaloneDNSDeployment}, standalone); {
	case apierrors.IsNotFound(err) && m.ourCoreDNS():
		if m.DNSVersion, err = runningVersion(ctx, c, coredns); err != nil {
			return err
		}
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		if m.DNSVersion, err = runningVersion(ctx, c, standalone); err != nil {
			return err
		}
	}
	m.DNS, m.DNSSource = src.dns, src.dnsSource
	if m.DNS == "" && !src.inCluster {
		svc := &corev1.Service{}
		err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: kubeDNSService}, svc)
		if ignoreAbsent(err) != nil {
			return err
		}
		if err == nil && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
			m.DNS, m.DNSSource = net.JoinHostPort(svc.Spec.ClusterIP, "53"), kubeDNSSource
		}
	}
	return nil
}

// clusterLocalMode says whether the controller's arguments turn the cluster-local DNS mode on: the flag
// --cluster-local-services, as Go's flag package reads it (one dash or two, a boolean value or none).
func clusterLocalMode(args []string) bool {
	on := false
	for _, a := range args {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "cluster-local-services" {
			continue
		}
		on = true
		if hasValue {
			on, _ = strconv.ParseBool(value)
		}
	}
	return on
}

// ignoreAbsent treats a missing object or an unserved kind as no error.
func ignoreAbsent(err error) error {
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil
	}
	return err
}

// readBroker reads the broker: the members' records, slices, Leases and namespaces. Unlike a member, a broker
// that cannot be read stops the command, since it alone says who the members are.
func readBroker(ctx context.Context, context string, cfg *rest.Config, now func() time.Time) (Broker, error) {
	b := Broker{Context: context}
	var err error
	if b.ClockOffset, err = clockOffset(ctx, cfg, now); err != nil {
		return b, err
	}
	gv, missing, err := servedAPIs(cfg, false)
	if err != nil {
		return b, err
	}
	// The broker holds records as ServiceImports only; a missing ServiceExport kind is no fault there.
	for _, r := range missing {
		if r != mcsv1beta1.SchemeGroupVersion.WithResource(mcsv1beta1.ServiceExportPluralName).GroupResource().String() {
			b.MissingAPIs = append(b.MissingAPIs, r)
		}
	}
	c, err := newClient(cfg, gv)
	if err != nil {
		return b, err
	}
	sel := client.MatchingLabelsSelector{Selector: broker.Selector}
	records := &mcsv1beta1.ServiceImportList{}
	if !gv.Empty() {
		if err := c.List(ctx, records, sel); err != nil {
			return b, err
		}
	}
	slices := &discoveryv1.EndpointSliceList{}
	leases := &coordinationv1.LeaseList{}
	namespaces := &corev1.NamespaceList{}
	if err := errors.Join(c.List(ctx, slices, sel), c.List(ctx, leases, sel), c.List(ctx, namespaces, sel)); err != nil {
		return b, err
	}
	if err := readRecords(ctx, cfg, records, slices, leases); err != nil {
		return b, err
	}
	b.Records, b.Slices, b.Leases = records.Items, slices.Items, leases.Items
	var objects []metav1.Object
	for i := range b.Leases {
		objects = append(objects, &b.Leases[i])
	}
	for i := range b.Records {
		objects = append(objects, &b.Records[i])
	}
	for i := range b.Slices {
		objects = append(objects, &b.Slices[i])
	}
	b.Members = memberIDs(namespaces.Items, objects)
	return b, nil
}

// readRecords reads the broker's records (api/broker/v1alpha1) into the lists of the previous layout's objects
// read before: a namespace with a MemberLease is a member of this release, read in records, whose objects of the
// previous layout (written too, for the previous release's members) are left out; the others keep those. A broker
// that does not serve the records yet is read in the previous layout alone.
func readRecords(ctx context.Context, cfg *rest.Config, records *mcsv1beta1.ServiceImportList, slices *discoveryv1.EndpointSliceList, leases *coordinationv1.LeaseList) error {
	scheme, err := brokerv1alpha1.NewScheme()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	sel := client.MatchingLabelsSelector{Selector: broker.Selector}
	newLeases := &coordinationv1.LeaseList{}
	if err := c.List(ctx, newLeases, sel); meta.IsNoMatchError(err) {
		return nil
	} else if err != nil {
		return err
	}
	current := map[string]bool{}
	for _, l := range newLeases.Items {
		current[l.Namespace] = true
	}
	newRecords, newSlices := &mcsv1beta1.ServiceImportList{}, &discoveryv1.EndpointSliceList{}
	if err := errors.Join(c.List(ctx, newRecords, sel), c.List(ctx, newSlices, sel)); err != nil {
		return err
	}
	records.Items = append(outside(records.Items, current), newRecords.Items...)
	slices.Items = append(outside(slices.Items, current), newSlices.Items...)
	leases.Items = append(outside(leases.Items, current), newLeases.Items...)
	return nil
}

// outside returns the objects of items outside the namespaces of current.
func outside[T any, PT interface {
	*T
	metav1.Object
}](items []T, current map[string]bool) []T {
	var out []T
	for i := range items {
		if !current[PT(&items[i]).GetNamespace()] {
			out = append(out, items[i])
		}
	}
	return out
}

// readClusterID reads a context's cluster id and clusterset within timeout: contexts are read to find the
// members among them, and one that does not answer quickly is not worth waiting for.
func readClusterID(ctx context.Context, cfg *rest.Config, timeout time.Duration) (id, clusterSet string, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = timeout
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return "", "", err
	}
	return clusterid.Read(ctx, dyn)
}

// dnsAddress is where a member's DNS is asked: --dns, else its FLEET_DNS_<MEMBER> variable, each keyed by the
// member's context or cluster id; else "" (the collector then tries the member's kube-dns Service).
func dnsAddress(m memberMatch, flags map[string]string) (string, string) {
	for _, name := range []string{m.context, m.clusterID} {
		if a, ok := flags[name]; ok && name != "" {
			return a, "--dns"
		}
	}
	for _, name := range []string{m.context, m.clusterID} {
		if a := os.Getenv(dnsEnv(name)); a != "" && name != "" {
			return a, "$" + dnsEnv(name)
		}
	}
	return "", ""
}
