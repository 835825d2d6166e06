package lifecycle

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	brokerv1alpha1 "vksfleet.dev/fleet/api/broker/v1alpha1"
	"vksfleet.dev/fleet/controller"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/framework/ctrlharness"
	"vksfleet.dev/fleet/test/framework/promtool"
)

// These tests stop and start controllers; they run after the others, in file order, and never in parallel.

// restartAll stops every controller, then starts them all again and waits until each has reconciled and is idle.
// It returns how long the restart took to converge.
func restartAll(t *testing.T) time.Duration {
	t.Helper()
	before := map[string]float64{}
	for name, m := range members {
		m.stop()
		_, n, err := m.Idle()
		if err != nil {
			t.Fatal(err)
		}
		before[name] = n
	}
	start := time.Now()
	for _, m := range members {
		m.Start()
	}
	poll.T(t, wait, "every controller reconciled and idle after the restart", func() error {
		return everywhere(func(m *member) error {
			idle, n, err := m.Idle()
			switch {
			case err != nil:
				return err
			case n <= before[m.Name] || !idle:
				return fmt.Errorf("busy: %v reconciles since the restart, idle %v", n-before[m.Name], idle)
			}
			return nil
		})
	})
	return time.Since(start)
}

func TestRestartMakesZeroWrites(t *testing.T) {
	ns := namespace(t)
	a, c := members["cluster-a"], members["cluster-c"]
	deploy(t, a, ns, app{name: "steady", replicas: 3})
	deploy(t, c, ns, app{name: "steady", replicas: 2})
	deploy(t, c, ns, app{name: "headless", replicas: 2, edit: func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }})
	exportService(t, a, ns, "steady")
	exportService(t, c, ns, "steady")
	exportService(t, c, ns, "headless")
	waitImports(t, ns, map[string]map[string]int{"steady": {a.ID: 3, c.ID: 2}, "headless": {c.ID: 2}})
	// Settled means every controller is idle too, not only that the imports look right, and no namespace of an
	// earlier test is still being deleted.
	poll.T(t, 2*wait, "controllers idle", func() error {
		return everywhere(func(m *member) error {
			if idle, _, err := m.Idle(); err != nil || !idle {
				return fmt.Errorf("busy (%v)", err)
			}
			list := &corev1.NamespaceList{}
			if err := m.Client.List(context.Background(), list); err != nil {
				return err
			}
			for _, n := range list.Items {
				if !n.DeletionTimestamp.IsZero() {
					return fmt.Errorf("namespace %s is being deleted", n.Name)
				}
			}
			return nil
		})
	})
	for _, m := range members {
		m.Writes.Reset()
	}
	took := restartAll(t)
	t.Logf("restart of %d controllers converged in %v", len(members), took)
	for _, m := range members {
		if w := m.Writes.List(); len(w) > 0 {
			t.Errorf("%s wrote %d times after a restart with nothing changed: %v", m.Name, len(w), w)
		}
	}
}

func TestExportDeletedWhileStopped(t *testing.T) {
	ns := namespace(t)
	a, b := members["cluster-a"], members["cluster-b"]
	deploy(t, a, ns, app{name: "orphan", replicas: 1})
	exportService(t, a, ns, "orphan")
	poll.T(t, wait, "imported in B", func() error {
		imp, err := readImport(b, ns, "orphan")
		if err != nil {
			return err
		}
		return imp.wantEndpoints(map[string]int{a.ID: 1})
	})
	a.stop()
	unexport(t, a, ns, "orphan")
	a.Start()
	waitGone(t, ns, "orphan")
}

