package merge

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// exp builds an export created `age` seconds after t0 with a ClusterSetIP IPv4 spec and one TCP/80 port "http",
// then applies the edits.
func exp(cluster string, age int, edits ...func(*Export)) Export {
	e := Export{
		Cluster: cluster,
		Created: t0.Add(time.Duration(age) * time.Second),
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:       mcsv1beta1.ClusterSetIP,
			Ports:      []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		},
	}
	for _, edit := range edits {
		edit(&e)
	}
	return e
}

func ports(p ...mcsv1beta1.ServicePort) func(*Export) { return func(e *Export) { e.Spec.Ports = p } }
func families(f ...corev1.IPFamily) func(*Export)     { return func(e *Export) { e.Spec.IPFamilies = f } }
func port(name string, proto corev1.Protocol, n int32) mcsv1beta1.ServicePort {
	return mcsv1beta1.ServicePort{Name: name, Protocol: proto, Port: n}
}

func TestMerge(t *testing.T) {
	headless := func(e *Export) { e.Spec.Type = mcsv1beta1.Headless }
	clientIP := func(e *Export) { e.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }
	timeout := func(s int32) func(*Export) {
		return func(e *Export) {
			e.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(s)}}
		}
	}
	labels := func(l map[string]string) func(*Export) { return func(e *Export) { e.Labels = l } }
	annotations := func(a map[string]string) func(*Export) { return func(e *Export) { e.Annotations = a } }
	itp := func(p corev1.ServiceInternalTrafficPolicy) func(*Export) {
		return func(e *Export) { e.Spec.InternalTrafficPolicy = &p }
	}
	td := func(v string) func(*Export) { return func(e *Export) { e.Spec.TrafficDistribution = &v } }
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol

	cases := []struct {
		name         string
		exports      []Export
		wantSpec     func(*mcsv1beta1.ServiceImportSpec) // edits to the default spec of exp()
		wantLabels   map[string]string
		wantClusters []string
		want         []Conflict
	}{
		{
			name:         "one export is the import",
			exports:      []Export{exp("c1", 0, labels(map[string]string{"a": "1"}))},
			wantLabels:   map[string]string{"a": "1"},
			wantClusters: []string{"c1"},
		},
		{
			name:         "agreeing exports have no conflict",
			exports:      []Export{exp("c2", 5), exp("c1", 0), exp("c3", 9)},
			wantClusters: []string{"c1", "c2", "c3"},
		},
		{
			name:    "type: the oldest wins and the younger disagree",
			exports: []Export{exp("c2", 1, headless), exp("c1", 0), exp("c3", 2, headless)},
			want: []Conflict{{mcsv1beta1.ServiceExportReasonTypeConflict,
				`Conflicting type. Using "ClusterSetIP" from oldest service export in "c1". 2/3 clusters disagree.`}},
			wantClusters: []string{"c1", "c2", "c3"},
		},
		{
			name:    "equal timestamps: the lower cluster id wins",
			exports: []Export{exp("c2", 0, headless), exp("c1", 0)},
			want: []Conflict{{mcsv1beta1.ServiceExportReasonTypeConflict,
				`Conflicting type. Using "ClusterSetIP" from oldest service export in "c1". 1/2 clusters disagree.`}},
			wantClusters: []string{"c1", "c2"},
		},
		{
			name:     "headless winner",
			exports:  []Export{exp("b", 0, headless), exp("a", 1)},
			wantSpec: func(s *mcsv1beta1.ServiceImportSpec) { s.Type = mcsv1beta1.Headless },
			want: []Conflict{{mcsv1beta1.ServiceExportReasonTypeConflict,
				`Conflicting type. Using "Headless" from oldest service export in "b". 1/2 clusters disagree.`}},
			wantClusters: []string{"a", "b"},
		},
		{
			name:    "session affinity and its config",
			exports: []Export{exp("c1", 0, clientIP, timeout(30)), exp("c2", 1), exp("c3", 2, clientIP, timeout(60))},
			wantSpec: func(s *mcsv1beta1.ServiceImportSpec) {
				s.SessionAffinity = corev1.ServiceAffinityClientIP
				s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](30)}}
			},
			want: []Conflict{
				{mcsv1beta1.ServiceExportReasonSessionAffinityConflict,
					`Conflicting session affinity. Using "ClientIP" from oldest service export in "c1". 1/3 clusters disagree.`},
				{mcsv1beta1.ServiceExportReasonSessionAffinityConfigConflict,
					`Conflicting session affinity config. Using {"clientIP":{"timeoutSeconds":30}} from oldest service export in "c1". 2/3 clusters disagree.`},
			},
			wantClusters: []string{"c1", "c2", "c3"},
		},
		{
			name: "unset session affinity equals None",
			exports: []Export{exp("c1", 0), exp("c2", 1, func(e *Export) {
				e.Spec.SessionAffinity = corev1.ServiceAffinityNone
			})},
			wantClusters: []string{"c1", "c2"},
		},
		{
			name: "labels and annotations come from the winner",
			exports: []Export{
				exp("c1", 0, labels(map[string]string{"team": "a"}), annotations(map[string]string{"note": "x"})),
				exp("c2", 1, labels(map[string]string{"team": "b"})),
			},
			wantLabels: map[string]string{"team": "a"},
			want: []Conflict{
				{mcsv1beta1.ServiceExportReasonLabelsConflict,
					`Conflicting exported labels. Using {"team":"a"} from oldest service export in "c1". 1/2 clusters disagree.`},
				{mcsv1beta1.ServiceExportReasonAnnotationsConflict,
					`Conflicting exported annotations. Using {"note":"x"} from oldest service export in "c1". 1/2 clusters disagree.`},
			},
			wantClusters: []string{"c1", "c2"},
		},
		{
			name:         "nil and empty labels agree",
			exports:      []Export{exp("c1", 0, labels(map[string]string{})), exp("c2", 1)},
			wantLabels:   map[string]string{},
			wantClusters: []string{"c1", "c2"},
		},
		{
			name:    "internal traffic policy and traffic distribution",
			exports: []Export{exp("c1", 0, itp(corev1.ServiceInternalTrafficPolicyLocal)), exp("c2", 1, td("PreferClose"))},
			wantSpec: func(s *mcsv1beta1.ServiceImportSpec) {
				s.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
			},
			want: []Conflict{
				{mcsv1beta1.ServiceExportReasonInternalTrafficPolicyConflict,
					`Conflicting internal traffic policy. Using "Local" from oldest service export in "c1". 1/2 clusters disagree.`},
				{mcsv1beta1.ServiceExportReasonTrafficDistributionConflict,
					`Conflicting traffic distribution. Using unset from oldest service export in "c1". 1/2 clusters disagree.`},
			},
			wantClusters: []string{"c1", "c2"},
		},
		{
			name: "ports are a union",
			exports: []Export{
				exp("c1", 0),
				exp("c2", 1, ports(port("http", corev1.ProtocolTCP, 80), port("dns", corev1.ProtocolUDP, 53))),
				exp("c3", 2, ports(port("", "", 80), port("metrics", corev1.ProtocolTCP, 9090))),
			},
			wantSpec: func(s *mcsv1beta1.ServiceImportSpec) {
				s.Ports = []mcsv1beta1.ServicePort{port("http", corev1.ProtocolTCP, 80), port("dns", corev1.ProtocolUDP, 53),
					port("metrics", corev1.ProtocolTCP, 9090)}
			},
			want: []Conflict{{mcsv1beta1.ServiceExportReasonPortConflict,
				`Conflicting ports. Using port "http" (TCP/80) from oldest service export in "c1", port "dns" (UDP/53) from ` +
					`oldest service export in "c2", port "metrics" (TCP/9090) from oldest service export in "c3". 3/3 clusters disagree.`}},
			wantClusters: []string{"c1", "c2", "c3"},
		},
		{
			// mcs-api v1beta1: PortConflict whenever "the ports are not identical in all the constituent Services",
			// even when the union serves every one of them.
			name: "different but compatible ports: the union, and a conflict",
			exports: []Export{
				exp("c1", 0),
				exp("c2", 1, ports(port("https", corev1.ProtocolTCP, 443))),
			},
			wantSpec: func(s *mcsv1beta1.ServiceImportSpec) {
				s.Ports = []mcsv1beta1.ServicePort{port("http", corev1.ProtocolTCP, 80), port("https", corev1.ProtocolTCP, 443)}
			},
			want: []Conflict{{mcsv1beta1.ServiceExportReasonPortConflict,
				`Conflicting ports. Using port "http" (TCP/80) from oldest service export in "c1", port "https" (TCP/443) ` +
					`from oldest service export in "c2". 2/2 clusters disagree.`}},
			wantClusters: []string{"c1", "c2"},
		},
		{
			name: "a subset of the ports: only the exports lacking some disagree",
			exports: []Export{
				exp("c1", 0, ports(port("http", corev1.ProtocolTCP, 80), port("https", corev1.ProtocolTCP, 443))),
				exp("c2", 1),
				exp("c3", 2, ports(port("https", "", 443), port("http", corev1.ProtocolTCP, 80))),
			},
			wantSpec: func(s *mcsv1beta1.ServiceImportSpec) {
				s.Ports = []mcsv1beta1.ServicePort{port("http", corev1.ProtocolTCP, 80), port("https", corev1.ProtocolTCP, 443)}
			},
			want: []Conflict{{mcsv1beta1.ServiceExportReasonPortConflict,
				`Conflicting ports. Using port "https" (TCP/443) from oldest service export in "c1". 1/3 clusters disagree.`}},
			wantClusters: []string{"c1", "c2", "c3"},
		},
		{
			name: "the same ports in another order agree",
			exports: []Export{
				exp("c1", 0, ports(port("a", corev1.ProtocolTCP, 1), port("b", corev1.ProtocolUDP, 2))),
				exp("c2", 1, ports(port("b", corev1.ProtocolUDP, 2), port("a", "", 1))),
			},
			wantSpec: func(s *mcsv1beta1.ServiceImportSpec) {
				s.Ports = []mcsv1beta1.ServicePort{port("a", corev1.ProtocolTCP, 1), port("b", corev1.ProtocolUDP, 2)}
			},
			wantClusters: []string{"c1", "c2"},
		},
		{
			name: "a long difference names the first ports and counts the rest",
			exports: []Export{
				exp("c1", 0, ports(port("a", corev1.ProtocolTCP, 1), port("b", corev1.ProtocolTCP, 2), port("c", corev1.ProtocolTCP, 3))),
				exp("c2", 1, ports(port("d", corev1.ProtocolTCP, 4), port("e", corev1.ProtocolTCP, 5), port("f", corev1.ProtocolTCP, 6))),
			},
			wantSpec: func(s *mcsv1beta1.ServiceImportSpec) {
				s.Ports = nil
				for i, n := range []string{"a", "b", "c", "d", "e", "f"} {
					s.Ports = append(s.Ports, port(n, corev1.ProtocolTCP, int32(i+1)))
				}
			},
			want: []Conflict{{mcsv1beta1.ServiceExportReasonPortConflict,
				`Conflicting ports. Using port "a" (TCP/1) from oldest service export in "c1", port "b" (TCP/2) from oldest ` +
					`service export in "c1", port "c" (TCP/3) from oldest service export in "c1", port "d" (TCP/4) from oldest ` +
					`service export in "c2", and 2 more. 2/2 clusters disagree.`}},
			wantClusters: []string{"c1", "c2"},
		},
		{
			name: "same name, different port: the oldest wins",
			exports: []Export{
				exp("c2", 1, ports(port("http", corev1.ProtocolTCP, 8080))),
				exp("c1", 0),
			},
			want: []Conflict{{mcsv1beta1.ServiceExportReasonPortConflict,
				`Conflicting ports. Using port "http" (TCP/80) from oldest service export in "c1". 1/2 clusters disagree.`}},
			wantClusters: []string{"c1", "c2"},
		},
		{
			name: "same protocol and port, different name",
			exports: []Export{
				exp("c1", 0, ports(port("", corev1.ProtocolUDP, 53))),
				exp("c2", 1, ports(port("dns", corev1.ProtocolUDP, 53))),
			},
			wantSpec: func(s *mcsv1beta1.ServiceImportSpec) {
				s.Ports = []mcsv1beta1.ServicePort{port("", corev1.ProtocolUDP, 53)}
			},
			want: []Conflict{{mcsv1beta1.ServiceExportReasonPortConflict,
				`Conflicting ports. Using port UDP/53 from oldest service export in "c1". 1/2 clusters disagree.`}},
			wantClusters: []string{"c1", "c2"},
		},
		{
			name: "a clash with a port a younger export brought in names that export",
			exports: []Export{
				exp("c1", 0),
				exp("c2", 1, ports(port("grpc", corev1.ProtocolTCP, 9000))),
				exp("c3", 2, ports(port("grpc", corev1.ProtocolTCP, 9001))),
			},
			wantSpec: func(s *mcsv1beta1.ServiceImportSpec) {
				s.Ports = []mcsv1beta1.ServicePort{port("http", corev1.ProtocolTCP, 80), port("grpc", corev1.ProtocolTCP, 9000)}
			},
			want: []Conflict{{mcsv1beta1.ServiceExportReasonPortConflict,
				`Conflicting ports. Using port "http" (TCP/80) from oldest service export in "c1", port "grpc" (TCP/9000) ` +
					`from oldest service export in "c2". 3/3 clusters disagree.`}},
			wantClusters: []string{"c1", "c2", "c3"},
		},
		{
			name: "appProtocol differs",
			exports: []Export{
				exp("c1", 0),
				exp("c2", 1, ports(mcsv1beta1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, AppProtocol: ptr.To("h2c")})),
			},
			want: []Conflict{{mcsv1beta1.ServiceExportReasonPortConflict,
				`Conflicting ports. Using port "http" (TCP/80) from oldest service export in "c1". 1/2 clusters disagree.`}},
			wantClusters: []string{"c1", "c2"},
		},
		{
			// The oldest export's order would move the primary family, and the VIP, whenever the oldest exporter changes.
			name:         "dual-stack everywhere: IPv4 first, whatever the oldest export's order",
			exports:      []Export{exp("c1", 0, families(v6, v4)), exp("c2", 1, families(v4, v6))},
			wantSpec:     func(s *mcsv1beta1.ServiceImportSpec) { s.IPFamilies = []corev1.IPFamily{v4, v6} },
			wantClusters: []string{"c1", "c2"},
		},
		{
			name:         "dual-stack everywhere, the other export the oldest",
			exports:      []Export{exp("c1", 1, families(v6, v4)), exp("c2", 0, families(v4, v6))},
			wantSpec:     func(s *mcsv1beta1.ServiceImportSpec) { s.IPFamilies = []corev1.IPFamily{v4, v6} },
			wantClusters: []string{"c1", "c2"},
		},
		{
			name:     "IP families intersect",
			exports:  []Export{exp("c1", 0, families(v4, v6)), exp("c2", 1, families(v6)), exp("c3", 2, families(v4, v6))},
			wantSpec: func(s *mcsv1beta1.ServiceImportSpec) { s.IPFamilies = []corev1.IPFamily{v6} },
			want: []Conflict{{mcsv1beta1.ServiceExportReasonIPFamilyConflict,
				`Conflicting IP families. Using ["IPv6"], the families every service export has. 2/3 clusters disagree.`}},
			wantClusters: []string{"c1", "c2", "c3"},
		},
		{
			name:    "an export sharing no family with the older ones is left out, not the families",
			exports: []Export{exp("c1", 0, families(v4)), exp("c3", 2, families(v6)), exp("c2", 1, families(v4))},
			want: []Conflict{{mcsv1beta1.ServiceExportReasonIPFamilyConflict,
				`Conflicting IP families. Using ["IPv4"], the families every service export has but those in "c3", ` +
					`which share none of them. 1/3 clusters disagree.`}},
			wantClusters: []string{"c1", "c2", "c3"},
		},
		{
			name:     "disjoint families: the oldest export's stay",
			exports:  []Export{exp("c1", 0, families(v6)), exp("c2", 1, families(v4))},
			wantSpec: func(s *mcsv1beta1.ServiceImportSpec) { s.IPFamilies = []corev1.IPFamily{v6} },
			want: []Conflict{{mcsv1beta1.ServiceExportReasonIPFamilyConflict,
				`Conflicting IP families. Using ["IPv6"], the families every service export has but those in "c2", ` +
					`which share none of them. 1/2 clusters disagree.`}},
			wantClusters: []string{"c1", "c2"},
		},
		{
			name: "disjoint from the families the older ones narrowed to",
			exports: []Export{exp("c1", 0, families(v4, v6)), exp("c2", 1, families(v6)), exp("c3", 2, families(v4)),
				exp("c4", 3, families(v6, v4))},
			wantSpec: func(s *mcsv1beta1.ServiceImportSpec) { s.IPFamilies = []corev1.IPFamily{v6} },
			want: []Conflict{{mcsv1beta1.ServiceExportReasonIPFamilyConflict,
				`Conflicting IP families. Using ["IPv6"], the families every service export has but those in "c3", ` +
					`which share none of them. 3/4 clusters disagree.`}},
			wantClusters: []string{"c1", "c2", "c3", "c4"},
		},
		{
			name:    "a family no Service may have is none, even the oldest export's",
			exports: []Export{exp("c1", 0, families("IPv5")), exp("c2", 1, families("x", v4)), exp("c3", 2)},
			want: []Conflict{{mcsv1beta1.ServiceExportReasonIPFamilyConflict,
				`Conflicting IP families. Using ["IPv4"], the families every service export has but those in "c1", ` +
					`which share none of them. 2/3 clusters disagree.`}},
			wantClusters: []string{"c1", "c2", "c3"},
		},
		{
			name:     "no family a Service may have at all",
			exports:  []Export{exp("c1", 0, families("x"))},
			wantSpec: func(s *mcsv1beta1.ServiceImportSpec) { s.IPFamilies = nil },
			want: []Conflict{{mcsv1beta1.ServiceExportReasonIPFamilyConflict,
				`Conflicting IP families. Using none, the families every service export has but those in "c1", ` +
					`which share none of them. 1/1 clusters disagree.`}},
			wantClusters: []string{"c1"},
		},
		{
			name: "many disjoint exports: the first few named",
			exports: []Export{exp("c0", 0), exp("c1", 1, families(v6)), exp("c2", 2, families(v6)), exp("c3", 3, families(v6)),
				exp("c4", 4, families(v6)), exp("c5", 5, families(v6))},
			want: []Conflict{{mcsv1beta1.ServiceExportReasonIPFamilyConflict,
				`Conflicting IP families. Using ["IPv4"], the families every service export has but those in "c1", "c2", ` +
					`"c3", "c4", and 1 more, which share none of them. 5/6 clusters disagree.`}},
			wantClusters: []string{"c0", "c1", "c2", "c3", "c4", "c5"},
		},
		{
			name:         "an export without families is ignored for the intersection",
			exports:      []Export{exp("c1", 0, families()), exp("c2", 1, families(v6))},
			wantSpec:     func(s *mcsv1beta1.ServiceImportSpec) { s.IPFamilies = []corev1.IPFamily{v6} },
			wantClusters: []string{"c1", "c2"},
		},
		{
			name: "several conflicts keep the SPEC order",
			exports: []Export{
				exp("c1", 0),
				exp("c2", 1, headless, ports(port("http", corev1.ProtocolTCP, 81)), families(v6)),
			},
			want: []Conflict{
				{mcsv1beta1.ServiceExportReasonPortConflict,
					`Conflicting ports. Using port "http" (TCP/80) from oldest service export in "c1". 1/2 clusters disagree.`},
				{mcsv1beta1.ServiceExportReasonTypeConflict,
					`Conflicting type. Using "ClusterSetIP" from oldest service export in "c1". 1/2 clusters disagree.`},
				{mcsv1beta1.ServiceExportReasonIPFamilyConflict,
					`Conflicting IP families. Using ["IPv4"], the families every service export has but those in "c2", ` +
						`which share none of them. 1/2 clusters disagree.`},
			},
			wantClusters: []string{"c1", "c2"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Merge(c.exports)
			want := exp("", 0).Spec
			if c.wantSpec != nil {
				c.wantSpec(&want)
			}
			if !reflect.DeepEqual(got.Spec, want) {
				t.Errorf("spec:\n got %+v\nwant %+v", got.Spec, want)
			}
			if !reflect.DeepEqual(got.Labels, c.wantLabels) {
				t.Errorf("labels = %v, want %v", got.Labels, c.wantLabels)
			}
			if !reflect.DeepEqual(got.Clusters, c.wantClusters) {
				t.Errorf("clusters = %v, want %v", got.Clusters, c.wantClusters)
			}
			if !reflect.DeepEqual(got.Conflicts, c.want) {
				t.Errorf("conflicts:\n got %q\nwant %q", got.Conflicts, c.want)
			}
		})
	}
}

