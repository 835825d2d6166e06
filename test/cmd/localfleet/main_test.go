package main

import (
	"context"
	"net"
	"strings"
	"testing"

	"vksfleet.dev/fleet/test/fleet"
)

// TestFaultSocket: `localfleet fault` hands its fault to the running fleet through the state folder's socket and
// reports the fleet's answer: here a fleet without nodes, which refuses every fault.
func TestFaultSocket(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("unix", files{dir}.faults())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go serveFaults(context.Background(), l, &fleet.Fleet{})
	for kind, want := range map[fleet.FaultKind]string{
		"reboot":   `unknown fault "reboot"`,
		fleet.Heal: "faults need a fleet with nodes",
	} {
		if err := fault(dir, fleet.Fault{Kind: kind}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("fault %s = %v, want an error with %q", kind, err, want)
		}
	}
	if err := fault(t.TempDir(), fleet.Fault{Kind: fleet.Heal}); err == nil || !strings.Contains(err.Error(), "is `make up` running?") {
		t.Errorf("fault with no fleet running = %v, want it to say so", err)
	}
}
