package clusterset

import "testing"

// TestFreePortsBelowEphemeral checks that ports handed out are distinct, bindable and never from the kernel's
// ephemeral range, where an outgoing connection could take one before its server binds it.
func TestFreePortsBelowEphemeral(t *testing.T) {
	ports, err := FreePorts(100)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	low := ephemeralLow()
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
		if p < lowestPort || p >= low {
			t.Errorf("port %d outside [%d, %d)", p, lowestPort, low)
		}
		if !bindable("127.0.0.1", p) {
			t.Errorf("port %d is not bindable", p)
		}
	}
}
