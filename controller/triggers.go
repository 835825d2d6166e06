package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/names"
)

// triggers enqueue services for reasons no watch shows: the heartbeat seeing a member's liveness change, the
// broker come back, or the broker's view become trusted again. The controller watches them as a source.Channel.
type triggers struct {
	local, broker client.Reader // caches
	ch            chan event.TypedGenericEvent[types.NamespacedName]
}

func newTriggers(local, broker client.Reader) *triggers {
	// The buffer lets a burst (every service of a member) be sent while the workers are busy.
	return &triggers{local: local, broker: broker, ch: make(chan event.TypedGenericEvent[types.NamespacedName], 1024)}
}

// source is the controller's watch of the triggers.
func (t *triggers) source() source.Source {
	return source.Channel(t.ch, handler.TypedFuncs[types.NamespacedName, reconcile.Request]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[types.NamespacedName], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(reconcile.Request{NamespacedName: e.Object})
		},
	})
}

// cluster enqueues every service the given member exports, after its liveness changed.
func (t *triggers) cluster(ctx context.Context, clusterID string) error {
	return t.namespace(ctx, names.BrokerNamespace(clusterID))
}

// namespace enqueues every service the member of broker namespace ns exports, listed or not in the directory
// (one namespace is read whatever the directory says: brokerView.List), after it joined or left.
func (t *triggers) namespace(ctx context.Context, ns string) error {
	records := &mcsv1beta1.ServiceImportList{}
	if err := t.broker.List(ctx, records, client.InNamespace(ns)); err != nil {
		return err
	}
	return t.send(ctx, services(records.Items)...)
}

// all enqueues every service this member exports or imports and every service on the broker.
func (t *triggers) all(ctx context.Context) error {
	if err := t.exports(ctx); err != nil {
		return err
	}
	imported := &mcsv1beta1.ServiceImportList{}
	if err := t.local.List(ctx, imported); err != nil {
		return err
	}
	if err := t.send(ctx, keysOf(imported.Items)...); err != nil {
		return err
	}
	records := &mcsv1beta1.ServiceImportList{}
	if err := t.broker.List(ctx, records); err != nil {
		return err
	}
	return t.send(ctx, services(records.Items)...)
}

// exports enqueues every service exported from this cluster.
func (t *triggers) exports(ctx context.Context) error {
	exported := &mcsv1beta1.ServiceExportList{}
	if err := t.local.List(ctx, exported); err != nil {
		return err
	}
	return t.send(ctx, keysOf(exported.Items)...)
}

// keysOf returns the keys of listed objects, which are services: a ServiceExport and a ServiceImport share their
// Service's namespace and name.
func keysOf[T any, PT interface {
	*T
	client.Object
}](items []T) []types.NamespacedName {
	keys := make([]types.NamespacedName, len(items))
	for i := range items {
		keys[i] = client.ObjectKeyFromObject(PT(&items[i]))
	}
	return keys
}

// send enqueues the services, waiting while the buffer is full.
func (t *triggers) send(ctx context.Context, keys ...types.NamespacedName) error {
	for _, k := range keys {
		select {
		case t.ch <- event.TypedGenericEvent[types.NamespacedName]{Object: k}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
