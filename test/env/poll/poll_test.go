package poll

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	calls := 0
	err := Until(context.Background(), time.Millisecond, time.Minute, func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("Until = %v after %d calls, want nil after 3", err, calls)
	}
	err = Until(context.Background(), time.Millisecond, 20*time.Millisecond, func() error { return errors.New("never") })
	if err == nil || !strings.Contains(err.Error(), "never") {
		t.Errorf("Until past its timeout = %v, want the last error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = Until(ctx, time.Hour, time.Hour, func() error { return errors.New("blocked") })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "blocked") {
		t.Errorf("Until with an ended context = %v, want context.Canceled and the last error", err)
	}
}
