package admit

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestProbeAddresses(t *testing.T) {
	var many []string
	for i := range MaxProbeAddresses + 2 {
		many = append(many, fmt.Sprintf("10.0.0.%d:8081", i+1))
	}
	tests := []struct {
		name    string
		value   string
		want    []string
		problem bool
	}{
		{"none", "", nil, false},
		{"sorted, repeats dropped", "10.1.0.7:8081,10.1.0.5:8081,10.1.0.7:8081", []string{"10.1.0.5:8081", "10.1.0.7:8081"}, false},
		{"IPv6", "[fd00::5]:8081", []string{"[fd00::5]:8081"}, false},
		{"loopback", "127.0.0.1:8081,10.1.0.5:8081", []string{"10.1.0.5:8081"}, true},
		{"link-local", "169.254.169.254:80", nil, true},
		{"unspecified", "0.0.0.0:8081,[::]:8081", nil, true},
		{"multicast", "224.0.0.1:8081", nil, true},
		{"IPv4 in IPv6", "[::ffff:10.1.0.5]:8081", nil, true},
		{"zone", "[fe80::1%eth0]:8081", nil, true},
		{"no port", "10.1.0.5", nil, true},
		{"port 0", "10.1.0.5:0", nil, true},
		{"a name", "api.example.com:443", nil, true},
		{"spaces", " 10.1.0.5:8081", nil, true},
		{"too many", strings.Join(many, ","), slices.Sorted(slices.Values(many))[:MaxProbeAddresses], true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, p := ProbeAddresses(tt.value)
			if !slices.Equal(got, tt.want) || (p != nil) != tt.problem {
				t.Errorf("ProbeAddresses(%q) = %v, %v; want %v, problem %v", tt.value, got, p, tt.want, tt.problem)
			}
		})
	}
}
