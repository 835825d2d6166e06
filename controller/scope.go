package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/names"
)

// brokerScope is what of the broker this member reads: every namespace, for an identity that may (the broker's
// administrator, or a member bound to mcs-broker-reader cluster-wide, as members were before the directory), or
// else its own broker namespace and those of the members the directory lists that it may read. It holds the
// members' regions as the directory records them too, which are no part of the scope proper: a region that
// changes changes no cache, and scopeWatch passes it on.
type brokerScope struct {
	all        bool
	namespaces []string // sorted; empty when all
	// regions are the listed members' regions, those with one; nil when all: an identity that reads every
	// namespace needs no directory (members set up without join, as the local test fleets without nodes), and
	// an export record's own region counts.
	regions map[string]string
}

func (s brokerScope) equal(o brokerScope) bool {
	return s.all == o.all && slices.Equal(s.namespaces, o.namespaces)
}

func (s brokerScope) String() string {
	if s.all {
		return "every namespace"
	}
	return strings.Join(s.namespaces, ",")
}

// cacheOptions confine the broker cache to the scope, and to the objects members write there, without their
// managedFields: the controller never reads them, and they are a good part of every object it holds. EndpointSlices,
// most of what it holds and what a hostile member would write most of, keep only what the import reads
// (admit.TrimSlice).
func (s brokerScope) cacheOptions() cache.Options {
	o := cache.Options{DefaultLabelSelector: broker.Selector, DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{&discoveryv1.EndpointSlice{}: {Transform: trimSlice}}}
	if !s.all {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range s.namespaces {
			o.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return o
}

// scopeReads are what the broker cache lists and watches in each namespace of the scope: mcs-broker-reader's
// rules.
var scopeReads = []authorizationv1.ResourceAttributes{
	{Group: "multicluster.x-k8s.io", Resource: "serviceimports"},
	{Group: "discovery.k8s.io", Resource: "endpointslices"},
	{Group: "coordination.k8s.io", Resource: "leases"},
}

// scopeReader works out the broker scope from the directory and access reviews of the broker's own. A namespace
// once found readable is not reviewed again: the poll costs one directory list and the reviews of the
// cluster-wide reads.
type scopeReader struct {
	client client.Client // uncached
	own    string
	log    logr.Logger

	readable map[string]bool
	logged   map[string]bool // what was said about refused or unreadable entries, said once each
}

func newScopeReader(c client.Client, clusterID string, log logr.Logger) *scopeReader {
	return &scopeReader{client: c, own: names.BrokerNamespace(clusterID), log: log, readable: map[string]bool{}, logged: map[string]bool{}}
}

// read returns the scope this member's broker identity has now.
func (r *scopeReader) read(ctx context.Context) (brokerScope, error) {
	all, err := r.allowed(ctx, "")
	if err != nil {
		return brokerScope{}, err
	}
	if all {
		r.once("regions from records", "this member reads every broker namespace, without the member directory: other members' "+
			"endpoints are ranked by the regions their own records claim")
		return brokerScope{all: true}, nil
	}
	scope := brokerScope{namespaces: []string{r.own}, regions: map[string]string{}}
	entries := &corev1.ConfigMapList{}
	err = r.client.List(ctx, entries, client.InNamespace(broker.DirectoryNamespace), client.MatchingLabelsSelector{Selector: broker.DirectorySelector})
	if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
		r.once("no directory", "this member may not read the member directory: it reads its own broker namespace only; `kubectl mcs join` again grants it",
			"namespace", broker.DirectoryNamespace, "error", err.Error())
		return scope, nil
	}
	if err != nil {
		return scope, err
	}
	members, refused := broker.ReadDirectory(entries.Items)
	for _, why := range refused {
		r.once(why, "leaving out of the member directory what is invalid", "reason", why)
	}
	scope.regions = regionsOf(members)
	for _, m := range members {
		if m.Namespace == r.own {
			continue
		}
		if !r.readable[m.Namespace] {
			ok, err := r.allowed(ctx, m.Namespace)
			if err != nil {
				return scope, err
			}
			if !ok {
				r.once("unreadable "+m.Namespace, "a member the directory lists is not readable by this member: its records are not imported here until `kubectl mcs join` runs again for either member",
					"member", m.ClusterID, "namespace", m.Namespace)
				continue
			}
			r.readable[m.Namespace] = true
		}
		scope.namespaces = append(scope.namespaces, m.Namespace)
	}
	slices.Sort(scope.namespaces)
	return scope, nil
}

// regionsOf maps each listed member that has a region to it.
func regionsOf(members []broker.Listed) map[string]string {
	regions := map[string]string{}
	for _, m := range members {
		if m.Region != "" {
			regions[m.ClusterID] = m.Region
		}
	}
	return regions
}

// allowed says whether this identity may watch every kind of scopeReads in namespace ns ("": every namespace).
// Watch stands for the reads a cache makes: every role that grants it grants list too.
func (r *scopeReader) allowed(ctx context.Context, ns string) (bool, error) {
	for _, res := range scopeReads {
		attrs := res
		attrs.Namespace, attrs.Verb = ns, "watch"
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}
		if err := r.client.Create(ctx, review); err != nil {
			return false, fmt.Errorf("reviewing this member's broker access: %w", err)
		}
		if !review.Status.Allowed {
			return false, nil
		}
	}
	return true, nil
}

