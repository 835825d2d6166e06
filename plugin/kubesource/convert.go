package kubesource

import (
	"net/netip"

	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/locality"
	"vksfleet.dev/fleet/controller/names"
	"vksfleet.dev/fleet/plugin/zone"
)

// toService converts a slim ServiceImport and the imported EndpointSlices of the same service into a
// zone.Service. Slices without a source-cluster label are not imported slices and are ignored; addresses that
// do not parse are skipped.
func toService(si *mcsv1beta1.ServiceImport, slices []*discoveryv1.EndpointSlice) *zone.Service {
	s := &zone.Service{Namespace: si.Namespace, Name: si.Name, Type: zone.ClusterSetIP}
	if si.Spec.Type == mcsv1beta1.Headless {
		s.Type = zone.Headless
	}
	for _, ip := range si.Spec.IPs {
		if a, err := netip.ParseAddr(ip); err == nil {
			s.IPs = append(s.IPs, a)
		}
	}
	for _, p := range si.Spec.Ports {
		s.Ports = append(s.Ports, zone.Port{Name: p.Name, Protocol: string(p.Protocol), Port: uint16(p.Port)})
	}
	// The importing controller ranks the clusters for this member; a ranking that does not parse ranks nothing.
	if v, ok := si.Annotations[names.AnnotationLocality]; ok {
		if a, err := locality.Decode(v); err == nil && len(a.DNSClusters) > 0 {
			s.Preferred = a.DNSClusters
		}
	}
	for _, sl := range slices {
		cluster := sl.Labels[mcsv1beta1.LabelSourceCluster]
		if cluster == "" {
			continue
		}
		var ports []zone.Port
		for _, p := range sl.Ports {
			if p.Port == nil {
				continue
			}
			pp := zone.Port{Port: uint16(*p.Port), Protocol: "TCP"}
			if p.Name != nil {
				pp.Name = *p.Name
			}
			if p.Protocol != nil {
				pp.Protocol = string(*p.Protocol)
			}
			ports = append(ports, pp)
		}
		for _, e := range sl.Endpoints {
			ep := zone.Endpoint{Cluster: cluster, Ports: ports, Ready: e.Conditions.Ready == nil || *e.Conditions.Ready}
			if e.Hostname != nil {
				ep.Hostname = *e.Hostname
			}
			for _, a := range e.Addresses {
				if addr, err := netip.ParseAddr(a); err == nil {
					ep.Addresses = append(ep.Addresses, addr)
				}
			}
			s.Endpoints = append(s.Endpoints, ep)
		}
	}
	return s
}
