package apply

import (
	"context"
	"net/http"
	"sync"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
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
