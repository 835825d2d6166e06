package broker_test

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/names"
)

// The record-format promise (README, "Upgrades and the broker's record format"), tested over the broker objects
// the previous release wrote (testdata/previous, recorded by test/e2e/upgrade from a clusterset on that release, whose
// commit each file names): this tree's import path reads every one as that release meant it, and this tree's
// writers write the same objects for the same export. A change that breaks a row breaks a mixed clusterset.

// readStream decodes a recorded YAML stream into objects of one type.
func readStream[T any](t *testing.T, file string) []T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "previous", file))
	if err != nil {
		t.Fatal(err)
	}
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []T
	for {
		var o T
		if err := d.Decode(&o); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		// The comment before the first "---" decodes as an empty document.
		if !reflect.ValueOf(o).IsZero() {
			out = append(out, o)
		}
	}
}

// The previous release's clusterset: 2 members, cluster-a and cluster-b; both export upgrade/web (a ClusterSetIP
// Service of 2 pods, whose ServiceExport exports a label and an annotation), cluster-b exports upgrade/db (a
// headless Service of a StatefulSet's 2 pods).
var (
	web      = types.NamespacedName{Namespace: "upgrade", Name: "web"}
	db       = types.NamespacedName{Namespace: "upgrade", Name: "db"}
	members  = []string{"cluster-a", "cluster-b"}
	webPorts = []mcsv1beta1.ServicePort{
		{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 7000},
		{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 7000},
		{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
	}
)

func TestPreviousReleaseRecords(t *testing.T) {
	records := readStream[mcsv1beta1.ServiceImport](t, "records.yaml")
	byKey := map[string]*mcsv1beta1.ServiceImport{}
	for i := range records {
		byKey[records[i].Namespace+"/"+records[i].Name] = &records[i]
	}
	for _, tc := range []struct {
		cluster, name string
		// service is the service the record is of; zero for the sentinel.
		service types.NamespacedName
		typ     mcsv1beta1.ServiceImportType
		labels  map[string]string
		annots  map[string]string
	}{
		{cluster: "cluster-a", name: "sentinel"},
		{cluster: "cluster-b", name: "sentinel"},
		{"cluster-a", "upgrade.web", web, mcsv1beta1.ClusterSetIP, map[string]string{"tier": "front"}, map[string]string{"example.com/owner": "team-a"}},
		{"cluster-b", "upgrade.web", web, mcsv1beta1.ClusterSetIP, map[string]string{"tier": "front"}, map[string]string{"example.com/owner": "team-a"}},
		{"cluster-b", "upgrade.db", db, mcsv1beta1.Headless, nil, nil},
	} {
		t.Run(tc.cluster+"/"+tc.name, func(t *testing.T) {
			rec := byKey[names.BrokerNamespace(tc.cluster)+"/"+tc.name]
			if rec == nil {
				t.Fatalf("no record %s in %s", tc.name, names.BrokerNamespace(tc.cluster))
			}
			if got := broker.ClusterOf(rec); got != tc.cluster {
				t.Errorf("ClusterOf = %q, want %q", got, tc.cluster)
			}
			if !broker.Selector.Matches(labels.Set(rec.Labels)) {
				t.Errorf("labels %v: members' watches (broker.Selector) would not see it", rec.Labels)
			}
			svc, ok := broker.ServiceOf(rec)
			if tc.service == (types.NamespacedName{}) {
				// The sentinel: no service's record, and written today as it was.
				if ok {
					t.Errorf("ServiceOf maps the sentinel to %s", svc)
				}
				want := broker.Sentinel(tc.cluster)
				if rec.Name != want.Name || !reflect.DeepEqual(rec.Labels, want.Labels) || !reflect.DeepEqual(rec.Annotations, want.Annotations) ||
					!reflect.DeepEqual(rec.Spec, want.Spec) {
					t.Errorf("recorded sentinel %+v %+v\nthis tree writes %+v %+v", rec.ObjectMeta, rec.Spec, want.ObjectMeta, want.Spec)
				}
				return
			}
			if !ok || svc != tc.service {
				t.Fatalf("ServiceOf = %s, %v; want %s", svc, ok, tc.service)
			}
			e := admitRecord(t, rec)
			if e.Cluster != tc.cluster || e.Spec.Type != tc.typ || !reflect.DeepEqual(e.Spec.Ports, webPorts) ||
				!reflect.DeepEqual(e.Labels, tc.labels) || !reflect.DeepEqual(e.Annotations, tc.annots) {
				t.Errorf("read as cluster %q, type %s, ports %v, labels %v, annotations %v; want %q, %s, %v, %v, %v",
					e.Cluster, e.Spec.Type, e.Spec.Ports, e.Labels, e.Annotations, tc.cluster, tc.typ, webPorts, tc.labels, tc.annots)
			}
			if e.Slices != 1 || e.Region != "region-1" || e.Draining || e.Created.IsZero() {
				t.Errorf("read as %d slices, region %q, draining %v, created %s; want 1, region-1, false, a time", e.Slices, e.Region, e.Draining, e.Created)
			}
			// What this tree writes for the same export is what the previous release wrote.
			again, err := broker.Record(svc, e)
			if err != nil {
				t.Fatal(err)
			}
			if again.Namespace != rec.Namespace || again.Name != rec.Name || !reflect.DeepEqual(again.Labels, rec.Labels) ||
				!reflect.DeepEqual(again.Annotations, rec.Annotations) || !reflect.DeepEqual(again.Spec, rec.Spec) {
				t.Errorf("recorded %s/%s %v %v %+v\nthis tree writes %s/%s %v %v %+v", rec.Namespace, rec.Name, rec.Labels, rec.Annotations, rec.Spec,
					again.Namespace, again.Name, again.Labels, again.Annotations, again.Spec)
			}
		})
	}
}

// admitRecord reads a record as the import does (controller's admitRecord): parsed, with a valid cluster id, in
// that id's namespace, admitted whole (admit.Record: its service, spec and region valid), its exported metadata
// whole.
func admitRecord(t *testing.T, rec *mcsv1beta1.ServiceImport) merge.Export {
	t.Helper()
	e, err := broker.ParseRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if p := admit.ClusterID(e.Cluster); p != nil {
		t.Fatalf("cluster id refused: %+v", *p)
	}
	if rec.Namespace != names.BrokerNamespace(e.Cluster) {
		t.Fatalf("record in %s, not in its cluster's namespace %s", rec.Namespace, names.BrokerNamespace(e.Cluster))
	}
	svc, _ := broker.ServiceOf(rec)
	e, problems, ok := admit.Record(svc, e, nil)
	if !ok || len(problems) > 0 {
		t.Fatalf("admit.Record refused it (%v): %+v", ok, problems)
	}
	return e
}

func TestPreviousReleaseSlices(t *testing.T) {
	recorded := readStream[discoveryv1.EndpointSlice](t, "slices.yaml")
	for _, tc := range []struct {
		cluster   string
		service   types.NamespacedName
		hostnames []string
	}{
		{"cluster-a", web, nil},
		{"cluster-b", web, nil},
		{"cluster-b", db, []string{"db-0", "db-1"}},
	} {
		t.Run(tc.cluster+"/"+tc.service.String(), func(t *testing.T) {
			var found []discoveryv1.EndpointSlice
			for _, s := range recorded {
				if svc, ok := broker.ServiceOf(&s); ok && svc == tc.service && s.Namespace == names.BrokerNamespace(tc.cluster) {
					found = append(found, s)
				}
			}
			if len(found) != 1 {
				t.Fatalf("%d slices, want 1", len(found))
			}
			s := found[0]
			if got := broker.ClusterOf(&s); got != tc.cluster {
				t.Errorf("ClusterOf = %q, want %q", got, tc.cluster)
			}
			if !strings.HasPrefix(s.Name, names.RecordName(tc.service.Namespace, tc.service.Name)+".") {
				t.Errorf("name %s is not of %s's", s.Name, tc.service)
			}
			out, problems, ok := admit.Slice(&s)
			if !ok || len(problems) > 0 {
				t.Fatalf("admit.Slice refused it: %v, %+v", ok, problems)
			}
			var hostnames []string
			for _, e := range out.Endpoints {
				if !ptr.Deref(e.Conditions.Ready, false) || len(e.Addresses) != 1 {
					t.Errorf("endpoint %+v: want one address, ready", e)
				}
				if e.Hostname != nil {
					hostnames = append(hostnames, *e.Hostname)
				}
			}
			slices.Sort(hostnames)
			if len(out.Endpoints) != 2 || !reflect.DeepEqual(hostnames, tc.hostnames) {
				t.Errorf("%d endpoints with hostnames %v, want 2 with %v", len(out.Endpoints), hostnames, tc.hostnames)
			}
			// This tree writes the same labels and annotations from a source slice like it (with no trigger time).
			src := s.DeepCopy()
			src.Annotations, src.Labels = nil, nil
			again := broker.Slice(tc.cluster, tc.service, src)
			if again.Namespace != s.Namespace || !reflect.DeepEqual(again.Labels, s.Labels) || !reflect.DeepEqual(again.Annotations, s.Annotations) {
				t.Errorf("recorded %s %v %v\nthis tree writes %s %v %v", s.Namespace, s.Labels, s.Annotations, again.Namespace, again.Labels, again.Annotations)
			}
		})
	}
}

// TestPreviousReleaseImports runs the recorded records and slices through the import as a third member would:
// merged, imported, none missing.
func TestPreviousReleaseImports(t *testing.T) {
	records := readStream[mcsv1beta1.ServiceImport](t, "records.yaml")
	recorded := readStream[discoveryv1.EndpointSlice](t, "slices.yaml")
	for _, tc := range []struct {
		service   types.NamespacedName
		typ       mcsv1beta1.ServiceImportType
		exporters []string
	}{
		{web, mcsv1beta1.ClusterSetIP, members},
		{db, mcsv1beta1.Headless, []string{"cluster-b"}},
	} {
		t.Run(tc.service.String(), func(t *testing.T) {
			var exports []merge.Export
			for i := range records {
				if svc, ok := broker.ServiceOf(&records[i]); ok && svc == tc.service {
					exports = append(exports, admitRecord(t, &records[i]))
				}
			}
			var sources []imports.Source
			for _, s := range recorded {
				if svc, ok := broker.ServiceOf(&s); ok && svc == tc.service {
					out, _, _ := admit.Slice(&s)
					sources = append(sources, imports.Source{Cluster: broker.ClusterOf(&s), Slice: out})
				}
			}
			m := merge.Merge(exports)
			if len(m.Conflicts) > 0 || !reflect.DeepEqual(m.Clusters, tc.exporters) {
				t.Errorf("merged from %v with conflicts %+v; want %v, none", m.Clusters, m.Conflicts, tc.exporters)
			}
			si := imports.ServiceImport(tc.service, m, nil)
			if si.Spec.Type != tc.typ || !reflect.DeepEqual(si.Spec.Ports, webPorts) {
				t.Errorf("imported as %s with ports %v, want %s with %v", si.Spec.Type, si.Spec.Ports, tc.typ, webPorts)
			}
			imported := imports.Slices(tc.service, sources, m.SlicePorts, nil)
			perCluster := map[string]int{}
			for _, s := range imported {
				perCluster[s.Labels[mcsv1beta1.LabelSourceCluster]] += len(s.Endpoints)
				if len(s.Ports) != len(webPorts) {
					t.Errorf("imported slice %s has ports %v, want the 3 of the service", s.Name, s.Ports)
				}
			}
			if got := slices.Sorted(maps.Keys(perCluster)); !reflect.DeepEqual(got, tc.exporters) {
				t.Errorf("imported endpoints from %v, want %v", got, tc.exporters)
			}
			for c, n := range perCluster {
				if n != 2 {
					t.Errorf("%d endpoints imported from %s, want 2", n, c)
				}
			}
			if missing := imports.Missing(exports, sources, "cluster-c", func(string) bool { return true }); missing != "" {
				t.Errorf("Missing = %q: the records' slice counts do not match their slices", missing)
			}
		})
	}
}

func TestPreviousReleaseLeasesAndDirectory(t *testing.T) {
	leases := readStream[coordinationv1.Lease](t, "leases.yaml")
	var ids []string
	var latest time.Time
	for i := range leases {
		id := broker.LeaseOf(&leases[i])
		if id == "" {
			t.Errorf("Lease %s/%s speaks for no member", leases[i].Namespace, leases[i].Name)
		}
		if u := broker.UnreachableFrom(&leases[i]); len(u) > 0 {
			t.Errorf("Lease of %s reads as finding %v unreachable; it found none", id, u)
		}
		ids = append(ids, id)
		if r := leases[i].Spec.RenewTime; r != nil && r.After(latest) {
			latest = r.Time
		}
	}
	if !reflect.DeepEqual(ids, members) {
		t.Errorf("Leases of %v, want %v", ids, members)
	}
	// A third member that sees these Leases a second after the last renewal takes both members as alive.
	l := broker.NewLiveness("cluster-c", 30*time.Second)
	l.SetHealthy(true)
	l.Observe(leases, latest.Add(time.Second))
	for _, id := range members {
		if !l.Alive(id) {
			t.Errorf("%s is not alive from its recorded Lease", id)
		}
	}

	listed, refused := broker.ReadDirectory(readStream[corev1.ConfigMap](t, "directory.yaml"))
	if len(refused) > 0 {
		t.Errorf("directory entries refused: %v", refused)
	}
	var got []string
	for _, m := range listed {
		got = append(got, m.ClusterID)
		if m.Namespace != names.BrokerNamespace(m.ClusterID) {
			t.Errorf("%s listed with namespace %s", m.ClusterID, m.Namespace)
		}
	}
	if !reflect.DeepEqual(got, members) {
		t.Errorf("directory lists %v, want %v", got, members)
	}
}
