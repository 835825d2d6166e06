// Package controller runs the mcs-controller for one member cluster: it publishes the member's ServiceExports to
// the broker and imports every service the clusterset exports. Run is the whole controller, so that a binary runs
// it once and tests run one per member in a single process.
package controller

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	brokerv1alpha1 "vksfleet.dev/fleet/api/broker/v1alpha1"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/reach"
	"vksfleet.dev/fleet/mcs/clusterid"
	"vksfleet.dev/fleet/mcs/mcsversion"
	"vksfleet.dev/fleet/mcs/names"
)

// LeaderElectionID names the local Lease that controller replicas elect a leader with, in
// Options.LeaderElectionNamespace.
const LeaderElectionID = "mcs-controller.vksfleet.dev"

// Run runs the controller until ctx ends. It returns at once with an error when the options are bad, the cluster
// id is invalid or the member cluster cannot be reached at start; while the broker cannot be reached, at start or
// at the start of any later run, it waits and retries (brokerRetry). Ending ctx, even while it starts, is no error.
func Run(ctx context.Context, opts Options) (err error) {
	defer func() {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			err = nil // stopped while starting: not a failure
		}
	}()
	if opts.Local == nil || opts.Broker == nil {
		return errors.New("controller: both a local and a broker client configuration are required")
	}
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	log := *opts.Logger
	var a apis
	if a.localGV, a.local, err = detectAPI(opts.Local); err != nil {
		return fmt.Errorf("controller: local cluster: %w", err)
	}
	id, clusterSet, err := resolveID(ctx, opts)
	if err != nil {
		return err
	}
	log = log.WithValues("cluster", id, "clusterSet", clusterSet)
	opts.Local, opts.Broker = countWrites(opts.Local, id, "local"), countWrites(opts.Broker, id, "broker")

	kept := newDecisions(id, opts)
	kept.log = log
	retry := &brokerRetry{id: id, log: log, after: time.After, serve: func(ready func(*http.Request) error) (func(), error) {
		return ServeProbes(opts.HealthProbeBindAddress, ready)
	}}
	var scopes *scopeReader
	for {
		var scope brokerScope
		err := retry.do(ctx, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, brokerStepTimeout)
			defer cancel()
			if scopes == nil {
				direct, err := detectBroker(opts.Broker, &a)
				if err != nil {
					return err
				}
				scopes = newScopeReader(direct, id, log)
			}
			if err := scopes.checkRecords(ctx); err != nil {
				return unavailable(err)
			}
			scope, err = scopes.read(ctx)
			return unavailable(err)
		})
		if err != nil {
			return fmt.Errorf("controller: broker: %w", err)
		}
		err = runManager(ctx, opts, id, a, scope, scopes, kept, log)
		if ctx.Err() != nil {
			return err
		}
		switch afterRun(err) {
		case runStop, runFail:
			return err
		case runAgain:
			retry.ran()
			if errors.Is(err, errBrokerReset) {
				// The broker lost this member's Lease, with its data: the watches of a broker whose etcd was wiped
				// resume from resource versions it no longer has and may never deliver again, so the caches start
				// afresh. The new run starts untrusting the broker's view, which keeps every import until the
				// members have republished; a broker back from a reset that does not serve the mcs-api CRDs yet
				// fails the new run's start, which is retried.
				log.Info("the broker lost its data: restarting with fresh caches")
			}
			// A scope change loses nothing: the imports stay as they are while the next run's caches fill.
		case runRetry:
			retry.failed(err)
		}
	}
}

// brokerStepTimeout bounds each request of a run's start to the broker: a broker that accepts connections but
// does not answer must not stall the retries.
const brokerStepTimeout = 10 * time.Second

// apis are the mcs-api versions the member and the broker serve, and the schemes that encode them: on the broker,
// records, the layout of this release, and broker, the previous release's, which it still reads of that
// release's members and writes of its own.
type apis struct {
	localGV, brokerGV schema.GroupVersion
	local, broker     *runtime.Scheme
	records           *runtime.Scheme
}

// detectBroker asks the broker which mcs-api version it serves, into a, checks that it serves the records, and
// returns an uncached client of it for the records' layout. A failed request is marked errBrokerUnavailable, and
// so is a broker without the records, which this release's broker init gives it; a configuration no client can
// be made of is not.
func detectBroker(cfg *rest.Config, a *apis) (client.Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = brokerStepTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	gv, scheme, err := detect(dc)
	if err != nil {
		return nil, unavailable(err)
	}
	if ok, err := mcsversion.Serves(dc, brokerv1alpha1.SchemeGroupVersion.WithResource(brokerv1alpha1.ExportRecords)); err != nil {
		return nil, unavailable(err)
	} else if !ok {
		return nil, unavailable(errNoRecords)
	}
	records, err := brokerv1alpha1.NewScheme()
	if err != nil {
		return nil, err
	}
	direct, err := client.New(cfg, client.Options{Scheme: records})
	if err != nil {
		return nil, err
	}
	a.brokerGV, a.broker, a.records = gv, scheme, records
	return direct, nil
}

