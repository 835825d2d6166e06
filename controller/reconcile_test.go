package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/mcsversion"
	"vksfleet.dev/fleet/mcs/names"
)

// fakeCluster is a fake API server seen as the controller's caches see it: the scheme the controller builds for
// v1beta1, the status subresources and the field indexes; writes counts the writes it receives.
type fakeCluster struct {
	client.Client
	writes atomic.Int32
}

func newFakeCluster(t *testing.T, objs ...client.Object) *fakeCluster {
	t.Helper()
	scheme, err := mcsversion.NewScheme(mcsv1beta1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCluster{}
	f.Client = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&mcsv1beta1.ServiceImport{}, &mcsv1beta1.ServiceExport{}).
		WithIndex(&discoveryv1.EndpointSlice{}, localSliceIndex, indexLocalSlice).
		WithIndex(&discoveryv1.EndpointSlice{}, serviceIndex, indexByService).
		WithIndex(&mcsv1beta1.ServiceImport{}, serviceIndex, indexByService).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				f.writes.Add(1)
				return c.Create(ctx, obj, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				f.writes.Add(1)
				return c.Update(ctx, obj, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				f.writes.Add(1)
				return c.Delete(ctx, obj, opts...)
			},
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				f.writes.Add(1)
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).Build()
	return f
}

// testReconciler is a reconciler of cluster "a" over fake local and broker clusters, with the hold of a Pending
// import status the controller runs with.
func testReconciler(local, broker client.Client) *reconciler {
	return &reconciler{id: "a", local: local, broker: broker, readyWaits: newHold(readyHold), limits: newLimits(Options{}.withDefaults()),
		events: &events.FakeRecorder{}, log: logr.Discard()}
}

// objMeta is the metadata of a test object with labels given as key, value pairs.
func objMeta(namespace, name string, labels ...string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Namespace: namespace, Name: name}
	for i := 0; i+1 < len(labels); i += 2 {
		if m.Labels == nil {
			m.Labels = map[string]string{}
		}
		m.Labels[labels[i]] = labels[i+1]
	}
	return m
}

func TestOnlyRaces(t *testing.T) {
	gr := schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}
	exists := apierrors.NewAlreadyExists(gr, "a")
	conflict := apierrors.NewConflict(gr, "b", errors.New("the object has been modified"))
	forbidden := apierrors.NewForbidden(gr, "c", errors.New("no"))
	// As kube-apiserver's NamespaceLifecycle admission refuses a create in a namespace being deleted.
	terminating := apierrors.NewForbidden(gr, "d", errors.New("unable to create new content in namespace x because it is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Field: "metadata.namespace"}}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"AlreadyExists", exists, true},
		{"Conflict, wrapped", at("local", "https://member", fmt.Errorf("updating: %w", conflict)), true},
		{"races joined in a wrapped join", at("broker", "h", fmt.Errorf("slices: %w", errors.Join(exists, nil, conflict))), true},
		{"a real error among races", errors.Join(exists, at("broker", "h", fmt.Errorf("x: %w", errors.Join(conflict, forbidden)))), false},
		{"a create in a namespace being deleted", at("broker", "h", fmt.Errorf("importing: %w", terminating)), true},
		{"a real error", forbidden, false},
		{"not an API error", errors.New("broken"), false},
	}
	for _, c := range cases {
		if got := onlyRaces(c.err); got != c.want {
			t.Errorf("%s: onlyRaces(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

func TestFailures(t *testing.T) {
	gr := schema.GroupResource{Resource: "services"}
	conflict := apierrors.NewConflict(gr, "b", errors.New("the object has been modified"))
	forbidden := apierrors.NewForbidden(gr, "c", errors.New("no"))
	refused := &url.Error{Op: "Get", URL: "https://broker", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}
	err := errors.Join(
		at("broker", "https://broker", fmt.Errorf("publishing: %w", errors.Join(conflict, refused))),
		at("local", "https://member", fmt.Errorf("status: %w", forbidden)),
		at("local", "https://member", context.DeadlineExceeded),
		errors.New("neither"))
	var got []string
	failures(err, "", func(target string, err error) { got = append(got, target+"/"+cause(err)) })
	want := []string{"broker/Conflict", "broker/Unreachable", "local/Forbidden", "local/Timeout", "/Other"}
	if !slices.Equal(got, want) {
		t.Errorf("failures = %v, want %v", got, want)
	}
}

func TestWithdrawsAndHold(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	src := func(cluster, slice string) imports.Source {
		return imports.Source{Cluster: cluster, Slice: discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: slice}}}
	}
	stored := func(cluster, slice string) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: names.ImportedSliceName("web", cluster, slice)}}
	}
	si := &mcsv1beta1.ServiceImport{}
	one := []merge.Export{{Cluster: "a"}}
	cases := []struct {
		name    string
		si      *mcsv1beta1.ServiceImport
		stored  []discoveryv1.EndpointSlice
		exports []merge.Export
		sources []imports.Source
		want    bool
	}{
		{"nothing imported, nothing exported", nil, nil, nil, nil, false},
		{"the last export gone", si, nil, nil, nil, true},
		{"slices left of a gone import", nil, []discoveryv1.EndpointSlice{stored("a", "s1")}, nil, nil, true},
		{"every stored slice still wanted, one more", si, []discoveryv1.EndpointSlice{stored("a", "s1")}, one,
			[]imports.Source{src("a", "s1"), src("b", "s2")}, false},
		{"a cluster's slice no longer wanted", si, []discoveryv1.EndpointSlice{stored("a", "s1"), stored("b", "s2")}, one,
			[]imports.Source{src("a", "s1")}, true},
	}
	for _, c := range cases {
		if got := withdraws(c.si, nil, c.stored, key, c.exports, c.sources); got != c.want {
			t.Errorf("%s: withdraws = %v, want %v", c.name, got, c.want)
		}
	}

	h := newHold(2 * time.Second)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, s := range []struct {
		at   time.Duration
		want time.Duration
	}{{0, 2 * time.Second}, {time.Second, time.Second}, {3 * time.Second, 0}} {
		if got := h.wait(key, t0.Add(s.at)); got != s.want {
			t.Errorf("hold at %v = %v, want %v", s.at, got, s.want)
		}
	}
	h.forget(key)
	if got := h.wait(key, t0.Add(10*time.Second)); got != 2*time.Second {
		t.Errorf("hold after forget = %v, want the whole hold", got)
	}
}

func TestIsBrokerNamespace(t *testing.T) {
	brokerNS := &corev1.Namespace{ObjectMeta: objMeta("", names.BrokerNamespace("b"), names.LabelManagedBy, names.ManagedBy)}
	userNS := &corev1.Namespace{ObjectMeta: objMeta("", "mcs-member-portal")}
	r := testReconciler(newFakeCluster(t, brokerNS, userNS), nil)
	for ns, want := range map[string]bool{brokerNS.Name: true, "mcs-member-portal": false, "mcs-member-gone": false, "default": false} {
		if got, err := r.isBrokerNamespace(context.Background(), ns); err != nil || got != want {
			t.Errorf("isBrokerNamespace(%q) = %v, %v; want %v", ns, got, err, want)
		}
	}
}
