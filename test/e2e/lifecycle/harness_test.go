// Package lifecycle tests the export and import lifecycle on a local clusterset without nodes, with one
// mcs-controller per member in this process (test/framework/ctrlharness): imports everywhere, conflicts,
// admission, restarts, members and the broker lost, and a member that is also the broker.
package lifecycle

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	ctrl "sigs.k8s.io/controller-runtime"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/framework/ctrlharness"
)

// leaseGrace is short so that the lease test withdraws endpoints within seconds, yet longer than a restart of
// every controller, so that restarts change nothing.
const leaseGrace = 6 * time.Second

// Clusters ids: cluster-b has a dotted id, as KEP-2149 allows.
var clusterIDs = map[string]string{"cluster-b": "b.east"}

// Members of the clusterset proper, which use the broker API server, and of a second clusterset in which
// member-broker is both a member and the broker.
var (
	mainMembers = []string{"cluster-a", "cluster-b", "cluster-c"}
	pairMembers = []string{"member-broker", "member-other"}
	cs          *clusterset.ClusterSet
	members     map[string]*member // the clusterset proper
	all         map[string]*member // every member of both clustersets
)

// member is one member cluster and its in-process controller.
type member struct {
	*ctrlharness.Controller
}

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	var err error
	cs, err = clusterset.Start(ctx, clusterset.Options{Members: append(mainMembers, pairMembers...), ClusterIDs: clusterIDs})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the clusterset:", err)
		return 1
	}
	defer func() {
		if err := cs.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the clusterset:", err)
		}
	}()
	members, all = map[string]*member{}, map[string]*member{}
	for _, name := range mainMembers {
		all[name] = newMember(cs.Member(name), cs.Broker)
		members[name] = all[name]
	}
	for _, name := range pairMembers {
		all[name] = newMember(cs.Member(name), cs.Member(pairMembers[0]))
	}
	for _, mb := range all {
		mb.Start()
	}
	defer func() {
		for _, mb := range all {
			mb.stop()
		}
	}()
	if err := waitForLeases(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := errorLines.check(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	return code
}

// waitForLeases waits until every controller holds its broker Lease, which it takes once its broker cache synced.
func waitForLeases(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, m := range all {
		if err := m.WaitForBrokerLease(ctx); err != nil {
			return err
		}
	}
	return nil
}

// newMember returns the member and its controller, not started, logging to stderr when E2E_LOG is set and
// keeping its "Reconciler error" lines in errorLines.
func newMember(c, broker *clusterset.Cluster) *member {
	verbose := os.Getenv("E2E_LOG") != ""
	log := funcr.New(func(prefix, args string) {
		if verbose {
			fmt.Fprintln(os.Stderr, c.Name, prefix, args)
		}
		if strings.Contains(args, `"msg"="Reconciler error"`) {
			errorLines.add(c.Name + " " + args)
		}
	}, funcr.Options{})
	return &member{Controller: ctrlharness.New(c, broker, ctrlharness.Options{LeaseGrace: leaseGrace, Logger: &log})}
}

// errorLines are the controllers' "Reconciler error" lines outside the tests that make API servers fail on
// purpose. Expected races with the caches must not log one: an operator reads that line as a failure.
var errorLines reconcilerErrors

type reconcilerErrors struct {
	mu     sync.Mutex
	faults int // tests under way that cause failures
	lines  []string
}

func (e *reconcilerErrors) add(line string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.faults == 0 {
		e.lines = append(e.lines, line)
	}
}

// causesFailures marks the test as one whose failures the controllers rightly log, until it ends.
func causesFailures(t *testing.T) {
	errorLines.mu.Lock()
	errorLines.faults++
	errorLines.mu.Unlock()
	t.Cleanup(func() {
		errorLines.mu.Lock()
		errorLines.faults--
		errorLines.mu.Unlock()
	})
}

// check fails the run when any line was logged.
func (e *reconcilerErrors) check() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.lines) > 0 {
		return fmt.Errorf("%d \"Reconciler error\" lines logged outside tests that cause failures:\n%s",
			len(e.lines), strings.Join(e.lines, "\n"))
	}
	return nil
}

// stop stops the member's controller and waits for it to return; an error it ended with is only reported, since
// the tests judge controllers by what they did.
func (m *member) stop() {
	if err := m.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, m.Name, "controller:", err)
	}
}
