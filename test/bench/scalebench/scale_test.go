package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestTenMembers runs the simulator at 10 members, as `make bench-scale` does at more: the layout stays constant
// per member (the watches the broker serves for a member), a join is complete everywhere within the 10 s
// and costs the broker a bounded number of requests, an export reaches the last member within a second, and a
// lost member is decided everywhere within its grace and two looks. The bounds are loose for a shared machine;
// the figures are logged.
func TestTenMembers(t *testing.T) {
	p, err := run(context.Background(), config{members: 10, services: 100, idle: 5 * time.Second, exports: 10, grace: 6 * time.Second}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(p.row())
	// 3 watches of records and 3 of the member's own namespace in the previous layout, per replica.
	if w := p.watchesPerMember; w < 5.5 || w > 7 {
		t.Errorf("the broker serves %.1f watches per member, want 6 (3 kinds of records, 3 of the previous layout in its own namespace)", w)
	}
	if p.joinNext > 10*time.Second {
		t.Errorf("member 11 joined and imported everywhere in %s, want within 10 s", p.joinNext)
	}
	if p.joinRequests > 200 {
		t.Errorf("a join cost the broker %.0f requests beyond the idle rate, want at most 200", p.joinRequests)
	}
	if p.p99 > time.Second {
		t.Errorf("export → last member p99 %s, want within 1 s", p.p99)
	}
	// Each member sees a renewal at its next look and judges at its look after the grace (grace/10 apart).
	if bound := p.grace + 2*p.grace/10 + 500*time.Millisecond; p.lossDecided > bound {
		t.Errorf("a lost member decided everywhere %s after its last renewal, want within %s (its grace %s, two looks)", p.lossDecided, bound, p.grace)
	}
}
