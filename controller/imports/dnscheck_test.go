package imports

import (
	"net/netip"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

func TestDNSChecks(t *testing.T) {
	meta := metav1.ObjectMeta{Namespace: "demo", Name: "web"}
	slice := func(family discoveryv1.AddressType, ready ...*bool) discoveryv1.EndpointSlice {
		s := discoveryv1.EndpointSlice{AddressType: family}
		for _, r := range ready {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: r}})
		}
		return s
	}
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	const name = "web.demo.svc.clusterset.local."
	tests := []struct {
		desc   string
		spec   mcsv1beta1.ServiceImportSpec
		slices []discoveryv1.EndpointSlice
		want   []DNSCheck
	}{
		{"ClusterSetIP dual-stack: each family exactly", mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: []string{"fd00::5", "10.0.0.5"}}, nil,
			[]DNSCheck{{Name: name, Want: addrs("10.0.0.5")}, {Name: name, IPv6: true, Want: addrs("fd00::5")}}},
		{"ClusterSetIP without IPs yet: nothing to ask", mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP}, nil, nil},
		{"headless: the families with a ready endpoint", mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless},
			[]discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv4, ptr.To(false), nil), slice(discoveryv1.AddressTypeIPv6, ptr.To(false))},
			[]DNSCheck{{Name: name}}},
		{"headless with nothing ready: NXDOMAIN is the answer, nothing to ask", mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless},
			[]discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv4, ptr.To(false))}, nil},
	}
	for _, tt := range tests {
		si := &mcsv1beta1.ServiceImport{ObjectMeta: meta, Spec: tt.spec}
		got := DNSChecks(si, tt.slices)
		if !slices.EqualFunc(got, tt.want, func(a, b DNSCheck) bool { return a.Name == b.Name && a.IPv6 == b.IPv6 && slices.Equal(a.Want, b.Want) }) {
			t.Errorf("%s: DNSChecks = %+v, want %+v", tt.desc, got, tt.want)
		}
	}
}

func TestDNSCheckSatisfied(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	tests := []struct {
		want, got []netip.Addr
		ok        bool
	}{
		{[]netip.Addr{a}, []netip.Addr{a}, true},
		{[]netip.Addr{a}, []netip.Addr{a, a}, true},
		{[]netip.Addr{a, b}, []netip.Addr{b, a}, true},
		{[]netip.Addr{a}, []netip.Addr{b}, false},    // a stale VIP
		{[]netip.Addr{a}, nil, false},                // not indexed yet
		{[]netip.Addr{a}, []netip.Addr{a, b}, false}, // more than the import has
		{nil, []netip.Addr{b}, true},                 // headless: any address
		{nil, nil, false},
	}
	for _, tt := range tests {
		if got := (DNSCheck{Want: tt.want}).Satisfied(tt.got); got != tt.ok {
			t.Errorf("want %v, answer %v: Satisfied = %v", tt.want, tt.got, got)
		}
	}
}
