package nodeagent

import (
	"fmt"
	"net/netip"
	"testing"
)

func TestIPAM(t *testing.T) {
	a := newIPAM([]netip.Prefix{netip.MustParsePrefix("10.1.1.0/24"), netip.MustParsePrefix("fd00:10:1:0:1::/80")})
	off, addrs, err := a.allocate()
	if err != nil || off != 2 || fmt.Sprint(addrs) != "[10.1.1.2 fd00:10:1:0:1::2]" {
		t.Fatalf("first allocation = %d %v %v, want 2 [10.1.1.2 fd00:10:1:0:1::2]", off, addrs, err)
	}
	second, _, _ := a.allocate()
	a.release(off)
	// A freed address is not handed out again before the others.
	if third, _, _ := a.allocate(); third != second+1 {
		t.Errorf("after releasing %d, got %d, want %d", off, third, second+1)
	}
	for range lastOffset - firstOffset - 2 {
		if _, _, err := a.allocate(); err != nil {
			t.Fatal(err)
		}
	}
	// Only the released offset is left, after the round.
	if got, _, err := a.allocate(); err != nil || got != off {
		t.Errorf("last free offset = %d, %v; want %d", got, err, off)
	}
	if _, _, err := a.allocate(); err == nil {
		t.Error("allocation from a full range succeeded")
	}
}