func TestStoppedMemberLosesItsEndpoints(t *testing.T) {
	ns := namespace(t)
	a, b, c := members["cluster-a"], members["cluster-b"], members["cluster-c"]
	deploy(t, a, ns, app{name: "lease", replicas: 1})
	deploy(t, c, ns, app{name: "lease", replicas: 2})
	exportService(t, a, ns, "lease")
	exportService(t, c, ns, "lease")
	both := map[string]int{a.ID: 1, c.ID: 2}
	poll.T(t, wait, "both clusters imported", func() error {
		return everywhere(func(m *member) error {
			imp, err := readImport(m, ns, "lease")
			if err != nil {
				return err
			}
			return imp.wantEndpoints(both)
		})
	})
	before, err := readImport(b, ns, "lease")
	if err != nil {
		t.Fatal(err)
	}

	c.stop()
	lease := &coordinationv1.Lease{}
	key := types.NamespacedName{Namespace: names.BrokerNamespace(c.ID), Name: names.LeaseName}
	if err := cs.Broker.Records.Get(context.Background(), key, lease); err != nil {
		t.Fatal(err)
	}
	renewed := lease.Spec.RenewTime.Time
	poll.T(t, leaseGrace+wait, "C's endpoints withdrawn from A and B", func() error {
		for _, m := range []*member{a, b} {
			imp, err := readImport(m, ns, "lease")
			if err != nil {
				return err
			}
			if err := imp.wantEndpoints(map[string]int{a.ID: 1}); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
		}
		return nil
	})
	if gone := time.Since(renewed); gone < leaseGrace {
		t.Errorf("C's endpoints went %v after its last Lease renewal, before the %v grace", gone, leaseGrace)
	} else {
		t.Logf("C's endpoints went %v after its last Lease renewal (grace %v)", gone, leaseGrace)
	}
	c.Start()
	poll.T(t, wait, "C's endpoints back", func() error {
		return everywhere(func(m *member) error {
			imp, err := readImport(m, ns, "lease")
			if err != nil {
				return err
			}
			return imp.wantEndpoints(both)
		})
	})
	after, err := readImport(b, ns, "lease")
	if err != nil {
		t.Fatal(err)
	}
	if before.si.UID != after.si.UID || fmt.Sprint(before.si.Spec.IPs) != fmt.Sprint(after.si.Spec.IPs) {
		t.Errorf("B's ServiceImport was replaced while C was away: ips %v, then %v", before.si.Spec.IPs, after.si.Spec.IPs)
	}
}

func TestBrokerUnreachableKeepsImports(t *testing.T) {
	ns := namespace(t)
	a, b, c := members["cluster-a"], members["cluster-b"], members["cluster-c"]
	deploy(t, a, ns, app{name: "far", replicas: 1})
	deploy(t, c, ns, app{name: "far", replicas: 2})
	deploy(t, b, ns, app{name: "fromb", replicas: 1})
	exportService(t, a, ns, "far")
	exportService(t, c, ns, "far")
	exportService(t, b, ns, "fromb")
	waitImports(t, ns, map[string]map[string]int{"far": {a.ID: 1, c.ID: 2}, "fromb": {b.ID: 1}})
	before, err := readImport(b, ns, "far")
	if err != nil {
		t.Fatal(err)
	}

	causesFailures(t)
	b.Writes.Reset()
	b.Partition(true)
	t.Cleanup(func() { b.Partition(false) })
	// A withdrawing B's endpoints marks the grace as passed: by then B's stale view of the broker shows every
	// other Lease expired too, and B must not withdraw anything because of it.
	poll.T(t, leaseGrace+wait, "A withdraws the endpoints of B, which is cut off", func() error {
		imp, err := readImport(a, ns, "fromb")
		if err != nil {
			return err
		}
		return imp.wantEndpoints(map[string]int{})
	})
	withdrawn := time.Now()
	// Nothing is expected to happen in B, so there is no event to wait for: give B's liveness loop (1 s ticks)
	// a few rounds.
	poll.T(t, wait, "B's liveness loop ran a few rounds", func() error {
		if d := time.Since(withdrawn); d < 3*time.Second {
			return fmt.Errorf("only %v", d)
		}
		return nil
	})
	after, err := readImport(b, ns, "far")
	if err != nil {
		t.Fatal(err)
	}
	if err := after.wantEndpoints(map[string]int{a.ID: 1, c.ID: 2}); err != nil || after.si.UID != before.si.UID {
		t.Errorf("B's import changed while the broker was unreachable: %v", err)
	}
	for _, w := range b.Writes.List() {
		if strings.HasPrefix(w, "DELETE") {
			t.Errorf("B deleted while the broker was unreachable: %s", w)
		}
	}

	// B's own changes still reach B's own import, and the clusterset once the broker is back.
	scale(t, b, ns, "fromb", 2)
	poll.T(t, wait, "B imports its own change while cut off", func() error {
		imp, err := readImport(b, ns, "fromb")
		if err != nil {
			return err
		}
		return imp.wantEndpoints(map[string]int{b.ID: 2})
	})
	poll.T(t, wait, "Ready=False on B's export while cut off", func() error {
		return wantCondition(b, ns, "fromb", "Ready", metav1.ConditionFalse, "Failed")
	})
	b.Partition(false)
	poll.T(t, wait, "converged once the broker is back", func() error {
		if err := wantCondition(b, ns, "fromb", "Ready", metav1.ConditionTrue, "Exported"); err != nil {
			return err
		}
		return everywhere(func(m *member) error {
			imp, err := readImport(m, ns, "fromb")
			if err != nil {
				return err
			}
			return imp.wantEndpoints(map[string]int{b.ID: 2})
		})
	})
}

