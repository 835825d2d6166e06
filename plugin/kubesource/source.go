package kubesource

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"vksfleet.dev/fleet/mcs/mcsversion"
	"vksfleet.dev/fleet/plugin/zone"
)

// Observer receives the source's measurements; the CoreDNS adapter turns them into Prometheus metrics.
type Observer interface {
	// Rebuilt reports one index update of n services that took d.
	Rebuilt(n int, d time.Duration)
	// Propagated reports the time from an object change reaching the source to the answer changing.
	Propagated(d time.Duration)
	// Answered reports the time from an endpoint change in the exporting cluster (the imported slice's
	// last-change-trigger-time) to the answer changing: cross-cluster propagation, end to end.
	Answered(d time.Duration)
	// SyncError reports a failed list, watch or discovery of resource.
	SyncError(resource string, err error)
	// Sized reports the index sizes after an update.
	Sized(services, names, reverse int)
	// Dropped reports n items of object (a slice's namespace/name, a service's zone.Key, or "" for a batch)
	// left out for reason (one of the Drop constants), and why. It is called each time the object arrives or
	// its service is built, so a hostile object is counted as often as it is written.
	Dropped(reason, object string, n int, why error)
}

// Options configure a Source.
type Options struct {
	// Config reaches the API server.
	Config *rest.Config
	// Index receives the services.
	Index *zone.Index
	// NoEndpoints leaves out the EndpointSlice watch: only ClusterSetIP services answer.
	NoEndpoints bool
	// Managers are the endpointslice.kubernetes.io/managed-by values of the EndpointSlices served; when empty,
	// every manager's are. The label proves nothing about who wrote a slice: every slice served is validated the
	// same way, whatever its manager (see slimEndpointSlice).
	Managers []string
	// Observer receives measurements; nil discards them.
	Observer Observer
}

// Source watches one cluster and keeps an index up to date.
type Source struct {
	opts     Options
	kube     kubernetes.Interface
	mcs      mcsclient.Interface
	selector string // the label selector of the EndpointSlices served (see sliceSelector)
	synced   atomic.Bool

	imports, namespaces cache.SharedIndexInformer // set once by start
	registrations       []cache.ResourceEventHandlerRegistration

	mu       sync.Mutex
	slicesOf map[serviceKey][]*endpointSlice // the imported slices of each service, from the slice informer
	dirty    map[serviceKey]time.Time        // service -> when it first changed since the last update
	changes  []time.Time                     // the exporting clusters' change times of the slices since then
	nsDirty  bool
	nsSince  time.Time
	wake     chan struct{}
	cancel   context.CancelFunc
	finished chan struct{}
}

type serviceKey struct{ namespace, name string }

// New returns a Source for the cluster that opts.Config reaches. Nothing runs until Start.
func New(opts Options) (*Source, error) {
	if opts.Config == nil || opts.Index == nil {
		return nil, errors.New("kubesource: Config and Index are required")
	}
	if opts.Observer == nil {
		opts.Observer = nopObserver{}
	}
	// Built-in types (EndpointSlices, Namespaces) are read as protobuf, as CoreDNS's kubernetes plugin reads
	// them: listing thousands of slices then makes far less garbage than JSON. ServiceImports are custom
	// resources, which are served as JSON only.
	kc := rest.CopyConfig(opts.Config)
	kc.ContentType = runtime.ContentTypeProtobuf
	kc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kube, err := kubernetes.NewForConfig(kc)
	if err != nil {
		return nil, fmt.Errorf("kubesource: %w", err)
	}
	mcs, err := mcsclient.NewForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("kubesource: %w", err)
	}
	return newSource(opts, kube, mcs)
}

// newSource returns a Source that reads through the clients given; opts.Config is not used.
func newSource(opts Options, kube kubernetes.Interface, mcs mcsclient.Interface) (*Source, error) {
	sel, err := sliceSelector(opts.Managers)
	if err != nil {
		return nil, fmt.Errorf("kubesource: %w", err)
	}
	return &Source{opts: opts, kube: kube, mcs: mcs, selector: sel, dirty: map[serviceKey]time.Time{},
		slicesOf: map[serviceKey][]*endpointSlice{}, wake: make(chan struct{}, 1)}, nil
}

