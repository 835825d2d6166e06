package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestRetryDelay(t *testing.T) {
	for _, tt := range []struct {
		failures int
		want     time.Duration
	}{{0, 0}, {1, time.Second}, {2, 2 * time.Second}, {5, 16 * time.Second}, {6, retryCap}, {1000, retryCap}} {
		if got := retryDelay(tt.failures); got != tt.want {
			t.Errorf("retryDelay(%d) = %v, want %v", tt.failures, got, tt.want)
		}
	}
}

// Every way a run ends: only a failure to reach the broker at its start is retried after a backoff; nothing else
// that the broker does ends the process.
func TestAfterRun(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}, "", errors.New("no"))
	for _, tt := range []struct {
		name string
		err  error
		want runEnd
	}{
		{"ctx ended", nil, runStop},
		{"scope changed", errScopeChanged, runAgain},
		{"broker reset", errBrokerReset, runAgain},
		{"broker away while indexing", fmt.Errorf("controller: indexing broker objects: %w", unavailable(errors.New("connection refused"))), runRetry},
		{"broker refusing", unavailable(forbidden), runRetry},
		{"too many requests", unavailable(apierrors.NewTooManyRequests("slow down", 1)), runRetry},
		{"timeout", unavailable(context.DeadlineExceeded), runRetry},
		{"leader election lost", errors.New("leader election lost"), runFail},
		{"member cluster index", errors.New("controller: indexing local slices: boom"), runFail},
	} {
		if got := afterRun(tt.err); got != tt.want {
			t.Errorf("%s: afterRun(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

// fakeWait is what brokerRetry does besides the step: the waits it asks for, and the probes it serves.
type fakeWait struct {
	delays        []time.Duration
	serving       bool
	starts, stops int
	ready         func(*http.Request) error
}

func (f *fakeWait) retry() *brokerRetry {
	return &brokerRetry{id: "a", log: logr.Discard(),
		serve: func(ready func(*http.Request) error) (func(), error) {
			f.serving, f.ready = true, ready
			f.starts++
			return func() { f.serving = false; f.stops++ }, nil
		},
		after: func(d time.Duration) <-chan time.Time {
			f.delays = append(f.delays, d)
			c := make(chan time.Time, 1)
			c <- time.Time{}
			return c
		},
	}
}

// steps returns a step that fails with each error in turn, then succeeds; it checks that the probes are served,
// and failing with the last failure, at every attempt after the first.
func steps(t *testing.T, f *fakeWait, errs ...error) (step func(context.Context) error, calls *int) {
	calls = new(int)
	return func(context.Context) error {
		if *calls > 0 {
			if !f.serving {
				t.Errorf("attempt %d: the probes are not served while waiting for the broker", *calls+1)
			} else if err := f.ready(nil); err == nil || !strings.Contains(err.Error(), errs[*calls-1].Error()) {
				t.Errorf("attempt %d: /readyz %v, want the last failure %v", *calls+1, err, errs[*calls-1])
			}
		}
		*calls++
		if *calls <= len(errs) {
			return errs[*calls-1]
		}
		return nil
	}, calls
}

// A broker that refuses, throttles and times out at the start: the start waits, with a growing backoff, serving
// the probes, and goes on once the broker answers; once that run has started, the next start, with the broker
// there, waits for nothing.
func TestBrokerRetryWaitsForTheBroker(t *testing.T) {
	f := &fakeWait{}
	b := f.retry()
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "selfsubjectaccessreviews"}, "", errors.New("no"))
	step, calls := steps(t, f, unavailable(forbidden), unavailable(apierrors.NewTooManyRequests("slow down", 1)),
		unavailable(context.DeadlineExceeded))
	if err := b.do(context.Background(), step); err != nil {
		t.Fatalf("do = %v, want nil once the broker answers", err)
	}
	if *calls != 4 || !slices.Equal(f.delays, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}) {
		t.Errorf("%d attempts after waits %v, want 4 after 1s, 2s, 4s", *calls, f.delays)
	}
	if f.starts != 1 || f.stops != 1 || f.serving {
		t.Errorf("probes started %d times, stopped %d times, serving %v: want once each, released for the manager", f.starts, f.stops, f.serving)
	}

	b.ran()
	f.delays = nil
	step, calls = steps(t, f)
	if err := b.do(context.Background(), step); err != nil || *calls != 1 || len(f.delays) != 0 || f.starts != 1 {
		t.Errorf("a start with the broker there: %v after %d attempts, waits %v, probes started %d times", err, *calls, f.delays, f.starts)
	}
}

// A run that could not start for want of the broker (failed), though its broker steps succeeded, makes the next
// start wait first, and the backoff grows over such runs until one starts.
func TestBrokerRetryAfterAFailedRun(t *testing.T) {
	f := &fakeWait{}
	b := f.retry()
	b.failed(unavailable(errors.New("indexing: connection refused")))
	step, calls := steps(t, f, unavailable(errors.New("connection refused")))
	if err := b.do(context.Background(), step); err != nil {
		t.Fatal(err)
	}
	if *calls != 2 || !slices.Equal(f.delays, []time.Duration{time.Second, 2 * time.Second}) {
		t.Errorf("%d attempts after waits %v, want 2 after 1s, 2s", *calls, f.delays)
	}
	b.failed(unavailable(errors.New("indexing: no matches for kind ServiceImport")))
	step, _ = steps(t, f)
	if err := b.do(context.Background(), step); err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}; !slices.Equal(f.delays, want) {
		t.Errorf("waits %v, want %v: the backoff grows while runs fail to start", f.delays, want)
	}
}

// A mistake no wait mends (a broker configuration no client can be made of) ends the start at once, as does ctx.
func TestBrokerRetryStops(t *testing.T) {
	f := &fakeWait{}
	b := f.retry()
	bad := errors.New("invalid broker configuration")
	step, calls := steps(t, f, bad)
	if err := b.do(context.Background(), step); !errors.Is(err, bad) || *calls != 1 || len(f.delays) != 0 || f.starts != 0 {
		t.Errorf("a permanent error: %v after %d attempts, waits %v, probes started %d times; want it at once", err, *calls, f.delays, f.starts)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f = &fakeWait{}
	b = f.retry()
	b.after = func(time.Duration) <-chan time.Time { cancel(); return nil } // the wait never ends but for ctx
	step, calls = steps(t, f, unavailable(errors.New("connection refused")))
	if err := b.do(ctx, step); !errors.Is(err, context.Canceled) || *calls != 1 || f.serving {
		t.Errorf("ctx ended while waiting: %v after %d attempts, serving %v; want ctx's error, the probes released", err, *calls, f.serving)
	}
}
