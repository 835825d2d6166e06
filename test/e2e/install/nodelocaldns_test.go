package install

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
)

const (
	nodeLocalNS = "nodelocal"
	// stanzaTTL is the longest the stanza keeps an answer, and the multicluster plugin's default TTL, which the
	// deployed Corefile's `cache 30` keeps clusterset.local answers for too.
	stanzaTTL = 5 * time.Second
	// margin covers the 20 ms polls, the queries' round trips and the two CoreDNS servers' watches seeing a
	// change at slightly different times.
	margin = 500 * time.Millisecond
)

// dnsPath is a way to ask cluster-b's DNS, and how long after the uncached server changed its answer this way
// may still give the old one.
type dnsPath struct {
	name  string
	addr  string
	bound time.Duration
}

// TestNodeLocalDNSCache runs build/deploy/nodelocaldns/clusterset.server as node-local-dns would, with our CoreDNS
// binary (it holds the stock cache and forward plugins), in front of two of cluster-b's CoreDNS servers: the
// Corefile replace-kube-dns.sh makes, which serves clusterset.local in a block of its own without a cache, and the
// deployed Corefile, whose `cache 30` also caches clusterset.local for the plugin's 5 s TTL. It measures how long
// a removed endpoint, an added one and a newly exported name take to show through each path, from the moment
// the uncached server answers the change: at most the stanza's 5 s, and 6 s behind the deployed Corefile's cache
// (kube-dns hands out the remaining TTL in whole seconds, rounded up). It checks that the node cache never keeps
// an answer longer than kube-dns's remaining TTL and that it passes every answer through unchanged.
func TestNodeLocalDNSCache(t *testing.T) {
	ctx := context.Background()
	b := cs.Member("cluster-b")
	read := func(parts ...string) string {
		bs, err := os.ReadFile(filepath.Join(append([]string{root, "build", "deploy"}, parts...)...))
		if err != nil {
			t.Fatal(err)
		}
		return string(bs)
	}
	stanza := read("nodelocaldns", "clusterset.server")
	kubeDNS := runCorefile(ctx, t, b, clusterset.KubeadmCorefile+read("replace-kube-dns", "clusterset.server"))
	deployed := runCorefile(ctx, t, b, read("coredns", "Corefile"))
	paths := []dnsPath{
		{"kube-dns", kubeDNS, 0},
		{"kube-dns, deployed Corefile", deployed, stanzaTTL},
		{"node-local -> kube-dns", runNodeLocal(t, stanza, kubeDNS), stanzaTTL},
		{"node-local -> kube-dns, deployed Corefile", runNodeLocal(t, stanza, deployed), stanzaTTL + time.Second},
	}
	cached := paths[1:]

	// A headless service with two ready endpoints, asked through every cache once while they are cold.
	if err := mcstest.CreateNamespace(ctx, b.Client, nodeLocalNS); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	port := mcstest.Port("tcp", corev1.ProtocolTCP, 80)
	if err := b.Client.Create(ctx, mcstest.Import(nodeLocalNS, "web", mcsv1beta1.Headless, nil, port)); err != nil {
		t.Fatal(err)
	}
	slice := mcstest.Slice(nodeLocalNS, "web", "cluster-a", discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{mcstest.SlicePort("tcp", corev1.ProtocolTCP, 80)},
		mcstest.Endpoint("10.1.0.61", "web-0", true), mcstest.Endpoint("10.1.0.62", "web-1", true))
	if err := b.Client.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}
	web := names.ServiceDNSName(nodeLocalNS, "web")
	both := addresses("10.1.0.61", "10.1.0.62")
	settle(t, paths[:1], web, dns.TypeA, both, time.Now())
	// Every server has its own informers: each must hold the slice before the service's name is asked through its
	// cache, or the cache keeps its NXDOMAIN. An endpoint's own name tells, without caching the service's.
	settle(t, cached, "web-0.cluster-a."+web, dns.TypeA, addresses("10.1.0.61"), time.Now())
	for _, p := range cached {
		r, err := ask(p.addr, web, dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if !both(r) || r.ttl != uint32(stanzaTTL.Seconds()) {
			t.Fatalf("%s, cold: %v, want both endpoints with the full TTL %v", p.name, r, stanzaTTL)
		}
	}

	changeSlice := func(edit func(*discoveryv1.EndpointSlice)) time.Time {
		t.Helper()
		s := &discoveryv1.EndpointSlice{}
		if err := b.Client.Get(ctx, types.NamespacedName{Namespace: slice.Namespace, Name: slice.Name}, s); err != nil {
			t.Fatal(err)
		}
		edit(s)
		start := time.Now()
		if err := b.Client.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
		return start
	}
	start := changeSlice(func(s *discoveryv1.EndpointSlice) { s.Endpoints[1].Conditions.Ready = ptr.To(false) })
	removed := settle(t, paths, web, dns.TypeA, addresses("10.1.0.61"), start)
	report(t, "removed endpoint (web-1 not ready)", paths, removed)
	if removed[2] <= removed[0] {
		t.Errorf("node-local never answered the removed endpoint after kube-dns stopped (%v vs %v): it does not cache", removed[2], removed[0])
	}

	start = changeSlice(func(s *discoveryv1.EndpointSlice) {
		s.Endpoints = append(s.Endpoints, mcstest.Endpoint("10.1.0.63", "web-2", true))
	})
	report(t, "added endpoint (web-2)", paths, settle(t, paths, web, dns.TypeA, addresses("10.1.0.61", "10.1.0.63"), start))

	// A name asked before it is exported: NXDOMAIN in every cache, then the export.
	fresh := names.ServiceDNSName(nodeLocalNS, "fresh")
	for _, p := range paths {
		if r, err := ask(p.addr, fresh, dns.TypeA); err != nil || r.rcode != dns.RcodeNameError {
			t.Fatalf("%s before the export: %v %v, want NXDOMAIN", p.name, r, err)
		}
	}
	start = time.Now()
	importService(ctx, t, b, nodeLocalNS, "fresh", "10.99.0.20")
	report(t, "new export (NXDOMAIN before)", paths, settle(t, paths, fresh, dns.TypeA, addresses("10.99.0.20"), start))

	// The node cache keeps an answer for what is left of kube-dns's cache entry, not for a fresh 5 s.
	version := names.DNSVersionName
	var left uint32
	poll.T(t, timeout, "kube-dns's cache entry aging", func() error {
		r, err := ask(paths[1].addr, version, dns.TypeTXT)
		if err != nil {
			return err
		}
		if left = r.ttl; left > 2 {
			return fmt.Errorf("TTL %d left", left)
		}
		return nil
	})
	if r, err := ask(paths[3].addr, version, dns.TypeTXT); err != nil || r.ttl > left {
		t.Errorf("%s: %v %v, want a TTL of at most the %d s kube-dns has left", paths[3].name, r, err, left)
	}

	// Every kind of answer passes through unchanged.
	api := names.ServiceDNSName(nodeLocalNS, "api")
	importService(ctx, t, b, nodeLocalNS, "api", "10.99.0.21")
	queries := []struct {
		name  string
		qtype uint16
	}{
		{api, dns.TypeA}, {api, dns.TypeAAAA}, {api, dns.TypeSRV}, {"_tcp._tcp." + api, dns.TypeSRV},
		{web, dns.TypeA}, {web, dns.TypeSRV}, {"web-0.cluster-a." + web, dns.TypeA}, {"cluster-a." + web, dns.TypeA},
		{version, dns.TypeTXT}, {names.ServiceDNSName(nodeLocalNS, "missing"), dns.TypeA},
	}
	for _, q := range queries {
		for _, pair := range [][2]dnsPath{{paths[2], paths[0]}, {paths[3], paths[1]}} {
			poll.T(t, timeout, fmt.Sprintf("%s %s as %s", q.name, dns.TypeToString[q.qtype], pair[1].name), func() error {
				via, err := ask(pair[0].addr, q.name, q.qtype)
				if err != nil {
					return err
				}
				want, err := ask(pair[1].addr, q.name, q.qtype)
				if err != nil {
					return err
				}
				if via.rcode != want.rcode || !slices.Equal(via.rrs, want.rrs) {
					return fmt.Errorf("%s: %v, %s: %v", pair[0].name, via, pair[1].name, want)
				}
				return nil
			})
		}
	}
}

