package dnsconformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/test/env/poll"
)

// TestLongClusterID checks a source cluster id of 100 characters in two labels, as KEP-2149 allows, on the
// binary, with the slices the controller writes for it (controller/imports): their source-cluster label holds
// a shortened, hashed value, and every name carries the full id from their annotation instead. The service's
// name of 63 characters puts an endpoint's name at exactly 253 octets with a hostname of 62; with one of 63 the
// name would be 254 octets, which no question can even carry, and that endpoint answers the service's name
// only. The objects are deleted at the end, so that later tests see the suite's fixture alone.
func TestLongClusterID(t *testing.T) {
	ctx := context.Background()
	id := strings.Repeat("a", 63) + "." + strings.Repeat("b", 36)
	svc := strings.Repeat("l", 63)
	base := svc + "." + ns + ".svc." + zone
	fits, over := strings.Repeat("h", 62), strings.Repeat("h", 63)
	fitsName, derived := fits+"."+id+"."+base, "10-4-0-3."+id+"."+base
	if len(id) != 100 || len(fitsName)-1 != 253 || len(over+"."+id+"."+base)-1 != 254 {
		t.Fatalf("fixture: id of %d characters, names of %d and %d octets", len(id), len(fitsName)-1, len(over+"."+id+"."+base)-1)
	}

	http := []discoveryv1.EndpointPort{mcstest.SlicePort("http", corev1.ProtocolTCP, 8080)}
	exported := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "long-id"},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       http,
		Endpoints: []discoveryv1.Endpoint{mcstest.Endpoint("10.4.0.1", fits, true), mcstest.Endpoint("10.4.0.2", over, true),
			mcstest.Endpoint("10.4.0.3", "", true)},
	}
	si := mcstest.Import(ns, svc, mcsv1beta1.Headless, nil, mcstest.Port("http", corev1.ProtocolTCP, 8080))
	imported := imports.Slices(types.NamespacedName{Namespace: ns, Name: svc}, []imports.Source{{Cluster: id, Slice: exported}}, merge.SlicePorts{}, nil)
	if len(imported) != 1 || imported[0].Labels[mcsv1beta1.LabelSourceCluster] != names.LabelValue(id) || names.LabelValue(id) == id {
		t.Fatalf("the controller's slice for a 100-character id is not labelled with a shortened value: %v", imported)
	}
	c := env.member.Client
	if err := c.Create(ctx, si); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &imported[0]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, err := range []error{c.Delete(ctx, &imported[0]), c.Delete(ctx, si)} {
			if err != nil {
				t.Error(err)
			}
		}
		poll.T(t, 30*time.Second, "the long id's service withdrawn", func() error {
			if got := exchange(t, "udp", base, dns.TypeA); got.rcode != "NXDOMAIN" {
				return fmt.Errorf("%s A: %s %v", base, got.rcode, got.answer)
			}
			return nil
		})
	})
	poll.T(t, 30*time.Second, "the long id's endpoints answered", func() error {
		if got := exchange(t, "udp", base, dns.TypeA); len(got.answer) != 3 {
			return fmt.Errorf("%s A: %s %v", base, got.rcode, got.answer)
		}
		return nil
	})

	const nx, ok = "NXDOMAIN", "NOERROR"
	srv := []string{"0 100 8080 " + fitsName, "0 100 8080 " + derived}
	longRows := []row{
		{spec: "per-endpoint A, 100-character id, 253 octets", name: fitsName, qtype: dns.TypeA, rcode: ok, answer: []string{"10.4.0.1"}},
		{spec: "per-endpoint A, 100-character id, name derived from the address", name: derived, qtype: dns.TypeA, rcode: ok,
			answer: []string{"10.4.0.3"}},
		{spec: "per-endpoint AAAA, 100-character id: NODATA", name: fitsName, qtype: dns.TypeAAAA, rcode: ok},
		{spec: "headless A: every ready endpoint, one without a name of its own too", name: base, qtype: dns.TypeA, rcode: ok,
			answer: []string{"10.4.0.1", "10.4.0.2", "10.4.0.3"}},
		{spec: "headless bare-name SRV: targets carry the full id", name: base, qtype: dns.TypeSRV, rcode: ok, answer: srv},
		{spec: "headless named port SRV: targets carry the full id", name: "_http._tcp." + base, qtype: dns.TypeSRV, rcode: ok,
			answer: srv},
		{spec: "per-endpoint name under the hashed label value", name: fits + "." + names.LabelValue(id) + "." + base,
			qtype: dns.TypeA, rcode: nx},
		{spec: "<clusterid>.<svc>.<ns> must not exist, 100-character id", name: id + "." + base, qtype: dns.TypeA, rcode: nx},
		{spec: "per-endpoint name under the id's last label only", name: fits + "." + strings.Repeat("b", 36) + "." + base,
			qtype: dns.TypeA, rcode: nx},
		{spec: "PTR of an endpoint of the 100-character id", name: "1.0.4.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: ok,
			answer: []string{fitsName}},
	}
	for _, r := range longRows {
		mixed := r
		mixed.spec += ", mixed case"
		mixed.name = mixedCase(r.name)
		for _, r := range []row{r, mixed} {
			for _, a := range askers() {
				t.Run(fmt.Sprintf("%s/%s/%s", r.spec, dns.TypeToString[r.qtype], a.name), func(t *testing.T) {
					check(t, r, a.ask(t, r.name, r.qtype))
				})
			}
		}
	}
}
