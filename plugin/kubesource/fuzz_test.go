package kubesource

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/locality"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/plugin/zone"
)

// FuzzIndexBuild feeds the index what users and other clusters write, as the informers hand it over: a
// ServiceImport and two EndpointSlices of its service, one of them entirely the fuzzer's (names, cluster id and
// its label, hostname, address, ports), go through the transforms, toService and Index.Apply. Nothing may
// panic, no record may fail to pack (the names must have been refused before), and every record the zone and
// its reverse zones hold must pack in a message and unpack again.
func FuzzIndexBuild(f *testing.F) {
	payload := strings.Repeat("a", 52) + "." + strings.Repeat("b", 60) + "\\"
	for _, seed := range []struct {
		ns, svc                      string
		headless                     bool
		ip, portName, protocol       string
		port                         int32
		id                           string
		hashedLabel                  bool
		hostname, address            string
		ready                        bool
		slicePortName, sliceProtocol string
		preferred                    string
	}{
		{"ns", "web", false, "10.96.0.10", "http", "TCP", 80, "east.prod", true, "", "10.1.0.5", true, "http", "TCP", ""},
		{"ns", "db", true, "", "sql", "TCP", 5432, "east.prod", true, "db-0", "10.1.0.5", true, "sql", "TCP", "east.prod"},
		{"ns", "db", true, "", "", "", 53, "west", false, "", "fd00::1", true, "dns", "UDP", "west"},
		{"ns", "web", true, "", "sql", "TCP", 5432, payload, true, "db-0", "10.1.0.66", true, "sql", "TCP", payload},
		{"ns", "db", true, "", "sql", "TCP", 5432, strings.Repeat("a", 52) + "." + strings.Repeat("b", 62) + "\\", true, "db-0", "10.1.0.66", true, "sql", "TCP", ""},
		{"ns", "db", true, "", "sql\\", "TCP\\", 5432, "east", true, "db-0\\", "10.1.0.7", true, "s\\.q", "x.y", ""},
		{"ns", "db", true, "", "sql", "TCP", 5432, strings.Repeat("a", 63) + "." + strings.Repeat("b", 63), true, strings.Repeat("h", 63), "::ffff:10.1.0.8", true, "sql", "SCTP", ""},
		{"n.s", "a.b", true, "10.0.0.1", "http", "tcp", 70000, "East", false, "DB-0", "10.1.0.9%eth0", false, "", "", "x"},
		{"", "", false, "", "", "", 0, "", false, "", "", false, "", "", ""},
	} {
		f.Add(seed.ns, seed.svc, seed.headless, seed.ip, seed.portName, seed.protocol, seed.port, seed.id, seed.hashedLabel,
			seed.hostname, seed.address, seed.ready, seed.slicePortName, seed.sliceProtocol, seed.preferred)
	}
	f.Fuzz(func(t *testing.T, ns, svc string, headless bool, ip, portName, protocol string, port int32, id string,
		hashedLabel bool, hostname, address string, ready bool, slicePortName, sliceProtocol, preferred string) {
		typ := mcsv1beta1.ClusterSetIP
		if headless {
			typ = mcsv1beta1.Headless
		}
		si := mcstest.Import(ns, svc, typ, []string{ip}, mcstest.Port(portName, corev1.Protocol(protocol), port))
		si.Annotations = map[string]string{names.AnnotationLocality: locality.Annotation{DNSClusters: []string{preferred}}.Encode()}
		label := id
		if hashedLabel {
			label = names.LabelValue(id)
		}
		ports := []discoveryv1.EndpointPort{mcstest.SlicePort(slicePortName, corev1.Protocol(sliceProtocol), port)}
		fuzzed := mcstest.Slice(ns, svc, label, discoveryv1.AddressTypeIPv4, ports, mcstest.Endpoint(address, hostname, ready))
		fuzzed.Annotations = map[string]string{names.AnnotationClusterID: id}
		honest := mcstest.Slice(ns, svc, "east.prod", discoveryv1.AddressTypeIPv4, ports, mcstest.Endpoint("10.9.0.1", "db-0", true))
		honest.Name += "-honest"

		slim, _ := slimServiceImport(si)
		var filed []*endpointSlice
		for _, sl := range []*discoveryv1.EndpointSlice{fuzzed, honest} {
			out, _ := slimEndpointSlice(sl)
			filed = append(filed, out.(*endpointSlice))
		}
		// Every address has PTR records, so that the reverse transfers carry the fuzzed one.
		ix := zone.New(zone.Options{Zone: "clusterset.local.", TTL: 5,
			Reverse: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}})
		ix.SetNamespaces([]string{ns})
		if skipped, why := ix.Apply(zone.Change{Key: zone.Key(ns, svc), Service: toService(slim.(*serviceImport), filed)}); skipped > 0 {
			t.Fatalf("%d records did not pack: %v", skipped, why)
		}
		snap := ix.Snapshot()
		for _, zoneRecords := range []func(func([]dns.RR) bool){
			snap.Transfer(0), snap.TransferReverse("in-addr.arpa.", 0), snap.TransferReverse("ip6.arpa.", 0),
		} {
			for rrs := range zoneRecords {
				for _, rr := range rrs {
					m := new(dns.Msg)
					m.Answer = []dns.RR{rr}
					wire, err := m.Pack()
					if err != nil {
						t.Fatalf("%v does not pack: %v", rr, err)
					}
					if err := new(dns.Msg).Unpack(wire); err != nil {
						t.Fatalf("%v does not unpack: %v", rr, err)
					}
				}
			}
		}
	})
}
