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

	"github.com/go-logr/logr/funcr"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/framework"
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
	framework.Main(m, framework.Suite{Setup: setup})
}

// setup starts the clusterset and every member's controller, and checks after the tests that no controller logged
// a "Reconciler error" outside the tests that cause failures.
func setup(s *framework.Setup) error {
	var err error
	if cs, err = s.ClusterSet(clusterset.Options{Members: append(mainMembers, pairMembers...), ClusterIDs: clusterIDs}); err != nil {
		return err
	}
	members, all = map[string]*member{}, map[string]*member{}
	for _, name := range mainMembers {
		all[name] = newMember(cs.Member(name), cs.Broker)
		members[name] = all[name]
	}
	if err := cs.Member(pairMembers[0]).ServeRecords(); err != nil {
		return err
	}
	for _, name := range pairMembers {
		all[name] = newMember(cs.Member(name), cs.Member(pairMembers[0]))
	}
	for _, mb := range all {
		mb.Start()
	}
	s.Cleanup(func() error {
		for _, mb := range all {
			mb.stop()
		}
		return nil
	})
	s.Check(errorLines.check)
	return waitForLeases(context.Background())
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