func TestStartupChecksAndProbes(t *testing.T) {
	a := members["cluster-a"]
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err := controller.Run(ctx, controller.Options{Local: a.Config, Broker: cs.Broker.Config, ClusterID: "Not_A_Cluster_ID"})
	if err == nil || !strings.Contains(err.Error(), "RFC 1123") {
		t.Errorf("Run with an invalid cluster id = %v, want an RFC 1123 error", err)
	}
	if err := controller.Run(ctx, controller.Options{Local: a.Config, Broker: cs.Broker.Config, LeaseGrace: time.Millisecond}); err == nil {
		t.Error("Run accepted a 1 ms lease grace")
	}

	// Swap A's controller for one serving probes and metrics, then swap back.
	a.stop()
	defer a.Start()
	ports, err := clusterset.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	health, metricsAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	probed := ctrlharness.InProcess(controller.Options{
		Local: a.Config, Broker: cs.Broker.Config, LeaseGrace: leaseGrace,
		HealthProbeBindAddress: health, MetricsBindAddress: metricsAddr,
	})
	defer func() {
		if err := probed.Stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for _, path := range []string{"/healthz", "/readyz"} {
		poll.T(t, wait, path, func() error { return get("http://"+health+path, "ok") })
	}
	poll.T(t, wait, "metrics", func() error {
		return get("http://"+metricsAddr+"/metrics", `mcs_controller_broker_reachable{cluster_id="cluster-a"} 1`)
	})

	// What an operator reads of an export: its state in the metrics, which Prometheus' own lint accepts, and an Event.
	ns := namespace(t)
	deploy(t, a, ns, app{name: "web", replicas: 1})
	exportService(t, a, ns, "web")
	for _, want := range []string{
		`mcs_controller_service_exports{cluster_id="cluster-a",condition="Ready",reason="Exported",status="True"} `,
		`mcs_controller_service_imports{cluster_id="cluster-a",condition="Ready",reason="Ready",status="True"} `,
		`mcs_controller_member_alive{cluster_id="b.east",observer_cluster_id="cluster-a"} 1`,
		`mcs_controller_member_lease_age_seconds{cluster_id="b.east",observer_cluster_id="cluster-a"} `,
		`mcs_controller_api_writes_total{cluster_id="cluster-a",resource="serviceexports",target="local",verb="PUT"} `,
		`mcs_controller_build_info{goversion="go`,
	} {
		poll.T(t, wait, want, func() error { return get("http://"+metricsAddr+"/metrics", want) })
	}
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	promtool.Run(t, body, "check", "metrics")
	poll.T(t, wait, "an Exported Event", func() error {
		events, err := a.Kube.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == "Exported" && e.Regarding.Kind == "ServiceExport" && e.Regarding.Name == "web" && e.Type == corev1.EventTypeNormal {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(events.Items))
	})
}

// get fetches url and checks for a 200 whose body contains want.
func get(url, want string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: %d, body lacks %q", url, resp.StatusCode, want)
	}
	return nil
}

