package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/controller/reach"
	"vksfleet.dev/fleet/mcs/names"
)

// maxRetryDelay caps the backoff of a failing service.
const maxRetryDelay = 30 * time.Second

// reconciler reconciles one service key (namespace/name) at a time, both ways: it publishes the local export of
// the service to the broker and writes the local import of the service from every cluster's export. Keeping both
// in one reconcile gives each ServiceExport's status a single writer.
type reconciler struct {
	// refusals keeps what each service's last gather left out, so that each refusal is reported once.
	refusals refusalLog
	// foreigns keeps the services whose ServiceImport here is another implementation's (besideForeign).
	foreigns notOursLog
	id       string
	siAPI    string        // the local ServiceImport apiVersion, for owner references
	local    client.Client // cached reads
	broker   client.Client // cached reads of the broker (brokerView); writes of this member's records
	// mirror writes this member's export in the previous release's layout, for that release's members, and reads
	// it back from its cache; nil in tests without a broker.
	mirror client.Client
	denied []string // namespaces never exported from
	// deniedImport are the namespaces no other cluster's export is imported into, besides
	// admit.AlwaysDeniedNamespaces (Options.DeniedImportNamespaces).
	deniedImport []string
	// clusterLocal reflects imports into cluster.local (Options.ClusterLocalServices).
	clusterLocal bool
	// localHost and brokerHost name the API servers in errors.
	localHost, brokerHost string
	// trust says whether the broker's view may be acted on with deletions, and withdrawals holds them until the
	// view has shown them long enough.
	trust       *broker.Trust
	withdrawals *hold
	// brokerDirect reads the broker uncached: a withdrawal is applied only once the server itself still holds this
	// member's sentinel record.
	brokerDirect client.Reader
	// duplicate says whether another cluster claims this member's id: nothing is deleted from the broker then.
	duplicate *duplicateID
	// published learns which exports are on the broker since the process started (nil in tests).
	published *startPublish
	// dns, when set, is this member's DNS server, which must answer an import before it is Ready; readyWaits holds
	// back a Pending status while the slices and the server catch up.
	dns        *dnsProbe
	readyWaits *hold
	// races backs off the retries of races with the caches, which bypass the controller's failure backoff.
	races    workqueue.TypedRateLimiter[reconcile.Request]
	liveness *broker.Liveness
	// reach is what the data-plane probe found of each other member, nil when the probe is off (Options.DataPlaneProbe).
	reach  *reach.Tracker
	events events.EventRecorder
	log    logr.Logger
	// staleAfter is how long after its last renewal a lost member's endpoints that still answer are only fallen
	// back on (Options.LeaseGrace + Options.StaleLimit; 0, in tests, never); failOpens keeps which exporters each
	// service uses only because no other has a ready endpoint, so that each start is reported once.
	staleAfter time.Duration
	failOpens  failOpenLog
	// topologySeen is the topology the last node or region event found, so that only a change enqueues every service.
	topologySeen topologySeen
	// regions are the other members' regions, as the member directory records them (scope.go).
	regions *memberRegions
	// limits bound what one member brings into this member's imports and what one namespace publishes of its exports.
	limits *limits
}

// Reconcile brings one service's export and import up to date. Races with the caches are expected: a create of
// an object the cache has not shown yet (AlreadyExists), an update from a stale copy (Conflict), a create in a
// namespace whose deletion the cache has not shown yet. They are retried
// with their own backoff and logged only at V(1), so that "Reconciler error" in the log always means a failure
// an operator should look at; every other error is returned, naming the API server it came from.
func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	requeue, err := r.reconcile(ctx, req.NamespacedName)
	if err != nil && ctx.Err() != nil {
		return reconcile.Result{}, nil // stopping: the next start reconciles everything anyway
	}
	failures(err, "", func(target string, err error) {
		reconcileErrors.WithLabelValues(r.id, target, cause(err)).Inc()
	})
	if err != nil && onlyRaces(err) {
		r.log.V(1).Info("retrying after a race with the cache", "service", req.NamespacedName, "error", err.Error())
		return reconcile.Result{RequeueAfter: r.races.When(req)}, nil
	}
	r.races.Forget(req)
	if err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// onlyRaces says whether every failure joined in err is an AlreadyExists, a Conflict, or a create refused in a
// namespace being deleted that the cache still shows live.
func onlyRaces(err error) bool {
	only := true
	failures(err, "", func(_ string, err error) {
		only = only && (apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) ||
			apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause))
	})
	return only
}

