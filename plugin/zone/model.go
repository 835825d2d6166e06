package zone

import "net/netip"

// Type is a ServiceImport's type.
type Type uint8

// The ServiceImport types.
const (
	// ClusterSetIP services answer with the import's virtual IPs.
	ClusterSetIP Type = iota
	// Headless services answer with the ready endpoints of every cluster.
	Headless
)

// Port is a service or endpoint port.
type Port struct {
	// Name is the port's name; unnamed ports get no _<port>._<proto> name.
	Name string
	// Protocol is TCP, UDP or SCTP, in any case.
	Protocol string
	// Port is the port number.
	Port uint16
}

// Endpoint is one endpoint of one source cluster, with the ports of the EndpointSlice that holds it.
type Endpoint struct {
	// Cluster is the source cluster's id; it may span two labels ("east.prod").
	Cluster string
	// Hostname is the endpoint's hostname; when empty, a name is derived from the first address.
	Hostname string
	// Addresses are the endpoint's addresses.
	Addresses []netip.Addr
	// Ready is the endpoint's ready condition; only ready endpoints are published.
	Ready bool
	// Ports are the ports of the endpoint's EndpointSlice.
	Ports []Port
}

// Service is everything the zone publishes for one ServiceImport.
type Service struct {
	// Namespace and Name identify the ServiceImport.
	Namespace, Name string
	// Type is the import's type.
	Type Type
	// IPs are the ClusterSetIP virtual IPs; ignored for Headless.
	IPs []netip.Addr
	// Ports are the import's ports.
	Ports []Port
	// Endpoints are the endpoints of every source cluster; only Headless services publish them.
	Endpoints []Endpoint
	// Preferred, when set, are the clusters whose endpoints the service's own name answers with (A, AAAA and
	// SRV): the member's closest tier with a ready endpoint, as its controller ranked them. While none of them
	// has a ready endpoint, the name answers every cluster's. Per-endpoint names always answer.
	Preferred []string
}

// Key returns the index key of a service, "<name>.<namespace>" in lower case, which is also how it appears in
// query names (see Name.Key).
func Key(namespace, name string) string { return lower(name) + "." + lower(namespace) }
