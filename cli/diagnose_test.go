package cli

import (
	"regexp"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/names"
)

var (
	web   = types.NamespacedName{Namespace: "demo", Name: "web"}
	epoch = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
)

// fixture is a healthy clusterset built with the controller's own builders: cluster-a exports demo/web with two
// ready endpoints, cluster-a and cluster-b import it, both Leases are fresh, and each member's DNS answers.
func fixture(t *testing.T) *Snapshot {
	t.Helper()
	export := merge.Export{Cluster: "cluster-a", Created: epoch, Spec: mcsv1beta1.ServiceImportSpec{
		Type: mcsv1beta1.ClusterSetIP, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
	}}
	record, err := broker.Record(web, export)
	if err != nil {
		t.Fatal(err)
	}
	source := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-abcde"},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.1.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.1.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
		},
	}
	brokerSlice := broker.Slice("cluster-a", web, &source)
	brokerSlice.Name = names.BrokerSliceName(web.Namespace, web.Name, source.Name, 0)
	s := &Snapshot{Now: epoch.Add(time.Hour), Broker: Broker{
		Context: "broker", Records: []mcsv1beta1.ServiceImport{*record},
		Slices: []discoveryv1.EndpointSlice{*brokerSlice},
		Leases: []coordinationv1.Lease{lease("cluster-a", 2*time.Second), lease("cluster-b", time.Second)},
	}}
	merged := merge.Merge([]merge.Export{export})
	for i, name := range []string{"cluster-a", "cluster-b"} {
		derived := imports.DerivedService(web, merged, nil)
		derived.Spec.ClusterIPs = []string{"10.128.0." + string(rune('1'+i))}
		si := imports.ServiceImport(web, merged, derived)
		m := Member{
			Context: name, ClusterID: name, ClusterSet: "set", Namespaces: []string{"default", "demo"},
			Imports: []mcsv1beta1.ServiceImport{*si}, DerivedServices: []corev1.Service{*derived},
			Slices: imports.Slices(web, []imports.Source{{Cluster: "cluster-a", Slice: *brokerSlice}}, merge.SlicePorts{}, nil),
			DNS:    "127.0.0.1:53" + string(rune('1'+i)), DNSSource: "--dns",
			DNSAnswers: map[string]DNSAnswer{
				versionQuery:                           {Rcode: "NOERROR", Records: []string{"1.0.0"}},
				serviceQueries(web)[0].key():           {Rcode: "NOERROR", Records: derived.Spec.ClusterIPs},
				serviceQueries(web)[1].key():           {Rcode: "NOERROR"},
				clusterIDQuery(web, "cluster-a").key(): {Rcode: "NXDOMAIN"},
			},
		}
		s.Members = append(s.Members, m)
	}
	s.Members[0].Exports = []mcsv1beta1.ServiceExport{{
		ObjectMeta: metav1.ObjectMeta{Namespace: web.Namespace, Name: web.Name},
		Status: mcsv1beta1.ServiceExportStatus{Conditions: []metav1.Condition{
			{Type: "Valid", Status: metav1.ConditionTrue, Reason: "Valid"},
			{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Exported"},
			{Type: "Conflict", Status: metav1.ConditionFalse, Reason: "NoConflicts"},
		}},
	}}
	return s
}

// lease is the member's broker Lease renewed age before the fixture's Now, with a 30 s grace.
func lease(id string, age time.Duration) coordinationv1.Lease {
	return coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: names.BrokerNamespace(id), Name: names.LeaseName,
			Annotations: map[string]string{names.AnnotationClusterID: id}},
		Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](30),
			RenewTime: &metav1.MicroTime{Time: epoch.Add(time.Hour - age)}},
	}
}

// diagnoseCase is a fault caused on the fixture and the check that must see it.
type diagnoseCase struct {
	name            string
	fault           func(*Snapshot)
	check, cluster  string
	service         string
	want            Result
	messageContains string
}