// runNodeLocal runs our CoreDNS binary with the stanza, its __PILLAR__ names filled in as node-local-dns does:
// listening on 127.0.0.1 and 127.0.0.2 (the link-local address and the kube-dns address it takes over) on a free
// port, forwarding to upstream, with its metrics on a free loopback port. It returns the DNS address.
func runNodeLocal(t *testing.T, stanza, upstream string) string {
	t.Helper()
	ports := freePorts(t, 2)
	conf := strings.NewReplacer(
		"__PILLAR__LOCAL__DNS__", "127.0.0.1",
		"__PILLAR__DNS__SERVER__", "127.0.0.2",
		"__PILLAR__CLUSTER__DNS__", upstream,
		"prometheus :9253", fmt.Sprintf("prometheus 127.0.0.1:%d", ports[1]),
	).Replace(portRe.ReplaceAllString(stanza, fmt.Sprintf(":%d {", ports[0])))
	for l := range strings.Lines(conf) {
		if !strings.HasPrefix(l, "#") && (strings.Contains(l, "__PILLAR__") || strings.Contains(l, ":53 ")) {
			t.Fatalf("the stanza changed: %q is left as it was", l)
		}
	}
	startCoreDNS(context.Background(), t, "node-local", conf, "")
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	poll.T(t, timeout, "node-local answering on "+addr, func() error {
		_, err := ask(addr, "up."+names.DNSZone, dns.TypeA)
		return err
	})
	return addr
}