// detectAPI asks the cluster cfg reaches which mcs-api version it serves.
func detectAPI(cfg *rest.Config) (schema.GroupVersion, *runtime.Scheme, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return schema.GroupVersion{}, nil, err
	}
	return detect(dc)
}

func detect(dc discovery.DiscoveryInterface) (schema.GroupVersion, *runtime.Scheme, error) {
	gv, err := mcsversion.Detect(dc)
	if err != nil {
		return gv, nil, err
	}
	scheme, err := mcsversion.NewScheme(gv)
	return gv, scheme, err
}

// resolveID returns opts.ClusterID, or else the cluster id and clusterset that the member's ClusterProperties
// name.
func resolveID(ctx context.Context, opts Options) (id, clusterSet string, err error) {
	if opts.ClusterID != "" {
		return opts.ClusterID, "", nil
	}
	dyn, err := dynamic.NewForConfig(opts.Local)
	if err != nil {
		return "", "", fmt.Errorf("controller: local cluster: %w", err)
	}
	if id, clusterSet, err = clusterid.Resolve(ctx, dyn); err != nil {
		return "", "", fmt.Errorf("controller: %w", err)
	}
	return id, clusterSet, nil
}

// errBrokerReset ends a run of the manager when the broker lost this member's Lease.
var errBrokerReset = errors.New("the broker lost this member's Lease")

// decisions are what this process decides about the members, kept from one run of the manager to the next: a run
// ends at every join or leave anywhere in the clusterset, and its caches with it, but whether a member is alive,
// whether its endpoints answer from here, and whether another cluster claims this member's id are about the
// members, not about a view of them. Started afresh, a run would import a member cut off from here ready again
// until two probe rounds fail, revive for a grace a dead member whose clock runs ahead, and hold back every
// deletion until its second renewal. Trust in the broker's view stays per run: it is about the view. The leader
// writes those the Leases cannot tell again on its own Lease, for the next process to lead (persist.go).
type decisions struct {
	id    string
	grace time.Duration
	log   logr.Logger

	liveness  *broker.Liveness
	reach     *reach.Tracker // nil without the data-plane probe
	duplicate *duplicateID
	// renewer is this process's holder of the Lease: its last write tells the next run's first renewal whether
	// another holder renewed since, as within a run.
	renewer *broker.Renewer
	// addresses are the controller replicas' probe addresses the renewer writes, nil without the probe.
	addresses *probeAddresses
	// dnsPath is the verdict on this member's own DNS path of Ready imports, nil without --dns-address: a run's
	// start is no change of it.
	dnsPath *dnsPath
	// published is whether the process has published the exports it started with, which the renewer writes.
	published *startPublish
}

func newDecisions(id string, opts Options) *decisions {
	d := &decisions{
		id:        id,
		grace:     opts.LeaseGrace,
		liveness:  broker.NewLiveness(id, opts.LeaseGrace),
		duplicate: &duplicateID{id: id, grace: opts.LeaseGrace},
		renewer:   &broker.Renewer{ClusterID: id, Holder: holderIdentity(id)},
		published: &startPublish{},
	}
	d.renewer.Decisions, d.renewer.Resume, d.renewer.Published = d.remember, d.resume, d.published.done
	if opts.DataPlaneProbe {
		d.reach = reach.New(probeDown, probeUp)
		d.addresses = &probeAddresses{}
		d.renewer.ProbeAddresses = d.addresses.get
		d.renewer.Unreachable = func() []string {
			var ids []string
			for member, state := range d.reach.States() {
				if state == reach.Unreachable {
					ids = append(ids, member)
				}
			}
			slices.Sort(ids)
			return ids
		}
	}
	if opts.BrokerCredentials != nil {
		d.renewer.Credential = opts.BrokerCredentials.ID
	}
	if opts.DNSAddress != "" {
		d.dnsPath = newDNSPath(id)
	}
	return d
}

// newRun readies the decisions for a run with a new broker cache: liveness decisions wait for its first look at
// the Leases, which may show members the last cache did not.
func (d *decisions) newRun() { d.liveness.Reobserve() }

