package admit_test

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/names"
)

// FuzzRecord feeds the import what another member writes on the broker: an export record whose labels,
// annotations and spec are all the fuzzer's goes through broker.ServiceOf and ParseRecord and the import's checks
// (admit.ClusterID, the record's namespace, admit.Record), as the controller's admitRecord takes it. Nothing may panic; a
// refusal gives exactly one problem; what is admitted passes the checks again with no problem, has fields the
// Service API accepts (checked here apart from admit.Spec), ranks no earlier than PrecedenceAllowance before its
// record's creation, and merges with an honest export into a derived Service with the same properties.
func FuzzRecord(f *testing.F) {
	type seed struct {
		ns, name, id                 string
		elsewhere                    bool
		created                      string
		recorded                     int64
		region, typ                  string
		portName, protocol           string
		port                         int32
		family1, family2             string
		families                     uint8
		affinity                     string
		timeout                      int32
		config                       bool
		policy, distribution         string
		exportedLabels, exportedAnns string
	}
	const at = "2026-11-28T10:00:00Z"
	recorded := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC).Unix()
	for _, s := range []seed{
		{"ns", "web", "cluster-b", false, at, recorded, "region-1", "ClusterSetIP", "http", "TCP", 80, "IPv4", "", 1, "None", 0, false, "Cluster", "", `{"tier":"gold"}`, `{"example.com/a":"b"}`},
		{"ns", "db", "east.prod", false, at, recorded, "", "Headless", "", "", 5432, "IPv6", "IPv4", 2, "ClientIP", 10800, true, "Local", "PreferSameZone", "", ""},
		{"ns", "web", "0-forger", false, "1970-01-01T00:00:00Z", recorded, "us east", "Headless", "http", "TCP", 81, "IPv4", "IPv6", 2, "", 0, false, "", "PreferClose", "", ""},
		{"ns", "web", "0-forger", false, "0001-01-01T00:00:00Z", recorded, "region-1", "ClusterSetIP", "http", "TCP", 80, "x", "", 1, "ClientIP", 0, true, "Node", "Anywhere", "", ""},
		{"default", "Web_1", "cluster-b", false, at, recorded, "", "ClusterSetIP", "http", "TCP", 80, "IPv4", "IPv4", 2, "None", 5, true, "", "", `{"mcs.vksfleet.dev/locality":"x"}`, "{"},
		{"kube-system", "kube-dns", "cluster-b", false, at, recorded, "", "ClusterSetIP", "dns", "UDP", 53, "IPv4", "", 1, "None", 0, false, "", "", "", ""},
		{"ns", "web", "cluster-c", true, at, 0, "", "ClusterIP", "Http_1", "ICMP", 70000, "", "", 0, "Cookie", -1, true, "", "", "", ""},
	} {
		f.Add(s.ns, s.name, s.id, s.elsewhere, s.created, s.recorded, s.region, s.typ, s.portName, s.protocol, s.port,
			s.family1, s.family2, s.families, s.affinity, s.timeout, s.config, s.policy, s.distribution, s.exportedLabels, s.exportedAnns)
	}
	f.Fuzz(func(t *testing.T, ns, name, id string, elsewhere bool, created string, recordedAt int64, region, typ,
		portName, protocol string, port int32, family1, family2 string, families uint8, affinity string, timeout int32,
		config bool, policy, distribution, exportedLabels, exportedAnns string) {
		rec := &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: names.BrokerNamespace(id), Name: names.RecordName(ns, name),
				// Any time an API server could have set: 0 to about 500 years after 1970.
				CreationTimestamp: metav1.Unix(recordedAt%(1<<34), 0),
				Labels: map[string]string{names.LabelManagedBy: names.ManagedBy, names.LabelServiceNamespace: ns,
					mcsv1beta1.LabelServiceName: name, mcsv1beta1.LabelSourceCluster: id},
				Annotations: map[string]string{names.AnnotationClusterID: id, names.AnnotationExportCreated: created,
					names.AnnotationRegion: region},
			},
			Spec: mcsv1beta1.ServiceImportSpec{
				Type:            mcsv1beta1.ServiceImportType(typ),
				Ports:           []mcsv1beta1.ServicePort{{Name: portName, Protocol: corev1.Protocol(protocol), Port: port}},
				IPFamilies:      []corev1.IPFamily{corev1.IPFamily(family1), corev1.IPFamily(family2), corev1.IPv4Protocol}[:families%4],
				SessionAffinity: corev1.ServiceAffinity(affinity),
			},
		}
		if elsewhere {
			rec.Namespace = names.BrokerNamespace("cluster-d")
		}
		if config {
			rec.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(timeout)}}
		}
		if policy != "" {
			rec.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicy(policy))
		}
		if distribution != "" {
			rec.Spec.TrafficDistribution = ptr.To(distribution)
		}
		if exportedLabels != "" {
			rec.Annotations[names.AnnotationExportedLabels] = exportedLabels
		}
		if exportedAnns != "" {
			rec.Annotations[names.AnnotationExportedAnnotations] = exportedAnns
		}

		key, ok := broker.ServiceOf(rec)
		if !ok {
			return
		}
		e, err := broker.ParseRecord(rec)
		if err != nil || admit.ClusterID(e.Cluster) != nil || rec.Namespace != names.BrokerNamespace(e.Cluster) {
			return
		}
		denied := []string{"default"}
		got, problems, ok := admit.Record(key, e, denied)
		for _, p := range problems {
			if p.Reason == "" || p.Message == "" {
				t.Fatalf("a problem without a reason or message: %+v", p)
			}
		}
		if !ok {
			if len(problems) != 1 {
				t.Fatalf("a refusal with %d problems, want 1: %+v", len(problems), problems)
			}
			return
		}
		if again, more, ok := admit.Record(key, got, denied); !ok || len(more) > 0 || !slices.Equal(again.Spec.IPFamilies, got.Spec.IPFamilies) {
			t.Fatalf("the admitted export is not admitted again as it is: %v, %+v", ok, more)
		}
		admitted(t, key, got.Spec, got.Region)
		if claimed, _ := time.Parse(time.RFC3339Nano, created); got.Created.Before(claimed) ||
			got.Created.Before(rec.CreationTimestamp.Add(-broker.PrecedenceAllowance)) {
			t.Fatalf("ranks at %s, before the claimed %s or its record's %s less the allowance", got.Created, claimed, rec.CreationTimestamp)
		}

		honest := merge.Export{Cluster: "cluster-a", Created: rec.CreationTimestamp.Time, Slices: -1, Spec: mcsv1beta1.ServiceImportSpec{
			Type: mcsv1beta1.ClusterSetIP, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
		m := merge.Merge([]merge.Export{honest, got})
		if d := imports.DerivedService(key, m, nil); d != nil {
			derived(t, d)
		}
	})
}

