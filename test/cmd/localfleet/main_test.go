package main

import (
	"context"
	"net"
	"strings"
	"testing"

	"vksfleet.dev/fleet/test/framework"
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
	go serveFaults(context.Background(), l, &framework.Fleet{})
	for kind, want := range map[framework.FaultKind]string{
		"reboot":       `unknown fault "reboot"`,
		framework.Heal: "faults need a fleet with nodes",
	} {
		if err := fault(dir, framework.Fault{Kind: kind}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("fault %s = %v, want an error with %q", kind, err, want)
		}
	}
	if err := fault(t.TempDir(), framework.Fault{Kind: framework.Heal}); err == nil || !strings.Contains(err.Error(), "is `make up` running?") {
		t.Errorf("fault with no fleet running = %v, want it to say so", err)
	}
}