// stockCoreDNS is the image of a cluster's stock CoreDNS, which has no multicluster plugin.
const stockCoreDNS = "registry.k8s.io/coredns/coredns:v1.12.0"

// withoutDemo adds cluster-c, which has no namespace demo, and whose DNS answers demo/web as rcode.
func withoutDemo(rcode string) func(*Snapshot) {
	return func(s *Snapshot) {
		s.Broker.Leases = append(s.Broker.Leases, lease("cluster-c", time.Second))
		s.Members = append(s.Members, Member{Context: "cluster-c", ClusterID: "cluster-c", Namespaces: []string{"default"},
			DNS: "127.0.0.1:533", DNSSource: "--dns", DNSAnswers: map[string]DNSAnswer{
				versionQuery:                 {Rcode: "NOERROR", Records: []string{"1.0.0"}},
				serviceQueries(web)[0].key(): {Rcode: rcode},
				serviceQueries(web)[1].key(): {Rcode: rcode},
			}})
	}
}

func diagnoseCases() []diagnoseCase {
	return []diagnoseCase{
		{"member unreachable", func(s *Snapshot) { s.Members[1] = Member{Context: "cluster-b", Error: "connection refused"} },
			CheckReachable, "cluster-b", "", Fail, "connection refused"},
		{"member no context reaches", func(s *Snapshot) {
			s.Broker.Leases = append(s.Broker.Leases, lease("cluster-c", time.Second))
			s.Members = append(s.Members, Member{ClusterID: "cluster-c"})
		}, CheckReachable, "cluster-c", "", Unknown, "no kubeconfig context reaches member cluster-c"},
		{"broker CRD missing", func(s *Snapshot) { s.Broker.MissingAPIs = []string{"serviceimports.multicluster.x-k8s.io"} },
			CheckCRDs, "broker", "", Fail, "serviceimports"},
		{"CRD missing", func(s *Snapshot) { s.Members[1].MissingAPIs = []string{"serviceexports.multicluster.x-k8s.io"} },
			CheckCRDs, "cluster-b", "", Fail, "serviceexports"},
		{"no Corefile ConfigMap", func(*Snapshot) {}, CheckCorefile, "cluster-a", "", Unknown, "no ConfigMap"},
		{"Corefile without the stanza", func(s *Snapshot) { s.Members[0].Corefile = ptr.To(".:53 {\n  errors\n}\n") },
			CheckCorefile, "cluster-a", "", Fail, "no multicluster stanza"},
		{"stock CoreDNS without the stanza", func(s *Snapshot) {
			s.Members[0].Corefile, s.Members[0].CoreDNSImage = ptr.To(".:53 {\n  errors\n}\n"), stockCoreDNS
		}, CheckCorefile, "cluster-a", "", Fail, "no multicluster stanza"},
		{"our CoreDNS without the stanza", func(s *Snapshot) {
			s.Members[0].Corefile, s.Members[0].CoreDNSImage = ptr.To(".:53 {\n  errors\n}\n"), "ghcr.io/vksfleet/coredns:v0.1.0"
		}, CheckCorefile, "cluster-a", "", Fail, "no multicluster stanza"},
		{"Corefile that does not parse", func(s *Snapshot) { s.Members[0].Corefile = ptr.To(".:53 {\n") },
			CheckCorefile, "cluster-a", "", Fail, "does not parse"},
		{"Corefile with the stanza", func(s *Snapshot) { s.Members[0].Corefile = ptr.To(".:53 {\n  multicluster clusterset.local\n}\n") },
			CheckCorefile, "cluster-a", "", Pass, ""},
		{"DNS without the zone", func(s *Snapshot) { s.Members[1].DNSAnswers[versionQuery] = DNSAnswer{Rcode: "REFUSED"} },
			CheckDNS, "cluster-b", "", Fail, "REFUSED"},
		{"DNS unreachable", func(s *Snapshot) { s.Members[1].DNSAnswers[versionQuery] = DNSAnswer{Error: "i/o timeout"} },
			CheckDNS, "cluster-b", "", Fail, "i/o timeout"},
		{"kube-dns ClusterIP unreachable from here", func(s *Snapshot) {
			s.Members[1].DNS, s.Members[1].DNSSource = "10.96.0.10:53", kubeDNSSource
			s.Members[1].DNSAnswers[versionQuery] = DNSAnswer{Error: "read udp: i/o timeout"}
		}, CheckDNS, "cluster-b", "", Unknown, "i/o timeout"},
		{"kube-dns ClusterIP unreachable, for a service", func(s *Snapshot) {
			s.Members[1].DNS, s.Members[1].DNSSource = "10.96.0.10:53", kubeDNSSource
			s.Members[1].DNSAnswers[serviceQueries(web)[0].key()] = DNSAnswer{Error: "dial udp: connect: network is unreachable"}
		}, CheckDNS, "cluster-b", "demo/web", Unknown, "network is unreachable"},
		{"stock DNS without the zone", func(s *Snapshot) {
			s.Members[1].CoreDNSImage = stockCoreDNS
			s.Members[1].DNSAnswers[versionQuery] = DNSAnswer{Rcode: "NXDOMAIN"}
		}, CheckDNS, "cluster-b", "", Fail, "NXDOMAIN"},
		{"in-cluster probe could not run", func(s *Snapshot) {
			s.Members[1].DNS, s.Members[1].DNSSource, s.Members[1].DNSAnswers = inClusterAddress, inClusterSource, nil
			s.Members[1].DNSError = "creating the probe pod in namespace default: forbidden"
		}, CheckDNS, "cluster-b", "", Unknown, "forbidden"},
		{"in-cluster DNS does not answer its pods", func(s *Snapshot) {
			s.Members[1].DNS, s.Members[1].DNSSource = inClusterAddress, inClusterSource
			s.Members[1].DNSAnswers[versionQuery] = DNSAnswer{Error: "connection timed out; no servers could be reached"}
		}, CheckDNS, "cluster-b", "", Fail, "no servers"},
		{"absent namespace answers NXDOMAIN", withoutDemo("NXDOMAIN"), CheckDNS, "cluster-c", "demo/web", Pass, "NXDOMAIN"},
		{"absent namespace answers NOERROR", withoutDemo("NOERROR"), CheckDNS, "cluster-c", "demo/web", Fail, "want NXDOMAIN"},
		{"no DNS address", func(s *Snapshot) { s.Members[1].DNS, s.Members[1].DNSAnswers = "", nil },
			CheckDNS, "cluster-b", "", Unknown, "no DNS address"},
		{"DNS answers another IP", func(s *Snapshot) {
			s.Members[1].DNSAnswers[serviceQueries(web)[0].key()] = DNSAnswer{Rcode: "NOERROR", Records: []string{"10.9.9.9"}}
		}, CheckDNS, "cluster-b", "demo/web", Fail, "10.9.9.9"},
		{"DNS answers a name at a cluster id", func(s *Snapshot) {
			s.Members[1].DNSAnswers[clusterIDQuery(web, "cluster-a").key()] = DNSAnswer{Rcode: "NOERROR", Records: []string{"10.1.0.1"}}
		}, CheckDNS, "cluster-b", "demo/web", Fail, "cluster-a.web.demo.svc.clusterset.local answered [10.1.0.1] (NOERROR), want NXDOMAIN"},
		{"DNS NXDOMAIN for the service", func(s *Snapshot) {
			s.Members[1].DNSAnswers[serviceQueries(web)[0].key()] = DNSAnswer{Rcode: "NXDOMAIN"}
		}, CheckDNS, "cluster-b", "demo/web", Fail, "NXDOMAIN"},
		{"lease expired", func(s *Snapshot) { s.Broker.Leases[1] = lease("cluster-b", 31*time.Second) },
			CheckLease, "cluster-b", "", Fail, "past the grace"},
		{"lease absent", func(s *Snapshot) { s.Broker.Leases = s.Broker.Leases[:1] }, CheckLease, "cluster-b", "", Fail, "no Lease"},
		{"lease renewed in the future", func(s *Snapshot) { s.Broker.Leases[1] = lease("cluster-b", -time.Minute) },
			CheckLease, "cluster-b", "", Fail, "future"},
		{"clock skew", func(s *Snapshot) { s.Members[1].ClockOffset = 45 * time.Second }, CheckClock, "cluster-b", "", Fail, "45s off"},
		{"clock skew within the grace", func(s *Snapshot) { s.Members[1].ClockOffset = 20 * time.Second }, CheckClock, "cluster-b", "", Pass, ""},
		{"slices of a member that left", func(s *Snapshot) { s.Broker.Leases = s.Broker.Leases[1:] },
			CheckStaleSlices, "cluster-b", "", Fail, "left the clusterset"},
		{"slices of an expired member", func(s *Snapshot) { s.Broker.Leases[0] = lease("cluster-a", time.Minute) },
			CheckStaleSlices, "cluster-b", "", Fail, "last renewed 1m0s ago"},
		{"slices being withdrawn right after expiry", func(s *Snapshot) { s.Broker.Leases[0] = lease("cluster-a", 32*time.Second) },
			CheckStaleSlices, "cluster-b", "", Pass, ""},
		{"the exporter's own slices are never stale", func(s *Snapshot) { s.Broker.Leases[0] = lease("cluster-a", time.Minute) },
			CheckStaleSlices, "cluster-a", "", Pass, ""},
		{"slices of a member whose control plane is lost, kept on purpose", func(s *Snapshot) {
			s.Broker.Leases[0] = lease("cluster-a", time.Minute)
			meta.SetStatusCondition(&s.Members[1].Imports[0].Status.Conditions, metav1.Condition{Type: imports.ConditionStale,
				Status: metav1.ConditionTrue, Reason: imports.ReasonControlPlaneLost, Message: "The control plane of cluster-a (Lease last seen renewed at ...) is lost"})
		}, CheckStaleSlices, "cluster-b", "", Pass, ""},
		{"a member's endpoints unreachable from another", func(s *Snapshot) {
			s.Broker.Leases[1].Annotations[names.AnnotationUnreachable] = "cluster-a,Not_An_ID"
		}, CheckDataPlane, "cluster-a", "", Fail, "do not answer from cluster-b"},
		{"a member's endpoints answer everywhere", func(s *Snapshot) {}, CheckDataPlane, "cluster-a", "", Pass, ""},
		{"export invalid", func(s *Snapshot) {
			s.Members[0].Exports[0].Status.Conditions[0] = metav1.Condition{Type: "Valid", Status: metav1.ConditionFalse, Reason: "NoService"}
		}, CheckExportValid, "cluster-a", "demo/web", Fail, "NoService"},
		{"export valid but not published", func(s *Snapshot) {
			s.Members[0].Exports[0].Status.Conditions[1] = metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Failed", Message: "forbidden"}
		}, CheckExportReady, "cluster-a", "demo/web", Fail, "Ready=False/Failed: forbidden"},
		{"export published", func(s *Snapshot) {}, CheckExportReady, "cluster-a", "demo/web", Pass, "published"},
		{"export in conflict", func(s *Snapshot) {
			s.Members[0].Exports[0].Status.Conditions[2] = metav1.Condition{Type: "Conflict", Status: metav1.ConditionTrue, Reason: "PortConflict", Message: "ports differ"}
		}, CheckExportConflict, "cluster-a", "demo/web", Fail, "PortConflict"},
		{"import missing", func(s *Snapshot) { s.Members[1].Imports = nil }, CheckImportPresent, "cluster-b", "demo/web", Fail, "no ServiceImport"},
		{"import left behind", func(s *Snapshot) { s.Broker.Records = nil }, CheckImportPresent, "cluster-b", "demo/web", Fail, "no cluster exports"},
		{"import's slices lag the broker", func(s *Snapshot) { s.Members[1].Slices[0].Endpoints = s.Members[1].Slices[0].Endpoints[:1] },
			CheckImportConsistent, "cluster-b", "demo/web", Fail, "1 here"},
		{"derived Service missing", func(s *Snapshot) { s.Members[1].DerivedServices = nil },
			CheckImportConsistent, "cluster-b", "demo/web", Fail, "no derived Service"},
		{"import's ports differ", func(s *Snapshot) { s.Members[1].Imports[0].Spec.Ports[0].Port = 81 },
			CheckImportConsistent, "cluster-b", "demo/web", Fail, "ports"},
	}
}

