// Package poll waits for a condition in tests, the demo and benchmarks: it checks at an interval until the
// condition holds, the timeout passes or the context ends, and reports the condition's last error. Nothing in
// this project synchronises by sleeping.
package poll

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Interval is how often T checks.
const Interval = 100 * time.Millisecond

// Until calls check at once and then every interval until it returns nil. It returns ctx's error if ctx ends
// first, and after timeout an error wrapping check's last error.
func Until(ctx context.Context, interval, timeout time.Duration, check func() error) error {
	deadline := time.After(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-deadline:
			return fmt.Errorf("not true after %v: %w", timeout, err)
		case <-tick.C:
		}
	}
}

// T polls check every Interval and fails t, naming what, if it does not return nil within timeout.
func T(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	if err := Until(context.Background(), Interval, timeout, check); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
