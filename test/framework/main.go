package framework

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"vksfleet.dev/fleet/test/env/clusterset"
)

// Suite is what a suite's TestMain runs around its tests (Main).
type Suite struct {
	// Logger takes controller-runtime's logs (the clusterset's envtest, clients, controllers run in this process);
	// nil discards them. Main sets it before anything else: controller-runtime keeps the first logger it is given,
	// and warns, 30 s into a process that gave none, that nothing takes its logs.
	Logger *logr.Logger
	// Setup starts what the suite's tests share, registering with s what undoes it; nil starts nothing.
	Setup func(s *Setup) error
}

// Setup is what a suite's Setup starts, for the tests: a clusterset or a fleet, and the suite's own.
type Setup struct {
	cleanups []func() error
	checks   []func() error
	failed   bool
}

// Main runs the suite's tests between its Setup and the cleanups Setup registered, for its TestMain, and exits with
// the tests' code: 1 instead of a pass when setting up failed, when a check registered with Setup.Check fails, or
// when a cleanup does (a clusterset that does not stop, say), as a test's cleanup that fails fails the test.
func Main(m *testing.M, suite Suite) {
	log := logr.Discard()
	if suite.Logger != nil {
		log = *suite.Logger
	}
	ctrl.SetLogger(log)
	os.Exit(suite.run(m))
}

// run is Main but for the exit; m is a *testing.M.
func (suite Suite) run(m interface{ Run() int }) int {
	s := &Setup{}
	if suite.Setup != nil {
		if err := suite.Setup(s); err != nil {
			fmt.Fprintln(os.Stderr, "setting up the suite:", err)
			s.failed = true
			return s.cleanUp(1)
		}
	}
	code := m.Run()
	s.failed = code != 0
	if code == 0 {
		for _, check := range s.checks {
			if err := check(); err != nil {
				fmt.Fprintln(os.Stderr, "FAIL:", err)
				code, s.failed = 1, true
			}
		}
	}
	return s.cleanUp(code)
}

// cleanUp runs the cleanups, last registered first, and returns code, or 1 when one failed.
func (s *Setup) cleanUp(code int) int {
	for _, f := range slices.Backward(s.cleanups) {
		if err := f(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	return code
}

// Cleanup registers f to run after the tests and the checks, last registered first; an error it returns fails
// the run.
func (s *Setup) Cleanup(f func() error) { s.cleanups = append(s.cleanups, f) }

// Check registers f to run after the tests, before the cleanups, if they passed: an error it returns fails the
// run, for what only the whole suite can tell, such as a log line no test may cause.
func (s *Setup) Check(f func() error) { s.checks = append(s.checks, f) }

// Failed says, in a cleanup, whether the tests, a check or the setup failed: for what to show only then, such as a
// server's log.
func (s *Setup) Failed() bool { return s.failed }

// TempDir creates a temporary directory that is removed after the tests.
func (s *Setup) TempDir() (string, error) {
	dir, err := os.MkdirTemp("", "suite-")
	if err != nil {
		return "", err
	}
	s.Cleanup(func() error { return os.RemoveAll(dir) })
	return dir, nil
}

// ClusterSet starts a clusterset with opts, which is stopped after the tests.
func (s *Setup) ClusterSet(opts clusterset.Options) (*clusterset.ClusterSet, error) {
	cs, err := clusterset.Start(context.Background(), opts)
	if err != nil {
		return nil, fmt.Errorf("starting the clusterset: %w", err)
	}
	s.stopAfter("clusterset", cs.Stop)
	return cs, nil
}

// Fleet starts a fleet with opts, which is stopped after the tests.
func (s *Setup) Fleet(opts Options) (*Fleet, error) {
	f, err := Start(context.Background(), opts)
	if err != nil {
		return nil, fmt.Errorf("starting the fleet: %w", err)
	}
	s.stopAfter("fleet", f.Stop)
	return f, nil
}

// stopAfter registers stop, which stops what, as a cleanup.
func (s *Setup) stopAfter(what string, stop func() error) {
	s.Cleanup(func() error {
		if err := stop(); err != nil {
			return fmt.Errorf("stopping the %s: %w", what, err)
		}
		return nil
	})
}
