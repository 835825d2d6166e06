package export

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/names"
)

func serviceExport() *mcsv1beta1.ServiceExport {
	return &mcsv1beta1.ServiceExport{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "web", Generation: 2,
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
			Labels:            map[string]string{"not": "exported"},
		},
		Spec: mcsv1beta1.ServiceExportSpec{ExportedLabels: map[string]string{"team": "a"}},
	}
}

func TestValid(t *testing.T) {
	cases := []struct {
		name       string
		svc        *corev1.Service
		denied     []string
		wantOK     bool
		wantReason string
	}{
		{"no service", nil, nil, false, "NoService"},
		{"service being deleted", &corev1.Service{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: ptr.To(metav1.Now())}}, nil, false, "NoService"},
		{"ExternalName", &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName}}, nil, false, "InvalidServiceType"},
		{"ClusterIP", &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}, nil, true, "Valid"},
		{"NodePort", &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort}}, nil, true, "Valid"},
		{"LoadBalancer", &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}, nil, true, "Valid"},
		{"denied namespace", &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}, []string{"kube-system", "ns"}, false, "NamespaceNotAllowed"},
		{"denied namespace without a Service", nil, []string{"ns"}, false, "NamespaceNotAllowed"},
		{"other namespaces denied", &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}, DefaultDeniedNamespaces, true, "Valid"},
	}
	for _, c := range cases {
		cond, ok := Valid(serviceExport(), c.svc, c.denied)
		wantStatus := metav1.ConditionFalse
		if c.wantOK {
			wantStatus = metav1.ConditionTrue
		}
		if ok != c.wantOK || cond.Reason != c.wantReason || cond.Status != wantStatus || cond.Type != "Valid" || cond.ObservedGeneration != 2 {
			t.Errorf("%s: Valid() = %+v, %v", c.name, cond, ok)
		}
	}
}

func TestRecord(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.0.0.1",
		Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080, AppProtocol: ptr.To("http")}},
		IPFamilies:            []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol},
		SessionAffinity:       corev1.ServiceAffinityClientIP,
		SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}},
		InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
		TrafficDistribution:   ptr.To("PreferClose"),
	}}
	got := Record("east.prod", serviceExport(), svc)
	want := mcsv1beta1.ServiceImportSpec{
		Type:                  mcsv1beta1.ClusterSetIP,
		Ports:                 []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, AppProtocol: ptr.To("http")}},
		IPFamilies:            svc.Spec.IPFamilies,
		SessionAffinity:       corev1.ServiceAffinityClientIP,
		SessionAffinityConfig: svc.Spec.SessionAffinityConfig,
		InternalTrafficPolicy: svc.Spec.InternalTrafficPolicy,
		TrafficDistribution:   svc.Spec.TrafficDistribution,
	}
	if !reflect.DeepEqual(got.Spec, want) || got.Cluster != "east.prod" || !got.Created.Equal(serviceExport().CreationTimestamp.Time) ||
		!reflect.DeepEqual(got.Labels, map[string]string{"team": "a"}) || got.Annotations != nil {
		t.Errorf("Record() = %+v", got)
	}
	if got.Draining {
		t.Error("an export without the drain annotation drains")
	}
	draining := serviceExport()
	draining.Annotations = map[string]string{names.AnnotationDrain: "true"}
	if !Record("c", draining, svc).Draining {
		t.Errorf("an export annotated %s=true does not drain", names.AnnotationDrain)
	}
	svc.Spec.ClusterIP = corev1.ClusterIPNone
	if got := Record("c", serviceExport(), svc); got.Spec.Type != mcsv1beta1.Headless {
		t.Errorf("clusterIP None exports as %q", got.Spec.Type)
	}
}

func endpoints(n int, node string) []discoveryv1.Endpoint {
	eps := make([]discoveryv1.Endpoint, n)
	for i := range eps {
		eps[i] = discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.1.%d.%d", i/250, i%250)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(i%2 == 0), Serving: ptr.To(true), Terminating: ptr.To(false)},
			Hostname:   ptr.To(fmt.Sprintf("pod-%d", i)),
			NodeName:   ptr.To(node),
			Zone:       ptr.To("zone-a"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: fmt.Sprintf("pod-%d", i)},
			Hints:      &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}},
		}
	}
	return eps
}