// runManager runs the controller's manager on the broker scope until ctx ends, the scope changes or the broker is
// found reset.
func runManager(ctx context.Context, opts Options, id string, a apis, scope brokerScope, scopes *scopeReader, kept *decisions,
	log logr.Logger) error {
	kept.newRun()
	mgr, b, err := newClusters(ctx, opts, a, id, scope, log)
	if err != nil {
		return err
	}
	r := &reconciler{
		id:           id,
		siAPI:        a.localGV.String(),
		local:        mgr.GetClient(),
		broker:       b.client,
		mirror:       b.legacy.GetClient(),
		denied:       opts.DeniedExportNamespaces,
		deniedImport: opts.DeniedImportNamespaces,
		clusterLocal: opts.ClusterLocalServices,
		localHost:    opts.Local.Host,
		brokerHost:   opts.Broker.Host,
		trust:        broker.NewTrust(opts.LeaseGrace),
		brokerDirect: b.direct,
		duplicate:    kept.duplicate,
		published:    kept.published,
		withdrawals:  newHold(withdrawalHold),
		readyWaits:   newHold(readyHold),
		races:        workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay),
		liveness:     kept.liveness,
		reach:        kept.reach,
		regions:      newMemberRegions(scope.regions),
		staleAfter:   opts.LeaseGrace + opts.StaleLimit,
		limits:       newLimits(opts),
		events:       mgr.GetEventRecorder(names.ManagedBy),
		log:          log,
	}
	if opts.DNSAddress != "" {
		r.dns = newDNSProbe(opts.DNSAddress)
		// A runnable of the manager's, so that only the leader asks, as only it writes the imports' Ready.
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			return kept.dnsPath.run(ctx, r.dns, r.readyQuestion, r.events, log)
		})); err != nil {
			return err
		}
	}
	enqueue := newTriggers(r.local, r.broker)
	if err := mgr.Add(&scopeWatch{reader: scopes, scope: scope, view: b.view, regions: r.regions, enqueue: enqueue, elected: mgr.Elected()}); err != nil {
		return err
	}
	if r.reach != nil {
		probe := newDataPlaneProbe(id, b.view, r.reach, r.liveness, r.staleAfter, enqueue, log)
		probe.replicas = replicaOf(mgr.GetClient(), opts.LeaderElectionNamespace, opts.HealthProbeBindAddress, os.Getenv)
		if probe.replicas != nil {
			probe.replicas.dns, probe.replicas.dnsPort, _ = dnsService(opts.DNSAddress)
		}
		probe.addresses, probe.elected = kept.addresses, mgr.Elected()
		if probe.replicas == nil {
			log.Info("no --leader-election-namespace: this replica cannot compare its probes with another node's, and " +
				"acts on no member's unreachable data plane")
		}
		// A run in a pod is one of the Deployment's replicas: the leader acts on a member's loss only once a
		// replica on another node agrees.
		kept.reach.RequireAgreement()
		if err := mgr.Add(probe); err != nil {
			return err
		}
	}
	if err := r.setup(mgr, b, enqueue, opts.Workers); err != nil {
		return err
	}
	if opts.BrokerCredentials != nil {
		if err := mgr.AddReadyzCheck("broker-credentials", opts.BrokerCredentials.Check); err != nil {
			return err
		}
		// A runnable of the manager's, so that only the leader renews: every replica reads the renewed token.
		if err := mgr.Add(manager.RunnableFunc(opts.BrokerCredentials.Renew)); err != nil {
			return err
		}
	}
	hb := &heartbeat{id: id, grace: opts.LeaseGrace, client: b.direct, cache: b.view, mirror: b.legacyDirect, mirrorRenewer: kept.renewer.Mirror(),
		liveness: r.liveness, trust: r.trust, local: r.local, enqueue: enqueue, events: &memberEvents{rec: r.events, liveness: r.liveness}, log: log,
		renewer: kept.renewer, duplicate: r.duplicate, published: kept.published}
	if err := mgr.Add(manager.RunnableFunc(hb.run)); err != nil {
		return err
	}
	defer states.add(&runState{id: id, liveness: r.liveness, reach: r.reach, local: r.local})()
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("broker", hb.ready); err != nil {
		return err
	}
	log.Info("starting", "leaseGrace", opts.LeaseGrace, "deniedExportNamespaces", opts.DeniedExportNamespaces,
		"deniedImportNamespaces", opts.DeniedImportNamespaces, "brokerNamespace", names.BrokerNamespace(id), "brokerScope", scope.String(),
		"localAPI", a.localGV, "brokerAPI", a.brokerGV, "clusterLocalServices", opts.ClusterLocalServices, "dnsAddress", opts.DNSAddress,
		"maxEndpointsPerService", opts.MaxEndpointsPerService, "maxEndpointsPerMember", opts.MaxEndpointsPerMember,
		"maxSlicesPerNamespace", opts.MaxSlicesPerNamespace)
	return mgr.Start(ctx)
}

