package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

// churned is how many Services each member exports and withdraws at random.
const churned = 4

// run is one chaos run: the fleet, its loops and what the faults did.
type run struct {
	t     *testing.T
	f     *framework.Fleet
	cfg   config
	a, b  *framework.Member
	loops map[string]*workload.Loop // by "member/pod"

	mu     sync.Mutex
	faults []fault // injected, in order
	errs   []string
}

// export creates the ServiceExport of name in m.
func (r *run) export(ctx context.Context, m *framework.Member, name string) error {
	return m.Client.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
}

// churnName is the nth churned Service of m.
func churnName(m *framework.Member, n int) string {
	return fmt.Sprintf("churn-%s-%d", m.Name[len(m.Name)-1:], n)
}

// endpointsName is m's exported Service whose endpoints churn.
func endpointsName(m *framework.Member) string { return "ep-" + m.Name[len(m.Name)-1:] }

// createChurned creates the churned Services of m, without selectors, each with an EndpointSlice of its own (no
// pod needed: nothing sends them traffic), and exports the one whose endpoints churn.
func (r *run) createChurned(ctx context.Context, m *framework.Member) error {
	names := []string{endpointsName(m)}
	for n := range churned {
		names = append(names, churnName(m, n))
	}
	for _, name := range names {
		objs := []client.Object{
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "tcp", Port: workload.EchoPort}}}},
			endpointSlice(m, name, 1),
		}
		for _, o := range objs {
			if err := m.Client.Create(ctx, o); err != nil {
				return err
			}
		}
	}
	return r.export(ctx, m, endpointsName(m))
}

// endpointSlice is the slice of a churned Service with n endpoints, addresses in m's pod range that no pod has.
func endpointSlice(m *framework.Member, name string, n int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("tcp"), Port: ptr.To(int32(workload.EchoPort))}},
	}
	base := m.PodCIDRs[0].Addr().As4()
	for i := range n {
		s.Endpoints = append(s.Endpoints, mcstest.Endpoint(fmt.Sprintf("%d.%d.250.%d", base[0], base[1], 10+i), "", true))
	}
	return s
}

// churn changes exports and endpoints in every member until ctx ends; an error (the member's API server is down,
// say) is counted as a skipped change, not a failure. Wait on the result for the churn to end.
func (r *run) churn(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i, m := range r.f.Members {
		rng := rand.New(rand.NewPCG(r.cfg.seed, uint64(i)))
		wg.Go(func() {
			tick := time.NewTicker(churnEvery)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				name := churnName(m, rng.IntN(churned))
				key := types.NamespacedName{Namespace: ns, Name: name}
				var se mcsv1beta1.ServiceExport
				err := m.Client.Get(cctx, key, &se)
				switch {
				case apierrors.IsNotFound(err):
					err = r.export(cctx, m, name)
				case err == nil:
					err = m.Client.Delete(cctx, &se)
				}
				if err == nil {
					s := endpointSlice(m, endpointsName(m), 1+rng.IntN(3))
					var cur discoveryv1.EndpointSlice
					if err = m.Client.Get(cctx, client.ObjectKeyFromObject(s), &cur); err == nil {
						cur.Endpoints = s.Endpoints
						err = m.Client.Update(cctx, &cur)
					}
				}
				cancel()
				if err != nil && ctx.Err() == nil {
					r.note(fmt.Sprintf("churn in %s skipped: %v", m.Name, err))
				}
			}
		})
	}
	return &wg
}

// note records something that went wrong in the harness, not in the product: it is logged, not failed.
func (r *run) note(s string) {
	r.mu.Lock()
	r.errs = append(r.errs, s)
	r.mu.Unlock()
}

// exported lists, by name, the members that export each Service of the namespace now.
func (r *run) exported(ctx context.Context) (map[string][]string, error) {
	by := map[string][]string{}
	for _, m := range r.f.Members {
		var list mcsv1beta1.ServiceExportList
		if err := m.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		for _, se := range list.Items {
			by[se.Name] = append(by[se.Name], m.Name)
		}
	}
	return by, nil
}

// imported lists, by name, the exporting clusters each ServiceImport of m's namespace names in its status.
func imported(ctx context.Context, m *framework.Member) (map[string][]string, error) {
	var list mcsv1beta1.ServiceImportList
	if err := m.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	by := map[string][]string{}
	for _, si := range list.Items {
		clusters := []string{}
		for _, c := range si.Status.Clusters {
			clusters = append(clusters, c.Cluster)
		}
		sort.Strings(clusters)
		by[si.Name] = clusters
	}
	return by, nil
}

// agree says how the imports of every member differ from the exports, nil once they agree.
func (r *run) agree(ctx context.Context) error {
	want, err := r.exported(ctx)
	if err != nil {
		return err
	}
	for _, v := range want {
		sort.Strings(v)
	}
	var errs []error
	for _, m := range r.f.Members {
		got, err := imported(ctx, m)
		if err != nil {
			return err
		}
		if !maps.EqualFunc(got, want, slices.Equal) {
			errs = append(errs, fmt.Errorf("%s imports %v, the clusterset exports %v", m.Name, got, want))
		}
	}
	return errors.Join(errs...)
}

// waitImported waits until every member imports what the clusterset exports.
func (r *run) waitImported(ctx context.Context) {
	poll.T(r.t, timeout, "every export imported", func() error { return r.agree(ctx) })
}

// waitLoopsSucceed waits until every loop has succeeded after since.
func (r *run) waitLoopsSucceed(ctx context.Context, since time.Time) {
	poll.T(r.t, timeout, "every loop succeeds", func() error {
		var failing []string
		for name, l := range r.loops {
			reqs := l.Requests(since.UnixMilli(), 0)
			if !slices.ContainsFunc(reqs, func(q workload.Request) bool { return q.OK }) {
				failing = append(failing, name)
			}
		}
		if len(failing) > 0 {
			sort.Strings(failing)
			return fmt.Errorf("no success yet from %s", strings.Join(failing, ", "))
		}
		return nil
	})
}

// converge waits, once the faults are undone, until the clusterset agrees again: every member imports exactly
// what is exported, its controller and CoreDNS Deployments are available, and every loop succeeds. It returns
// how long that took after the last fault.
func (r *run) converge(ctx context.Context, last time.Time) time.Duration {
	t := r.t
	for _, m := range r.f.Members {
		for _, d := range []types.NamespacedName{framework.ControllerDeployment, r.f.DNSDeployment()} {
			if err := m.WaitAvailable(ctx, d.Namespace, d.Name, 2, convergeBound); err != nil {
				t.Fatal(err)
			}
		}
	}
	poll.T(t, convergeBound, "imports agree with exports after the faults", func() error { return r.agree(ctx) })
	r.waitLoopsSucceed(ctx, time.Now())
	return time.Since(last)
}