func TestSlices(t *testing.T) {
	ports := []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}}
	local := []discoveryv1.EndpointSlice{
		{ObjectMeta: metav1.ObjectMeta{Name: "web-v4", Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-11-26T05:00:00.123456789Z", "local": "x"}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: endpoints(250, "node-1"), Ports: ports},
		{ObjectMeta: metav1.ObjectMeta{Name: "web-empty"}, AddressType: discoveryv1.AddressTypeIPv4, Ports: ports},
		{ObjectMeta: metav1.ObjectMeta{Name: "web-gone", DeletionTimestamp: ptr.To(metav1.Now())}, AddressType: discoveryv1.AddressTypeIPv4, Endpoints: endpoints(1, "n")},
	}
	got := Slices("ns", "web", local)
	var gotNames []string
	var sizes []int
	for _, s := range got {
		gotNames = append(gotNames, s.Name)
		sizes = append(sizes, len(s.Endpoints))
		if !reflect.DeepEqual(s.Ports, ports) || s.AddressType != discoveryv1.AddressTypeIPv4 {
			t.Errorf("slice %s: ports %v, address type %s", s.Name, s.Ports, s.AddressType)
		}
		// The trigger time travels with every part of its source slice, and no other annotation does.
		var want map[string]string
		if s.Name != "ns.web.web-empty" {
			want = map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-11-26T05:00:00.123456789Z"}
		}
		if !reflect.DeepEqual(s.Annotations, want) {
			t.Errorf("slice %s: annotations %v, want %v", s.Name, s.Annotations, want)
		}
		for _, e := range s.Endpoints {
			if e.NodeName != nil || e.TargetRef != nil || e.Hints != nil {
				t.Errorf("slice %s: local fields leave the cluster: %+v", s.Name, e)
			}
			if e.Hostname == nil || e.Zone == nil || e.Conditions.Ready == nil || e.Conditions.Serving == nil || e.Conditions.Terminating == nil {
				t.Errorf("slice %s: exported fields lost: %+v", s.Name, e)
			}
		}
	}
	// The empty slice is published empty: all pods gone is an update that importers apply at once, not a
	// withdrawal that they may hold back.
	if want := []string{"ns.web.web-empty", "ns.web.web-v4", "ns.web.web-v4.1", "ns.web.web-v4.2"}; !reflect.DeepEqual(gotNames, want) {
		t.Errorf("names = %v, want %v", gotNames, want)
	}
	if want := []int{0, 100, 100, 50}; !reflect.DeepEqual(sizes, want) {
		t.Errorf("sizes = %v, want %v", sizes, want)
	}
	// The input stays untouched and the output is stable.
	if local[0].Endpoints[0].NodeName == nil || !reflect.DeepEqual(got, Slices("ns", "web", local)) {
		t.Error("Slices changed its input or is not deterministic")
	}
}

func TestValidExportedMetadata(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}
	cases := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		wantOK      bool
		wantReason  string
		wantMessage string
		wantLabels  map[string]string
	}{
		{"valid", map[string]string{"team": "a"}, map[string]string{"example.com/note": "any value"}, true, "Valid",
			"Service is valid for export.", map[string]string{"team": "a"}},
		{"a label value with a space", map[string]string{"team": "payments team"}, nil, false, ReasonInvalidExportedMetadata,
			`Not exported: exported label "team": `, nil},
		{"an invalid annotation key", nil, map[string]string{"bad key": "x"}, false, ReasonInvalidExportedMetadata,
			`Not exported: exported annotation "bad key": `, nil},
		{"a reserved key is left out", map[string]string{"team": "a"}, map[string]string{names.AnnotationLocality: `{"dnsClusters":["evil"]}`}, true, "Valid",
			`Service is valid for export. Not exported: exported annotation key "mcs.vksfleet.dev/locality" is reserved.`, map[string]string{"team": "a"}},
	}
	for _, c := range cases {
		se := serviceExport()
		se.Spec.ExportedLabels, se.Spec.ExportedAnnotations = c.labels, c.annotations
		cond, ok := Valid(se, svc, nil)
		if ok != c.wantOK || cond.Reason != c.wantReason || !strings.HasPrefix(cond.Message, c.wantMessage) {
			t.Errorf("%s: Valid() = %+v, %v", c.name, cond, ok)
		}
		if !ok {
			continue
		}
		rec := Record("a", se, svc)
		if !reflect.DeepEqual(rec.Labels, c.wantLabels) || rec.Annotations[names.AnnotationLocality] != "" {
			t.Errorf("%s: Record() labels %v, annotations %v", c.name, rec.Labels, rec.Annotations)
		}
	}
}

