package admit

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

func TestFit(t *testing.T) {
	cases := []struct {
		name                   string
		sizes                  []int
		maxSlices, maxEndpoint int
		n, endpoints           int
	}{
		{"nothing", nil, 10, 100, 0, 0},
		{"all fit", []int{10, 20, 30}, 10, 100, 3, 60},
		{"exactly at the endpoint limit", []int{50, 50}, 10, 100, 2, 100},
		{"the endpoint limit cuts", []int{50, 40, 20, 5}, 10, 100, 2, 90},
		{"a later small slice is not taken past a cut", []int{90, 20, 1}, 10, 100, 1, 90},
		{"the slice limit cuts", []int{0, 0, 0, 0}, 3, 100, 3, 0},
		{"a first slice too large keeps nothing", []int{101, 1}, 10, 100, 0, 0},
		{"no room left", []int{1}, 10, 0, 0, 0},
		{"less than no room", []int{1}, 10, -5, 0, 0},
		{"a million endpoints in a thousand slices", thousand(1000), 1000, 10_000, 10, 10_000},
	}
	for _, c := range cases {
		n, endpoints := Fit(c.sizes, c.maxSlices, c.maxEndpoint)
		if n != c.n || endpoints != c.endpoints {
			t.Errorf("%s: Fit(%d slices, %d, %d) = %d, %d; want %d, %d", c.name, len(c.sizes), c.maxSlices, c.maxEndpoint,
				n, endpoints, c.n, c.endpoints)
		}
	}
}

func thousand(size int) []int {
	s := make([]int, 1000)
	for i := range s {
		s[i] = size
	}
	return s
}

func TestSlicesPerService(t *testing.T) {
	for endpoints, want := range map[int]int{1: 1, 9: 1, 10: 1, 11: 2, 250: 25, 10_000: 1000, 100_000: MaxSlicesPerExport} {
		if got := SlicesPerService(endpoints); got != want {
			t.Errorf("SlicesPerService(%d) = %d, want %d", endpoints, got, want)
		}
	}
}

func TestSize(t *testing.T) {
	ep := func(addrs ...string) discoveryv1.Endpoint { return discoveryv1.Endpoint{Addresses: addrs} }
	many := make([]discoveryv1.Endpoint, MaxEndpointsPerSlice+5)
	for i := range many {
		many[i] = ep("10.0.0.1")
	}
	cases := []struct {
		name string
		eps  []discoveryv1.Endpoint
		want int
	}{
		{"empty", nil, 0},
		{"one address each", []discoveryv1.Endpoint{ep("10.0.0.1"), ep("10.0.0.2")}, 2},
		{"addresses count each", []discoveryv1.Endpoint{ep("10.0.0.1", "10.0.0.2", "10.0.0.3")}, 3},
		{"an endpoint without addresses counts once", []discoveryv1.Endpoint{ep()}, 1},
		{"endpoints past what Slice takes do not count", many, MaxEndpointsPerSlice},
	}
	for _, c := range cases {
		if got := Size(&discoveryv1.EndpointSlice{Endpoints: c.eps}); got != c.want {
			t.Errorf("%s: Size() = %d, want %d", c.name, got, c.want)
		}
	}
}