// reply is what a DNS server answered.
type reply struct {
	rcode int
	rrs   []string // the answer section's records without their headers, sorted
	ttl   uint32   // the lowest TTL in the answer section
}

func (r reply) String() string {
	return fmt.Sprintf("%s %v ttl %d", dns.RcodeToString[r.rcode], r.rrs, r.ttl)
}

// ask asks server one question over UDP.
func ask(server, name string, qtype uint16) (reply, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Timeout: 2 * time.Second}
	res, _, err := c.Exchange(m, server)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s @%s: %w", name, dns.TypeToString[qtype], server, err)
	}
	r := reply{rcode: res.Rcode}
	for i, rr := range res.Answer {
		r.rrs = append(r.rrs, strings.TrimPrefix(rr.String(), rr.Header().String()))
		if i == 0 || rr.Header().Ttl < r.ttl {
			r.ttl = rr.Header().Ttl
		}
	}
	slices.Sort(r.rrs)
	return r, nil
}

// addresses matches an answer holding exactly the given A records.
func addresses(want ...string) func(reply) bool {
	return func(r reply) bool {
		return r.rcode == dns.RcodeSuccess && slices.Equal(r.rrs, slices.Sorted(slices.Values(want)))
	}
}

// settle asks every path every 20 ms until its answer matches, and returns for each path when it first did,
// counted from start.
func settle(t *testing.T, paths []dnsPath, name string, qtype uint16, match func(reply) bool, start time.Time) []time.Duration {
	t.Helper()
	seen := make([]time.Duration, len(paths))
	err := poll.Until(context.Background(), 20*time.Millisecond, 30*time.Second, func() error {
		var waiting []error
		for i, p := range paths {
			if seen[i] > 0 {
				continue
			}
			r, err := ask(p.addr, name, qtype)
			switch {
			case err != nil:
				waiting = append(waiting, err)
			case match(r):
				seen[i] = time.Since(start)
			default:
				waiting = append(waiting, fmt.Errorf("%s: %v", p.name, r))
			}
		}
		return errors.Join(waiting...)
	})
	if err != nil {
		t.Fatalf("%s %s: %v", name, dns.TypeToString[qtype], err)
	}
	return seen
}

// report logs when each path showed the change and checks that none showed it later than its bound after the
// uncached server, the first path.
func report(t *testing.T, change string, paths []dnsPath, seen []time.Duration) {
	t.Helper()
	var line []string
	for i, p := range paths {
		line = append(line, fmt.Sprintf("%s %v", p.name, seen[i].Round(10*time.Millisecond)))
		if late := seen[i] - seen[0]; late > p.bound+margin {
			t.Errorf("%s: %s showed it %v after kube-dns, more than its bound %v", change, p.name, late, p.bound)
		}
	}
	t.Logf("%s, answered from the change on: %s", change, strings.Join(line, ", "))
}
