package install

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestDeleteAll: a deletecollection that outlasts the API server's request timeout is looked at again and repeated
// until nothing is left; a refusal is not.
func TestDeleteAll(t *testing.T) {
	gr := schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}
	timeout := apierrors.NewTimeoutError("the server was unable to return a response in the time allotted", 0)
	for _, tc := range []struct {
		name    string
		deletes []error // what each deletecollection answers, the last one again after
		left    []int   // what each look finds left
		calls   int
		ok      bool
	}{
		{"at once", []error{nil}, nil, 1, true},
		{"a timeout, then again", []error{timeout, nil}, []int{5000}, 2, true},
		{"a timeout, and the server finished meanwhile", []error{timeout}, []int{0}, 1, true},
		{"refused", []error{apierrors.NewForbidden(gr, "", nil)}, nil, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, looks := 0, 0
			b := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
				DeleteAllOf: func(context.Context, client.WithWatch, client.Object, ...client.DeleteAllOfOption) error {
					err := tc.deletes[min(calls, len(tc.deletes)-1)]
					calls++
					return err
				},
				List: func(_ context.Context, _ client.WithWatch, list client.ObjectList, _ ...client.ListOption) error {
					l := list.(*metav1.PartialObjectMetadataList)
					l.Items = make([]metav1.PartialObjectMetadata, min(tc.left[min(looks, len(tc.left)-1)], 1))
					looks++
					return nil
				},
			}).Build()
			obj := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"}}
			err := deleteAll(context.Background(), b, obj, "mcs-member-m", time.Minute)
			if (err == nil) != tc.ok || calls != tc.calls {
				t.Errorf("deleteAll: %v after %d deletecollections; want ok %v after %d", err, calls, tc.ok, tc.calls)
			}
		})
	}
}
