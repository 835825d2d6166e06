package controller

import (
	"context"
	"errors"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

func TestTriggers(t *testing.T) {
	local := newFakeCluster(t,
		&mcsv1beta1.ServiceExport{ObjectMeta: objMeta("ns", "web")},
		&mcsv1beta1.ServiceExport{ObjectMeta: objMeta("ns", "db")},
		&mcsv1beta1.ServiceImport{ObjectMeta: objMeta("ns", "web")},
		&mcsv1beta1.ServiceImport{ObjectMeta: objMeta("other", "api")},
	)
	brokerC := newFakeCluster(t, record("a", "ns", "web"), record("a", "ns", "db"), record("b", "ns", "web"),
		record("b", "other", "api"), record("c", "ns", "cache"))
	tr := newTriggers(local, brokerC)
	cases := []struct {
		name string
		send func(context.Context) error
		want []string // sorted; a service sent for two reasons comes twice, the queue merges them
	}{
		{"cluster a", func(ctx context.Context) error { return tr.cluster(ctx, "a") }, []string{"ns/db", "ns/web"}},
		{"cluster b", func(ctx context.Context) error { return tr.cluster(ctx, "b") }, []string{"ns/web", "other/api"}},
		{"a cluster without exports", func(ctx context.Context) error { return tr.cluster(ctx, "d") }, nil},
		{"exports", tr.exports, []string{"ns/db", "ns/web"}},
		{"all: exports, imports, broker services", tr.all,
			[]string{"ns/cache", "ns/db", "ns/db", "ns/web", "ns/web", "ns/web", "other/api", "other/api"}},
	}
	for _, c := range cases {
		if err := c.send(context.Background()); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var sent []event.TypedGenericEvent[types.NamespacedName]
		for len(tr.ch) > 0 {
			sent = append(sent, <-tr.ch)
		}
		got := sortedKeys(sent, func(e event.TypedGenericEvent[types.NamespacedName]) types.NamespacedName { return e.Object })
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: sent %v, want %v", c.name, got, c.want)
		}
	}

	// With the buffer full, a send waits only as long as its context lasts.
	full := &triggers{local: local, broker: brokerC, ch: make(chan event.TypedGenericEvent[types.NamespacedName])}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := full.exports(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("exports into a full buffer, context ended: %v, want %v", err, context.Canceled)
	}
}
