package dnsconformance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"vksfleet.dev/fleet/build/deploy/corefile"
	"vksfleet.dev/fleet/test/env/poll"
)

// transferServer runs another coredns with the server block s and a `transfer { to * }` stanza until the test
// ends, and returns its DNS port.
func transferServer(t *testing.T, name string, s corefile.Server) int {
	t.Helper()
	s.TransferTo = "*"
	var log bytes.Buffer
	p, port, err := runCoreDNS(context.Background(), name, s, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Log(name + " output:\n" + log.String())
		}
	})
	return port
}

// digXfr runs dig for a transfer (args: the zone and AXFR or IXFR=serial) and returns the records it printed,
// and whether it reported the transfer failed.
func digXfr(t *testing.T, port int, args ...string) (rrs []dns.RR, failed bool) {
	t.Helper()
	out := runDig(t, port, append(args, "+tcp")...)
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		switch line := strings.TrimSpace(sc.Text()); {
		case line == "":
		case strings.HasPrefix(line, "; Transfer failed"):
			failed = true
		case strings.HasPrefix(line, ";"):
		default:
			rr, err := dns.NewRR(line)
			if err != nil {
				t.Fatalf("dig %v: parsing %q: %v", args, line, err)
			}
			rrs = append(rrs, rr)
		}
	}
	return rrs, failed
}

// rrset is the records of one owner name and type.
type rrset struct {
	owner string
	qtype uint16
}

// rrsets groups records by owner and type; the SOA that ends a transfer is left out.
func rrsets(rrs []dns.RR) map[rrset][]dns.RR {
	out := map[rrset][]dns.RR{}
	for i, rr := range rrs {
		if i > 0 && i == len(rrs)-1 && rr.Header().Rrtype == dns.TypeSOA {
			break
		}
		h := rr.Header()
		out[rrset{h.Name, h.Rrtype}] = append(out[rrset{h.Name, h.Rrtype}], rr)
	}
	return out
}

// checkFrame returns an error unless rrs is a whole transfer of apex: its SOA first and last, the same one,
// and no other SOA.
func checkFrame(rrs []dns.RR, apex string) (serial uint32, err error) {
	if len(rrs) < 2 {
		return 0, fmt.Errorf("%d records: not a transfer", len(rrs))
	}
	first, ok1 := rrs[0].(*dns.SOA)
	last, ok2 := rrs[len(rrs)-1].(*dns.SOA)
	if !ok1 || !ok2 || first.String() != last.String() || first.Hdr.Name != apex {
		return 0, fmt.Errorf("first %v, last %v: want the SOA of %s at both ends", rrs[0], rrs[len(rrs)-1], apex)
	}
	for _, rr := range rrs[1 : len(rrs)-1] {
		if rr.Header().Rrtype == dns.TypeSOA {
			return 0, fmt.Errorf("an SOA inside the transfer: %v", rr)
		}
	}
	return first.Serial, nil
}

// agree returns an error unless each owner name and type of a transfer answers a query, asked over TCP one by
// one, with the same records, the zone's serial staying that of the transfer throughout.
func agree(port int, rrs []dns.RR, serial uint32) error {
	stable := func() error {
		got, err := exchangeAt(port, "tcp", zone, dns.TypeSOA)
		if err != nil {
			return err
		}
		if len(got.answer) == 1 {
			if soa, ok := got.answer[0].(*dns.SOA); ok && soa.Serial == serial {
				return nil
			}
		}
		return fmt.Errorf("the zone moved on from serial %d: %v", serial, got.answer)
	}
	if err := stable(); err != nil {
		return err
	}
	for k, set := range rrsets(rrs) {
		got, err := exchangeAt(port, "tcp", k.owner, k.qtype)
		if err != nil {
			return err
		}
		want := rdata(set)
		slices.Sort(want)
		answer := rdata(got.answer)
		slices.Sort(answer)
		if got.rcode != "NOERROR" || !slices.Equal(answer, want) {
			return fmt.Errorf("%s %s: query %s %q, transfer %q", k.owner, dns.TypeToString[k.qtype], got.rcode, answer, want)
		}
	}
	return stable()
}