// waitImports waits until every member imports each service of want with the wanted endpoints per cluster.
func waitImports(t *testing.T, ns string, want map[string]map[string]int) {
	t.Helper()
	poll.T(t, wait, "imports settled", func() error {
		return everywhere(func(m *member) error {
			for name, perCluster := range want {
				imp, err := readImport(m, ns, name)
				if err != nil {
					return err
				}
				if err := imp.wantEndpoints(perCluster); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			return nil
		})
	})
}

// waitGone waits until no member has the import of name, its derived Service or its slices.
func waitGone(t *testing.T, ns, name string) {
	t.Helper()
	poll.T(t, wait, name+": import, derived Service and slices gone everywhere", func() error {
		return everywhere(func(m *member) error {
			imp, err := readImport(m, ns, name)
			if err != nil {
				return err
			}
			return imp.gone()
		})
	})
}

// Never trust an empty view: the broker losing its data, by a wipe of its etcd or by the deletion of the
// ExportRecord CRD, must make no member delete anything, and the clusterset converges once the broker is back.
func TestBrokerRestartsEmpty(t *testing.T) {
	emptyBroker(t, func() {
		// cluster-a's first attempt to recreate its Lease fails, as on a broker that is barely up: it tries again.
		members["cluster-a"].FailLeaseCreates(1)
		if err := cs.Broker.RestartEmpty(); err != nil {
			t.Fatal(err)
		}
		// The broker is back without CRDs, as before an operator reinstalls them: every controller recreates its
		// namespace there meanwhile, while the records API, its MemberLease's with it, answers 404.
		poll.T(t, wait, "every member's broker namespace back on the empty broker", func() error {
			return everywhere(func(m *member) error {
				return cs.Broker.Client.Get(context.Background(), types.NamespacedName{Name: names.BrokerNamespace(m.ID)}, &corev1.Namespace{})
			})
		})
	})
}

func TestBrokerCRDRecreated(t *testing.T) {
	emptyBroker(t, func() {
		ctx := context.Background()
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: brokerv1alpha1.ExportRecords + "." + brokerv1alpha1.GroupName}}
		if err := cs.Broker.Client.Delete(ctx, crd); err != nil {
			t.Fatal(err)
		}
		poll.T(t, wait, "the ExportRecord CRD and every record gone from the broker", func() error {
			err := cs.Broker.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd)
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("CRD still there (%v)", err)
			}
			return nil
		})
	})
}

