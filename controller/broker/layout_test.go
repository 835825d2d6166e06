package broker

import (
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/names"
)

func TestRecordRoundTrip(t *testing.T) {
	svc := types.NamespacedName{Namespace: "ns", Name: "web"}
	e := merge.Export{
		Cluster: "b.east",
		Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:       mcsv1beta1.Headless,
			Ports:      []mcsv1beta1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}},
			IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol},
		},
		Labels:      map[string]string{"team": "a"},
		Annotations: map[string]string{"example.com/x": "y"},
		Region:      "east",
		Draining:    true,
		Slices:      2,
	}
	rec, err := Record(svc, e)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Namespace != names.BrokerNamespace("b.east") || rec.Name != "ns.web" {
		t.Errorf("record at %s/%s", rec.Namespace, rec.Name)
	}
	if key, ok := ServiceOf(rec); !ok || key != svc {
		t.Errorf("ServiceOf(record) = %v, %v", key, ok)
	}
	if !Selector.Matches(labels.Set(rec.Labels)) {
		t.Error("the broker selector misses a record")
	}
	back, err := ParseRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, e) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, e)
	}
	// A record written before the slice count does not say it.
	delete(rec.Annotations, names.AnnotationSlices)
	if back, err := ParseRecord(rec); err != nil || back.Slices != -1 {
		t.Errorf("a record without %s: Slices %d, %v", names.AnnotationSlices, back.Slices, err)
	}
}

func TestParseRecordErrors(t *testing.T) {
	good, err := Record(types.NamespacedName{Namespace: "ns", Name: "web"}, merge.Export{Cluster: "a", Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(map[string]string){
		"no cluster id":   func(a map[string]string) { delete(a, names.AnnotationClusterID) },
		"bad timestamp":   func(a map[string]string) { a[names.AnnotationExportCreated] = "yesterday" },
		"bad labels JSON": func(a map[string]string) { a[names.AnnotationExportedLabels] = "{" },
		"bad slice count": func(a map[string]string) { a[names.AnnotationSlices] = "-2" },
	}
	for name, breakIt := range cases {
		rec := good.DeepCopy()
		breakIt(rec.Annotations)
		if _, err := ParseRecord(rec); err == nil || !strings.Contains(err.Error(), rec.Name) {
			t.Errorf("%s: ParseRecord() error = %v", name, err)
		}
	}
}

// TestPrecedence: an export ranks by the time its member claims, but never earlier than PrecedenceAllowance before
// its broker record was created, a time the broker sets.
func TestPrecedence(t *testing.T) {
	recorded := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		name               string
		exported, recorded time.Time
		want               time.Time
	}{
		{"published at once", recorded, recorded, recorded},
		{"published within the allowance", recorded.Add(-3 * time.Second), recorded, recorded.Add(-3 * time.Second)},
		{"claimed before the record", recorded.Add(-time.Hour), recorded, recorded.Add(-PrecedenceAllowance)},
		{"claimed 1970", time.Unix(0, 0), recorded, recorded.Add(-PrecedenceAllowance)},
		{"claimed year 1", time.Time{}, recorded, recorded.Add(-PrecedenceAllowance)},
		{"claimed after the record", recorded.Add(time.Minute), recorded, recorded.Add(time.Minute)},
		{"no recorded time", time.Unix(0, 0), time.Time{}, time.Unix(0, 0)},
	}
	for _, c := range cases {
		if got := Precedence(c.exported, c.recorded); !got.Equal(c.want) {
			t.Errorf("%s: Precedence(%s, %s) = %s, want %s", c.name, c.exported, c.recorded, got, c.want)
		}
	}
}

// TestForgedAgeLoses: a record that claims an export older than everyone's, created on the broker after an honest
// record, loses the merge to it; an honest export published late, and one published again on a broker that lost
// its records, rank by their records.
func TestForgedAgeLoses(t *testing.T) {
	svc := types.NamespacedName{Namespace: "ns", Name: "web"}
	honestAt := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	spec := func(typ mcsv1beta1.ServiceImportType) mcsv1beta1.ServiceImportSpec {
		return mcsv1beta1.ServiceImportSpec{Type: typ, Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}
	}
	// record is what the broker stores of cluster's export, claimed to be of exported, created at recorded.
	record := func(cluster string, exported, recorded time.Time, typ mcsv1beta1.ServiceImportType) merge.Export {
		rec, err := Record(svc, merge.Export{Cluster: cluster, Created: exported, Spec: spec(typ), Slices: -1})
		if err != nil {
			t.Fatal(err)
		}
		rec.CreationTimestamp = metav1.NewTime(recorded)
		e, err := ParseRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	cases := []struct {
		name   string
		others []merge.Export
		want   mcsv1beta1.ServiceImportType
	}{
		{"a forged 1970 record a minute after the honest one", []merge.Export{
			record("0-forger", time.Unix(0, 0), honestAt.Add(time.Minute), mcsv1beta1.Headless)}, mcsv1beta1.ClusterSetIP},
		{"a forged year-1 record just past the allowance", []merge.Export{
			record("0-forger", time.Time{}, honestAt.Add(PrecedenceAllowance+time.Second), mcsv1beta1.Headless)}, mcsv1beta1.ClusterSetIP},
		{"an older honest export still wins", []merge.Export{
			record("c", honestAt.Add(-time.Hour), honestAt.Add(-time.Hour), mcsv1beta1.Headless)}, mcsv1beta1.Headless},
		// Its ServiceExport is a day old, but its record came after the honest one: it ranks by its record.
		{"an old export published late, or again on a broker that lost its records", []merge.Export{
			record("c", honestAt.Add(-24*time.Hour), honestAt.Add(time.Hour), mcsv1beta1.Headless)}, mcsv1beta1.ClusterSetIP},
	}
	for _, c := range cases {
		honest := record("b", honestAt, honestAt, mcsv1beta1.ClusterSetIP)
		if got := merge.Merge(append(c.others, honest)).Spec.Type; got != c.want {
			t.Errorf("%s: the merge takes type %s, want %s", c.name, got, c.want)
		}
	}
}

// TestSliceKeepsTriggerTime: a broker slice carries its source slice's change time, and no other annotation.
func TestSliceKeepsTriggerTime(t *testing.T) {
	src := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Annotations: map[string]string{
		corev1.EndpointsLastChangeTriggerTime: "2026-11-26T02:45:47Z", "team.example/secret": "x"}}}
	got := Slice("a", types.NamespacedName{Namespace: "ns", Name: "web"}, src).Annotations
	want := map[string]string{names.AnnotationClusterID: "a", corev1.EndpointsLastChangeTriggerTime: "2026-11-26T02:45:47Z"}
	if !maps.Equal(got, want) {
		t.Errorf("annotations %v, want %v", got, want)
	}
}
