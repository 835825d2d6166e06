package zone

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// bigIndex holds n ClusterSetIP services and n/5 headless services of 3 clusters x 4 endpoints, the shape of
// the DNS benchmark.
func bigIndex(tb testing.TB, n int) *Index {
	tb.Helper()
	ix := New(Options{Zone: "clusterset.local.", TTL: 5, Reverse: everyAddress})
	ix.SetNamespaces([]string{"bench"})
	var changes []Change
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		changes = append(changes, Change{Key: Key("bench", name), Service: &Service{Namespace: "bench", Name: name,
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})}, Ports: []Port{{Name: "http", Protocol: "TCP", Port: 80}}}})
	}
	for i := range n / 5 {
		changes = append(changes, Change{Key: Key("bench", fmt.Sprintf("hl-%d", i)), Service: headless(i, 0)})
	}
	ix.Apply(changes...)
	return ix
}

func headless(i, generation int) *Service {
	s := &Service{Namespace: "bench", Name: fmt.Sprintf("hl-%d", i), Type: Headless, Ports: []Port{{Name: "http", Protocol: "TCP", Port: 80}}}
	for c := range 3 {
		for e := range 4 {
			s.Endpoints = append(s.Endpoints, Endpoint{Cluster: fmt.Sprintf("cluster-%d", c), Ready: true, Ports: s.Ports,
				Addresses: []netip.Addr{netip.AddrFrom4([4]byte{10, byte(c + generation), byte(i >> 4), byte(i<<4 | e)})}})
		}
	}
	return s
}

// TestConcurrentReadersAndWriter runs lookups while services change; with -race it checks that the query path
// needs no lock.
func TestConcurrentReadersAndWriter(t *testing.T) {
	ix := bigIndex(t, 500)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, _ := ix.Snapshot().Lookup("hl-7.bench.svc.clusterset.local.", dns.TypeA)
				if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 12 {
					t.Errorf("hl-7: rcode %d, %d answers", r.Rcode, len(r.Answer))
					return
				}
			}
		})
	}
	for g := range 200 {
		ix.Apply(Change{Key: Key("bench", "hl-7"), Service: headless(7, g%2)})
	}
	close(stop)
	wg.Wait()
}

// BenchmarkApplyOne measures the incremental update of one headless service in an index of 6,000 services.
func BenchmarkApplyOne(b *testing.B) {
	ix := bigIndex(b, 5000)
	g := 0
	for b.Loop() {
		g++
		ix.Apply(Change{Key: Key("bench", "hl-7"), Service: headless(7, g%2)})
	}
}

// BenchmarkBuildAll measures building the whole index of 6,000 services from nothing, as after a restart.
func BenchmarkBuildAll(b *testing.B) {
	for b.Loop() {
		bigIndex(b, 5000)
	}
}

func BenchmarkLookupBig(b *testing.B) {
	s := bigIndex(b, 5000).Snapshot()
	for b.Loop() {
		s.Lookup("svc-4242.bench.svc.clusterset.local.", dns.TypeA)
	}
}
