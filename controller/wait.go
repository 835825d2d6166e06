package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// errBrokerUnavailable marks a failed request to the broker at the start of a run: the broker is down, slow,
// refusing (403, 429), or back from a reset without the mcs-api CRDs yet. Each of these may pass, and exiting
// would only turn a broker outage into a crash loop, so the start is retried (brokerRetry).
var errBrokerUnavailable = errors.New("broker unavailable")

// unavailable marks err, a failed request to the broker, with errBrokerUnavailable.
func unavailable(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", errBrokerUnavailable, err)
}

// runEnd is what Run does once a run of the manager has ended.
type runEnd int

const (
	runStop  runEnd = iota // ctx ended: Run returns
	runAgain               // start the next run at once: the scope changed, or the broker was reset
	runRetry               // start the next run after a backoff: the broker could not be reached at the start
	runFail                // Run returns the error: the options, the member cluster, or a bug
)

// afterRun decides what follows a run of the manager that ended with err. The manager returns nil only once ctx
// ended.
func afterRun(err error) runEnd {
	switch {
	case err == nil:
		return runStop
	case errors.Is(err, errScopeChanged), errors.Is(err, errBrokerReset):
		return runAgain
	case errors.Is(err, errBrokerUnavailable):
		return runRetry
	}
	return runFail
}

// Backoff of the broker steps of a run's start, doubling from retryBase up to retryCap: a broker that comes back
// is found within retryCap, and a member waiting for it costs the broker a few requests a minute.
const (
	retryBase = time.Second
	retryCap  = 30 * time.Second
)

// retryDelay is the wait before the next attempt after failures failed attempts in a row.
func retryDelay(failures int) time.Duration {
	if failures <= 0 {
		return 0
	}
	if failures > 16 {
		return retryCap
	}
	return min(retryCap, retryBase<<(failures-1))
}

// brokerRetry retries the broker steps of each run's start with backoff while the broker cannot be reached: a
// process that starts during a broker outage, or whose next run after a join meets a broker refusing or away,
// waits rather than exits. The member's imports stay as they are meanwhile, nothing withdrawn, and /healthz and
// /readyz are served (the latter failing, with the reason), so that the pod is not restarted by its liveness probe.
type brokerRetry struct {
	id  string
	log logr.Logger
	// serve serves the probes while waiting, until the stop it returns is called: ServeProbes on
	// Options.HealthProbeBindAddress.
	serve func(ready func(*http.Request) error) (stop func(), err error)
	after func(time.Duration) <-chan time.Time // time.After

	failures int // failed attempts to start a run in a row: of the broker steps, or of the run after them

	mu      sync.Mutex
	lastErr error // the last attempt's failure, for /readyz
}

// failed records that a run failed to start for want of the broker after do succeeded: the next do waits a
// longer backoff first. A broker back from a reset answers do's steps before it serves the mcs-api CRDs again.
func (b *brokerRetry) failed(err error) {
	b.failures++
	b.report(err)
}

// ran records that a run started: the next failure starts the backoff afresh.
func (b *brokerRetry) ran() { b.failures = 0 }

// report logs a failed attempt and tells /readyz and the broker gauge.
func (b *brokerRetry) report(err error) {
	b.mu.Lock()
	b.lastErr = err
	b.mu.Unlock()
	brokerReachable.WithLabelValues(b.id).Set(0)
	b.log.Error(err, "the broker cannot be reached: the start is retried, and this member's imports stay as they are",
		"retryIn", retryDelay(b.failures), "failures", b.failures)
}

// ready is /readyz while waiting.
func (b *brokerRetry) ready(*http.Request) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Errorf("waiting for the broker: %w", b.lastErr)
}

// do runs step until it succeeds, fails with an error not marked errBrokerUnavailable, or ctx ends; it returns
// step's last error, or ctx's. It waits retryDelay before each attempt after a failure, serving the probes, and
// the first too after a run that failed to start (failed).
func (b *brokerRetry) do(ctx context.Context, step func(context.Context) error) error {
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		if b.failures > 0 {
			if stop == nil {
				var err error
				if stop, err = b.serve(b.ready); err != nil {
					return err
				}
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-b.after(retryDelay(b.failures)):
			}
		}
		err := step(ctx)
		switch {
		case err == nil:
			if b.failures > 0 {
				b.log.Info("the broker answers again", "failures", b.failures)
			}
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !errors.Is(err, errBrokerUnavailable):
			return err
		}
		b.failed(err)
	}
}

// ServeProbes serves /healthz (ok) and /readyz (ready's verdict) on addr until stop is called, while the process
// waits for something before its manager runs, which serves both once it does: a pod that waits is then live and
// not ready, rather than restarted by its liveness probe or mistaken for working. An empty or "0" addr serves
// nothing. stop releases addr before it returns, for the manager to bind.
func ServeProbes(addr string, ready func(*http.Request) error) (stop func(), err error) {
	if addr == "" || addr == "0" {
		return func() {}, nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--health-probe-bind-address (Options.HealthProbeBindAddress): %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	// Serve returns only once Close below ends it, with http.ErrServerClosed.
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}
