// Package controller runs the mcs-controller for one member cluster: it publishes the member's ServiceExports to
// the broker and imports every service the clusterset exports. Run is the whole controller, so that a binary runs
// it once and tests run one per member in a single process.
package controller

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

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
// id is invalid or a cluster cannot be reached at start; ending ctx, even while it starts, is no error.
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
	a, err := detectAPIs(opts.Local, opts.Broker)
	if err != nil {
		return err
	}
	id, clusterSet, err := resolveID(ctx, opts)
	if err != nil {
		return err
	}
	log = log.WithValues("cluster", id, "clusterSet", clusterSet)
	opts.Local, opts.Broker = countWrites(opts.Local, id, "local"), countWrites(opts.Broker, id, "broker")

	direct, err := client.New(opts.Broker, client.Options{Scheme: a.broker})
	if err != nil {
		return fmt.Errorf("controller: broker: %w", err)
	}
	scopes := newScopeReader(direct, id, log)
	reset := false
	for {
		err := runManager(ctx, opts, id, a, scopes, log)
		switch {
		case errors.Is(err, errScopeChanged):
			// Nothing is lost: the imports stay as they are while the next run's caches fill.
		case errors.Is(err, errBrokerReset):
			// The broker lost this member's Lease, with its data: the watches of a broker whose etcd was wiped
			// resume from resource versions it no longer has and may never deliver again, so the caches start
			// afresh. The new run starts untrusting the broker's view, which keeps every import until the members
			// have republished.
			log.Info("the broker lost its data: restarting with fresh caches")
			reset = true
		case reset && err != nil && ctx.Err() == nil:
			// A broker back from a reset may not serve the mcs-api CRDs yet: the run retries until it does.
			log.Error(err, "restarting after the broker lost its data")
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		default:
			return err
		}
	}
}

// apis are the mcs-api versions the member and the broker serve, and the schemes that encode them.
type apis struct {
	localGV, brokerGV schema.GroupVersion
	local, broker     *runtime.Scheme
}

// detectAPIs asks the member and the broker which mcs-api version each serves.
func detectAPIs(local, broker *rest.Config) (apis, error) {
	var a apis
	var err error
	if a.localGV, a.local, err = detectAPI(local); err != nil {
		return a, fmt.Errorf("controller: local cluster: %w", err)
	}
	if a.brokerGV, a.broker, err = detectAPI(broker); err != nil {
		return a, fmt.Errorf("controller: broker: %w", err)
	}
	return a, nil
}

func detectAPI(cfg *rest.Config) (schema.GroupVersion, *runtime.Scheme, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return schema.GroupVersion{}, nil, err
	}
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

