// Package hostile attacks a running fleet the way a hostile member (with its own broker credentials: it writes
// only in its broker namespace) or a namespace user (who may create Services, EndpointSlices and ServiceExports
// in their namespace) could, following the correctness review of 2026-11-25 and a few attacks of our own. After
// every attack, every honest member's DNS must still answer cluster.local and clusterset.local correctly, and
// every import must stay what the honest exports make it.
package hostile

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/framework"
)

const (
	ns      = "team"
	zone    = ".svc." + names.DNSZone + "."
	timeout = 60 * time.Second
	// mallory is the hostile member: it exists on the broker only, where the test writes with the identity
	// `kubectl mcs join` gives it.
	mallory = "mallory"
)

// crafted is the review's payload: with a "\." the last label of the id and the service name db pack as one label of
// 65 octets.
var crafted = strings.Repeat("a", 52) + "." + strings.Repeat("b", 62) + `\`

// env is the fleet under attack and what the honest exports should look like.
type env struct {
	f       *framework.Fleet
	a, b, c *framework.Member
	brokerC client.Client // mallory's broker identity
	info    install.BrokerInfo
	admin   client.Client // the broker's administrator, for what no member can do
	dbAddrs []string      // the honest answer to db's A question
}

func TestHostileMemberAndUser(t *testing.T) {
	f, _ := framework.StartTest(t, 3, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := &env{f: f, a: f.Member("cluster-a"), b: f.Member("cluster-b"), c: f.Member("cluster-c"), admin: f.Broker.Records,
		dbAddrs: []string{"10.1.1.1", "10.1.1.2"}}
	for _, m := range f.Members {
		if err := mcstest.CreateNamespace(ctx, m.Client, ns); err != nil {
			t.Fatal(err)
		}
	}
	// The honest exports: web (ClusterSetIP) from A and C, db (headless, with hostnames) from A.
	e.export(t, e.a, "web", false, mcstest.Endpoint("10.1.0.1", "", true), mcstest.Endpoint("10.1.0.2", "", true))
	e.export(t, e.c, "web", false, mcstest.Endpoint("10.3.0.1", "", true))
	e.export(t, e.a, "db", true, mcstest.Endpoint("10.1.1.1", "db-0", true), mcstest.Endpoint("10.1.1.2", "db-1", true))
	e.healthy(t, "the honest fixture")
	e.waitEndpoints(t, "web", map[string]int{"cluster-a": 2, "cluster-c": 1})

	// The hostile member: its identity on the broker, as join gives it, and a Lease it keeps renewing, so that it
	// counts as alive.
	e.brokerC, e.info = joinedIdentity(ctx, t, f, mallory)
	go e.renewLeases(ctx)

	t.Run("a namespace user's slice with a crafted cluster id", e.craftedIDSlice)
	t.Run("a namespace user's forged imported slice", e.forgedImportedSlice)
	t.Run("a member's record with a crafted cluster id, in the namespace it ground for", e.craftedIDRecord)
	t.Run("a member's record with ports no Service has", e.badPorts)
	t.Run("a member's record that is not JSON where JSON belongs", e.brokenRecord)
	t.Run("a member's reserved annotation to steer headless DNS", e.steerLocality)
	t.Run("a member's endpoints pointing at this cluster's pods and nodes", e.localReferences)
	t.Run("a user's invalid exported labels", e.invalidExportedLabels)
	t.Run("a user's namespace named like a broker namespace", e.brokerLikeNamespace)
	t.Run("a member's Lease that keeps a dead member alive", e.forgedLease)
	t.Run("a member's reads and writes outside its broker namespace", e.outsideItsNamespace)
	t.Run("a member's record claiming to be the oldest, headless, on another port", e.forgedAge)
	t.Run("a member's record of an IP family no other export has", e.disjointFamily)
	t.Run("a member's records of fields no Service may have", e.invalidFields)
	t.Run("a member's records for kube-system, default and names no Service may have", e.importDoor)
	t.Run("a member's record declaring a million slices", e.forgedSliceCount)
	t.Run("a namespace user's public address in a headless export", e.publicPTR)
	t.Run("a member's flood of endpoints for one service", e.flood)
	// Last: mallory is gone after it.
	t.Run("a member evicted from the broker alone", e.evicted)
}

// joinedIdentity prepares the broker as `kubectl mcs broker init` does, gives the member id its broker identity
// as join does, and returns a client that acts as that identity, with the broker-info init wrote.
func joinedIdentity(ctx context.Context, t *testing.T, f *framework.Fleet, id string) (client.Client, install.BrokerInfo) {
	t.Helper()
	info, err := install.BrokerInit(ctx, f.Broker.Config, install.InitOptions{ClusterSet: "clusterset", TokenExpiration: time.Hour}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := install.BrokerIdentity(ctx, info, id); err != nil {
		t.Fatal(err)
	}
	c, err := memberClient(f, id, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, info
}

// memberClient is a client of the broker with member id's identity, as join gives it, with scheme (nil: the
// records'); edit, if given, changes its configuration first.
func memberClient(f *framework.Fleet, id string, scheme *runtime.Scheme, edit func(*rest.Config)) (client.Client, error) {
	cfg := rest.CopyConfig(f.Broker.Config)
	ns := names.BrokerNamespace(id)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + install.MemberServiceAccount(id),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	if edit != nil {
		edit(cfg)
	}
	if scheme == nil {
		scheme = f.Broker.Records.Scheme()
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// export creates, in m, a selector-less Service with its own EndpointSlice of endpoints, and exports it.
func (e *env) export(t *testing.T, m *framework.Member, name string, headless bool, endpoints ...discoveryv1.Endpoint) {
	t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "user"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: endpoints,
		Ports: []discoveryv1.EndpointPort{mcstest.SlicePort("http", corev1.ProtocolTCP, 8080)},
	}
	for _, o := range []client.Object{svc, slice, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}} {
		if err := m.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// healthy waits until every honest member's DNS answers cluster.local, web's ClusterSetIP and db's endpoints as
// the honest exports make them, and the import of web holds port http alone.
func (e *env) healthy(t *testing.T, after string) {
	t.Helper()
	poll.T(t, timeout, "DNS and imports correct after "+after, func() error {
		for _, m := range e.f.Members {
			if err := e.answers(m); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
		}
		return nil
	})
}

func (e *env) answers(m *framework.Member) error {
	ctx := context.Background()
	if ips, rcode, err := m.Addresses("kubernetes.default.svc.cluster.local", dns.TypeA); err != nil || rcode != dns.RcodeSuccess || len(ips) != 1 {
		return fmt.Errorf("cluster.local: %v %s %v", ips, dns.RcodeToString[rcode], err)
	}
	si := &mcsv1beta1.ServiceImport{}
	if err := m.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, si); err != nil {
		return err
	}
	if len(si.Spec.Ports) != 1 || si.Spec.Ports[0].Name != "http" || si.Spec.Type != mcsv1beta1.ClusterSetIP {
		return fmt.Errorf("web imported as %s with ports %+v", si.Spec.Type, si.Spec.Ports)
	}
	for k := range si.Annotations {
		if strings.HasPrefix(k, "example.com/") {
			return fmt.Errorf("web carries %s, which no honest export has", k)
		}
	}
	if ips, rcode, err := m.Addresses("web."+ns+zone, dns.TypeA); err != nil || rcode != dns.RcodeSuccess || !slices.Equal(ips, ipv4(si.Spec.IPs)) {
		return fmt.Errorf("web: %v %s %v, want the ClusterSetIP %v", ips, dns.RcodeToString[rcode], err, si.Spec.IPs)
	}
	if ips, rcode, err := m.Addresses("db."+ns+zone, dns.TypeA); err != nil || rcode != dns.RcodeSuccess || !slices.Equal(ips, e.dbAddrs) {
		return fmt.Errorf("db: %v %s %v, want %v", ips, dns.RcodeToString[rcode], err, e.dbAddrs)
	}
	if ips, _, err := m.Addresses("db-0."+e.a.ID+".db."+ns+zone, dns.TypeA); err != nil || !slices.Equal(ips, []string{"10.1.1.1"}) {
		return fmt.Errorf("db-0 of %s: %v %v", e.a.ID, ips, err)
	}
	return nil
}

func ipv4(ips []string) []string {
	return slices.DeleteFunc(slices.Clone(ips), func(ip string) bool { return strings.Contains(ip, ":") })
}

// waitEndpoints waits until b's imported slices of svc hold want endpoints per source cluster id.
func (e *env) waitEndpoints(t *testing.T, svc string, want map[string]int) {
	t.Helper()
	poll.T(t, timeout, "imported endpoints of "+svc+" in cluster-b", func() error {
		got := map[string]int{}
		for _, s := range e.importedSlices(t, e.b, svc) {
			got[s.Annotations[names.AnnotationClusterID]] += len(s.Endpoints)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("endpoints per cluster %v, want %v", got, want)
		}
		return nil
	})
}

func (e *env) importedSlices(t *testing.T, m *framework.Member, svc string) []discoveryv1.EndpointSlice {
	t.Helper()
	list := &discoveryv1.EndpointSliceList{}
	if err := m.Client.List(context.Background(), list, client.InNamespace(ns),
		client.MatchingLabels{mcsv1beta1.LabelServiceName: svc, discoveryv1.LabelManagedBy: names.ManagedBy}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// renewLeases renews mallory's Lease, and those it forges, every second until ctx ends.
func (e *env) renewLeases(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	renewer := &broker.Renewer{ClusterID: mallory, Holder: mallory}
	for {
		_, _, _ = renewer.Renew(ctx, e.brokerC, 5*time.Second, time.Now())
		leases := &coordinationv1.LeaseList{}
		if e.brokerC.List(ctx, leases, client.InNamespace(names.BrokerNamespace(mallory))) == nil {
			for _, l := range leases.Items {
				if l.Name != names.LeaseName {
					l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
					_ = e.brokerC.Update(ctx, &l)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// publish writes a record and slices on the broker as cluster would, in namespace (its broker namespace unless
// it ground another's), after edit changes the record; it returns a function that deletes them again. It writes
// as mallory in mallory's namespace, and as the administrator elsewhere: no member may write there.
func (e *env) publish(t *testing.T, cluster, namespace, svc string, edit func(*mcsv1beta1.ServiceImport), slices ...*discoveryv1.EndpointSlice) func() {
	t.Helper()
	return e.publishKey(t, cluster, namespace, types.NamespacedName{Namespace: ns, Name: svc}, edit, slices...)
}

// publishKey is publish for a service of any namespace.
func (e *env) publishKey(t *testing.T, cluster, namespace string, key types.NamespacedName, edit func(*mcsv1beta1.ServiceImport),
	slices ...*discoveryv1.EndpointSlice) func() {
	t.Helper()
	ctx := context.Background()
	c := e.admin
	if namespace == names.BrokerNamespace(mallory) {
		c = e.brokerC
	}
	rec, err := broker.Record(key, exportOf(cluster, len(slices)))
	if err != nil {
		t.Fatal(err)
	}
	rec.Namespace = namespace
	if edit != nil {
		edit(rec)
	}
	objs := []client.Object{rec}
	for _, s := range slices {
		out := broker.Slice(cluster, key, s)
		out.Namespace = namespace
		objs = append(objs, out)
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %s on the broker: %v", o.GetName(), err)
		}
	}
	return func() {
		for _, o := range objs {
			if err := c.Delete(ctx, o); err != nil {
				t.Errorf("deleting %s from the broker: %v", o.GetName(), err)
			}
		}
	}
}

// exportOf is the export a publishKey record says cluster made, a day ago, of a ClusterSetIP service on port 80
// in slices slices.
func exportOf(cluster string, slices int) merge.Export {
	return merge.Export{
		Cluster: cluster, Created: time.Now().Add(-24 * time.Hour), Slices: slices,
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []mcsv1beta1.ServicePort{mcstest.Port("http", corev1.ProtocolTCP, 80)}},
	}
}

func ipv4Slice(name string, endpoints ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: endpoints, Ports: []discoveryv1.EndpointPort{mcstest.SlicePort("http", corev1.ProtocolTCP, 8080)}}
}

// craftedIDSlice: finding 1. A user who may create EndpointSlices in a namespace with a headless import writes one
// labelled as imported, with the crafted id; every CoreDNS replica used to panic on it at its next index build.
func (e *env) craftedIDSlice(t *testing.T) {
	s := mcstest.Slice(ns, "db", names.LabelValue(crafted), discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{mcstest.SlicePort("http", corev1.ProtocolTCP, 8080)}, mcstest.Endpoint("10.66.6.1", "x", true))
	s.Name = "crafted-id"
	s.Annotations = map[string]string{names.AnnotationClusterID: crafted}
	for _, m := range []*framework.Member{e.b, e.c} {
		if err := m.Client.Create(context.Background(), s.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	e.healthy(t, "a slice with a crafted cluster id")
}

// forgedImportedSlice: a user writes a slice that claims to be imported from cluster-a, with an address of their
// own; the controller owns imported slices and removes it, and DNS never answers it once settled.
func (e *env) forgedImportedSlice(t *testing.T) {
	s := mcstest.Slice(ns, "db", e.a.ID, discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{mcstest.SlicePort("http", corev1.ProtocolTCP, 8080)}, mcstest.Endpoint("10.66.6.2", "db-9", true))
	s.Name = "forged"
	s.Annotations = map[string]string{names.AnnotationClusterID: e.a.ID}
	if err := e.b.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	poll.T(t, timeout, "the forged slice removed", func() error {
		err := e.b.Client.Get(context.Background(), client.ObjectKeyFromObject(s), &discoveryv1.EndpointSlice{})
		if err == nil {
			return fmt.Errorf("still there")
		}
		return client.IgnoreNotFound(err)
	})
	e.healthy(t, "a forged imported slice")
}

// craftedIDRecord: finding 18. A member that ground a namespace hash for the crafted id publishes a record and a
// slice there; the id fails validation, so nothing of it is imported. Since join, a member cannot create that
// namespace (only the joiner can): the administrator does, to show the controllers' own check.
func (e *env) craftedIDRecord(t *testing.T) {
	if err := broker.EnsureNamespace(context.Background(), e.admin, crafted); err != nil {
		t.Fatal(err)
	}
	defer e.publish(t, crafted, names.BrokerNamespace(crafted), "db", func(r *mcsv1beta1.ServiceImport) {
		r.Spec.Type = mcsv1beta1.Headless
	}, ipv4Slice("crafted", mcstest.Endpoint("10.66.6.3", "x", true)))()
	e.healthy(t, "a record with a crafted cluster id")
	e.waitRefused(t, "InvalidClusterID")
}

// badPorts: finding 2's hostile form. The oldest record of web has two unnamed ports; it is refused whole, and
// web stays what A and C export.
func (e *env) badPorts(t *testing.T) {
	defer e.publish(t, mallory, names.BrokerNamespace(mallory), "web", func(r *mcsv1beta1.ServiceImport) {
		r.Spec.Ports = []mcsv1beta1.ServicePort{{Port: 80}, {Port: 81}}
	}, ipv4Slice("ports", mcstest.Endpoint("10.66.6.4", "", true)))()
	e.waitRefused(t, "InvalidPorts")
	e.healthy(t, "a record with two unnamed ports")
	e.waitEndpoints(t, "web", map[string]int{"cluster-a": 2, "cluster-c": 1})
}

// brokenRecord: a record whose exported labels are not JSON is refused, and the rest goes on.
func (e *env) brokenRecord(t *testing.T) {
	defer e.publish(t, mallory, names.BrokerNamespace(mallory), "web", func(r *mcsv1beta1.ServiceImport) {
		r.Annotations[names.AnnotationExportedLabels] = "{not json"
	}, ipv4Slice("broken", mcstest.Endpoint("10.66.6.5", "", true)))()
	e.waitRefused(t, "InvalidRecord")
	e.healthy(t, "a broken record")
	e.waitEndpoints(t, "web", map[string]int{"cluster-a": 2, "cluster-c": 1})
}

// steerLocality: finding 3b. The oldest export of db carries the reserved locality annotation naming its own
// cluster alone; it is dropped, so db still answers every cluster's endpoints, mallory's among them, and an
// exported annotation of another domain on web is not taken from a record either when its value is too large.
func (e *env) steerLocality(t *testing.T) {
	undo := e.publish(t, mallory, names.BrokerNamespace(mallory), "db", func(r *mcsv1beta1.ServiceImport) {
		r.Spec.Type = mcsv1beta1.Headless
		r.Annotations[names.AnnotationExportedAnnotations] = `{"` + names.AnnotationLocality + `":"{\"dnsClusters\":[\"` + mallory + `\"]}"}`
	}, ipv4Slice("steer", mcstest.Endpoint("10.9.0.1", "m-0", true)))
	e.dbAddrs = []string{"10.1.1.1", "10.1.1.2", "10.9.0.1"}
	e.healthy(t, "a reserved locality annotation")
	undo()
	e.dbAddrs = []string{"10.1.1.1", "10.1.1.2"}
	e.healthy(t, "mallory's db withdrawn")
}

// localReferences: finding 16. Mallory's endpoints name a pod and a node of the importing cluster; the imported
// slices carry addresses, conditions, hostname and zone only.
func (e *env) localReferences(t *testing.T) {
	ep := mcstest.Endpoint("10.9.0.2", "", true)
	ep.NodeName = ptr.To("node-0")
	ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "victim"}
	ep.DeprecatedTopology = map[string]string{"a": "b"}
	defer e.publish(t, mallory, names.BrokerNamespace(mallory), "mal", nil, ipv4Slice("refs", ep))()
	poll.T(t, timeout, "mal imported into cluster-b without local references", func() error {
		slices := e.importedSlices(t, e.b, "mal")
		if len(slices) != 1 || len(slices[0].Endpoints) != 1 {
			return fmt.Errorf("%d slices", len(slices))
		}
		got := slices[0].Endpoints[0]
		if got.NodeName != nil || got.TargetRef != nil || got.DeprecatedTopology != nil {
			return fmt.Errorf("the imported endpoint kept %+v", got)
		}
		return nil
	})
	e.healthy(t, "endpoints with local references")
}

// invalidExportedLabels: finding 3a. A user exports a Service with a label value Kubernetes refuses; the export
// is Valid=False with the reason, nothing of it is imported anywhere, and everything else goes on.
func (e *env) invalidExportedLabels(t *testing.T) {
	ctx := context.Background()
	e.export(t, e.a, "typo", false, mcstest.Endpoint("10.1.2.1", "", true))
	se := &mcsv1beta1.ServiceExport{}
	poll.T(t, timeout, "typo exported", func() error {
		if err := e.a.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "typo"}, se); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(se.Status.Conditions, "Valid") {
			return fmt.Errorf("conditions %+v", se.Status.Conditions)
		}
		return nil
	})
	se.Spec.ExportedLabels = map[string]string{"team": "payments team"}
	if err := e.a.Client.Update(ctx, se); err != nil {
		t.Fatal(err)
	}
	poll.T(t, timeout, "typo Valid=False/InvalidExportedMetadata and withdrawn everywhere", func() error {
		if err := e.a.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "typo"}, se); err != nil {
			return err
		}
		c := meta.FindStatusCondition(se.Status.Conditions, "Valid")
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "InvalidExportedMetadata" || !strings.Contains(c.Message, `"team"`) {
			return fmt.Errorf("Valid condition %+v", c)
		}
		for _, m := range e.f.Members {
			err := m.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "typo"}, &mcsv1beta1.ServiceImport{})
			if client.IgnoreNotFound(err) != nil || err == nil {
				return fmt.Errorf("%s still imports typo (%v)", m.Name, err)
			}
		}
		return nil
	})
	e.healthy(t, "invalid exported labels")
}

// brokerLikeNamespace: finding 15. A user's namespace whose name starts like a broker namespace exports and
// imports like any other.
func (e *env) brokerLikeNamespace(t *testing.T) {
	ctx := context.Background()
	const portal = "mcs-member-portal"
	for _, m := range e.f.Members {
		if err := mcstest.CreateNamespace(ctx, m.Client, portal); err != nil {
			t.Fatal(err)
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: portal, Name: "p"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	for _, o := range []client.Object{svc, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: portal, Name: "p"}}} {
		if err := e.a.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	poll.T(t, timeout, "p imported into cluster-b", func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := e.b.Client.Get(ctx, types.NamespacedName{Namespace: portal, Name: "p"}, si); err != nil {
			return err
		}
		if len(si.Spec.IPs) == 0 {
			return fmt.Errorf("no ClusterSetIP yet")
		}
		return nil
	})
}

// forgedLease: finding 4. With cluster-c's controller stopped, mallory keeps a Lease of its own annotated with
// cluster-c's id fresh; cluster-c's endpoints are withdrawn anyway once its own Lease lapses.
func (e *env) forgedLease(t *testing.T) {
	ctx := context.Background()
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: names.BrokerNamespace(mallory), Name: "forged",
			Labels:      map[string]string{names.LabelManagedBy: names.ManagedBy},
			Annotations: map[string]string{names.AnnotationClusterID: e.c.ID}},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	if err := e.brokerC.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	e.c.StopController()
	e.waitEndpoints(t, "web", map[string]int{"cluster-a": 2})
	if err := e.c.StartController(); err != nil {
		t.Fatal(err)
	}
	e.waitEndpoints(t, "web", map[string]int{"cluster-a": 2, "cluster-c": 1})
	e.healthy(t, "a forged Lease")
}

// waitRefused waits until cluster-b's controller counts a refusal of the reason.
func (e *env) waitRefused(t *testing.T, reason string) {
	t.Helper()
	poll.T(t, timeout, "cluster-b's controller refuses with "+reason, func() error {
		n, err := e.b.ControllerMetric("mcs_controller_refused_total", map[string]string{"reason": reason})
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("none counted")
		}
		return nil
	})
}

// outsideItsNamespace: an attack of our own. Mallory tries to read the broker's own objects (where the broker is
// also a member, its workloads' endpoints), to write or delete in an honest member's namespace, and to list itself
// in the member directory under another name: the broker refuses each, and every honest import stays as it was.
func (e *env) outsideItsNamespace(t *testing.T) {
	ctx := context.Background()
	nsA := names.BrokerNamespace(e.a.ID)
	rec := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: ns + ".web"},
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{mcstest.Port("http", corev1.ProtocolTCP, 80)}}}
	entry := broker.DirectoryEntry(e.a.ID)
	entry.Name = "mcs-member-mallory-twin"
	// The broker's own objects, of the built-in and mcs-api kinds: where the broker is a member too, its workloads'.
	own, err := memberClient(e.f, mallory, e.f.Broker.Client.Scheme(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for what, do := range map[string]func() error{
		"list EndpointSlices in every namespace": func() error { return own.List(ctx, &discoveryv1.EndpointSliceList{}) },
		"list the broker's own Leases": func() error {
			return own.List(ctx, &coordinationv1.LeaseList{}, client.InNamespace(metav1.NamespaceSystem))
		},
		"list ServiceImports in every namespace": func() error { return own.List(ctx, &mcsv1beta1.ServiceImportList{}) },
		"overwrite cluster-a's record of web":    func() error { return e.brokerC.Create(ctx, rec) },
		"delete cluster-a's Lease": func() error {
			return e.brokerC.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: names.LeaseName}})
		},
		"add an entry to the member directory":       func() error { return e.brokerC.Create(ctx, entry) },
		"create a namespace for a ground cluster id": func() error { return broker.EnsureNamespace(ctx, e.brokerC, crafted) },
	} {
		if err := do(); !apierrors.IsForbidden(err) {
			t.Errorf("mallory may %s: want Forbidden, got %v", what, err)
		}
	}
	// What it may: read every member's records, which are the clusterset's and nothing else of the broker.
	if err := e.brokerC.List(ctx, &mcsv1beta1.ServiceImportList{}); err != nil {
		t.Errorf("mallory may not read the members' records: %v", err)
	}
	e.healthy(t, "mallory's tries outside its namespace")
	e.waitEndpoints(t, "web", map[string]int{"cluster-a": 2, "cluster-c": 1})
}