func TestDiagnose(t *testing.T) {
	if checks := Diagnose(fixture(t), []types.NamespacedName{web}); !Passed(checks) {
		t.Fatalf("the healthy fixture fails: %+v", checks)
	}
	for _, c := range diagnoseCases() {
		t.Run(c.name, func(t *testing.T) {
			s := fixture(t)
			c.fault(s)
			checks := Diagnose(s, []types.NamespacedName{web})
			var found []Check
			for _, got := range checks {
				if got.Check == c.check && got.Cluster == c.cluster && got.Service == c.service {
					found = append(found, got)
				}
			}
			if len(found) != 1 {
				t.Fatalf("%d %s checks for %s %s in %+v", len(found), c.check, c.cluster, c.service, checks)
			}
			got := found[0]
			if got.Result != c.want || !strings.Contains(got.Message, c.messageContains) {
				t.Errorf("%s: %s %q, want %s containing %q", c.check, got.Result, got.Message, c.want, c.messageContains)
			}
			if got.Result != Pass && got.Hint == "" {
				t.Errorf("%s %s without a hint", c.check, got.Result)
			}
			if c.want == Fail && Passed(checks) {
				t.Error("Passed with a failed check")
			}
		})
	}
}

// TestHints reads every hint diagnose gives for every fault: none may break a cluster. A whole manifest
// (member.yaml replaces the cluster's Corefile, CoreDNS Deployment and kube-dns Service) is never suggested, nor
// adding the multicluster directive unless the member runs our CoreDNS build, the only one that loads it.
func TestHints(t *testing.T) {
	addsMulticluster := regexp.MustCompile(`(?i)\badd\b[^:;]*multicluster`)
	seen := 0
	for _, c := range diagnoseCases() {
		s := fixture(t)
		c.fault(s)
		for _, check := range Diagnose(s, []types.NamespacedName{web}) {
			if check.Hint == "" {
				continue
			}
			seen++
			for _, banned := range []string{"member.yaml", "broker.yaml", "bin/manifests", "apply -f"} {
				if strings.Contains(check.Hint, banned) {
					t.Errorf("%s: %s %s hint suggests %q: %s", c.name, check.Check, check.Cluster, banned, check.Hint)
				}
			}
			m := s.member(check.Cluster)
			if addsMulticluster.MatchString(check.Hint) && (m == nil || !m.ourCoreDNS()) {
				t.Errorf("%s: %s %s hint adds multicluster to a Corefile whose CoreDNS may be stock: %s", c.name, check.Check, check.Cluster, check.Hint)
			}
		}
	}
	if seen < len(diagnoseCases()) {
		t.Errorf("only %d hints seen", seen)
	}
	hint := func(name string) string {
		for _, c := range diagnoseCases() {
			if c.name == name {
				s := fixture(t)
				c.fault(s)
				for _, check := range Diagnose(s, []types.NamespacedName{web}) {
					if check.Check == c.check && check.Cluster == c.cluster && check.Service == c.service {
						return check.Hint
					}
				}
			}
		}
		t.Fatalf("no case %q", name)
		return ""
	}
	for _, c := range []struct{ name, want string }{
		{"CRD missing", "kubectl --context cluster-b apply -k build/deploy/crds"},
		{"CRD missing", "kubectl mcs join"},
		{"broker CRD missing", "kubectl --context broker apply -k build/deploy/crds"},
		{"stock CoreDNS without the stanza", "kubectl mcs join"},
		{"stock DNS without the zone", "kubectl mcs join"},
		{"our CoreDNS without the stanza", "edit configmap coredns"},
		{"kube-dns ClusterIP unreachable from here", "--dns cluster-b=HOST:PORT"},
		{"kube-dns ClusterIP unreachable from here", "--in-cluster"},
		{"kube-dns ClusterIP unreachable, for a service", "--in-cluster"},
		{"no DNS address", "--in-cluster"},
		{"in-cluster probe could not run", "--image"},
		{"member no context reaches", "--contexts"},
	} {
		if h := hint(c.name); !strings.Contains(h, c.want) {
			t.Errorf("%s: hint %q lacks %q", c.name, h, c.want)
		}
	}
}

