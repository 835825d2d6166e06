package admit

import discoveryv1 "k8s.io/api/discovery/v1"

// Reasons an import leaves out EndpointSlices past a limit (Fit); with ReasonTooManySlices, they are the limits'
// refusal reasons.
const (
	// ReasonTooManyEndpoints refuses the slices of one member's export of one service past the endpoints it may
	// have.
	ReasonTooManyEndpoints = "TooManyEndpoints"
	// ReasonTooManyMemberEndpoints refuses the slices of one member's export past what the member's other
	// exports leave of the endpoints one member may have imported in all.
	ReasonTooManyMemberEndpoints = "TooManyMemberEndpoints"
)

// LimitReasons are the refusal reasons of the limits.
var LimitReasons = []string{ReasonTooManySlices, ReasonTooManyEndpoints, ReasonTooManyMemberEndpoints}

// sliceFill is the fewest endpoints a slice holds on average that an export of a given number of endpoints may
// count on: the EndpointSlice controller fills slices up to 100 endpoints, but leaves them partly empty as pods
// come and go, and the exporter publishes each of them as it is. Ten times the slices that full ones would take
// keeps an honest export whole.
const sliceFill = 10

// SlicesPerService is how many EndpointSlices one member's export of one service may have when it may have at most
// endpoints endpoints: one for every sliceFill endpoints, at least one and at most MaxSlicesPerExport.
func SlicesPerService(endpoints int) int {
	return min(MaxSlicesPerExport, max(1, (endpoints+sliceFill-1)/sliceFill))
}

// Size is what a slice counts against the endpoint limits: each endpoint that Slice may take, as many times as
// it has addresses (one, as a rule), since what a member holds of it grows with the addresses.
func Size(s *discoveryv1.EndpointSlice) int {
	n := 0
	for _, e := range s.Endpoints[:min(len(s.Endpoints), MaxEndpointsPerSlice)] {
		n += max(1, len(e.Addresses))
	}
	return n
}

// Fit returns how many of a member's slices, given their sizes in the order they are taken (by name), fit within
// maxSlices slices and maxEndpoints endpoints, and the endpoints those hold: the longest prefix that does. What is
// kept depends only on the slices, never on the order the broker lists them in, and a slice is kept whole or not
// at all, so that every member that applies the same limits keeps the same ones.
func Fit(sizes []int, maxSlices, maxEndpoints int) (n, endpoints int) {
	for n < len(sizes) && n < maxSlices && endpoints+sizes[n] <= maxEndpoints {
		endpoints += sizes[n]
		n++
	}
	return n, endpoints
}