// TestTransfer is the acceptance check: `dig AXFR clusterset.local` (and IXFR) over TCP against the
// binary with a transfer stanza, in a server block where the kubernetes plugin, another Transferer, serves
// cluster.local. The transfer is compared with the same names asked one by one, and with every row of SPEC
// section 4.
func TestTransfer(t *testing.T) {
	port := transferServer(t, "coredns-transfer", memberServer(&corefile.Kubernetes{Namespaces: []string{metav1.NamespaceDefault}}))

	var (
		rrs    []dns.RR
		serial uint32
	)
	poll.T(t, 30*time.Second, "an AXFR that agrees with the queries", func() error {
		start := time.Now()
		var failed bool
		rrs, failed = digXfr(t, port, zone, "AXFR")
		if failed {
			return errors.New("dig: transfer failed")
		}
		elapsed := time.Since(start)
		var err error
		if serial, err = checkFrame(rrs, zone); err != nil {
			return err
		}
		if err := agree(port, rrs, serial); err != nil {
			return err
		}
		t.Logf("AXFR of %s: %d records in %s with dig", zone, len(rrs), elapsed.Round(time.Millisecond))
		return nil
	})
	sets := rrsets(rrs)

	// Every answer of the SPEC's rows is in the transfer, and no name the rows find absent.
	for _, r := range specRows() {
		if !dns.IsSubDomain(zone, r.name) {
			continue
		}
		set := sets[rrset{r.name, r.qtype}]
		got := rdata(set)
		want := slices.Clone(r.answer)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s (%s %s): transfer %q, want %q", r.spec, r.name, dns.TypeToString[r.qtype], got, want)
		}
		if r.rcode == "NXDOMAIN" {
			for k := range sets {
				if k.owner == r.name {
					t.Errorf("%s: %s is in the transfer", r.spec, r.name)
				}
			}
		}
	}
	// The per-endpoint names carry the cluster id, two labels for the member's own; the large headless service
	// is there whole.
	for _, k := range []rrset{{db0, dns.TypeA}, {db0, dns.TypeAAAA}, {dbB4, dns.TypeA}, {dbB6, dns.TypeAAAA}} {
		if len(sets[k]) != 1 {
			t.Errorf("%s %s: %v in the transfer, want one record", k.owner, dns.TypeToString[k.qtype], sets[k])
		}
	}
	if n := len(sets[rrset{big, dns.TypeA}]); n != bigCount {
		t.Errorf("%s A: %d records in the transfer, want %d", big, n, bigCount)
	}

	// IXFR: from the current serial the SOA alone; from an older one the whole zone.
	if got, failed := digXfr(t, port, zone, "IXFR="+strconv.FormatUint(uint64(serial), 10)); failed || len(got) != 1 ||
		got[0].String() != rrs[0].String() {
		t.Errorf("IXFR from the current serial: failed %v, %v; want the SOA %v alone", failed, got, rrs[0])
	}
	got, failed := digXfr(t, port, zone, "IXFR="+strconv.FormatUint(uint64(serial-1), 10))
	if s, err := checkFrame(got, zone); failed || err != nil || s != serial || len(got) != len(rrs) {
		t.Errorf("IXFR from an older serial: failed %v, %d records, %v; want the whole zone (%d records)", failed, len(got), err, len(rrs))
	}
	if r, err := exchangeAt(port, "udp", zone, dns.TypeAXFR); err != nil || r.rcode != "REFUSED" {
		t.Errorf("AXFR over UDP: %v %v, want REFUSED", r.rcode, err)
	}

	// The reverse zones the stanza names: every PTR that queries answer, between the reverse zone's SOAs.
	for _, apex := range []string{"in-addr.arpa.", "ip6.arpa."} {
		ptrs, failed := digXfr(t, port, apex, "AXFR")
		if failed {
			t.Errorf("AXFR %s failed", apex)
			continue
		}
		if _, err := checkFrame(ptrs, apex); err != nil {
			t.Errorf("AXFR %s: %v", apex, err)
		}
		n := 0
		for k, set := range rrsets(ptrs) {
			if k.qtype != dns.TypePTR {
				continue
			}
			n++
			q, err := exchangeAt(port, "tcp", k.owner, dns.TypePTR)
			if err != nil || !slices.Equal(rdata(q.answer), rdata(set)) {
				t.Errorf("%s PTR: query %v %v, transfer %v", k.owner, q.answer, err, set)
			}
		}
		for _, r := range specRows() {
			if r.qtype == dns.TypePTR && dns.IsSubDomain(apex, r.name) && !slices.Equal(rdata(rrsets(ptrs)[rrset{r.name, dns.TypePTR}]), r.answer) {
				t.Errorf("%s: %s not in the transfer of %s", r.spec, r.name, apex)
			}
		}
		t.Logf("AXFR of %s: %d PTR records", apex, n)
	}
}

// TestTransferRefused checks the servers that must not transfer: one without a transfer stanza (the suite's),
// and one whose zone is not ready, which must refuse rather than send part of it.
func TestTransferRefused(t *testing.T) {
	// The API server of the not-ready one is unreachable: its informers never sync.
	notReady := transferServer(t, "coredns-not-ready",
		corefile.Server{Endpoint: "http://127.0.0.1:1", Multicluster: &corefile.Multicluster{Reverse: true}})
	poll.T(t, 30*time.Second, "the not-ready server answering SERVFAIL", func() error {
		r, err := exchangeAt(notReady, "udp", "dns-version."+zone, dns.TypeTXT)
		if err == nil && r.rcode != "SERVFAIL" {
			err = fmt.Errorf("dns-version: %s, want SERVFAIL before sync", r.rcode)
		}
		return err
	})
	for _, s := range []struct {
		name  string
		port  int
		rcode string
	}{{"no transfer stanza", env.port, "REFUSED"}, {"not ready", notReady, "SERVFAIL"}} {
		for _, args := range [][]string{{zone, "AXFR"}, {zone, "IXFR=1"}, {"in-addr.arpa.", "AXFR"}} {
			if rrs, failed := digXfr(t, s.port, args...); !failed || len(rrs) != 0 {
				t.Errorf("%s: dig %v: failed %v, %d records; want the transfer refused", s.name, args, failed, len(rrs))
			}
		}
		if r, err := exchangeAt(s.port, "tcp", zone, dns.TypeAXFR); err != nil || r.rcode != s.rcode || len(r.answer) != 0 {
			t.Errorf("%s: AXFR %s %v %v, want %s", s.name, r.rcode, r.answer, err, s.rcode)
		}
	}
}
