package kubesource

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	fakediscovery "k8s.io/client-go/discovery/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/plugin/zone"
)

// TestApplyGuarded checks that a service whose index build panics neither stops the worker nor holds back the
// other services of its batch, keeps its last good entry, and is reported once; and that records skipped by the
// builds are summed.
func TestApplyGuarded(t *testing.T) {
	ix := zone.New(zone.Options{Zone: "clusterset.local.", TTL: 5})
	ix.SetNamespaces([]string{"ns"})
	vip := func(name, ip string) zone.Change {
		return zone.Change{Key: zone.Key("ns", name), Service: &zone.Service{Namespace: "ns", Name: name,
			IPs: []netip.Addr{netip.MustParseAddr(ip)}}}
	}
	ix.Apply(vip("bad", "10.0.0.1"))
	// The fake build panics on any batch holding "bad", as a build with a bug would, and skips one record per
	// other service, as a build that meets an unpackable record does.
	var applied []string
	apply := func(changes ...zone.Change) (int, error) {
		for _, c := range changes {
			if c.Key == zone.Key("ns", "bad") {
				panic("a bug")
			}
		}
		for _, c := range changes {
			applied = append(applied, c.Key)
		}
		ix.Apply(changes...)
		return len(changes), errors.New("first skipped")
	}
	skipped, panicked, why := applyGuarded(apply, []zone.Change{vip("a", "10.0.0.2"), vip("bad", "10.0.0.3"), vip("b", "10.0.0.4")})
	slices.Sort(applied)
	if !slices.Equal(applied, []string{"a.ns", "b.ns"}) {
		t.Errorf("applied %v, want the two good services", applied)
	}
	if skipped != 2 || why == nil || why.Error() != "first skipped" {
		t.Errorf("skipped %d (%v), want 2 (first skipped)", skipped, why)
	}
	if len(panicked) != 1 || panicked[0].key != "bad.ns" || !strings.Contains(panicked[0].why.Error(), "a bug") ||
		!strings.Contains(panicked[0].why.Error(), "applyGuarded") {
		t.Errorf("panicked %v, want bad.ns with the panic and its stack", panicked)
	}
	for name, want := range map[string]string{"a": "10.0.0.2", "b": "10.0.0.4", "bad": "10.0.0.1"} {
		r, _ := ix.Snapshot().Lookup(name+".ns.svc.clusterset.local.", dns.TypeA)
		if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != want {
			t.Errorf("%s answers %v, want %s", name, r.Answer, want)
		}
	}
	if skipped, panicked, _ := applyGuarded(apply, []zone.Change{vip("c", "10.0.0.5")}); skipped != 1 || panicked != nil {
		t.Errorf("a batch without a panic: skipped %d, panicked %v", skipped, panicked)
	}
}

// answers records what the source reports of cross-cluster propagation.
type answers struct {
	nopObserver
	got []time.Duration
}

func (a *answers) Answered(d time.Duration) { a.got = append(a.got, d) }

// TestAnsweredFromTheExportingChange: an imported slice's last-change-trigger-time, the time of the change in the
// exporting cluster, is measured to the index update that answers it, once per change: a resync of the same slice
// is no new change, and a slice without the time is not measured.
func TestAnsweredFromTheExportingChange(t *testing.T) {
	obs := &answers{}
	s := &Source{opts: Options{Index: zone.New(zone.Options{Zone: "clusterset.local.", TTL: 5}), Observer: obs},
		dirty: map[serviceKey]time.Time{}, slicesOf: map[serviceKey][]*endpointSlice{}, wake: make(chan struct{}, 1),
		imports: cache.NewSharedIndexInformer(&cache.ListWatch{}, &serviceImport{}, 0, cache.Indexers{})}
	h := s.sliceHandler()
	slice := func(changed time.Time) any {
		sl := mcstest.Slice("ns", "web", "east", discoveryv1.AddressTypeIPv4, nil, mcstest.Endpoint("10.0.0.1", "", true))
		if !changed.IsZero() {
			sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: changed.Format(time.RFC3339Nano)}
		}
		out, _ := slimEndpointSlice(sl)
		return out
	}
	first := time.Now().Add(-2 * time.Second)
	h.OnAdd(slice(first), false)
	s.update(true)
	if len(obs.got) != 1 || obs.got[0] < 2*time.Second || obs.got[0] > time.Minute {
		t.Fatalf("after the first change: %v, want one latency of about 2s", obs.got)
	}
	h.OnUpdate(slice(first), slice(first))
	s.update(true)
	if len(obs.got) != 1 {
		t.Errorf("a resync was measured: %v", obs.got)
	}
	h.OnUpdate(slice(first), slice(time.Now().Add(-time.Second)))
	h.OnUpdate(slice(first), slice(time.Time{}))
	s.update(true)
	if len(obs.got) != 2 || obs.got[1] < time.Second {
		t.Errorf("after a second change and one without a time: %v, want two latencies", obs.got)
	}
}