func TestConditions(t *testing.T) {
	valid := metav1.Condition{Type: string(mcsv1beta1.ServiceExportConditionValid), Status: metav1.ConditionTrue, Reason: "Valid"}
	stale := []metav1.Condition{{Type: string(mcsv1beta1.ServiceExportConditionConflict), Status: metav1.ConditionTrue, Reason: "PortConflict"}}
	got := Conditions(stale, valid, true, nil, "", nil, nil, 2)
	if !meta.IsStatusConditionTrue(got, string(mcsv1beta1.ServiceExportConditionReady)) ||
		!meta.IsStatusConditionFalse(got, string(mcsv1beta1.ServiceExportConditionConflict)) || stale[0].Status != metav1.ConditionTrue {
		t.Errorf("published: %+v (input %+v)", got, stale)
	}
	got = Conditions(stale, valid, false, nil, "", nil, nil, 2)
	if r := meta.FindStatusCondition(got, string(mcsv1beta1.ServiceExportConditionReady)); r.Reason != string(mcsv1beta1.ServiceExportReasonPending) ||
		meta.FindStatusCondition(got, string(mcsv1beta1.ServiceExportConditionConflict)) != nil {
		t.Errorf("not exported: %+v", got)
	}
	limited := &Limited{Reason: ReasonTooManyEndpoints, Message: "Published 10 of 20 endpoints."}
	for _, tt := range []struct {
		publishErr error
		idConflict string
		limited    *Limited
		reason     string
	}{
		{errors.New("forbidden"), "", limited, string(mcsv1beta1.ServiceExportReasonFailed)},
		{nil, "two clusters", limited, ReasonClusterIDConflict},
		{nil, "", limited, ReasonTooManyEndpoints},
	} {
		if r := Ready(true, tt.publishErr, tt.idConflict, tt.limited, 1); r.Status != metav1.ConditionFalse || r.Reason != tt.reason {
			t.Errorf("Ready(%v, %q, %+v) = %+v", tt.publishErr, tt.idConflict, tt.limited, r)
		}
	}
	if r := Ready(true, nil, "", limited, 1); r.Message != limited.Message {
		t.Errorf("Ready() message %q, want the limit's", r.Message)
	}
}

// TestLimit: an export publishes the first of its slices by name that fit the per-service limit, whole, and says
// what it leaves out; under the limit it publishes all of them.
func TestLimit(t *testing.T) {
	slice := func(name string, endpoints int) discoveryv1.EndpointSlice {
		s := discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for i := range endpoints {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)}})
		}
		return s
	}
	names := func(ss []discoveryv1.EndpointSlice) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.Name)
		}
		return out
	}
	full := []discoveryv1.EndpointSlice{slice("a", 100), slice("b", 100), slice("c", 50)}
	cases := []struct {
		name       string
		slices     []discoveryv1.EndpointSlice
		max        int
		want       []string
		wantReason string
		wantMsg    string
	}{
		{"under the limit", full, 250, []string{"a", "b", "c"}, "", ""},
		{"the endpoint limit cuts", full, 249, []string{"a", "b"}, ReasonTooManyEndpoints,
			"Published 200 of 250 endpoints, in the first 2 of 3 EndpointSlices by name: one member's export of one " +
				"service may have at most 249 endpoints in 25 EndpointSlices (the mcs-controller flag --max-endpoints-per-service)."},
		// Ten endpoints allow one slice: the empty slices after the first are left out too.
		{"the slice limit cuts", []discoveryv1.EndpointSlice{slice("a", 0), slice("b", 0)}, 10, []string{"a"}, ReasonTooManyEndpoints,
			"Published 0 of 0 endpoints, in the first 1 of 2 EndpointSlices by name"},
	}
	for _, c := range cases {
		got, limited := Limit(c.slices, c.max)
		if !reflect.DeepEqual(names(got), c.want) {
			t.Errorf("%s: Limit() kept %v, want %v", c.name, names(got), c.want)
		}
		switch {
		case c.wantReason == "" && limited != nil:
			t.Errorf("%s: Limit() limited %+v, want nil", c.name, limited)
		case c.wantReason != "" && (limited == nil || limited.Reason != c.wantReason || !strings.HasPrefix(limited.Message, c.wantMsg)):
			t.Errorf("%s: Limit() limited %+v, want %s: %s", c.name, limited, c.wantReason, c.wantMsg)
		}
	}

	kept, limited := Share(full, 1, "ns", 7)
	if !reflect.DeepEqual(names(kept), []string{"a"}) || limited == nil || limited.Reason != ReasonNamespaceLimit ||
		!strings.Contains(limited.Message, "namespace ns may use at most 7") {
		t.Errorf("Share(3 slices, 1) = %v, %+v", names(kept), limited)
	}
	if kept, limited := Share(full, 3, "ns", 7); len(kept) != 3 || limited != nil {
		t.Errorf("Share(3 slices, 3) = %v, %+v; want all, not limited", names(kept), limited)
	}
}
