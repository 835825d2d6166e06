package apply

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

func slice(name string, addr discoveryv1.AddressType, ip string) discoveryv1.EndpointSlice {
	return discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"l": "v"}},
		AddressType: addr,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
}

// writes records the write calls a fake client receives.
type writes struct {
	mu    sync.Mutex
	calls []string
}

func (w *writes) client(t *testing.T, objs ...client.Object) client.Client {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	scheme.AddKnownTypes(mcsv1beta1.SchemeGroupVersion, &mcsv1beta1.ServiceImport{}, &mcsv1beta1.ServiceImportList{})
	metav1.AddToGroupVersion(scheme, mcsv1beta1.SchemeGroupVersion)
	record := func(verb string, obj client.Object) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.calls = append(w.calls, verb+" "+obj.GetName())
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			record(http.MethodPost, obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			record(http.MethodPut, obj)
			return c.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			record(http.MethodDelete, obj)
			return c.Delete(ctx, obj, opts...)
		},
	}).Build()
}

func TestSlices(t *testing.T) {
	v4, v6 := discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
	same, changed, family, extra := slice("same", v4, "10.0.0.1"), slice("changed", v4, "10.0.0.2"), slice("family", v4, "10.0.0.3"), slice("extra", v4, "10.0.0.4")
	w := &writes{}
	c := w.client(t, same.DeepCopy(), changed.DeepCopy(), family.DeepCopy(), extra.DeepCopy())
	existing := &discoveryv1.EndpointSliceList{}
	if err := c.List(context.Background(), existing); err != nil {
		t.Fatal(err)
	}
	desired := []discoveryv1.EndpointSlice{same, slice("changed", v4, "10.0.0.20"), slice("family", v6, "fd00::3"), slice("new", v4, "10.0.0.5")}
	if err := Slices(context.Background(), c, existing.Items, desired); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"PUT changed": true, "DELETE family": true, "POST family": true, "POST new": true, "DELETE extra": true}
	if len(w.calls) != len(want) {
		t.Errorf("writes = %v, want %v", w.calls, want)
	}
	for _, call := range w.calls {
		if !want[call] {
			t.Errorf("unexpected write %q (all: %v)", call, w.calls)
		}
	}

	// Applying the same desired state again writes nothing.
	w.calls = nil
	if err := c.List(context.Background(), existing); err != nil {
		t.Fatal(err)
	}
	if err := Slices(context.Background(), c, existing.Items, desired); err != nil {
		t.Fatal(err)
	}
	if len(w.calls) > 0 {
		t.Errorf("second apply wrote %v", w.calls)
	}
}

func TestDeleteToleratesGone(t *testing.T) {
	w := &writes{}
	c := w.client(t)
	s := slice("gone", discoveryv1.AddressTypeIPv4, "10.0.0.1")
	if err := Delete(context.Background(), c, &s); err != nil {
		t.Errorf("deleting a missing object: %v", err)
	}
	s.DeletionTimestamp = ptr.To(metav1.Now())
	w.calls = nil
	if err := Delete(context.Background(), c, &s); err != nil || len(w.calls) > 0 {
		t.Errorf("deleting an object being deleted: %v, writes %v", err, w.calls)
	}
}

func TestUpdateRecreatesWhatTheCacheStillShows(t *testing.T) {
	w := &writes{}
	c := w.client(t)
	cached := slice("lost", discoveryv1.AddressTypeIPv4, "10.0.0.1")
	cached.ResourceVersion = "42"
	want := slice("lost", discoveryv1.AddressTypeIPv4, "10.0.0.2")
	if err := Slices(context.Background(), c, []discoveryv1.EndpointSlice{cached}, []discoveryv1.EndpointSlice{want}); err != nil {
		t.Fatal(err)
	}
	got := &discoveryv1.EndpointSlice{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(&want), got); err != nil || got.Endpoints[0].Addresses[0] != "10.0.0.2" {
		t.Errorf("after an update of a lost slice: %v, %+v (writes %v)", err, got.Endpoints, w.calls)
	}
}

