package controller

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
)

// heartbeat renews this member's broker Lease and re-evaluates the other members' Leases, enqueueing the
// services of every member whose liveness changed. It runs only on the elected leader.
type heartbeat struct {
	id     string
	grace  time.Duration
	client client.Client // direct: the Lease is read fresh before each renewal
	cache  syncedReader  // the broker's view, holding every member's Lease
	// mirror renews, with mirrorRenewer, this member's Lease in the previous release's layout, which that
	// release's members judge it by; nil in tests.
	mirror        client.Client
	mirrorRenewer *broker.Renewer
	mirrorFailed  bool // the last mirror renewal failed: said once
	// liveness and trust are what the heartbeat decides for the reconciler; enqueue tells it what to look at again.
	liveness *broker.Liveness
	trust    *broker.Trust
	local    client.Reader // the member's cache: whether it holds any import
	// renewer renews the Lease as this process; duplicate learns from it whether another cluster claims the id.
	renewer   *broker.Renewer
	duplicate *duplicateID
	enqueue   *triggers
	published *startPublish // nil in tests
	events    *memberEvents
	log       logr.Logger

	mu        sync.Mutex
	namespace bool  // the broker namespace is known to exist
	lastErr   error // the last renewal's error
}

// run renews every grace/3 and checks Leases and the sentinel record every grace/10 (bounded to 100 ms..1 s): the
// checks read the cache, and bound how late past the grace a withdrawal happens. Each loop renews before it looks
// at the Leases: the process's first renewal resumes the last leader's decisions (persist.go), which the first
// look, and every reconcile after it, must start from.
func (h *heartbeat) run(ctx context.Context) error {
	if !h.cache.WaitForCacheSync(ctx) {
		return ctx.Err()
	}
	// The gauge changes only when a conflict starts or ends: set, it has a series to alert and plot from the start.
	clusterIDConflict.WithLabelValues(h.id).Set(gauge(h.duplicate.Active()))
	renewEvery := h.grace / 3
	tick := min(time.Second, max(100*time.Millisecond, h.grace/10))
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	var nextRenew time.Time
	// renewed: this run has held the Lease. leaseFound: the first renewal found the Lease, which is evidence that
	// the broker kept this member's data. loss: whether the broker lost the Lease, and when the run must end.
	renewed, leaseStood, leaseFound, first := false, false, false, true
	var loss leaseLoss
	for {
		now := time.Now()
		if !now.Before(nextRenew) {
			// A broker that swallows requests must not stall the loop: a renewal that cannot finish in time
			// counts as failed, which freezes liveness decisions like any other failure.
			rctx, cancel := context.WithTimeout(ctx, max(time.Second, renewEvery))
			created, err := h.renew(rctx, now)
			cancel()
			if loss.observe(created, err) {
				return errBrokerReset
			}
			if !renewed {
				leaseFound = err == nil && !created
			}
			renewed = renewed || err == nil
			// A Lease this run created stands from now on; that it was missing is the sentinel's to tell the
			// trust, which is created with it and shows only a tick later.
			leaseStood = err == nil
			recovered := err == nil && !h.liveness.Healthy()
			h.liveness.SetHealthy(err == nil)
			brokerReachable.WithLabelValues(h.id).Set(gauge(err == nil))
			nextRenew = now.Add(renewEvery)
			if err != nil {
				h.log.Error(err, "renewing the broker lease")
				nextRenew = now.Add(min(renewEvery, time.Second))
			}
			if recovered {
				// Publishing failed while the broker was away; retry every export now rather than at the
				// end of each one's backoff.
				h.log.Info("broker reachable again")
				if err := h.enqueue.exports(ctx); err != nil {
					return err
				}
			}
		}
		// The sentinel is checked every tick, not only at renewals: a deleted CRD takes it with the records, and
		// withdrawals wait for trust only a renewal interval.
		sentinel, err := broker.EnsureSentinel(ctx, h.cache, h.client, h.id)
		if err != nil {
			h.log.V(1).Info("the broker's sentinel record cannot be created", "error", err.Error())
		}
		if first {
			first = false
			held, err := h.holdsImports(ctx)
			if err != nil {
				return err
			}
			if err := h.startPublish(ctx); err != nil {
				return err
			}
			if (leaseFound && sentinel) || !held {
				h.trust.Vouch()
			}
		}
		wasTrusted := h.trust.Trusted()
		regained := h.trust.Observe(leaseStood && sentinel, now)
		brokerViewTrusted.WithLabelValues(h.id).Set(gauge(h.trust.Trusted()))
		if wasTrusted && !h.trust.Trusted() {
			h.log.Info("broker view untrusted: withdrawals are held back until this member's Lease and sentinel record "+
				"have stood again for the settle time", "leaseStood", leaseStood, "sentinel", sentinel)
		}
		if regained {
			// Whatever the untrusted view would have deleted was held back: look at everything again.
			h.log.Info("broker view trusted")
			if err := h.enqueue.all(ctx); err != nil {
				return err
			}
		}
		leases := &coordinationv1.LeaseList{}
		if err := h.cache.List(ctx, leases); err != nil {
			return err
		}
		for _, id := range h.liveness.Observe(leases.Items, now) {
			alive := h.liveness.Alive(id)
			h.log.Info("member liveness changed", "member", id, "alive", alive)
			h.events.changed(id, alive)
			if err := h.enqueue.cluster(ctx, id); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// syncedReader is a reader of caches that can be waited for.
type syncedReader interface {
	client.Reader
	WaitForCacheSync(ctx context.Context) bool
}

// leaseLoss follows the renewals of one run to tell when the broker lost this member's Lease, with its data, and
// when the run must end for it. A run that held the Lease and then had to create it again found it lost, even if
// that creation failed; it ends only once a renewal has written the Lease again, since the next run cannot renew
// until the broker serves the mcs-api CRDs again, and the other members meanwhile read this member's liveness
// from the Lease.
type leaseLoss struct {
	held, lost bool
}

// observe takes the outcome of a renewal (whether it had to create the Lease, and its error) and says whether
// the run must end now.
func (l *leaseLoss) observe(created bool, err error) (reset bool) {
	if created && l.held {
		l.lost = true
	}
	l.held = l.held || err == nil
	return l.lost && err == nil
}

// holdsImports says whether this member holds any ServiceImport, which a view missing data could withdraw.
func (h *heartbeat) holdsImports(ctx context.Context) (bool, error) {
	list := &mcsv1beta1.ServiceImportList{}
	if err := h.local.List(ctx, list, client.Limit(1)); err != nil {
		return false, err
	}
	return len(list.Items) > 0, nil
}

// startPublish gives published the exports the member has at the process's first look.
func (h *heartbeat) startPublish(ctx context.Context) error {
	if h.published == nil {
		return nil
	}
	exported := &mcsv1beta1.ServiceExportList{}
	if err := h.local.List(ctx, exported); err != nil {
		return err
	}
	h.published.start(keysOf(exported.Items))
	return nil
}

// renew renews this member's Lease, and says whether it had to create it: at a first start, or because the
// broker lost it. It records in h.duplicate whether another process had renewed it since.
func (h *heartbeat) renew(ctx context.Context, now time.Time) (created bool, err error) {
	h.mu.Lock()
	ok := h.namespace
	h.mu.Unlock()
	if !ok {
		err = broker.EnsureNamespace(ctx, h.client, h.id)
	}
	if err == nil {
		var foreign bool
		created, foreign, err = h.renewer.Renew(ctx, h.client, h.grace, now)
		if err == nil && h.duplicate.observe(created, foreign, now) {
			active := h.duplicate.Active()
			clusterIDConflict.WithLabelValues(h.id).Set(gauge(active))
			if active {
				h.log.Error(errors.New(h.duplicate.message()), "cluster id conflict")
			} else {
				h.log.Info("cluster id conflict over: no other controller renewed this member's Lease for a grace")
			}
			if err := h.enqueue.exports(ctx); err != nil {
				return created, err
			}
		}
	}
	if err == nil && h.mirror != nil {
		h.renewMirror(ctx, now)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// After a failure the namespace is checked again: the broker may have lost it with everything else.
	h.namespace = err == nil
	h.lastErr = err
	return created, err
}

// renewMirror renews this member's Lease in the previous layout. A failure fails nothing of this release: only a
// previous release's member would see this member's Lease lapse, so it is said, once until a renewal succeeds.
func (h *heartbeat) renewMirror(ctx context.Context, now time.Time) {
	_, _, err := h.mirrorRenewer.Renew(ctx, h.mirror, h.grace, now)
	if err != nil && !h.mirrorFailed {
		h.log.Error(err, "renewing this member's Lease in the previous release's layout: members of that release may take this member for lost")
	}
	if err == nil && h.mirrorFailed {
		h.log.Info("renewing this member's Lease in the previous release's layout again")
	}
	h.mirrorFailed = err != nil
}

// ready fails while the broker cannot be reached.
func (h *heartbeat) ready(*http.Request) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastErr != nil {
		return errors.Join(errors.New("broker unreachable"), h.lastErr)
	}
	return nil
}

func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
