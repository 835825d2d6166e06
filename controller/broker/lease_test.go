package broker

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"vksfleet.dev/fleet/mcs/memberlease"
	"vksfleet.dev/fleet/mcs/names"
)

// lease is member id's Lease in its broker namespace, last renewed at renewed by the member's clock.
func lease(id string, renewed time.Time) coordinationv1.Lease {
	return coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: names.BrokerNamespace(id), Name: names.LeaseName,
			Annotations: map[string]string{names.AnnotationClusterID: id}},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}},
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

func TestLivenessMembers(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewLiveness("a", 10*time.Second)
	l.Observe([]coordinationv1.Lease{lease("a", t0), lease("b", t0), lease("c", t0)}, t0.Add(5*time.Second))
	l.Observe([]coordinationv1.Lease{lease("a", t0), lease("b", t0.Add(6*time.Second)), lease("c", t0)}, t0.Add(11*time.Second))
	// b's renewal was seen at 11 s; c's Lease was first seen renewed at t0 and never since. The observer itself is
	// no member of its own view.
	want := map[string]Member{"b": {Alive: true, Age: time.Second}, "c": {Alive: false, Age: 12 * time.Second}}
	if got := l.Members(t0.Add(12 * time.Second)); !maps.Equal(got, want) {
		t.Errorf("Members = %v, want %v", got, want)
	}
}