// Start starts the informers and the index worker; they run until Stop. The ServiceImport version is found by
// discovery, retried until the API server answers.
func (s *Source) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.finished = make(chan struct{})
	go func() {
		defer close(s.finished)
		gv, ok := s.serviceImportVersion(ctx)
		if !ok {
			return
		}
		if err := s.startInformers(ctx, gv); err != nil {
			s.opts.Observer.SyncError("informers", err)
			return
		}
		s.work(ctx)
	}()
}

// Stop stops everything Start started and waits for the worker to end.
func (s *Source) Stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	<-s.finished
}

// HasSynced reports whether every informer has synced and the index holds everything they listed.
func (s *Source) HasSynced() bool { return s.synced.Load() }

// serviceImportVersion asks discovery which ServiceImport version the server serves, preferring v1beta1, and
// retries with backoff while the server cannot tell or serves none.
func (s *Source) serviceImportVersion(ctx context.Context) (schema.GroupVersion, bool) {
	delay := 250 * time.Millisecond
	for {
		gv, err := mcsversion.Detect(s.kube.Discovery())
		if err == nil {
			return gv, true
		}
		s.opts.Observer.SyncError("discovery", err)
		select {
		case <-ctx.Done():
			return gv, false
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}

func (s *Source) startInformers(ctx context.Context, gv schema.GroupVersion) error {
	// Informers without indexers: the default namespace index would hold a set entry per object, and the slices
	// are found by service through s.slicesOf instead. Each list-watch tells its reflector whether its client
	// streams the initial list (a real one does, a fake one does not), as client-go asks of clients since it
	// streams by default.
	imports := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return s.mcs.MulticlusterV1beta1().ServiceImports("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return s.mcs.MulticlusterV1beta1().ServiceImports("").Watch(ctx, o)
		},
	}
	var example runtime.Object = &mcsv1beta1.ServiceImport{}
	if gv == mcsv1alpha1.SchemeGroupVersion {
		imports.ListWithContextFunc = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return s.mcs.MulticlusterV1alpha1().ServiceImports("").List(ctx, o)
		}
		imports.WatchFuncWithContext = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return s.mcs.MulticlusterV1alpha1().ServiceImports("").Watch(ctx, o)
		}
		example = &mcsv1alpha1.ServiceImport{}
	}
	s.imports = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(imports, s.mcs), example, 0, cache.Indexers{})
	s.namespaces = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return s.kube.CoreV1().Namespaces().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return s.kube.CoreV1().Namespaces().Watch(ctx, o)
		},
	}, s.kube), &corev1.Namespace{}, 0, cache.Indexers{})
	toRun := []watched{
		{"serviceimports", s.imports, slimServiceImport, s.handler(importKey)},
		{"namespaces", s.namespaces, slimNamespace, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { s.markNamespaces() },
			DeleteFunc: func(any) { s.markNamespaces() },
		}},
	}
	if !s.opts.NoEndpoints {
		imported := func(o *metav1.ListOptions) { o.LabelSelector = s.selector }
		slices := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				imported(&o)
				return s.kube.DiscoveryV1().EndpointSlices("").List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				imported(&o)
				return s.kube.DiscoveryV1().EndpointSlices("").Watch(ctx, o)
			},
		}, s.kube), &discoveryv1.EndpointSlice{}, 0, cache.Indexers{})
		toRun = append(toRun, watched{"endpointslices", slices, s.transformSlice, s.sliceHandler()})
	}
	for _, i := range toRun {
		if err := i.inf.SetTransform(i.transform); err != nil {
			return err
		}
		name := i.name
		if err := i.inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			s.opts.Observer.SyncError(name, err)
			cache.DefaultWatchErrorHandler(ctx, r, err)
		}); err != nil {
			return err
		}
		reg, err := i.inf.AddEventHandler(i.handler)
		if err != nil {
			return err
		}
		s.registrations = append(s.registrations, reg)
		go i.inf.RunWithContext(ctx)
	}
	return nil
}

// sliceSelector selects the EndpointSlices served: those of a multi-cluster service whose managed-by label is one
// of managers, or those of every manager when there is none. Slices of other managers (a user's, another
// implementation's that the operator did not name) are never listed, so they neither reach an answer nor take
// memory here; the label is no proof of origin, so what is selected is still validated (see slimEndpointSlice).
func sliceSelector(managers []string) (string, error) {
	if slices.Contains(managers, "") {
		// A valid label value, but the selector's text would read it as no value at all.
		return "", errors.New("managers: an empty value")
	}
	imported, err := labels.NewRequirement(mcsv1beta1.LabelServiceName, selection.Exists, nil)
	if err != nil {
		return "", err
	}
	sel := labels.NewSelector().Add(*imported)
	if len(managers) > 0 {
		managed, err := labels.NewRequirement(discoveryv1.LabelManagedBy, selection.In, managers)
		if err != nil {
			return "", fmt.Errorf("managers: %w", err)
		}
		sel = sel.Add(*managed)
	}
	return sel.String(), nil
}