// drops records what the source reports left out, by reason; the informers report from their own goroutines.
type drops struct {
	nopObserver
	mu  sync.Mutex
	got map[string]int
}

func (d *drops) Dropped(reason, _ string, n int, _ error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.got[reason] += n
}

// listsOnly is a fake clientset that says, as client-go's fakes do but the mcs-api's does not, that it cannot
// stream the initial list of a watch: its informers list first.
type listsOnly struct{ mcsclient.Interface }

func (listsOnly) IsWatchListSemanticsUnSupported() bool { return true }

// TestServesTheManagersNamed runs a source against fake API servers holding a headless import and slices of
// several managers: ours, another MCS implementation's, and one without the label. It serves the slices of the
// managers named, and of every manager when none is; a slice of another manager is validated as ours are.
func TestServesTheManagersNamed(t *testing.T) {
	const other = "endpointslice-controller.x-k8s.io"
	slice := func(cluster, address, manager string) runtime.Object {
		sl := mcstest.Slice("shop", "db", cluster, discoveryv1.AddressTypeIPv4, nil, mcstest.Endpoint(address, "", true))
		if manager == "" {
			delete(sl.Labels, discoveryv1.LabelManagedBy)
		} else {
			sl.Labels[discoveryv1.LabelManagedBy] = manager
		}
		return sl
	}
	objects := []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
		slice("east", "10.0.0.1", names.ManagedBy),
		slice("west", "10.0.0.2", other),
		slice("Hostile", "10.0.0.3", other), // an invalid cluster id: refused whoever wrote it
		slice("north", "10.0.0.4", ""),
	}
	for _, tt := range []struct {
		name     string
		managers []string
		want     []string
		refused  int
	}{
		{"ours, the default", []string{names.ManagedBy}, []string{"10.0.0.1"}, 0},
		{"ours and another", []string{names.ManagedBy, other}, []string{"10.0.0.1", "10.0.0.2"}, 1},
		{"another alone", []string{other}, []string{"10.0.0.2"}, 1},
		{"every manager", nil, []string{"10.0.0.1", "10.0.0.2", "10.0.0.4"}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kube := kubefake.NewClientset(objects...)
			kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
				GroupVersion: mcsv1beta1.SchemeGroupVersion.String(),
				APIResources: []metav1.APIResource{{Name: mcsv1beta1.ServiceImportPluralName}},
			}}
			mcs := listsOnly{mcsfake.NewSimpleClientset(mcstest.Import("shop", "db", mcsv1beta1.Headless, nil))}
			ix := zone.New(zone.Options{Zone: "clusterset.local.", TTL: 5})
			obs := &drops{got: map[string]int{}}
			s, err := newSource(Options{Index: ix, Managers: tt.managers, Observer: obs}, kube, mcs)
			if err != nil {
				t.Fatal(err)
			}
			s.Start()
			defer s.Stop()
			if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
				func(context.Context) (bool, error) { return s.HasSynced(), nil }); err != nil {
				t.Fatal("not synced:", err)
			}
			r, _ := ix.Snapshot().Lookup("db.shop.svc.clusterset.local.", dns.TypeA)
			if got := mcstest.Addresses(r.Answer); !slices.Equal(got, tt.want) {
				t.Errorf("A %v, want %v", got, tt.want)
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if got := obs.got[DropInvalidClusterID]; got != tt.refused {
				t.Errorf("%d slices refused for their cluster id, want %d", got, tt.refused)
			}
		})
	}
}