func (r *scopeReader) once(key, msg string, kv ...any) {
	if !r.logged[key] {
		r.logged[key] = true
		r.log.Info(msg, kv...)
	}
}

// errScopeChanged ends a run of the manager when members joined or left: the broker cache is confined to the
// namespaces of one scope, so the next run starts one for the new scope.
var errScopeChanged = errors.New("the members this member may read changed")

// scopePoll is how often the directory is read: a member that joined is imported from within about this long,
// and a member's region that join recorded anew ranks its endpoints from within about this long.
const scopePoll = 5 * time.Second

// memberRegions are the other members' regions that gather ranks their exports by: those the member directory
// records, which the joiner writes and no member can. Without a directory (brokerScope.regions nil) an export
// record's own region is taken, which trusts every member to say where it is.
type memberRegions struct {
	regions atomic.Pointer[map[string]string]
}

func newMemberRegions(regions map[string]string) *memberRegions {
	m := &memberRegions{}
	m.regions.Store(&regions)
	return m
}

// of returns the region of the exporting member cluster, whose record claims claimed: the directory's, "" when
// it records none, or the claim without a directory. A nil memberRegions has no directory.
func (m *memberRegions) of(cluster, claimed string) string {
	if m == nil {
		return claimed
	}
	regions := *m.regions.Load()
	if regions == nil {
		return claimed
	}
	return regions[cluster]
}

// set stores the regions the directory records now, and returns the members whose region changed, sorted.
func (m *memberRegions) set(regions map[string]string) []string {
	old := *m.regions.Swap(&regions)
	var changed []string
	for c, r := range regions {
		if old[c] != r {
			changed = append(changed, c)
		}
	}
	for c := range old {
		if _, ok := regions[c]; !ok {
			changed = append(changed, c)
		}
	}
	slices.Sort(changed)
	return changed
}

// scopeWatch ends the run once the scope differs from the one its broker cache was built for. It runs on every
// replica, leader or not, since each holds a broker cache. A region that changed is no new scope: it is passed
// to regions, and the leader reconciles the services its member exports.
type scopeWatch struct {
	reader  *scopeReader
	scope   brokerScope
	regions *memberRegions
	enqueue *triggers
	elected <-chan struct{}
}

func (w *scopeWatch) Start(ctx context.Context) error {
	t := time.NewTicker(scopePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		now, err := w.reader.read(ctx)
		if err != nil {
			// The broker is unreachable or refuses: the heartbeat reports that; the scope stays as it is.
			continue
		}
		if !now.equal(w.scope) {
			w.reader.log.Info("broker scope changed: restarting with a cache for the new one", "was", w.scope.String(), "now", now.String())
			return errScopeChanged
		}
		changed := w.regions.set(now.regions)
		select {
		case <-w.elected:
		default:
			continue // a replica that does not lead reconciles nothing; once elected, its controller reconciles every service
		}
		for _, c := range changed {
			w.reader.log.Info("a member's region in the member directory changed", "member", c, "region", now.regions[c])
			if err := w.enqueue.cluster(ctx, c); err != nil && ctx.Err() == nil {
				w.reader.log.Error(err, "listing a member's exports after its region changed", "member", c)
			}
		}
	}
}

// NeedLeaderElection is false: every replica's broker cache follows the scope.
func (w *scopeWatch) NeedLeaderElection() bool { return false }

// trimSlice is the broker cache's transform of an EndpointSlice (admit.TrimSlice); objects of other types, which
// it is not given, pass as they are.
func trimSlice(obj any) (any, error) {
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
		admit.TrimSlice(s)
	}
	return obj, nil
}
