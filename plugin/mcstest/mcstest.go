// Package mcstest builds the imported objects the multicluster plugin reads, as the MCS controller would
// write them, for the plugin's integration tests and the DNS conformance suite, and reads the addresses of the
// answers, for the plugin's tests and the suites alike.
package mcstest

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/names"
)

// Port returns a ServiceImport port.
func Port(name string, protocol corev1.Protocol, port int32) mcsv1beta1.ServicePort {
	return mcsv1beta1.ServicePort{Name: name, Protocol: protocol, Port: port}
}

// Import returns a v1beta1 ServiceImport.
func Import(namespace, name string, t mcsv1beta1.ServiceImportType, ips []string, ports ...mcsv1beta1.ServicePort) *mcsv1beta1.ServiceImport {
	si := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: t, IPs: ips, Ports: ports},
	}
	if si.Spec.Ports == nil {
		si.Spec.Ports = []mcsv1beta1.ServicePort{}
	}
	for _, ip := range ips {
		family := corev1.IPv4Protocol
		if strings.Contains(ip, ":") {
			family = corev1.IPv6Protocol
		}
		si.Spec.IPFamilies = append(si.Spec.IPFamilies, family)
	}
	return si
}

// Endpoint returns an endpoint with one address; hostname may be empty.
func Endpoint(address, hostname string, ready bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{address}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}
	if hostname != "" {
		e.Hostname = ptr.To(hostname)
	}
	return e
}

// SlicePort returns an EndpointSlice port.
func SlicePort(name string, protocol corev1.Protocol, port int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr.To(name), Protocol: ptr.To(protocol), Port: ptr.To(port)}
}

// Slice returns an imported EndpointSlice of service in namespace from source cluster, labelled as the MCS
// controller labels them; its name is derived from the service, cluster and family, so it is unique per triple.
func Slice(namespace, service, cluster string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort,
	endpoints ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      fmt.Sprintf("%s-%s-%s", service, strings.ReplaceAll(cluster, ".", "-"), strings.ToLower(string(family))),
			Labels: map[string]string{
				mcsv1beta1.LabelServiceName:   service,
				mcsv1beta1.LabelSourceCluster: cluster,
				discoveryv1.LabelManagedBy:    names.ManagedBy,
			},
		},
		AddressType: family,
		Ports:       ports,
		Endpoints:   endpoints,
	}
}

// CreateNamespace creates a namespace.
func CreateNamespace(ctx context.Context, c client.Client, name string) error {
	return c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// Addresses returns the addresses of the A and AAAA records among rrs, sorted; other records are left out.
func Addresses(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		switch v := rr.(type) {
		case *dns.A:
			out = append(out, v.A.String())
		case *dns.AAAA:
			out = append(out, v.AAAA.String())
		}
	}
	slices.Sort(out)
	return out
}