// failures calls fn with every failure joined in err (errors.Join, under any wrapping) and the API server it came
// from, "local" or "broker" ("" when err does not say): a reconcile joins the failures of its steps, and each counts.
func failures(err error, target string, fn func(target string, err error)) {
	switch e := err.(type) {
	case nil:
	case *apiError:
		failures(e.err, e.target, fn)
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			failures(inner, target, fn)
		}
	default:
		// A failure wrapped with context is one failure, unless what it wraps joins several.
		for inner := errors.Unwrap(err); inner != nil; inner = errors.Unwrap(inner) {
			if _, joined := inner.(interface{ Unwrap() []error }); joined {
				failures(inner, target, fn)
				return
			}
			if _, named := inner.(*apiError); named {
				failures(inner, target, fn)
				return
			}
		}
		fn(target, err)
	}
}

// cause names a failure in mcs_controller_reconcile_errors_total: its Kubernetes status reason, or what kept the
// request from an answer.
func cause(err error) string {
	if reason := apierrors.ReasonForError(err); reason != metav1.StatusReasonUnknown {
		return string(reason)
	}
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()):
		return "Timeout"
	case errors.As(err, &netErr):
		return "Unreachable"
	}
	return "Other"
}

// apiError is a failure of a request to one of the controller's two API servers.
type apiError struct {
	target, host string // target is "local" or "broker"
	err          error
}

func (e *apiError) Error() string { return fmt.Sprintf("API server %s: %v", e.host, e.err) }

func (e *apiError) Unwrap() error { return e.err }

// atLocal and atBroker name the API server an error came from.
func (r *reconciler) atLocal(err error) error { return at("local", r.localHost, err) }

func (r *reconciler) atBroker(err error) error { return at("broker", r.brokerHost, err) }

func at(target, host string, err error) error {
	if err == nil {
		return nil
	}
	return &apiError{target: target, host: host, err: err}
}

// reconcile publishes the service's export, imports it from every cluster's, and writes the export's status. It
// returns when to look again though nothing changes, if a hold is waiting.
func (r *reconciler) reconcile(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	select {
	case <-r.liveness.Observed():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if brokerNS, err := r.isBrokerNamespace(ctx, key.Namespace); err != nil || brokerNS {
		// This member is also the broker: what lies here are broker objects, not exports or imports.
		return 0, r.atLocal(err)
	}
	top, err := r.topology(ctx)
	if err != nil {
		return 0, r.atLocal(err)
	}
	se, err := getOrNil(ctx, r.local, key, &mcsv1beta1.ServiceExport{})
	if err != nil {
		return 0, r.atLocal(err)
	}
	own, ownSlices, valid, err := r.export(ctx, key, se, top)
	if err != nil {
		return 0, r.atLocal(err)
	}
	publishRetry, err := r.publish(ctx, key, own, ownSlices)
	publishErr := r.atBroker(err)
	if err == nil && r.published != nil {
		r.published.published(key)
	}

	// Import: every cluster's export, with this cluster's taken from the local truth rather than the broker.
	exports, sources, err := r.gather(ctx, key, own, ownSlices)
	if err != nil {
		return 0, errors.Join(publishErr, r.atBroker(err))
	}
	merged := merge.Merge(exports)
	requeue, importErr := r.importService(ctx, key, exports, merged, sources, top)

	var statusErr error
	// A publish that lost a race is retried at once: reporting it as Failed would only flap the condition.
	if se != nil && se.DeletionTimestamp.IsZero() && (publishErr == nil || !onlyRaces(publishErr)) {
		statusErr = r.atLocal(r.exportStatus(ctx, se, valid, own != nil, publishErr, merged))
	}
	if publishRetry > 0 && (requeue == 0 || publishRetry < requeue) {
		requeue = publishRetry
	}
	return requeue, errors.Join(publishErr, r.atLocal(importErr), statusErr)
}

// isBrokerNamespace says whether a namespace of this member holds broker objects: one with a broker namespace's
// name that a controller created as such (its managed-by label), so that a user's namespace that merely starts
// the same way exports and imports as any other.
func (r *reconciler) isBrokerNamespace(ctx context.Context, namespace string) (bool, error) {
	if !names.IsBrokerNamespace(namespace) {
		return false, nil
	}
	ns, err := getOrNil(ctx, r.local, types.NamespacedName{Name: namespace}, &corev1.Namespace{})
	if err != nil || ns == nil {
		return false, err
	}
	return ns.Labels[names.LabelManagedBy] == names.ManagedBy, nil
}

// getOrNil reads an object, returning nil when it does not exist.
func getOrNil[T client.Object](ctx context.Context, c client.Client, key types.NamespacedName, obj T) (T, error) {
	var zero T
	if err := c.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return zero, nil
		}
		return zero, err
	}
	return obj, nil
}
