package names

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestBrokerNamespace(t *testing.T) {
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 66)
	cases := []struct{ id, want string }{
		{"cluster-a", "mcs-member-cluster-a-"},
		{"east.prod", "mcs-member-east-prod-"},
		{long, "mcs-member-" + strings.Repeat("a", 30) + "-"},
	}
	seen := map[string]string{}
	for _, c := range cases {
		got := BrokerNamespace(c.id)
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("BrokerNamespace(%q) = %q, want prefix %q", c.id, got, c.want)
		}
		if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
			t.Errorf("BrokerNamespace(%q) = %q is no namespace name: %v", c.id, got, errs)
		}
		if !IsBrokerNamespace(got) {
			t.Errorf("IsBrokerNamespace(%q) = false", got)
		}
		if prev, dup := seen[got]; dup {
			t.Errorf("ids %q and %q share namespace %q", prev, c.id, got)
		}
		seen[got] = c.id
	}
	if IsBrokerNamespace("default") || IsBrokerNamespace("mcs-members") {
		t.Error("IsBrokerNamespace accepts a service namespace")
	}
	// Ids that sanitise alike must still get distinct namespaces.
	if BrokerNamespace("east.prod") == BrokerNamespace("east-prod") {
		t.Error(`"east.prod" and "east-prod" share a broker namespace`)
	}
}

func TestLabelValue(t *testing.T) {
	long := strings.Repeat("a", 62) + "." + strings.Repeat("b", 60)
	cases := []struct {
		id   string
		same bool
	}{
		{"cluster-a", true},
		{"east.prod", true},
		{strings.Repeat("x", 63), true},
		{long, false},
		{strings.Repeat("a", 52) + "." + strings.Repeat("b", 20), false},
	}
	for _, c := range cases {
		got := LabelValue(c.id)
		if (got == c.id) != c.same {
			t.Errorf("LabelValue(%q) = %q, want unchanged = %v", c.id, got, c.same)
		}
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("LabelValue(%q) = %q is no label value: %v", c.id, got, errs)
		}
	}
}

func TestObjectNames(t *testing.T) {
	long := strings.Repeat("s", 63)
	for _, svc := range []string{"web", long} {
		d := DerivedServiceName("ns", svc)
		if errs := validation.IsDNS1035Label(d); len(errs) > 0 {
			t.Errorf("DerivedServiceName(ns, %q) = %q is no service name: %v", svc, d, errs)
		}
		if d == DerivedServiceName("ns2", svc) {
			t.Errorf("DerivedServiceName ignores the namespace: %q", d)
		}
		s := ImportedSliceName(svc, "east.prod", BrokerSliceName("ns", svc, "web-abcde", 0))
		if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
			t.Errorf("ImportedSliceName = %q is no object name: %v", s, errs)
		}
		if s == ImportedSliceName(svc, "west.prod", BrokerSliceName("ns", svc, "web-abcde", 0)) {
			t.Errorf("ImportedSliceName ignores the cluster: %q", s)
		}
	}
	if got := BrokerSliceName("ns", "web", "web-abcde", 0); got != "ns.web.web-abcde" {
		t.Errorf("BrokerSliceName part 0 = %q", got)
	}
	if got := BrokerSliceName("ns", "web", "web-abcde", 2); got != "ns.web.web-abcde.2" {
		t.Errorf("BrokerSliceName part 2 = %q", got)
	}
	// User-made source slices: dots and long names never collide and always fit.
	if a, b := BrokerSliceName("ns", "web", "x.1", 0), BrokerSliceName("ns", "web", "x", 1); a == b {
		t.Errorf("source x.1 and part 1 of x share the name %q", a)
	}
	longSrc := strings.Repeat("s", 253)
	if got := BrokerSliceName(strings.Repeat("n", 63), strings.Repeat("w", 63), longSrc, 999); len(got) > 253 || len(validation.IsDNS1123Subdomain(got)) > 0 {
		t.Errorf("BrokerSliceName of a long source = %q (%d characters)", got, len(got))
	}
	if got := RecordName("ns", "web"); got != "ns.web" {
		t.Errorf("RecordName = %q", got)
	}
}

func TestClusterLocalServiceName(t *testing.T) {
	fits, long := strings.Repeat("f", 52), strings.Repeat("l", 63)
	cases := []struct{ svc, want string }{
		{"web", "web-clusterset"},
		{"web-clusterset", "web-clusterset-clusterset"},
		{fits, fits + "-clusterset"},
		{fits + "x", strings.Repeat("f", 41) + "-" + hash(10, "ns", fits+"x") + "-clusterset"},
		{long, strings.Repeat("l", 41) + "-" + hash(10, "ns", long) + "-clusterset"},
		{strings.Repeat("a", 40) + "-b" + strings.Repeat("c", 20), strings.Repeat("a", 40) + "-" + hash(10, "ns", strings.Repeat("a", 40)+"-b"+strings.Repeat("c", 20)) + "-clusterset"},
	}
	seen := map[string]string{}
	for _, c := range cases {
		got := ClusterLocalServiceName("ns", c.svc)
		if got != c.want {
			t.Errorf("ClusterLocalServiceName(ns, %q) = %q, want %q", c.svc, got, c.want)
		}
		if errs := validation.IsDNS1035Label(got); len(errs) > 0 {
			t.Errorf("ClusterLocalServiceName(ns, %q) = %q is no Service name: %v", c.svc, got, errs)
		}
		if !IsClusterLocalServiceName(got) {
			t.Errorf("IsClusterLocalServiceName(%q) = false", got)
		}
		if prev, dup := seen[got]; dup {
			t.Errorf("%q and %q share the cluster-local name %q", prev, c.svc, got)
		}
		seen[got] = c.svc
		// Never the name of the Service being imported, nor of its derived Service.
		if got == c.svc || got == DerivedServiceName("ns", c.svc) || IsClusterLocalServiceName(DerivedServiceName("ns", c.svc)) {
			t.Errorf("ClusterLocalServiceName(ns, %q) = %q may clash with the service or its derived Service", c.svc, got)
		}
	}
	if ClusterLocalServiceName("ns", long) == ClusterLocalServiceName("other", long) {
		t.Error("a shortened cluster-local name ignores the namespace")
	}
	if got := ClusterLocalSliceName("web-ipv4"); got != "web-ipv4-clusterset" {
		t.Errorf("ClusterLocalSliceName = %q", got)
	}
}

func TestDNSNames(t *testing.T) {
	if got, want := ServiceDNSName("demo", "web"), "web.demo.svc.clusterset.local"; got != want {
		t.Errorf("ServiceDNSName = %q, want %q", got, want)
	}
	if DNSVersionName != "dns-version.clusterset.local" {
		t.Errorf("DNSVersionName = %q", DNSVersionName)
	}
}

func TestKeyPrefix(t *testing.T) {
	for _, key := range []string{LabelServiceNamespace, AnnotationClusterID, AnnotationCredential, AnnotationUnreachable,
		AnnotationExportCreated, AnnotationExportedLabels, AnnotationExportedAnnotations, AnnotationSlices,
		AnnotationRegion, AnnotationDrain, AnnotationLocality, LabelClusterLocalOf, LabelMemberDirectory} {
		if !strings.HasPrefix(key, KeyPrefix) {
			t.Errorf("%s does not start with KeyPrefix %s", key, KeyPrefix)
		}
	}
}
