package workload

import (
	"reflect"
	"testing"
)

func TestParseLoop(t *testing.T) {
	out := "1 1700000000000 ok cluster-b web-1 1.250\n" +
		"2 1700000000050 fail dial 0.300\n" +
		"serve: a log line on the same stream\n" +
		"3 1700000000100 ok cluster-c - 2.000\n" +
		"summary sent=3 ok=2 failed=1\n"
	want := []Request{
		{Seq: 1, StartMs: 1700000000000, OK: true, Cluster: "cluster-b", Pod: "web-1", LatencyMs: 1.25},
		{Seq: 2, StartMs: 1700000000050, Reason: "dial", LatencyMs: 0.3},
		{Seq: 3, StartMs: 1700000000100, OK: true, Cluster: "cluster-c", Pod: "-", LatencyMs: 2},
	}
	if got := ParseLoop(out); !reflect.DeepEqual(got, want) {
		t.Errorf("ParseLoop =\n%+v\nwant\n%+v", got, want)
	}
}
