package clusterset

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

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

// TestClaimHonoursOtherProcesses checks that a port whose lock file another process holds is not handed out, and
// that a claimed port is held against others until released.
func TestClaimHonoursOtherProcesses(t *testing.T) {
	if err := os.MkdirAll(portLocks, 0o777); err != nil {
		t.Fatal(err)
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// Another open file description of the same lock file stands for another process: flock excludes both.
	other := func() (*os.File, error) {
		f, err := os.OpenFile(filepath.Join(portLocks, strconv.Itoa(port)), os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
	if f, err := other(); err == nil {
		f.Close()
		t.Fatalf("port %d handed out, yet another process could lock it", port)
	}
	release(port)
	f, err := other()
	if err != nil {
		t.Fatalf("port %d released, yet another process cannot lock it: %v", port, err)
	}
	defer f.Close()
	if claim(port) {
		t.Errorf("port %d claimed while another process holds it", port)
	}
}