// admitted fails t unless an admitted record's service, spec and region are what the API server and the ServiceImport
// CRD accept, checked apart from admit.Service, admit.Spec and admit.Region.
func admitted(t *testing.T, key types.NamespacedName, s mcsv1beta1.ServiceImportSpec, region string) {
	t.Helper()
	if len(validation.IsDNS1035Label(key.Name)) > 0 || len(validation.IsDNS1123Label(key.Namespace)) > 0 ||
		slices.Contains([]string{"kube-system", "kube-public", "kube-node-lease", "default"}, key.Namespace) {
		t.Fatalf("admitted a record of %s", key)
	}
	if s.Type != mcsv1beta1.ClusterSetIP && s.Type != mcsv1beta1.Headless {
		t.Fatalf("admitted type %q", s.Type)
	}
	if len(s.IPFamilies) > 2 || (len(s.IPFamilies) == 2 && s.IPFamilies[0] == s.IPFamilies[1]) {
		t.Fatalf("admitted IP families %v", s.IPFamilies)
	}
	for _, f := range s.IPFamilies {
		if f != corev1.IPv4Protocol && f != corev1.IPv6Protocol {
			t.Fatalf("admitted IP family %q", f)
		}
	}
	if s.SessionAffinity != "" && s.SessionAffinity != corev1.ServiceAffinityNone && s.SessionAffinity != corev1.ServiceAffinityClientIP {
		t.Fatalf("admitted session affinity %q", s.SessionAffinity)
	}
	if c := s.SessionAffinityConfig; c != nil && (s.SessionAffinity != corev1.ServiceAffinityClientIP ||
		(c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && (*c.ClientIP.TimeoutSeconds <= 0 || *c.ClientIP.TimeoutSeconds > 86400))) {
		t.Fatalf("admitted session affinity %q with config %+v", s.SessionAffinity, c)
	}
	if p := s.InternalTrafficPolicy; p != nil && *p != corev1.ServiceInternalTrafficPolicyCluster && *p != corev1.ServiceInternalTrafficPolicyLocal {
		t.Fatalf("admitted internal traffic policy %q", *p)
	}
	if d := s.TrafficDistribution; d != nil && *d != "PreferClose" && *d != "PreferSameZone" && *d != "PreferSameNode" {
		t.Fatalf("admitted traffic distribution %q", *d)
	}
	if len(validation.IsValidLabelValue(region)) > 0 {
		t.Fatalf("admitted region %q", region)
	}
}

// derived fails t unless the derived Service is one the API server accepts in the fields a record decides.
func derived(t *testing.T, d *corev1.Service) {
	t.Helper()
	if len(validation.IsDNS1035Label(d.Name)) > 0 {
		t.Fatalf("derived Service name %q", d.Name)
	}
	if len(d.Spec.IPFamilies) == 0 || len(d.Spec.IPFamilies) > 2 {
		t.Fatalf("derived Service with IP families %v", d.Spec.IPFamilies)
	}
	switch d.Spec.SessionAffinity {
	case corev1.ServiceAffinityNone:
		if d.Spec.SessionAffinityConfig != nil {
			t.Fatalf("derived Service with affinity None and config %+v", d.Spec.SessionAffinityConfig)
		}
	case corev1.ServiceAffinityClientIP:
		if to := d.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds; *to <= 0 || *to > 86400 {
			t.Fatalf("derived Service with affinity timeout %d", *to)
		}
	default:
		t.Fatalf("derived Service with session affinity %q", d.Spec.SessionAffinity)
	}
	portNames := map[string]bool{}
	for _, p := range d.Spec.Ports {
		if p.Port < 1 || p.Port > 65535 || (len(d.Spec.Ports) > 1 && p.Name == "") || portNames[p.Name] {
			t.Fatalf("derived Service with ports %+v", d.Spec.Ports)
		}
		portNames[p.Name] = true
	}
}
