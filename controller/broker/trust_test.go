package broker

import (
	"testing"
	"time"
)

func TestTrust(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tr := NewTrust(6 * time.Second)
	steps := []struct {
		name         string
		intact       bool
		at           time.Duration
		wantRegained bool
		wantTrusted  bool
	}{
		{"a start is not trusted", true, 0, false, false},
		{"marks standing for less than the settle time", true, 5 * time.Second, false, false},
		{"marks standing for the settle time", true, 6 * time.Second, true, true},
		{"still standing: trusted, not regained again", true, 8 * time.Second, false, true},
		{"a mark missing interrupts at once", false, 9 * time.Second, false, false},
		{"back: the settle time counts again", true, 10 * time.Second, false, false},
		{"not yet", true, 15 * time.Second, false, false},
		{"regained", true, 16 * time.Second, true, true},
	}
	for _, s := range steps {
		if got := tr.Observe(s.intact, t0.Add(s.at)); got != s.wantRegained || tr.Trusted() != s.wantTrusted {
			t.Errorf("%s: Observe = %v, Trusted = %v; want %v, %v", s.name, got, tr.Trusted(), s.wantRegained, s.wantTrusted)
		}
	}
	vouched := NewTrust(time.Minute)
	vouched.Vouch()
	if !vouched.Observe(true, t0) || !vouched.Trusted() {
		t.Error("a vouched start is not trusted at once")
	}
	vouched.Observe(false, t0.Add(time.Second))
	if vouched.Observe(true, t0.Add(2*time.Second)) || vouched.Trusted() {
		t.Error("after an interruption, a vouched start waits for the settle time")
	}
	fresh := NewTrust(time.Minute)
	fresh.Vouch()
	fresh.Observe(false, t0) // a first start creates its Lease: not standing yet
	if !fresh.Observe(true, t0.Add(time.Second)) || !fresh.Trusted() {
		t.Error("a vouched first start is not trusted once its marks stand")
	}
	if s := Sentinel("b.east"); s.Name != SentinelName || s.Labels["app.kubernetes.io/managed-by"] == "" {
		t.Errorf("sentinel %+v", s.ObjectMeta)
	} else if _, ok := ServiceOf(s); ok {
		t.Error("the sentinel maps to a service")
	}
}
