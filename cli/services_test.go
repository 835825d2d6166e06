package cli

import (
	"bytes"
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/buildinfo"
	"vksfleet.dev/fleet/mcs/names"
)

func TestMatrix(t *testing.T) {
	s := fixture(t)
	s.Members = append(s.Members, Member{Context: "cluster-c", Namespaces: []string{"default"}}, Member{Context: "cluster-d", Error: "refused"},
		Member{ClusterID: "cluster-e"})
	s.Members[1].Slices[0].Endpoints[1].Conditions = discoveryConditions(false, true)
	s.Members[0].Exports[0].Status.Conditions[2] = metav1.Condition{Type: "Conflict", Status: metav1.ConditionTrue, Reason: "PortConflict,TypeConflict"}
	s.Members[1].Imports[0].Annotations = map[string]string{names.AnnotationLocality: `{"zones":{"z1":"same-zone","z2":"same-zone"},"dnsTier":"same-cluster"}`}
	rows := Matrix(s, "", "")
	var got []string
	for _, r := range rows {
		got = append(got, strings.Join([]string{r.Namespace + "/" + r.Name, r.Cluster, r.role(), dash(r.Type),
			dash(strings.Join(r.ClusterSetIPs, ",")), r.endpointsText(), dash(strings.Join(r.Conflicts, ",")), r.Locality}, " "))
	}
	want := []string{
		"demo/web cluster-a exported,imported ClusterSetIP 10.128.0.1 cluster-a=2/2 PortConflict,TypeConflict -",
		"demo/web cluster-b imported ClusterSetIP 10.128.0.2 cluster-a=1/2 - same-zone",
		"demo/web cluster-c (no namespace) - - - - -",
		"demo/web cluster-d (unreachable) - - - - -",
		"demo/web cluster-e (no context) - - - - -",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("matrix:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if rows := Matrix(s, "other", ""); len(rows) != 0 {
		t.Errorf("namespace filter: %d rows", len(rows))
	}
	if rows := Matrix(s, "", "nope"); len(rows) != 0 {
		t.Errorf("name filter: %d rows", len(rows))
	}
	var out bytes.Buffer
	if err := print(&out, outputWide, servicesTable(rows), nil); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"json", "yaml"} {
		out.Reset()
		if err := print(&out, format, servicesTable(rows), map[string]any{"services": Matrix(s, "", "")}); err != nil ||
			!strings.Contains(out.String(), "PortConflict") {
			t.Errorf("-o %s: %v\n%s", format, err, out.String())
		}
	}
	if err := validateOutput("xml"); err == nil {
		t.Error("-o xml accepted")
	}
}

// TestLocalityText: the locality cell is the tier the controller recorded on the import, per zone when the
// zones differ, the DNS tier for a headless import, and "-" while it records none.
func TestLocalityText(t *testing.T) {
	ann := func(zones, dns string) map[string]string {
		return map[string]string{names.AnnotationLocality: `{"zones":{` + zones + `},"dnsTier":"` + dns + `","dnsClusters":["a"]}`}
	}
	for _, c := range []struct {
		name        string
		typ         mcsv1beta1.ServiceImportType
		annotations map[string]string
		want        string
	}{
		{"no ranking", mcsv1beta1.ClusterSetIP, nil, "-"},
		{"every zone alike", mcsv1beta1.ClusterSetIP, ann(`"z1":"same-zone","z2":"same-zone"`, "same-cluster"), "same-zone"},
		{"zones differ", mcsv1beta1.ClusterSetIP, ann(`"z2":"same-region","z1":"same-zone"`, "same-cluster"), "z1=same-zone z2=same-region"},
		{"headless", mcsv1beta1.Headless, ann(`"z1":"same-zone"`, "same-region"), "same-region"},
		{"no zones", mcsv1beta1.ClusterSetIP, ann("", "anywhere"), "-"},
		{"garbage", mcsv1beta1.ClusterSetIP, map[string]string{names.AnnotationLocality: "{"}, "invalid"},
	} {
		si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Annotations: c.annotations}, Spec: mcsv1beta1.ServiceImportSpec{Type: c.typ}}
		if got := localityText(si); got != c.want {
			t.Errorf("%s: locality %q, want %q", c.name, got, c.want)
		}
	}
}

func discoveryConditions(ready, serving bool) discoveryv1.EndpointConditions {
	return discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(serving)}
}

