package mcsctl

import (
	"bytes"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestMatrix(t *testing.T) {
	s := fixture(t)
	s.Members = append(s.Members, Member{Context: "cluster-c", Namespaces: []string{"default"}}, Member{Context: "cluster-d", Error: "refused"})
	s.Members[1].Slices[0].Endpoints[1].Conditions = discoveryConditions(false, true)
	s.Members[0].Exports[0].Status.Conditions[2] = metav1.Condition{Type: "Conflict", Status: metav1.ConditionTrue, Reason: "PortConflict,TypeConflict"}
	rows := Matrix(s, "", "")
	var got []string
	for _, r := range rows {
		got = append(got, strings.Join([]string{r.Namespace + "/" + r.Name, r.Cluster, r.role(), dash(r.Type),
			dash(strings.Join(r.ClusterSetIPs, ",")), r.endpointsText(), dash(strings.Join(r.Conflicts, ",")), r.Locality}, " "))
	}
	want := []string{
		"demo/web cluster-a exported,imported ClusterSetIP 10.128.0.1 cluster-a=2/2 PortConflict,TypeConflict -",
		"demo/web cluster-b imported ClusterSetIP 10.128.0.2 cluster-a=1/2 - -",
		"demo/web cluster-c (no namespace) - - - - -",
		"demo/web cluster-d (unreachable) - - - - -",
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

func discoveryConditions(ready, serving bool) discoveryv1.EndpointConditions {
	return discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(serving)}
}

func TestStatus(t *testing.T) {
	s := fixture(t)
	s.Members = append(s.Members, Member{Context: "cluster-c", Error: "refused"})
	s.Broker.Leases[1] = lease("cluster-b", 40*time.Second)
	s.Members[1].DNSAnswers[versionQuery] = DNSAnswer{Rcode: "SERVFAIL"}
	rows := Status(s)
	type view struct {
		name, dns        string
		reachable, alive bool
		age              float64
	}
	want := []view{{"cluster-a", dnsYes, true, true, 2}, {"cluster-b", dnsNo, true, false, 40}, {"cluster-c", dnsUnknown, false, false, -1}}
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
	if !hasRow(out.String(), "cluster-c", "Unreachable") || !hasRow(out.String(), "cluster-b", "40s", "no") {
		t.Errorf("status table:\n%s", out.String())
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
