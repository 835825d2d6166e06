package memberlease

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
)

func TestFresh(t *testing.T) {
	for _, tt := range []struct {
		age  time.Duration
		want bool
	}{{0, true}, {-time.Minute, true}, {DefaultGrace, true}, {DefaultGrace + time.Nanosecond, false}} {
		if got := Fresh(tt.age, DefaultGrace); got != tt.want {
			t.Errorf("Fresh(%s, %s) = %v, want %v", tt.age, DefaultGrace, got, tt.want)
		}
	}
}

func TestDurationRoundTrip(t *testing.T) {
	for _, tt := range []struct{ grace, read time.Duration }{
		{30 * time.Second, 30 * time.Second}, {1500 * time.Millisecond, time.Second}, {time.Millisecond, time.Second},
	} {
		l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To(DurationSeconds(tt.grace))}}
		if got := GraceOf(l); got != tt.read {
			t.Errorf("GraceOf(DurationSeconds(%s)) = %s, want %s", tt.grace, got, tt.read)
		}
	}
	if got := GraceOf(&coordinationv1.Lease{}); got != DefaultGrace {
		t.Errorf("GraceOf(no duration) = %s, want DefaultGrace", got)
	}
}