func TestMergeEmptyAndInputUntouched(t *testing.T) {
	if got := Merge(nil); !reflect.DeepEqual(got, Result{}) {
		t.Errorf("Merge(nil) = %+v", got)
	}
	in := []Export{exp("c2", 1), exp("c1", 0, ports(port("", "", 80)))}
	Merge(in)
	if in[0].Cluster != "c2" || in[1].Spec.Ports[0].Protocol != "" {
		t.Errorf("Merge changed its input: %+v", in)
	}
}

func TestCondition(t *testing.T) {
	none := Condition(nil, 3)
	if none.Status != metav1.ConditionFalse || none.Reason != "NoConflicts" || none.ObservedGeneration != 3 {
		t.Errorf("no conflicts: %+v", none)
	}
	two := Condition([]Conflict{{"PortConflict", "a."}, {"TypeConflict", "b."}}, 1)
	if two.Status != metav1.ConditionTrue || two.Reason != "PortConflict,TypeConflict" || two.Message != "a. b." ||
		two.Type != "Conflict" {
		t.Errorf("two conflicts: %+v", two)
	}
}

func TestMergePortNames(t *testing.T) {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	cases := []struct {
		name      string
		exports   []Export
		wantPorts []mcsv1beta1.ServicePort
		wantNames map[string]map[string]string
		wantHeld  map[string][]string
	}{{
		name:      "one unnamed port stays unnamed",
		exports:   []Export{exp("a", 0, ports(port("", tcp, 80))), exp("b", 1, ports(port("", tcp, 80)))},
		wantPorts: []mcsv1beta1.ServicePort{port("", tcp, 80)},
	}, {
		name:      "two kubectl expose Services on 80 and 8080",
		exports:   []Export{exp("a", 0, ports(port("", tcp, 80))), exp("b", 1, ports(port("", "", 8080)))},
		wantPorts: []mcsv1beta1.ServicePort{port("tcp-80", tcp, 80), port("tcp-8080", tcp, 8080)},
		wantNames: map[string]map[string]string{"a": {"": "tcp-80"}, "b": {"": "tcp-8080"}},
	}, {
		name:      "an unnamed port takes the name of the port it merges into",
		exports:   []Export{exp("a", 0, ports(port("http", tcp, 80), port("metrics", tcp, 9090))), exp("b", 1, ports(port("", tcp, 80)))},
		wantPorts: []mcsv1beta1.ServicePort{port("http", tcp, 80), port("metrics", tcp, 9090)},
		wantNames: map[string]map[string]string{"b": {"": "http"}},
	}, {
		name:      "a named port of another name takes the union's",
		exports:   []Export{exp("a", 0), exp("b", 1, ports(port("web", tcp, 80)))},
		wantPorts: []mcsv1beta1.ServicePort{port("http", tcp, 80)},
		wantNames: map[string]map[string]string{"b": {"web": "http"}},
	}, {
		name: "a generated name never takes a named port's",
		exports: []Export{
			exp("a", 0, ports(port("tcp-53", tcp, 5353), port("dns", udp, 53))),
			exp("b", 1, ports(port("", tcp, 53))),
		},
		wantPorts: []mcsv1beta1.ServicePort{port("tcp-53", tcp, 5353), port("dns", udp, 53), port("tcp-53-2", tcp, 53)},
		wantNames: map[string]map[string]string{"b": {"": "tcp-53-2"}},
	}, {
		// The conformance suite's "same port name but different port numbers": only a serves port 42.
		name:      "a port of the union's name with another number is withheld",
		exports:   []Export{exp("a", 0, ports(port("tcp", tcp, 42))), exp("b", 1, ports(port("tcp", tcp, 4242)))},
		wantPorts: []mcsv1beta1.ServicePort{port("tcp", tcp, 42)},
		wantHeld:  map[string][]string{"b": {"tcp"}},
	}, {
		name:      "a port of the union's name with another protocol is withheld",
		exports:   []Export{exp("a", 0, ports(port("dns", udp, 53), port("web", tcp, 80))), exp("b", 1, ports(port("dns", tcp, 53), port("web", tcp, 80)))},
		wantPorts: []mcsv1beta1.ServicePort{port("dns", udp, 53), port("web", tcp, 80)},
		wantHeld:  map[string][]string{"b": {"dns"}},
	}, {
		// b's port merged into a's by number before c brought in a port of b's name: b still serves the union's
		// port 80, and only a port of the union's name and another number or protocol is withheld.
		name: "a younger export's port of the name does not withhold a port that merged by number",
		exports: []Export{
			exp("a", 0), exp("b", 1, ports(port("web", tcp, 80))), exp("c", 2, ports(port("web", tcp, 8080))),
		},
		wantPorts: []mcsv1beta1.ServicePort{port("http", tcp, 80), port("web", tcp, 8080)},
		wantNames: map[string]map[string]string{"b": {"web": "http"}},
	}, {
		name: "... nor one that merged by number, when the younger port differs in protocol",
		exports: []Export{
			exp("a", 0), exp("b", 1, ports(port("web", tcp, 80))), exp("c", 2, ports(port("web", udp, 80))),
		},
		wantPorts: []mcsv1beta1.ServicePort{port("http", tcp, 80), port("web", udp, 80)},
		wantNames: map[string]map[string]string{"b": {"web": "http"}},
	}, {
		// d comes after c's "web": its "web" is c's by name, as mergePorts met it, whatever b's became.
		name: "... while an export younger than that port's is matched by name",
		exports: []Export{
			exp("a", 0), exp("b", 1, ports(port("web", tcp, 80))), exp("c", 2, ports(port("web", tcp, 8080))),
			exp("d", 3, ports(port("web", tcp, 80))),
		},
		wantPorts: []mcsv1beta1.ServicePort{port("http", tcp, 80), port("web", tcp, 8080)},
		wantNames: map[string]map[string]string{"b": {"web": "http"}},
		wantHeld:  map[string][]string{"d": {"web"}},
	}, {
		name: "a port of the union's name with another number is withheld, its other port renamed",
		exports: []Export{
			exp("a", 0), exp("b", 1, ports(port("web", tcp, 80), port("http", tcp, 8080))), exp("c", 2, ports(port("web", tcp, 9090))),
		},
		wantPorts: []mcsv1beta1.ServicePort{port("http", tcp, 80), port("web", tcp, 9090)},
		wantNames: map[string]map[string]string{"b": {"web": "http"}},
		wantHeld:  map[string][]string{"b": {"http"}},
	}, {
		name:      "different names for one port are no reason to withhold it",
		exports:   []Export{exp("a", 0, ports(port("tcp", tcp, 42))), exp("b", 1, ports(port("tcp2", tcp, 4242)))},
		wantPorts: []mcsv1beta1.ServicePort{port("tcp", tcp, 42), port("tcp2", tcp, 4242)},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Merge(c.exports)
			if !reflect.DeepEqual(got.Spec.Ports, c.wantPorts) {
				t.Errorf("ports = %+v, want %+v", got.Spec.Ports, c.wantPorts)
			}
			if !reflect.DeepEqual(got.SlicePorts.Names, c.wantNames) {
				t.Errorf("port names = %v, want %v", got.SlicePorts.Names, c.wantNames)
			}
			if !reflect.DeepEqual(got.SlicePorts.Withheld, c.wantHeld) {
				t.Errorf("withheld ports = %v, want %v", got.SlicePorts.Withheld, c.wantHeld)
			}
			if len(got.Spec.Ports) > 1 {
				seen := map[string]bool{}
				for _, p := range got.Spec.Ports {
					if p.Name == "" || seen[p.Name] {
						t.Errorf("port %+v: a Service with several ports needs distinct names", p)
					}
					seen[p.Name] = true
				}
			}
		})
	}
}