// member finds a member by the name diagnose gives it.
func (s *Snapshot) member(name string) *Member {
	for i := range s.Members {
		if s.Members[i].name() == name {
			return &s.Members[i]
		}
	}
	return nil
}

// TestDiagnoseClusterLocal: a member in the cluster-local DNS mode, whose stock DNS serves no clusterset.local,
// passes once its imports are reflected into cluster.local, and fails on an import that is not.
func TestDiagnoseClusterLocal(t *testing.T) {
	clusterLocal := func(cond *metav1.Condition) *Snapshot {
		s := fixture(t)
		b := &s.Members[1]
		b.ClusterLocal, b.Corefile, b.CoreDNSImage = true, ptr.To(".:53 {\n  kubernetes cluster.local\n}\n"), stockCoreDNS
		for q := range b.DNSAnswers {
			b.DNSAnswers[q] = DNSAnswer{Rcode: "NXDOMAIN"}
		}
		if cond != nil {
			b.Imports[0].Status.Conditions = []metav1.Condition{*cond}
		}
		return s
	}
	reflected := &metav1.Condition{Type: imports.ConditionClusterLocalService, Status: metav1.ConditionTrue, Reason: "Reflected"}
	nameInUse := &metav1.Condition{Type: imports.ConditionClusterLocalService, Status: metav1.ConditionFalse, Reason: "NameInUse", Message: "taken"}
	for _, c := range []struct {
		name string
		cond *metav1.Condition
		want Result
	}{{"reflected", reflected, Pass}, {"name in use", nameInUse, Fail}, {"not reflected", nil, Fail}} {
		checks := Diagnose(clusterLocal(c.cond), []types.NamespacedName{web})
		var got []Check
		for _, ch := range checks {
			if ch.Cluster != "cluster-b" {
				continue
			}
			switch ch.Check {
			case CheckCorefile:
				t.Errorf("%s: a corefile check on a cluster-local member: %+v", c.name, ch)
			case CheckDNS:
				if ch.Result != Pass {
					t.Errorf("%s: %+v, want the clusterset.local DNS not judged in the cluster-local mode", c.name, ch)
				}
			case CheckClusterLocal:
				got = append(got, ch)
			}
		}
		if len(got) != 1 || got[0].Result != c.want || (c.want != Pass && got[0].Hint == "") {
			t.Errorf("%s: cluster-local checks %+v, want one %s with a hint unless it passes", c.name, got, c.want)
		}
		if Passed(checks) != (c.want == Pass) {
			t.Errorf("%s: Passed = %v, want %v: %+v", c.name, Passed(checks), c.want == Pass, checks)
		}
	}
}

// TestClusterLocalMode reads the cluster-local mode from the controller's arguments as its flag package would.
func TestClusterLocalMode(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--leader-elect", "--dns-address=kube-dns.kube-system.svc:53"}, false},
		{[]string{"--leader-elect", "--cluster-local-services"}, true},
		{[]string{"-cluster-local-services=true"}, true},
		{[]string{"--cluster-local-services", "--cluster-local-services=false"}, false},
		{[]string{"cluster-local-services"}, false},
	} {
		if got := clusterLocalMode(c.args); got != c.want {
			t.Errorf("clusterLocalMode(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}
