package kubesource

import "vksfleet.dev/fleet/plugin/zone"

// toService builds the zone.Service of a slim ServiceImport and the slim EndpointSlices of the same service.
// Slices without a source-cluster label are not imported slices and are ignored. The service shares the slim
// objects' slices, which nobody modifies.
func toService(si *serviceImport, slices []*endpointSlice) *zone.Service {
	s := &zone.Service{Namespace: si.namespace, Name: si.name, Type: zone.ClusterSetIP, IPs: si.ips, Ports: si.ports,
		Preferred: si.preferred}
	if si.headless {
		s.Type = zone.Headless
	}
	for _, sl := range slices {
		if sl.cluster != "" {
			s.Endpoints = append(s.Endpoints, sl.endpoints...)
		}
	}
	return s
}
