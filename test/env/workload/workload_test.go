package workload

import (
	"reflect"
	"testing"
	"time"
)

func TestParseLoop(t *testing.T) {
	out := "1 1700000000000 ok cluster-b web-1 1.250\n" +
		"2 1700000000050 fail dial 0.300\n" +
		"serve: a log line on the same stream\n" +
		"3 1700000000100 ok cluster-c - 2.000\n" +
		"4 1700000000150 fail dial-unreachable 2.500 [fd00:10:96::a]:8080\n" +
		"5 1700000000200 fail dns-timeout 1000.000 -\n" +
		"summary sent=5 ok=2 failed=3\n"
	want := []Request{
		{Seq: 1, StartMs: 1700000000000, OK: true, Cluster: "cluster-b", Pod: "web-1", LatencyMs: 1.25},
		{Seq: 2, StartMs: 1700000000050, Reason: "dial", LatencyMs: 0.3},
		{Seq: 3, StartMs: 1700000000100, OK: true, Cluster: "cluster-c", Pod: "-", LatencyMs: 2},
		{Seq: 4, StartMs: 1700000000150, Reason: "dial-unreachable", Addr: "[fd00:10:96::a]:8080", LatencyMs: 2.5},
		{Seq: 5, StartMs: 1700000000200, Reason: "dns-timeout", LatencyMs: 1000},
	}
	if got := ParseLoop(out); !reflect.DeepEqual(got, want) {
		t.Errorf("ParseLoop =\n%+v\nwant\n%+v", got, want)
	}
}

func TestFailover(t *testing.T) {
	ok := func(ms int64, c string) Request { return Request{StartMs: ms, OK: true, Cluster: c} }
	fail := func(ms int64) Request { return Request{StartMs: ms, Reason: "dial"} }
	reqs := []Request{ok(0, "a"), ok(50, "a"), fail(100), fail(150), ok(200, "b"), ok(250, "b")}
	isA := func(r Request) bool { return r.Cluster == "a" }
	isB := func(r Request) bool { return r.Cluster == "b" }
	if gap, failed, done := Failover(reqs, isA, isB); !done || gap != 150 || failed != 2 {
		t.Errorf("Failover = %d ms, %d failed, %v; want 150 ms, 2 failed", gap, failed, done)
	}
	// A clean move: no failure, one interval apart.
	if gap, failed, done := Failover([]Request{ok(0, "a"), ok(50, "b")}, isA, isB); !done || gap != 50 || failed != 0 {
		t.Errorf("clean move = %d ms, %d failed, %v", gap, failed, done)
	}
	if _, _, done := Failover(reqs[:4], isA, isB); done {
		t.Error("a move that has not happened reports done")
	}
}

func TestLongestGap(t *testing.T) {
	ok := func(ms int64) Request { return Request{StartMs: ms, OK: true} }
	fail := func(ms int64) Request { return Request{StartMs: ms} }
	for _, tc := range []struct {
		reqs []Request
		want time.Duration
	}{
		{nil, 0},
		{[]Request{ok(0), ok(100), ok(200)}, 100 * time.Millisecond},
		{[]Request{ok(0), fail(100), fail(1100), ok(2100), ok(2200)}, 2100 * time.Millisecond},
		{[]Request{fail(0), fail(1000), ok(2000)}, 2000 * time.Millisecond},
	} {
		if got := LongestGap(tc.reqs); got != tc.want {
			t.Errorf("LongestGap(%v) = %s, want %s", tc.reqs, got, tc.want)
		}
	}
}