// transformSlice is the slice informer's transform: slimEndpointSlice, with what it leaves out reported.
func (s *Source) transformSlice(obj any) (any, error) {
	out, drops := slimEndpointSlice(obj)
	if len(drops) > 0 {
		sl := out.(*endpointSlice)
		for _, d := range drops {
			s.opts.Observer.Dropped(d.reason, sl.namespace+"/"+sl.name, d.n, d.why)
		}
	}
	return out, nil
}

// watched is one informer with what the source hooks into it.
type watched struct {
	name      string
	inf       cache.SharedIndexInformer
	transform cache.TransformFunc
	handler   cache.ResourceEventHandler
}

// handler marks the service of every added, changed or deleted object dirty.
func (s *Source) handler(key func(any) (serviceKey, bool)) cache.ResourceEventHandler {
	mark := func(obj any) {
		if k, ok := key(unwrap(obj)); ok {
			s.markService(k)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    mark,
		UpdateFunc: func(oldObj, newObj any) { mark(oldObj); mark(newObj) },
		DeleteFunc: mark,
	}
}

// sliceHandler files every imported slice under its service in s.slicesOf, and marks the service dirty. An update
// swaps the old slice for the new one under one lock: filed apart, an index rebuild could fall between the two
// and answer the service without the slice's endpoints, NXDOMAIN for a headless service with one slice.
func (s *Source) sliceHandler() cache.ResourceEventHandler {
	swap := func(oldObj, newObj any) {
		var marked []serviceKey
		s.mu.Lock()
		for _, c := range []struct {
			obj  any
			keep bool
		}{{oldObj, false}, {newObj, true}} {
			sl, ok := unwrap(c.obj).(*endpointSlice)
			if !ok || sl.service == "" {
				continue
			}
			k := serviceKey{sl.namespace, sl.service}
			filed := slices.DeleteFunc(s.slicesOf[k], func(o *endpointSlice) bool { return o.name == sl.name })
			if c.keep {
				filed = append(filed, sl)
				// A change in the exporting cluster, not a resync of the same slice.
				if old, ok := unwrap(oldObj).(*endpointSlice); !sl.changed.IsZero() && (!ok || !old.changed.Equal(sl.changed)) {
					s.changes = append(s.changes, sl.changed)
				}
			}
			if len(filed) == 0 {
				delete(s.slicesOf, k)
			} else {
				s.slicesOf[k] = filed
			}
			marked = append(marked, k)
		}
		s.mu.Unlock()
		for _, k := range marked {
			s.markService(k)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { swap(nil, obj) },
		UpdateFunc: swap,
		DeleteFunc: func(obj any) { swap(obj, nil) },
	}
}

// unwrap returns the last known state of a deleted object whose deletion the informer missed.
func unwrap(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

func importKey(obj any) (serviceKey, bool) {
	si, ok := obj.(*serviceImport)
	if !ok {
		return serviceKey{}, false
	}
	return serviceKey{si.namespace, si.name}, true
}

func (s *Source) markService(k serviceKey) {
	s.mu.Lock()
	if _, ok := s.dirty[k]; !ok {
		s.dirty[k] = time.Now()
	}
	s.mu.Unlock()
	s.poke()
}

func (s *Source) markNamespaces() {
	s.mu.Lock()
	if !s.nsDirty {
		s.nsDirty, s.nsSince = true, time.Now()
	}
	s.mu.Unlock()
	s.poke()
}

func (s *Source) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// work applies the dirty services to the index until ctx ends. Before the informers have synced it only waits,
// so that the first update holds every listed object. After the first update that follows the sync, the
// source reports synced.
func (s *Source) work(ctx context.Context) {
	tick := time.NewTicker(20 * time.Millisecond) // re-checks the sync state, which changes without an event
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-tick.C:
		}
		if !s.informersSynced() {
			continue
		}
		wasSynced := s.synced.Load()
		s.update(wasSynced)
		if !wasSynced {
			s.synced.Store(true)
			tick.Stop()
		}
	}
}

func (s *Source) informersSynced() bool {
	for _, r := range s.registrations {
		if !r.HasSynced() {
			return false
		}
	}
	return len(s.registrations) > 0
}

// update takes the dirty set and applies it as one batch. Latencies are observed only once the source has
// synced: before that, "changes" are the initial list.
func (s *Source) update(observeLatency bool) {
	s.mu.Lock()
	dirty, nsDirty, nsSince, changed := s.dirty, s.nsDirty, s.nsSince, s.changes
	s.dirty, s.nsDirty, s.changes = map[serviceKey]time.Time{}, false, nil
	s.mu.Unlock()
	if len(dirty) == 0 && !nsDirty {
		return
	}
	start := time.Now()
	if nsDirty {
		var names []string
		for _, obj := range s.namespaces.GetStore().List() {
			if ns, ok := obj.(*namespace); ok {
				names = append(names, ns.name)
			}
		}
		s.opts.Index.SetNamespaces(names)
	}
	changes := make([]zone.Change, 0, len(dirty))
	for k := range dirty {
		changes = append(changes, zone.Change{Key: zone.Key(k.namespace, k.name), Service: s.service(k)})
	}
	skipped, panicked, why := applyGuarded(s.opts.Index.Apply, changes)
	if skipped > 0 {
		s.opts.Observer.Dropped(DropUnpackableRecord, "", skipped, why)
	}
	for _, p := range panicked {
		s.opts.Observer.Dropped(DropBuildPanic, p.key, 1, p.why)
	}
	done := time.Now()
	s.opts.Observer.Rebuilt(len(changes), done.Sub(start))
	s.opts.Observer.Sized(s.opts.Index.Snapshot().Sizes())
	if !observeLatency {
		return
	}
	for _, since := range dirty {
		s.opts.Observer.Propagated(done.Sub(since))
	}
	if nsDirty {
		s.opts.Observer.Propagated(done.Sub(nsSince))
	}
	for _, t := range changed {
		s.opts.Observer.Answered(done.Sub(t))
	}
}

// buildPanic is a service whose index build panicked: its key (see zone.Key) and the panic, with its stack.
type buildPanic struct {
	key string
	why error
}

// applyGuarded applies changes with apply (the index's Apply) and returns what it returns, with the services whose
// builds panicked, but never panics. A build that panics is a bug that some object's data triggers, and this
// process also serves cluster.local: it must keep serving. apply publishes nothing before it returns, so after a
// panic the index still holds its last good state; the batch is then applied again one service at a time, so
// that every other service is updated, and each service whose build panics keeps its last good entry and is
// returned once, for this build.
func applyGuarded(apply func(...zone.Change) (int, error), changes []zone.Change) (skipped int, panicked []buildPanic, why error) {
	try := func(changes ...zone.Change) (p error) {
		defer func() {
			if r := recover(); r != nil {
				p = fmt.Errorf("index build panicked: %v\n%s", r, debug.Stack())
			}
		}()
		n, err := apply(changes...)
		if n > 0 && skipped == 0 {
			why = err
		}
		skipped += n
		return nil
	}
	if try(changes...) == nil {
		return skipped, nil, why
	}
	for _, c := range changes {
		if p := try(c); p != nil {
			panicked = append(panicked, buildPanic{key: c.Key, why: p})
		}
	}
	return skipped, panicked, why
}

// service reads one service from the informer store and s.slicesOf; nil when its ServiceImport is gone.
func (s *Source) service(k serviceKey) *zone.Service {
	obj, ok, err := s.imports.GetStore().GetByKey(k.namespace + "/" + k.name)
	if err != nil || !ok {
		return nil
	}
	si, ok := obj.(*serviceImport)
	if !ok {
		return nil
	}
	s.mu.Lock()
	filed := slices.Clone(s.slicesOf[k])
	s.mu.Unlock()
	return toService(si, filed)
}

type nopObserver struct{}

func (nopObserver) Rebuilt(int, time.Duration)         {}
func (nopObserver) Propagated(time.Duration)           {}
func (nopObserver) Answered(time.Duration)             {}
func (nopObserver) SyncError(string, error)            {}
func (nopObserver) Sized(_, _, _ int)                  {}
func (nopObserver) Dropped(string, string, int, error) {}