// brokerClients are the broker's clients and caches of one run: the records cluster, whose cache reads the records
// of every namespace, and the legacy one, whose cache reads the previous layout in this member's namespace and
// the previous release's members'; the view that reads each namespace in its layout; client, which reads through
// the view and writes records; and uncached clients of either layout.
type brokerClients struct {
	records, legacy      cluster.Cluster
	view                 *brokerView
	client               client.Client
	direct, legacyDirect client.Client
}

// newClusters builds the clients of one run of the manager, none started: the member's manager, and the broker's
// clusters, whose caches the manager starts and which see only the objects of broker.Selector. The caches carry
// the indexes that the reconciler looks objects up by. The broker's come first: a run whose start fails for want
// of the broker is retried, and the manager binds the health probe address as it is made, which the wait for the
// broker serves meanwhile.
func newClusters(ctx context.Context, opts Options, a apis, id string, scope brokerScope, log logr.Logger) (manager.Manager, *brokerClients, error) {
	own := names.BrokerNamespace(id)
	b := &brokerClients{}
	var err error
	for _, c := range []struct {
		cluster *cluster.Cluster
		direct  *client.Client
		scheme  *runtime.Scheme
		cache   cache.Options
		name    string
	}{
		{&b.records, &b.direct, a.records, RecordCacheOptions(), "broker"},
		{&b.legacy, &b.legacyDirect, a.broker, scope.legacyCacheOptions(own), "broker-previous-layout"},
	} {
		*c.cluster, err = cluster.New(opts.Broker, func(o *cluster.Options) {
			o.Scheme, o.Logger, o.Cache = c.scheme, log.WithName(c.name), c.cache
		})
		if err != nil {
			return nil, nil, fmt.Errorf("controller: broker: %w", err)
		}
		if *c.direct, err = client.New(opts.Broker, client.Options{Scheme: c.scheme}); err != nil {
			return nil, nil, fmt.Errorf("controller: broker: %w", err)
		}
		for _, obj := range []client.Object{&mcsv1beta1.ServiceImport{}, &discoveryv1.EndpointSlice{}} {
			// Indexing looks the kind up on the broker, which may be away, or back from a reset without the CRDs.
			if err := (*c.cluster).GetFieldIndexer().IndexField(ctx, obj, serviceIndex, indexByService); err != nil {
				return nil, nil, fmt.Errorf("controller: indexing broker objects: %w", unavailable(err))
			}
		}
	}
	b.view = newBrokerView(b.records.GetCache(), b.legacy.GetCache(), own, scope)
	if b.client, err = client.New(opts.Broker, client.Options{Scheme: a.records, Cache: &client.CacheOptions{Reader: b.view}}); err != nil {
		return nil, nil, fmt.Errorf("controller: broker: %w", err)
	}
	mgr, err := ctrl.NewManager(opts.Local, manager.Options{
		Scheme:                  a.local,
		Logger:                  log,
		Metrics:                 metricsserver.Options{BindAddress: orZero(opts.MetricsBindAddress)},
		HealthProbeBindAddress:  orZero(opts.HealthProbeBindAddress),
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		// A run that ends because the broker was reset hands the lead straight to the next run.
		LeaderElectionReleaseOnCancel: true,
		Controller:                    config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                         localCache(opts),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("controller: local manager: %w", err)
	}
	for _, c := range []cluster.Cluster{b.records, b.legacy} {
		if err := mgr.Add(c); err != nil {
			return nil, nil, err
		}
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &discoveryv1.EndpointSlice{}, localSliceIndex, indexLocalSlice); err != nil {
		return nil, nil, fmt.Errorf("controller: indexing local slices: %w", err)
	}
	return mgr, b, nil
}

// localCache limits the member's cache of Leases to the controller replicas' records (replicas), in the
// controller's namespace, which is all the controller reads of them: the Role grants no more.
func localCache(opts Options) cache.Options {
	if !opts.DataPlaneProbe || opts.LeaderElectionNamespace == "" {
		return cache.Options{}
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{&coordinationv1.Lease{}: {
		Namespaces: map[string]cache.Config{opts.LeaderElectionNamespace: {}},
		Label:      labels.SelectorFromSet(labels.Set{names.LabelProbeReplica: "true"}),
	}}}
}

func orZero(addr string) string {
	if addr == "" {
		return "0"
	}
	return addr
}

// ControllerName is the name of a member's controller, which labels its controller-runtime and workqueue metrics.
func ControllerName(clusterID string) string { return "mcs-" + clusterID }

// holderIdentity names this process among every process that renews a Lease of the cluster id: the id, the host
// (the pod's name in a Deployment) and a random part, since a restarted process is another holder.
func holderIdentity(id string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%s/%s", id, host, rand.Text()[:8])
}
