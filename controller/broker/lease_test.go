package broker

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"vksfleet.dev/fleet/mcs/names"
)

func lease(id string, renewed time.Time) coordinationv1.Lease {
	return coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{names.AnnotationClusterID: id}},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}},
	}
}

func TestLiveness(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewLiveness("a", 10*time.Second)
	select {
	case <-l.Observed():
		t.Fatal("observed before Observe")
	default:
	}
	steps := []struct {
		name        string
		healthy     bool
		leases      []coordinationv1.Lease
		at          time.Duration
		wantChanged []string
		wantAlive   []string
	}{
		{"fresh leases are alive", true, []coordinationv1.Lease{lease("a", t0), lease("b", t0), lease("c", t0)}, 5 * time.Second, []string{"b", "c"}, []string{"a", "b", "c"}},
		{"within the grace nothing changes", true, []coordinationv1.Lease{lease("b", t0), lease("c", t0)}, 10 * time.Second, nil, []string{"a", "b", "c"}},
		{"an expired lease is dead", true, []coordinationv1.Lease{lease("b", t0.Add(5*time.Second)), lease("c", t0)}, 11 * time.Second, []string{"c"}, []string{"a", "b"}},
		{"an unhealthy observer freezes", false, []coordinationv1.Lease{lease("b", t0), lease("c", t0.Add(30*time.Second))}, 60 * time.Second, nil, []string{"a", "b"}},
		{"a renewed lease is alive again", true, []coordinationv1.Lease{lease("b", t0.Add(55*time.Second)), lease("c", t0.Add(58*time.Second))}, 60 * time.Second, []string{"c"}, []string{"a", "b", "c"}},
		{"a deleted lease is dead", true, []coordinationv1.Lease{lease("c", t0.Add(58*time.Second))}, 61 * time.Second, []string{"b"}, []string{"a", "c"}},
	}
	for _, s := range steps {
		l.SetHealthy(s.healthy)
		changed := l.Observe(s.leases, t0.Add(s.at))
		slices.Sort(changed)
		if !slices.Equal(changed, s.wantChanged) {
			t.Errorf("%s: changed = %v, want %v", s.name, changed, s.wantChanged)
		}
		for _, id := range []string{"a", "b", "c", "d"} {
			if got, want := l.Alive(id), slices.Contains(s.wantAlive, id); got != want {
				t.Errorf("%s: Alive(%q) = %v, want %v", s.name, id, got, want)
			}
		}
	}
	select {
	case <-l.Observed():
	default:
		t.Fatal("not observed after Observe")
	}
}