func TestServiceImport(t *testing.T) {
	ctx := context.Background()
	want := func(ip string, annotation string) *mcsv1beta1.ServiceImport {
		return &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Labels: map[string]string{"l": "v"},
				Annotations: map[string]string{"a": annotation}},
			Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: []string{ip}},
		}
	}
	w := &writes{}
	c := w.client(t)
	stored, err := ServiceImport(ctx, c, nil, want("10.0.0.1", "x"))
	if err != nil || stored.ResourceVersion == "" {
		t.Fatalf("create: %v, %+v", err, stored)
	}
	steps := []struct {
		desc   string
		want   *mcsv1beta1.ServiceImport
		writes []string
	}{
		{"unchanged: no write", want("10.0.0.1", "x"), nil},
		{"spec changed", want("10.0.0.2", "x"), []string{"PUT web"}},
		{"annotation changed", want("10.0.0.2", "y"), []string{"PUT web"}},
	}
	for _, s := range steps {
		w.calls = nil
		stored.Status.Clusters = []mcsv1beta1.ClusterStatus{{Cluster: "kept"}}
		if stored, err = ServiceImport(ctx, c, stored, s.want); err != nil {
			t.Fatalf("%s: %v", s.desc, err)
		}
		if !slices.Equal(w.calls, s.writes) || stored.Spec.IPs[0] != s.want.Spec.IPs[0] || stored.Annotations["a"] != s.want.Annotations["a"] {
			t.Errorf("%s: writes %v (want %v), stored %+v", s.desc, w.calls, s.writes, stored)
		}
		if len(stored.Status.Clusters) != 1 {
			t.Errorf("%s: the status was replaced: %+v", s.desc, stored.Status)
		}
	}
	// A ServiceImport the cache still shows but the server lost comes back from want.
	if err := c.Delete(ctx, stored.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	w.calls = nil
	back, err := ServiceImport(ctx, c, stored, want("10.0.0.3", "y"))
	if err != nil || !slices.Equal(w.calls, []string{"PUT web", "POST web"}) || back.Spec.IPs[0] != "10.0.0.3" {
		t.Errorf("after the ServiceImport was lost: %v, writes %v, %+v", err, w.calls, back)
	}
}

func TestService(t *testing.T) {
	ctx := context.Background()
	svc := func(label string, port int32, clusterIPs ...string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Labels: map[string]string{"l": label}},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: port}}, ClusterIPs: clusterIPs},
		}
	}
	// The fields a caller owns here: the ports; the ClusterIPs stay the server's.
	ports := func(upd, want *corev1.Service) { upd.Spec.Ports = want.Spec.Ports }
	w := &writes{}
	c := w.client(t)
	stored, err := Service(ctx, c, "test Service", nil, svc("a", 80), ports)
	if err != nil || stored.ResourceVersion == "" || !slices.Equal(w.calls, []string{"POST web"}) {
		t.Fatalf("create: %v, writes %v, %+v", err, w.calls, stored)
	}
	stored.Spec.ClusterIPs = []string{"10.0.0.1"}
	steps := []struct {
		desc   string
		want   *corev1.Service
		writes []string
	}{
		{"unchanged but for the server's fields: no write", svc("a", 80, "10.9.9.9"), nil},
		{"a field the caller owns changed", svc("a", 81), []string{"PUT web"}},
		{"a label changed", svc("b", 81), []string{"PUT web"}},
	}
	for _, s := range steps {
		w.calls = nil
		if stored, err = Service(ctx, c, "test Service", stored, s.want, ports); err != nil {
			t.Fatalf("%s: %v", s.desc, err)
		}
		if !slices.Equal(w.calls, s.writes) || stored.Spec.Ports[0].Port != s.want.Spec.Ports[0].Port || stored.Labels["l"] != s.want.Labels["l"] {
			t.Errorf("%s: writes %v (want %v), stored %+v", s.desc, w.calls, s.writes, stored)
		}
		if !slices.Equal(stored.Spec.ClusterIPs, []string{"10.0.0.1"}) {
			t.Errorf("%s: the server's ClusterIPs were replaced: %v", s.desc, stored.Spec.ClusterIPs)
		}
	}
	// Errors name the Service as the caller calls it.
	gone := svc("b", 82)
	gone.Name, gone.ResourceVersion = "gone", "42"
	if _, err := Service(ctx, c, "test Service", gone, svc("b", 83), ports); err == nil || !strings.HasPrefix(err.Error(), "updating test Service ns/gone: ") {
		t.Errorf("updating a missing Service: %v", err)
	}
}
