package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// These tests stop and start controllers; they run after the others, in file order, and never in parallel.

// restartAll stops every controller, then starts them all again and waits until each has reconciled and is idle.
// It returns how long the restart took to converge.
func restartAll(t *testing.T) time.Duration {
	t.Helper()
	before := map[string]float64{}
	for name, m := range members {
		m.stop()
		_, n, err := m.idle()
		if err != nil {
			t.Fatal(err)
		}
		before[name] = n
	}
	start := time.Now()
	for _, m := range members {
		m.start()
	}
	eventually(t, wait, "every controller reconciled and idle after the restart", func() error {
		return everywhere(func(m *member) error {
			idle, n, err := m.idle()
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
	eventually(t, wait, "imports settled", func() error {
		return everywhere(func(m *member) error {
			for name, want := range map[string]map[string]int{"steady": {a.ID: 3, c.ID: 2}, "headless": {c.ID: 2}} {
				imp, err := readImport(m, ns, name)
				if err != nil {
					return err
				}
				if err := imp.wantEndpoints(want); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			return nil
		})
	})
	// Settled means every controller is idle too, not only that the imports look right.
	eventually(t, wait, "controllers idle", func() error {
		return everywhere(func(m *member) error {
			if idle, _, err := m.idle(); err != nil || !idle {
				return fmt.Errorf("busy (%v)", err)
			}
			return nil
		})
	})
	for _, m := range members {
		m.writes.reset()
	}
	took := restartAll(t)
	t.Logf("restart of %d controllers converged in %v", len(members), took)
	for _, m := range members {
		if w := m.writes.writes(); len(w) > 0 {
			t.Errorf("%s wrote %d times after a restart with nothing changed: %v", m.Name, len(w), w)
		}
	}
}

func TestExportDeletedWhileStopped(t *testing.T) {
	ns := namespace(t)
	a, b := members["cluster-a"], members["cluster-b"]
	deploy(t, a, ns, app{name: "orphan", replicas: 1})
	exportService(t, a, ns, "orphan")
	eventually(t, wait, "imported in B", func() error {
		imp, err := readImport(b, ns, "orphan")
		if err != nil {
			return err
		}
		return imp.wantEndpoints(map[string]int{a.ID: 1})
	})
	a.stop()
	unexport(t, a, ns, "orphan")
	a.start()
	eventually(t, wait, "cleaned up everywhere", func() error {
		return everywhere(func(m *member) error {
			imp, err := readImport(m, ns, "orphan")
			if err != nil {
				return err
			}
			return imp.gone()
		})
	})
}

func TestStoppedMemberLosesItsEndpoints(t *testing.T) {
	ns := namespace(t)
	a, b, c := members["cluster-a"], members["cluster-b"], members["cluster-c"]
	deploy(t, a, ns, app{name: "lease", replicas: 1})
	deploy(t, c, ns, app{name: "lease", replicas: 2})
	exportService(t, a, ns, "lease")
	exportService(t, c, ns, "lease")
	both := map[string]int{a.ID: 1, c.ID: 2}
	eventually(t, wait, "both clusters imported", func() error {
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
	stopped := time.Now()
	eventually(t, leaseGrace+wait, "C's endpoints withdrawn from A and B", func() error {
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
	if gone := time.Since(stopped); gone < leaseGrace {
		t.Errorf("C's endpoints went %v after it stopped, before the %v grace", gone, leaseGrace)
	}
	c.start()
	eventually(t, wait, "C's endpoints back", func() error {
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

