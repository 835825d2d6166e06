package hostile

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller"
	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/export"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/framework/ctrlharness"
)

// floodEndpoints is what mallory publishes for one service: 200,000, twenty times the per-service limit, in
// `make test`, where a million would cost CI three minutes more; HOSTILE_FLOOD_ENDPOINTS sets it, and issue 37's
// million is `HOSTILE_FLOOD_ENDPOINTS=1000000 go test -v -run TestHostileMemberAndUser ./test/e2e/hostile/`.
func floodEndpoints(t *testing.T) int {
	v := os.Getenv("HOSTILE_FLOOD_ENDPOINTS")
	if v == "" {
		return 200_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < export.MaxEndpointsPerSlice || n%export.MaxEndpointsPerSlice != 0 {
		t.Fatalf("HOSTILE_FLOOD_ENDPOINTS=%q: want a multiple of %d", v, export.MaxEndpointsPerSlice)
	}
	return n
}

const (
	// corednsLimit is the memory limit of CoreDNS's container in build/deploy (coredns/deployment.yaml); the
	// controller's is ctrlharness.MemoryLimit, which its processes here run with as GOMEMLIMIT, as in its pods.
	corednsLimit = 256 << 20
)

// flood: review #1. mallory publishes floodEndpoints endpoints for one service, in slices of the size exporters write
// (what its broker quota lets it), as fast as the broker takes them. Every honest member imports the first
// --max-endpoints-per-service (its default) of them and refuses the rest, its controller and CoreDNS stay within their
// containers' memory limits, and the honest services keep answering throughout.
func (e *env) flood(t *testing.T) {
	ctx := context.Background()
	const svc = "flood"
	key := types.NamespacedName{Namespace: ns, Name: svc}
	total := floodEndpoints(t)
	n := total / export.MaxEndpointsPerSlice
	rec, err := broker.Record(key, exportOf(mallory, n))
	if err != nil {
		t.Fatal(err)
	}
	rec.Namespace = names.BrokerNamespace(mallory)
	// mallory writes as fast as the broker lets it: no client-side rate limit.
	c, err := memberClient(e.f, mallory, nil, func(cfg *rest.Config) { cfg.QPS = -1 })
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// The administrator clears what mallory wrote. Ten thousand slices outlast a deletecollection's request
		// timeout while the API server goes on deleting them: asked again until none is left.
		sel := client.MatchingLabels{mcsv1beta1.LabelServiceName: svc}
		in := client.InNamespace(names.BrokerNamespace(mallory))
		poll.T(t, 3*timeout, "mallory's flood deleted", func() error {
			if err := e.admin.DeleteAllOf(ctx, &discoveryv1.EndpointSlice{}, in, sel); err != nil {
				return err
			}
			if err := e.admin.DeleteAllOf(ctx, &mcsv1beta1.ServiceImport{}, in, sel); err != nil {
				return err
			}
			left := &discoveryv1.EndpointSliceList{}
			if err := e.admin.List(ctx, left, in, sel, client.Limit(1)); err != nil || len(left.Items) > 0 {
				return fmt.Errorf("slices left (%v)", err)
			}
			return nil
		})
	}()
	if err := c.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	slice := func(i, size int) client.Object {
		var eps []discoveryv1.Endpoint // nil for size 0: endpoints null, as an emptied slice has them
		for j := range size {
			eps = append(eps, mcstest.Endpoint(floodAddr(i*export.MaxEndpointsPerSlice+j).String(), "", true))
		}
		out := broker.Slice(mallory, key, ipv4Slice(fmt.Sprintf("%s-%05d", svc, i), eps...))
		out.Namespace = rec.Namespace
		return out
	}
	// The broker takes no slice larger than the controllers write (the EndpointRecord CRD's schema, as the policy
	// mcs-broker-member-slices for the previous layout's EndpointSlices), and takes an empty one, as a Service
	// scaled to zero publishes it.
	if err := c.Create(ctx, slice(n, export.MaxEndpointsPerSlice+1)); !apierrors.IsInvalid(err) {
		t.Errorf("a slice of %d endpoints: %v, want Invalid", export.MaxEndpointsPerSlice+1, err)
	}
	empty := slice(n+1, 0)
	if err := c.Create(ctx, empty); err != nil {
		t.Errorf("an empty slice: %v", err)
	} else if err := c.Delete(ctx, empty); err != nil {
		t.Error(err)
	}
	start := time.Now()
	if err := createAll(ctx, c, n, 8, func(i int) client.Object { return slice(i, export.MaxEndpointsPerSlice) }); err != nil {
		t.Fatalf("publishing %d endpoints: %v", total, err)
	}
	t.Logf("mallory published %d endpoints in %d slices in %s", total, n, time.Since(start).Round(time.Second))

	want := controller.DefaultMaxEndpointsPerService
	poll.T(t, 3*timeout, fmt.Sprintf("the honest members import %d of mallory's endpoints", want), func() error {
		for _, m := range e.f.Members {
			got := 0
			for _, s := range e.importedSlices(t, m, svc) {
				got += len(s.Endpoints)
			}
			if got != want {
				return fmt.Errorf("%s imports %d", m.Name, got)
			}
		}
		return nil
	})
	e.healthy(t, fmt.Sprintf("%d endpoints", total))
	controllerLimit, err := ctrlharness.MemoryLimit()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range e.f.Members {
		refused, err := m.ControllerMetric("mcs_controller_refused_total", map[string]string{"reason": admit.ReasonTooManyEndpoints})
		if err != nil {
			t.Fatal(err)
		}
		ctrl, dns, err := m.ProcessUsage()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: controller peak RSS %d MiB (limit %d), CoreDNS peak RSS %d MiB (limit %d), %v refusals for too many endpoints",
			m.Name, ctrl.PeakRSS>>20, controllerLimit>>20, dns.PeakRSS>>20, corednsLimit>>20, refused)
		if ctrl.PeakRSS >= controllerLimit || dns.PeakRSS >= corednsLimit {
			t.Errorf("%s: controller peak RSS %d MiB, CoreDNS %d MiB: over their limits", m.Name, ctrl.PeakRSS>>20, dns.PeakRSS>>20)
		}
		if refused == 0 {
			t.Errorf("%s counts no refusal for too many endpoints", m.Name)
		}
	}
}

// floodAddr is the i-th address of 10.64.0.0/12, which holds a million and more.
func floodAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 64 + byte(i>>16), byte(i >> 8), byte(i)})
}

// createAll creates the n objects obj makes, with workers requests at a time, and returns the errors.
func createAll(ctx context.Context, c client.Client, n, workers int, obj func(i int) client.Object) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := c.Create(ctx, obj(i)); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}