func TestStatus(t *testing.T) {
	s := fixture(t)
	s.Members = append(s.Members, Member{Context: "cluster-c", ClusterID: "cluster-c", Error: "refused"}, Member{ClusterID: "cluster-d"})
	s.Broker.Leases = append(s.Broker.Leases, lease("cluster-d", 3*time.Second))
	s.Broker.Leases[1] = lease("cluster-b", 40*time.Second)
	s.Members[1].DNSAnswers[versionQuery] = DNSAnswer{Rcode: "SERVFAIL"}
	rows := Status(s)
	type view struct {
		name, dns        string
		reachable, alive bool
		age              float64
	}
	want := []view{{"cluster-a", dnsYes, true, true, 2}, {"cluster-b", dnsNo, true, false, 40}, {"cluster-c", dnsUnknown, false, false, -1},
		{"", dnsUnknown, false, true, 3}}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, r := range rows {
		age := -1.0
		if r.LeaseAgeSeconds != nil {
			age = *r.LeaseAgeSeconds
		}
		if got := (view{r.Name, r.DNS, r.Reachable, r.Alive, age}); got != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, got, want[i])
		}
	}
	var out bytes.Buffer
	if err := print(&out, outputTable, statusTable(rows), nil); err != nil {
		t.Fatal(err)
	}
	if !hasRow(out.String(), "cluster-c", "Unreachable") || !hasRow(out.String(), "cluster-b", "40s", "no") ||
		!hasRow(out.String(), "No context", "cluster-d", "3s", "yes") {
		t.Errorf("status table:\n%s", out.String())
	}
}

// TestOutputs prints every listing in every -o format: the table's header, the wide columns only with wide, and
// JSON and YAML that decode to the rows.
func TestOutputs(t *testing.T) {
	s := fixture(t)
	checks := Diagnose(s, []types.NamespacedName{web})
	listings := []struct {
		name       string
		table      *metav1.Table
		data       any
		header     string
		wideColumn string
		dataKey    string
	}{
		{"status", statusTable(Status(s)), map[string]any{"members": Status(s)}, "CLUSTER-ID", "DNS-ADDRESS", "members:"},
		{"services", servicesTable(Matrix(s, "", "")), map[string]any{"services": Matrix(s, "", "")}, "CLUSTERSET-IP", "PORTS", "services:"},
		{"diagnose", diagnoseTable(checks), map[string]any{"passed": Passed(checks), "checks": checks}, "RESULT", "", "checks:"},
	}
	for _, l := range listings {
		for _, format := range []string{outputTable, outputWide, "json", "yaml"} {
			if err := validateOutput(format); err != nil {
				t.Fatalf("-o %q refused: %v", format, err)
			}
			var out bytes.Buffer
			if err := print(&out, format, l.table, l.data); err != nil {
				t.Fatalf("%s -o %q: %v", l.name, format, err)
			}
			text := out.String()
			switch format {
			case outputTable, outputWide:
				if !strings.Contains(text, l.header) || (l.wideColumn != "" && strings.Contains(text, l.wideColumn) != (format == outputWide)) {
					t.Errorf("%s -o %q:\n%s", l.name, format, text)
				}
			case "json":
				var decoded map[string]json.RawMessage
				if err := json.Unmarshal(out.Bytes(), &decoded); err != nil || len(decoded[strings.TrimSuffix(l.dataKey, ":")]) == 0 {
					t.Errorf("%s -o json: %v\n%s", l.name, err, text)
				}
			case "yaml":
				if !strings.HasPrefix(text, l.dataKey) && !strings.Contains(text, "\n"+l.dataKey) {
					t.Errorf("%s -o yaml:\n%s", l.name, text)
				}
			}
		}
	}
}

func TestSummary(t *testing.T) {
	pass, fail, unknown := Check{Result: Pass}, Check{Result: Fail}, Check{Result: Unknown}
	for _, c := range []struct {
		checks []Check
		want   string
	}{
		{[]Check{pass, pass}, "All 2 checks passed."},
		{[]Check{pass, unknown}, "No check failed; 1 of 2 checks are UNKNOWN (not a failure"},
		{[]Check{fail, unknown, pass}, "1 of 3 checks failed. 1 UNKNOWN."},
	} {
		var out bytes.Buffer
		if err := summary(&out, c.checks); err != nil || !strings.HasPrefix(out.String(), c.want) {
			t.Errorf("summary = %q, %v; want it to start %q", out.String(), err, c.want)
		}
	}
}

func TestBuildVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "vksfleet.dev/fleet", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "22e142b"}, {Key: "vcs.modified", Value: "true"}}}
	v := buildVersion(buildinfo.From(bi, true))
	v.BrokerError = "no broker context"
	if want := "kubectl-mcs (devel)\ngit revision 22e142b (modified)\ngo1.26.0\nbroker: no broker context\n"; v.text() != want {
		t.Errorf("version text %q, want %q", v.text(), want)
	}
	v.Broker, v.BrokerError = &BrokerVersion{Context: "hub", MCSAPI: "multicluster.x-k8s.io/v1beta1", Kubernetes: "v1.34.0"}, ""
	if !strings.Contains(v.text(), "broker hub: Kubernetes v1.34.0, mcs-api multicluster.x-k8s.io/v1beta1") {
		t.Errorf("version text %q", v.text())
	}
	if v := buildVersion(buildinfo.From(nil, false)); v.Version != "unknown" {
		t.Errorf("without build info: %+v", v)
	}
}

func hasRow(table string, words ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(line, w)
		}
		if ok {
			return true
		}
	}
	return false
}
