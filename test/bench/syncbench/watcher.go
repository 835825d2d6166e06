package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/test/env/clusterset"
)

// watcher follows cluster-b's ServiceImports and imported EndpointSlices in the benchmark namespace and records,
// in its event handlers, when each service's import became complete and when each endpoint became ready.
type watcher struct {
	want int // ready endpoints that make an import complete

	mu       sync.Mutex
	imports  map[string]bool                                  // service → ServiceImport present
	slices   map[string]map[string]*discoveryv1.EndpointSlice // service → slice name → slice
	expected map[string]bool                                  // services whose completion is being timed
	complete map[string]time.Time                             // service → when its import was first complete
	readyAt  map[string]map[string]time.Time                  // service → address → when first seen ready
	changed  chan struct{}                                    // closed and replaced at every event
}

// watch starts the watcher on c; it returns once the watcher's caches have synced.
func watch(ctx context.Context, c *clusterset.Cluster, want int) (*watcher, error) {
	imported, err := labels.NewRequirement(mcsv1beta1.LabelServiceName, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	ca, err := cache.New(c.Config, cache.Options{
		Scheme:            clusterset.Scheme,
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&discoveryv1.EndpointSlice{}: {Label: labels.NewSelector().Add(*imported)},
		},
	})
	if err != nil {
		return nil, err
	}
	w := &watcher{
		want: want, imports: map[string]bool{}, slices: map[string]map[string]*discoveryv1.EndpointSlice{},
		expected: map[string]bool{}, complete: map[string]time.Time{}, readyAt: map[string]map[string]time.Time{},
		changed: make(chan struct{}),
	}
	for obj, h := range map[client.Object]func(obj any, deleted bool){
		&mcsv1beta1.ServiceImport{}:  w.onImport,
		&discoveryv1.EndpointSlice{}: w.onSlice,
	} {
		inf, err := ca.GetInformer(ctx, obj)
		if err != nil {
			return nil, err
		}
		_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { h(obj, false) },
			UpdateFunc: func(_, obj any) { h(obj, false) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				h(obj, true)
			},
		})
		if err != nil {
			return nil, err
		}
	}
	go func() {
		if err := ca.Start(ctx); err != nil {
			log.Print("cluster-b watch: ", err)
		}
	}()
	if !ca.WaitForCacheSync(ctx) {
		return nil, errors.New("cluster-b watch did not sync")
	}
	return w, nil
}

func (w *watcher) onImport(obj any, deleted bool) {
	now := time.Now()
	si, ok := obj.(*mcsv1beta1.ServiceImport)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.imports[si.Name] = !deleted
	w.update(si.Name, now)
}

func (w *watcher) onSlice(obj any, deleted bool) {
	now := time.Now()
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	svc := s.Labels[mcsv1beta1.LabelServiceName]
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.slices[svc] == nil {
		w.slices[svc] = map[string]*discoveryv1.EndpointSlice{}
	}
	if deleted {
		delete(w.slices[svc], s.Name)
	} else {
		w.slices[svc][s.Name] = s
	}
	w.update(svc, now)
}

// update records what the event at now changed for svc and wakes the waiters; w.mu is held.
func (w *watcher) update(svc string, now time.Time) {
	ready := w.ready(svc)
	since := w.readyAt[svc]
	if since == nil {
		since = map[string]time.Time{}
		w.readyAt[svc] = since
	}
	for addr := range ready {
		if _, ok := since[addr]; !ok {
			since[addr] = now
		}
	}
	for addr := range since {
		if !ready[addr] {
			delete(since, addr)
		}
	}
	if _, done := w.complete[svc]; !done && w.expected[svc] && w.imports[svc] && len(ready) >= w.want {
		w.complete[svc] = now
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// ready returns the addresses of svc's ready endpoints; w.mu is held.
func (w *watcher) ready(svc string) map[string]bool {
	ready := map[string]bool{}
	for _, s := range w.slices[svc] {
		for _, ep := range s.Endpoints {
			if ptr.Deref(ep.Conditions.Ready, false) {
				for _, a := range ep.Addresses {
					ready[a] = true
				}
			}
		}
	}
	return ready
}

// addresses counts svc's endpoint addresses, ready or not; w.mu is held.
func (w *watcher) addresses(svc string) int {
	seen := map[string]bool{}
	for _, s := range w.slices[svc] {
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				seen[a] = true
			}
		}
	}
	return len(seen)
}

// expect starts timing svc: only services expected before their ServiceExport exists count as complete, so that
// a completion is never recorded before its start.
func (w *watcher) expect(svc string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expected[svc] = true
}

// waitFor calls check with w.mu held at every change of what the watcher saw, until it returns nil; it fails with
// check's last error after timeout.
func (w *watcher) waitFor(ctx context.Context, timeout time.Duration, check func() error) error {
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		err := check()
		changed := w.changed
		w.mu.Unlock()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("not done after %v: %w", timeout, err)
		case <-changed:
		}
	}
}