func TestConflictMessageFitsTheCondition(t *testing.T) {
	big := map[string]string{}
	for i := range 2000 {
		big[fmt.Sprintf("key-%04d", i)] = strings.Repeat("v", 60)
	}
	got := Merge([]Export{exp("a", 0, func(e *Export) { e.Annotations = big; e.Labels = big }), exp("b", 1)})
	c := Condition(got.Conflicts, 1)
	if len(c.Message) > MaxMessage || !strings.Contains(c.Message, `the keys ["key-0000",`) || !strings.Contains(c.Message, "and 1995 more") {
		t.Errorf("message of %d bytes: %.300s", len(c.Message), c.Message)
	}
	long := []Conflict{{Reason: "PortConflict", Message: strings.Repeat("é", MaxMessage)}}
	if m := Condition(long, 1).Message; len(m) > MaxMessage || !utf8.ValidString(m) || !strings.HasSuffix(m, "[truncated]") {
		t.Errorf("a long message is not cut to the limit: %d bytes", len(m))
	}
}

func TestSlicePortsApply(t *testing.T) {
	tcp := corev1.ProtocolTCP
	ep := func(name string, n int32) discoveryv1.EndpointPort {
		return discoveryv1.EndpointPort{Name: ptr.To(name), Protocol: ptr.To(tcp), Port: ptr.To(n)}
	}
	sp := SlicePorts{
		Names:    map[string]map[string]string{"a": {"": "tcp-80"}, "b": {"web": "http"}},
		Withheld: map[string][]string{"b": {"tcp"}},
	}
	in := []discoveryv1.EndpointPort{ep("", 80), ep("web", 80), ep("tcp", 42)}
	for _, c := range []struct {
		cluster string
		want    []discoveryv1.EndpointPort
	}{
		{"a", []discoveryv1.EndpointPort{ep("tcp-80", 80), ep("web", 80), ep("tcp", 42)}},
		{"b", []discoveryv1.EndpointPort{ep("", 80), ep("http", 80)}},
		{"c", in},
	} {
		if got := sp.Apply(c.cluster, in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Apply(%s) = %v, want %v", c.cluster, got, c.want)
		}
	}
	if *in[0].Name != "" || len(in) != 3 {
		t.Errorf("Apply modified its input: %v", in)
	}
}
