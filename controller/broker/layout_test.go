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