// emptyBroker exports services from two members, lets lose the broker's data, reinstalls the CRDs and checks
// that no member deleted anything and every import converges to what it was, with the same ServiceImports.
func emptyBroker(t *testing.T, lose func()) {
	causesFailures(t)
	ns := namespace(t)
	a, c := members["cluster-a"], members["cluster-c"]
	deploy(t, a, ns, app{name: "kept", replicas: 2})
	deploy(t, c, ns, app{name: "kept", replicas: 1})
	deploy(t, c, ns, app{name: "solo", replicas: 1, edit: func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }})
	exportService(t, a, ns, "kept")
	exportService(t, c, ns, "kept")
	exportService(t, c, ns, "solo")
	want := map[string]map[string]int{"kept": {a.ID: 2, c.ID: 1}, "solo": {c.ID: 1}}
	waitImports(t, ns, want)
	uids := map[string]types.UID{}
	for name, m := range members {
		for svc := range want {
			imp, err := readImport(m, ns, svc)
			if err != nil {
				t.Fatal(err)
			}
			uids[name+"/"+svc] = imp.si.UID
		}
		m.Writes.Reset()
	}

	// A failure in lose leaves the broker without CRDs: the next tests get them back, and fail on their own.
	t.Cleanup(func() {
		if err := cs.Broker.InstallCRDs(); err != nil {
			t.Errorf("reinstalling the broker's CRDs: %v", err)
		}
	})
	lose()
	if err := cs.Broker.InstallCRDs(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	waitImports(t, ns, want)
	// A change after the broker is back reaches everyone: the members watch the broker again.
	scale(t, c, ns, "kept", 2)
	want["kept"][c.ID] = 2
	poll.T(t, 4*wait, "C's scaling imported everywhere", func() error {
		return everywhere(func(m *member) error {
			imp, err := readImport(m, ns, "kept")
			if err != nil {
				return err
			}
			return imp.wantEndpoints(want["kept"])
		})
	})
	t.Logf("a change converged %v after the CRDs were back", time.Since(back))
	poll.T(t, wait, "every export republished and Ready", func() error {
		for _, m := range []*member{a, c} {
			if err := wantCondition(m, ns, "kept", "Ready", metav1.ConditionTrue, "Exported"); err != nil {
				return err
			}
		}
		return wantCondition(c, ns, "solo", "Ready", metav1.ConditionTrue, "Exported")
	})
	for name, m := range members {
		for svc := range want {
			imp, err := readImport(m, ns, svc)
			if err != nil {
				t.Fatal(err)
			}
			if imp.si.UID != uids[name+"/"+svc] {
				t.Errorf("%s's ServiceImport %s was replaced", name, svc)
			}
		}
		// Only this test's objects count: an earlier test's namespace may still be going away.
		for _, w := range m.Writes.List() {
			if strings.HasPrefix(w, "DELETE") && strings.Contains(w, ns) {
				t.Errorf("%s deleted while the broker was empty: %s", name, w)
			}
		}
	}
}

// Two clusters claim one cluster id: cluster-c's controller is replaced by one that says it is cluster-a, as a
// cluster restored from cluster-a's etcd snapshot would. Both report the conflict on their exports, cluster-a's
// record is never deleted while it lasts, and it clears once only cluster-a claims the id.
func TestDuplicateClusterID(t *testing.T) {
	causesFailures(t)
	ns := namespace(t)
	a, c := members["cluster-a"], members["cluster-c"]
	deploy(t, a, ns, app{name: "mine", replicas: 1})
	exportService(t, a, ns, "mine")
	deploy(t, c, ns, app{name: "theirs", replicas: 1})
	exportService(t, c, ns, "theirs")
	poll.T(t, wait, "cluster-a's export Ready", func() error {
		return wantCondition(a, ns, "mine", "Ready", metav1.ConditionTrue, "Exported")
	})
	mine := types.NamespacedName{Namespace: names.BrokerNamespace(a.ID), Name: names.RecordName(ns, "mine")}

	c.stop()
	defer c.Start()
	second := ctrlharness.InProcess(controller.Options{Local: c.Config, Broker: cs.Broker.Config, ClusterID: a.ID, LeaseGrace: leaseGrace,
		HealthProbeBindAddress: "0", MetricsBindAddress: "0"})
	recordKept := func() error {
		if err := cs.Broker.Records.Get(context.Background(), mine, &mcsv1beta1.ServiceImport{}); err != nil {
			t.Errorf("cluster-a's record of mine: %v", err)
		}
		return nil
	}
	poll.T(t, wait, "both report ClusterIDConflict", func() error {
		_ = recordKept()
		if err := wantCondition(a, ns, "mine", "Ready", metav1.ConditionFalse, "ClusterIDConflict"); err != nil {
			return err
		}
		return wantCondition(c, ns, "theirs", "Ready", metav1.ConditionFalse, "ClusterIDConflict")
	})
	if err := second.Stop(); err != nil {
		t.Errorf("the second controller: %v", err)
	}
	poll.T(t, leaseGrace+wait, "cluster-a's export Ready again", func() error {
		_ = recordKept()
		return wantCondition(a, ns, "mine", "Ready", metav1.ConditionTrue, "Exported")
	})
}
