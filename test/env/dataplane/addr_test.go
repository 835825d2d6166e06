package dataplane

import (
	"fmt"
	"net/netip"
	"testing"
)

func TestNodeAddrs(t *testing.T) {
	for _, tc := range []struct {
		member, node int
		v4, v6       string
		err          bool
	}{
		{0, 0, "10.254.1.1", "fd00:254:1::1", false},
		{2, 1, "10.254.3.2", "fd00:254:3::2", false},
		{99, 199, "10.254.100.200", "fd00:254:64::c8", false},
		{100, 0, "", "", true},
		{0, 200, "", "", true},
		{-1, 0, "", "", true},
	} {
		v4, v6, err := NodeAddrs(tc.member, tc.node)
		if (err != nil) != tc.err {
			t.Errorf("NodeAddrs(%d, %d) error = %v, want error %v", tc.member, tc.node, err, tc.err)
			continue
		}
		if err == nil && (v4.String() != tc.v4 || v6.String() != tc.v6) {
			t.Errorf("NodeAddrs(%d, %d) = %s, %s; want %s, %s", tc.member, tc.node, v4, v6, tc.v4, tc.v6)
		}
	}
}

func TestNodePodCIDRs(t *testing.T) {
	member := []netip.Prefix{netip.MustParsePrefix("10.3.0.0/16"), netip.MustParsePrefix("fd00:10:3::/64")}
	for _, tc := range []struct {
		cidrs []netip.Prefix
		node  int
		want  string
	}{
		{member, 0, "[10.3.0.0/24 fd00:10:3::/80]"},
		{member, 5, "[10.3.5.0/24 fd00:10:3:0:5::/80]"},
		{member, 256, "error"},
		{[]netip.Prefix{netip.MustParsePrefix("10.3.0.0/20")}, 0, "error"},
	} {
		got, err := NodePodCIDRs(tc.cidrs, tc.node)
		s := fmt.Sprint(got)
		if err != nil {
			s = "error"
		}
		if s != tc.want {
			t.Errorf("NodePodCIDRs(%v, %d) = %s (%v), want %s", tc.cidrs, tc.node, s, err, tc.want)
		}
	}
}