func TestLivenessCountsOnlyAMembersOwnLease(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	forged := lease("dead", t0) // written by member b in its own namespace, naming member dead
	forged.Namespace = names.BrokerNamespace("b")
	otherName := lease("dead", t0)
	otherName.Name = "extra"
	crafted := strings.Repeat("a", 52) + "." + strings.Repeat("b", 60) + `\`
	invalid := lease(crafted, t0)
	l := NewLiveness("a", 10*time.Second)
	l.Observe([]coordinationv1.Lease{forged, otherName, invalid, lease("b", t0)}, t0)
	if l.Alive("dead") || l.Alive(crafted) || !l.Alive("b") {
		t.Errorf("alive: dead %v, crafted %v, b %v", l.Alive("dead"), l.Alive(crafted), l.Alive("b"))
	}
}

func TestLivenessIgnoresClockSkew(t *testing.T) {
	const grace = 10 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, skew := range []time.Duration{-time.Hour, -11 * time.Second, 0, futureSlack, 11 * time.Second, time.Hour} {
		l := NewLiveness("a", grace)
		// Member b renews every 3 s by a clock skew away from the observer's, then dies at 30 s.
		for at := time.Duration(0); at <= 30*time.Second; at += time.Second {
			renewed := t0.Add(at/(3*time.Second)*(3*time.Second) + skew)
			l.Observe([]coordinationv1.Lease{lease("b", renewed)}, t0.Add(at))
			// A renewer behind by more than the grace, or ahead by more than the slack, counts from its first
			// renewal this observer sees.
			if settled := (skew > -grace && skew <= futureSlack) || at >= 3*time.Second; settled && !l.Alive("b") {
				t.Errorf("skew %v: a live member is dead at %v", skew, at)
			}
		}
		last := t0.Add(30*time.Second + skew)
		for at := 31 * time.Second; at <= 60*time.Second; at += time.Second {
			l.Observe([]coordinationv1.Lease{lease("b", last)}, t0.Add(at))
			if dead := at > 30*time.Second+grace; dead == l.Alive("b") {
				t.Errorf("skew %v: at %v alive = %v", skew, at, l.Alive("b"))
			}
		}
	}
}

// A member that died with its clock ahead leaves a renew time in the future: an observer that starts after it died
// must not take it as a renewal seen now, which would import the dead member's endpoints for a grace.
func TestLivenessFirstLookAhead(t *testing.T) {
	const grace = 10 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		ahead     time.Duration
		wantAlive bool
	}{
		{"an hour ahead", time.Hour, false},
		{"just past the slack", futureSlack + time.Millisecond, false},
		{"within the slack: NTP-close clocks", futureSlack, true},
		{"not ahead", 0, true},
	} {
		l := NewLiveness("a", grace)
		for at := time.Duration(0); at <= 2*grace; at += time.Second {
			l.Observe([]coordinationv1.Lease{lease("b", t0.Add(tc.ahead))}, t0.Add(at))
			if want := tc.wantAlive && at <= grace; l.Alive("b") != want {
				t.Errorf("%s: at %v alive = %v, want %v", tc.name, at, l.Alive("b"), want)
			}
		}
		// Once the renew time changes, the member renews, whatever its clock says.
		now := t0.Add(2*grace + time.Second)
		l.Observe([]coordinationv1.Lease{lease("b", t0.Add(tc.ahead+time.Second))}, now)
		if !l.Alive("b") {
			t.Errorf("%s: a renewal seen at %v does not count", tc.name, now)
		}
		if age := l.Members(now)["b"].Age; age != 0 {
			t.Errorf("%s: age %v just after a renewal was seen", tc.name, age)
		}
	}
}

// leaseOfGrace is lease with the grace its renewer writes.
func leaseOfGrace(id string, renewed time.Time, grace time.Duration) coordinationv1.Lease {
	l := lease(id, renewed)
	l.Spec.LeaseDurationSeconds = ptr.To(memberlease.DurationSeconds(grace))
	return l
}

// Each member is judged by the grace its own Lease records, which it renews by (a third of it), not by the
// observer's: a member with a longer grace is not dead between its renewals, one with a shorter is dead sooner,
// and a Lease that records none is judged by the observer's.
func TestLivenessJudgesEachByItsGrace(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewLiveness("a", 30*time.Second)
	graces := map[string]time.Duration{"slow": 90 * time.Second, "fast": 10 * time.Second, "none": 0}
	renewals := map[string]time.Duration{"slow": 30 * time.Second, "fast": 10 * time.Second / 3, "none": 10 * time.Second}
	leases := func(now time.Duration, stopped time.Duration) []coordinationv1.Lease {
		var ls []coordinationv1.Lease
		for id, every := range renewals {
			at := min(now, stopped) / every * every
			if graces[id] == 0 {
				ls = append(ls, lease(id, t0.Add(at)))
			} else {
				ls = append(ls, leaseOfGrace(id, t0.Add(at), graces[id]))
			}
		}
		return ls
	}
	// Every member renews for 3 minutes: all stay alive, though the slow one renews after the observer's grace.
	for at := time.Duration(0); at <= 3*time.Minute; at += time.Second {
		l.Observe(leases(at, time.Hour), t0.Add(at))
		for id := range renewals {
			if !l.Alive(id) {
				t.Fatalf("%s is dead at %v while it renews", id, at)
			}
		}
	}
	// Then all stop: each is dead once its own grace has passed since its last renewal, seen at 3 min.
	stop := 3 * time.Minute
	for at := stop + time.Second; at <= stop+2*time.Minute; at += time.Second {
		l.Observe(leases(at, stop), t0.Add(at))
		for id, grace := range graces {
			if grace == 0 {
				grace = 30 * time.Second
			}
			if want := at-stop <= grace; l.Alive(id) != want {
				t.Errorf("%s (grace %v) at %v after its last renewal: alive %v, want %v", id, grace, at-stop, l.Alive(id), want)
			}
		}
	}
}

// When the broker is back after this member could not reach it, a member alive before gets a fresh grace (its
// renewals may not be in the view yet), and a member dead before stays dead until a renewal shows.
func TestLivenessRegainedRevivesNoDeadMember(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewLiveness("a", 10*time.Second)
	l.Observe([]coordinationv1.Lease{lease("b", t0), lease("dead", t0.Add(-time.Hour))}, t0)
	l.SetHealthy(false)
	l.Observe([]coordinationv1.Lease{lease("b", t0), lease("dead", t0.Add(-time.Hour))}, t0.Add(time.Minute))
	l.SetHealthy(true)
	l.Observe([]coordinationv1.Lease{lease("b", t0), lease("dead", t0.Add(-time.Hour))}, t0.Add(2*time.Minute))
	if !l.Alive("b") || l.Alive("dead") {
		t.Errorf("after the broker came back: b alive %v (want true), dead alive %v (want false)", l.Alive("b"), l.Alive("dead"))
	}
}

// A Liveness kept across broker caches keeps what it saw: a member dead in the last view is not alive again at the
// first look of the next one, and decisions wait for that look.
func TestLivenessReobserve(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewLiveness("a", 10*time.Second)
	ahead := lease("b", t0.Add(time.Hour)) // dead, its clock an hour ahead: alive once renewed, then dead
	l.Observe([]coordinationv1.Lease{ahead}, t0)
	ahead.Spec.RenewTime = &metav1.MicroTime{Time: t0.Add(time.Hour + time.Second)}
	l.Observe([]coordinationv1.Lease{ahead}, t0.Add(time.Second))
	l.Observe([]coordinationv1.Lease{ahead}, t0.Add(20*time.Second))
	if l.Alive("b") {
		t.Fatal("b alive a grace after its last renewal")
	}
	l.Reobserve()
	select {
	case <-l.Observed():
		t.Fatal("observed after Reobserve, before Observe")
	default:
	}
	l.Observe([]coordinationv1.Lease{ahead}, t0.Add(21*time.Second))
	select {
	case <-l.Observed():
	default:
		t.Fatal("not observed after Observe")
	}
	if l.Alive("b") {
		t.Error("the next view's first look revives b")
	}
}

// Two processes renewing one member's Lease: each finds the other's changes, while a process alone finds none.
func TestRenewerFindsAnotherHolder(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mine, theirs := &Renewer{ClusterID: "a", Holder: "a/pod-1/x"}, &Renewer{ClusterID: "a", Holder: "a/pod-9/y"}
	steps := []struct {
		r           *Renewer
		wantCreated bool
		wantForeign bool
	}{
		{mine, true, false}, {mine, false, false}, {mine, false, false},
		{theirs, false, false}, // its first renewal: a handover looks the same
		{mine, false, true}, {theirs, false, true}, {mine, false, true},
	}
	for i, s := range steps {
		created, foreign, err := s.r.Renew(ctx, c, 10*time.Second, t0.Add(time.Duration(i)*time.Second))
		if err != nil || created != s.wantCreated || foreign != s.wantForeign {
			t.Errorf("step %d (%s): created %v, foreign %v, %v", i, s.r.Holder, created, foreign, err)
		}
	}
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: names.BrokerNamespace("a"), Name: names.LeaseName}, lease); err != nil ||
		*lease.Spec.HolderIdentity != mine.Holder {
		t.Errorf("lease %+v, %v", lease.Spec, err)
	}
}

// The Lease names the credential in use from the renewal that first sends it, at creation and at each renewal,
// and keeps the last name while none is known.
func TestRenewerNamesTheCredential(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	id := "creds-1"
	r := &Renewer{ClusterID: "a", Holder: "a/pod-1/x", Credential: func() string { return id }}
	for i, want := range []struct{ in, want string }{{"creds-1", "creds-1"}, {"creds-1", "creds-1"}, {"creds-2", "creds-2"}, {"", "creds-2"}} {
		id = want.in
		if _, _, err := r.Renew(ctx, c, 10*time.Second, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
		lease := &coordinationv1.Lease{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: names.BrokerNamespace("a"), Name: names.LeaseName}, lease); err != nil {
			t.Fatal(err)
		}
		if got := lease.Annotations[names.AnnotationCredential]; got != want.want {
			t.Errorf("renewal %d with credential %q: the Lease names %q, want %q", i, want.in, got, want.want)
		}
		if lease.Annotations[names.AnnotationClusterID] != "a" {
			t.Errorf("renewal %d lost the cluster id annotation: %v", i, lease.Annotations)
		}
	}
}

// A process that resumes from what the last one saw judges its first look at each Lease as that process would have:
// the same renew time counts from when it was seen, a renew time changed since counts as renewed after the last
// process wrote, and neither relies on the renewer's clock, which the first look without it does.
func TestLivenessResume(t *testing.T) {
	const grace = 10 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := t0.Add(-3 * time.Second) // when the last process wrote what it saw
	now := t0
	for _, tc := range []struct {
		name      string
		previous  Renewal
		renewed   time.Time // the renew time the first look finds
		wantAlive bool
		wantAge   time.Duration
	}{
		{"dead, its clock just ahead: not revived", Renewal{RenewTime: t0.Add(500 * time.Millisecond), SeenAt: t0.Add(-time.Minute)},
			t0.Add(500 * time.Millisecond), false, time.Minute},
		{"dead, its renew time never confirmed: still not", Renewal{RenewTime: t0.Add(time.Hour), SeenAt: t0.Add(-time.Minute), Unconfirmed: true},
			t0.Add(time.Hour), false, time.Minute},
		{"alive, its clock a minute behind: not killed", Renewal{RenewTime: t0.Add(-time.Minute - 5*time.Second), SeenAt: t0.Add(-5 * time.Second)},
			t0.Add(-time.Minute - 5*time.Second), true, 5 * time.Second},
		{"renewed since, its clock a minute behind: renewed after the write", Renewal{RenewTime: t0.Add(-time.Minute - 5*time.Second), SeenAt: t0.Add(-5 * time.Second)},
			t0.Add(-time.Minute - time.Second), true, 3 * time.Second},
		{"renewed since, its clock an hour ahead: renewed after the write", Renewal{RenewTime: t0.Add(time.Hour), SeenAt: t0.Add(-time.Minute), Unconfirmed: true},
			t0.Add(time.Hour + time.Second), true, 3 * time.Second},
		{"renewed since, between the write and now: at its renew time", Renewal{RenewTime: t0.Add(-8 * time.Second), SeenAt: t0.Add(-8 * time.Second)},
			t0.Add(-time.Second), true, time.Second},
	} {
		fresh := NewLiveness("a", grace)
		fresh.Observe([]coordinationv1.Lease{lease("b", tc.renewed)}, now)
		l := NewLiveness("a", grace)
		l.Resume(map[string]Renewal{"b": tc.previous}, at)
		l.Observe([]coordinationv1.Lease{lease("b", tc.renewed)}, now)
		if got := l.Members(now)["b"]; got.Alive != tc.wantAlive || got.Age != tc.wantAge {
			t.Errorf("%s: %+v, want alive %v, age %v (without resuming: %+v)", tc.name, got, tc.wantAlive, tc.wantAge, fresh.Members(now)["b"])
		}
		// Only the first look resumes: a renew time the same as the resumed one, seen again, is what this
		// observer saw.
		later := now.Add(time.Second)
		l.Observe([]coordinationv1.Lease{lease("b", tc.renewed)}, later)
		if got := l.Members(later)["b"].Age; got != tc.wantAge+time.Second {
			t.Errorf("%s: a second look ages to %v, want %v", tc.name, got, tc.wantAge+time.Second)
		}
	}
}

// A member this observer has looked at keeps what it saw; resuming waits, through an unhealthy look, for the first
// look that decides.
func TestLivenessResumeKeepsWhatItSaw(t *testing.T) {
	const grace = 10 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewLiveness("a", grace)
	l.Observe([]coordinationv1.Lease{lease("b", t0)}, t0)
	old := Renewal{RenewTime: t0, SeenAt: t0.Add(-time.Hour)}
	l.Resume(map[string]Renewal{"b": old, "c": old}, t0)
	l.SetHealthy(false)
	l.Observe([]coordinationv1.Lease{lease("b", t0), lease("c", t0)}, t0.Add(time.Second))
	l.SetHealthy(true)
	l.Observe([]coordinationv1.Lease{lease("b", t0), lease("c", t0)}, t0.Add(2*time.Second))
	if !l.Alive("b") {
		t.Error("resuming overrode a member this observer had seen renewed")
	}
	if l.Alive("c") {
		t.Error("an unhealthy look consumed what to resume")
	}
}

// What a first look could not tell again from the Leases is remembered, and only that: the renewals seen off the
// renewer's clock, the unconfirmed ones, and what was resumed and not looked at yet (never of the observer itself).
func TestLivenessMemory(t *testing.T) {
	const grace = 10 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewLiveness("a", grace)
	l.Observe([]coordinationv1.Lease{lease("synced", t0.Add(-2*time.Second)), lease("near", t0.Add(-time.Minute)),
		lease("ahead", t0.Add(time.Hour))}, t0)
	// near's clock runs a minute behind: its change is seen now.
	l.Observe([]coordinationv1.Lease{lease("synced", t0.Add(time.Second)), lease("near", t0.Add(-time.Minute+time.Second)),
		lease("ahead", t0.Add(time.Hour)), lease("behind", t0.Add(-time.Hour))}, t0.Add(time.Second))
	l.Resume(map[string]Renewal{"elsewhere": {RenewTime: t0, SeenAt: t0}, "near": {RenewTime: t0, SeenAt: t0},
		"a": {RenewTime: t0, SeenAt: t0}}, t0)
	want := map[string]Renewal{
		"near":      {RenewTime: t0.Add(-time.Minute + time.Second), SeenAt: t0.Add(time.Second)},
		"ahead":     {RenewTime: t0.Add(time.Hour), SeenAt: t0, Unconfirmed: true},
		"elsewhere": {RenewTime: t0, SeenAt: t0},
	}
	if got := l.Memory(); !maps.Equal(got, want) {
		t.Errorf("Memory = %v, want %v", got, want)
	}
}

// The decisions annotation is written at each renewal from what the process decided, removed when there is none,
// and handed back to the process's first read of the Lease only: a later renewal finds its own.
func TestRenewerKeepsDecisions(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	read := func() map[string]string {
		lease := &coordinationv1.Lease{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: names.BrokerNamespace("a"), Name: names.LeaseName}, lease); err != nil {
			t.Fatal(err)
		}
		return lease.Annotations
	}
	decided := "first"
	before := &Renewer{ClusterID: "a", Holder: "a/pod-1/x", Decisions: func(time.Time) string { return decided },
		Resume: func(string, time.Time) { t.Error("a process that created the Lease resumes") }}
	for i := range 2 {
		if _, _, err := before.Renew(ctx, c, 10*time.Second, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if got := read()[names.AnnotationDecisions]; got != "first" {
		t.Fatalf("the Lease carries decisions %q, want first", got)
	}
	var resumed []string
	after := &Renewer{ClusterID: "a", Holder: "a/pod-2/y", Decisions: func(time.Time) string { return decided },
		Resume: func(d string, _ time.Time) { resumed = append(resumed, d) }}
	decided = "second"
	for i := range 2 {
		if _, _, err := after.Renew(ctx, c, 10*time.Second, t0.Add(time.Duration(2+i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(resumed, []string{"first"}) {
		t.Errorf("the next process resumed from %q, want the last process's decisions once", resumed)
	}
	decided = ""
	if _, _, err := after.Renew(ctx, c, 10*time.Second, t0.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, ok := read()[names.AnnotationDecisions]; ok {
		t.Errorf("decisions %q left on the Lease after there were none", got)
	}
}