// runManager runs the controller's manager until ctx ends or the broker is found reset.
func runManager(ctx context.Context, opts Options, id string, a apis, scopes *scopeReader, log logr.Logger) error {
	scope, err := scopes.read(ctx)
	if err != nil {
		return fmt.Errorf("controller: broker: %w", err)
	}
	mgr, brokerCluster, brokerDirect, err := newClusters(ctx, opts, a, scope, log)
	if err != nil {
		return err
	}
	if err := mgr.Add(&scopeWatch{reader: scopes, scope: scope}); err != nil {
		return err
	}
	r := &reconciler{
		id:           id,
		siAPI:        a.localGV.String(),
		local:        mgr.GetClient(),
		broker:       brokerCluster.GetClient(),
		denied:       opts.DeniedExportNamespaces,
		clusterLocal: opts.ClusterLocalServices,
		localHost:    opts.Local.Host,
		brokerHost:   opts.Broker.Host,
		trust:        broker.NewTrust(opts.LeaseGrace),
		brokerDirect: brokerDirect,
		duplicate:    &duplicateID{id: id, grace: opts.LeaseGrace},
		withdrawals:  newHold(withdrawalHold),
		readyWaits:   newHold(readyHold),
		races:        workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay),
		liveness:     broker.NewLiveness(id, opts.LeaseGrace),
		events:       mgr.GetEventRecorder(names.ManagedBy),
		log:          log,
	}
	if opts.DNSAddress != "" {
		r.dns = newDNSProbe(opts.DNSAddress)
	}
	enqueue := newTriggers(r.local, r.broker)
	if opts.DataPlaneProbe {
		r.reach = reach.New(probeDown, probeUp)
		if err := mgr.Add(newDataPlaneProbe(id, brokerCluster.GetCache(), r.reach, enqueue, log)); err != nil {
			return err
		}
	}
	if err := r.setup(mgr, brokerCluster, enqueue, opts.Workers); err != nil {
		return err
	}
	renewer := &broker.Renewer{ClusterID: id, Holder: holderIdentity(id)}
	if r.reach != nil {
		renewer.Unreachable = func() []string {
			var ids []string
			for member, state := range r.reach.States() {
				if state == reach.Unreachable {
					ids = append(ids, member)
				}
			}
			slices.Sort(ids)
			return ids
		}
	}
	if opts.BrokerCredentials != nil {
		renewer.Credential = opts.BrokerCredentials.ID
		if err := mgr.AddReadyzCheck("broker-credentials", opts.BrokerCredentials.Check); err != nil {
			return err
		}
		// A runnable of the manager's, so that only the leader renews: every replica reads the renewed token.
		if err := mgr.Add(manager.RunnableFunc(opts.BrokerCredentials.Renew)); err != nil {
			return err
		}
	}
	hb := &heartbeat{id: id, grace: opts.LeaseGrace, client: brokerDirect, cache: brokerCluster.GetCache(),
		liveness: r.liveness, trust: r.trust, local: r.local, enqueue: enqueue, events: &memberEvents{rec: r.events, liveness: r.liveness}, log: log,
		renewer: renewer, duplicate: r.duplicate}
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
	log.Info("starting", "leaseGrace", opts.LeaseGrace, "deniedExportNamespaces", opts.DeniedExportNamespaces, "brokerNamespace", names.BrokerNamespace(id), "brokerScope", scope.String(),
		"localAPI", a.localGV, "brokerAPI", a.brokerGV, "clusterLocalServices", opts.ClusterLocalServices, "dnsAddress", opts.DNSAddress)
	return mgr.Start(ctx)
}

// newClusters builds the clients of one run of the manager, none started: the member's manager, the broker's
// cluster, whose cache the manager starts and which sees only the objects of broker.Selector, and an uncached
// broker client. Both caches carry the indexes that the reconciler looks objects up by.
func newClusters(ctx context.Context, opts Options, a apis, scope brokerScope, log logr.Logger) (manager.Manager, cluster.Cluster, client.Client, error) {
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
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("controller: local manager: %w", err)
	}
	brokerCluster, err := cluster.New(opts.Broker, func(o *cluster.Options) {
		o.Scheme = a.broker
		o.Logger = log.WithName("broker")
		o.Cache = scope.cacheOptions()
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("controller: broker: %w", err)
	}
	brokerDirect, err := client.New(opts.Broker, client.Options{Scheme: a.broker})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("controller: broker: %w", err)
	}
	if err := mgr.Add(brokerCluster); err != nil {
		return nil, nil, nil, err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &discoveryv1.EndpointSlice{}, localSliceIndex, indexLocalSlice); err != nil {
		return nil, nil, nil, fmt.Errorf("controller: indexing local slices: %w", err)
	}
	for _, obj := range []client.Object{&mcsv1beta1.ServiceImport{}, &discoveryv1.EndpointSlice{}} {
		if err := brokerCluster.GetFieldIndexer().IndexField(ctx, obj, serviceIndex, indexByService); err != nil {
			return nil, nil, nil, fmt.Errorf("controller: indexing broker objects: %w", err)
		}
	}
	return mgr, brokerCluster, brokerDirect, nil
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
