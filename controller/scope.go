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

	brokerv1alpha1 "vksfleet.dev/fleet/api/broker/v1alpha1"
	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/names"
)

// brokerScope is what of the broker this member reads, as the member directory lists the members: their broker
// namespaces, their regions, and those of the previous release's members (their entries unmarked) that this
// member may read in that release's layout (layout.go). Without a readable directory (members set up without
// join, as the local test fleets without nodes, whose identity reads everything) every namespace's records count,
// nothing is read in the previous layout, and an export record's own region counts. Only the previous layout's
// namespaces are what a run's caches are built for: a join or a leave of a member of this release changes no cache.
type brokerScope struct {
	members map[string]bool // the listed members' broker namespaces; nil without a directory
	legacy  []string        // sorted: the previous release's members' namespaces read in that layout
	// regions are the listed members' regions, those with one; nil without a directory.
	regions map[string]string
}

// equal says whether two scopes need the same caches.
func (s brokerScope) equal(o brokerScope) bool { return slices.Equal(s.legacy, o.legacy) }

func (s brokerScope) String() string {
	members := "every namespace's records"
	if s.members != nil {
		members = fmt.Sprintf("the records of %d members", len(s.members))
	}
	if len(s.legacy) == 0 {
		return members
	}
	return members + "; the previous release's layout in " + strings.Join(s.legacy, ",")
}

// RecordCacheOptions are those of the records cache a controller reads the broker through (and test/bench/scale's
// simulated members): the objects members write there, without their managedFields, which the controller never
// reads and which are a good part of every object it holds. EndpointSlices, most of what it holds and what a
// hostile member would write most of, keep only what the import reads (admit.TrimSlice). It reads every
// namespace: the records are all there is of their kinds.
func RecordCacheOptions() cache.Options {
	return cache.Options{DefaultLabelSelector: broker.Selector, DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{&discoveryv1.EndpointSlice{}: {Transform: trimSlice}}}
}

// legacyCacheOptions confine the cache of the previous layout as the records cache is, and to this member's own
// namespace, which it writes in that layout too, and the previous release's members'.
func (s brokerScope) legacyCacheOptions(own string) cache.Options {
	o := RecordCacheOptions()
	o.DefaultNamespaces = map[string]cache.Config{own: {}}
	for _, ns := range s.legacy {
		o.DefaultNamespaces[ns] = cache.Config{}
	}
	return o
}

// recordReads are what the records cache lists and watches, cluster-wide: mcs-broker-records-reader's rules.
var recordReads = []authorizationv1.ResourceAttributes{
	{Group: brokerv1alpha1.GroupName, Resource: brokerv1alpha1.ExportRecords},
	{Group: brokerv1alpha1.GroupName, Resource: brokerv1alpha1.EndpointRecords},
	{Group: brokerv1alpha1.GroupName, Resource: brokerv1alpha1.MemberLeases},
}

// legacyReads are what the legacy cache lists and watches in a namespace of the previous layout:
// mcs-broker-reader's rules.
var legacyReads = []authorizationv1.ResourceAttributes{
	{Group: "multicluster.x-k8s.io", Resource: "serviceimports"},
	{Group: "discovery.k8s.io", Resource: "endpointslices"},
	{Group: "coordination.k8s.io", Resource: "leases"},
}

// scopeReader works out the broker scope from the directory, and from access reviews of the broker's own for the
// previous release's members alone: a member of this release costs its poll nothing but its directory entry. A
// namespace once found readable is not reviewed again.
type scopeReader struct {
	client client.Client // uncached
	own    string
	log    logr.Logger

	readable map[string]bool
	logged   map[string]bool // what was said about refused or unreadable entries, said once each
	// everything: this identity reads every namespace of the previous layout too, as an administrator (members set
	// up without join, as the local test fleets without nodes): it uses no directory, as before the directory was.
	everything bool
}

func newScopeReader(c client.Client, clusterID string, log logr.Logger) *scopeReader {
	return &scopeReader{client: c, own: names.BrokerNamespace(clusterID), log: log, readable: map[string]bool{}, logged: map[string]bool{}}
}

// checkRecords fails, saying what to run, unless this member's identity may read the records cluster-wide, which
// the records cache needs to start, and learns whether it reads everything: asked once per run, not at every poll.
func (r *scopeReader) checkRecords(ctx context.Context) error {
	ok, err := r.allowed(ctx, "", recordReads)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("this member may not read the broker's records cluster-wide: run this release's `kubectl mcs join` " +
			"for it, which adds it to the ClusterRoleBinding mcs-broker-records-readers")
	}
	r.everything, err = r.allowed(ctx, "", legacyReads)
	return err
}

// read returns the scope the member directory gives this member now.
func (r *scopeReader) read(ctx context.Context) (brokerScope, error) {
	if r.everything {
		r.once("regions from records", "this member reads every broker namespace, without the member directory: other members' "+
			"endpoints are ranked by the regions their own records claim")
		return brokerScope{}, nil
	}
	entries := &corev1.ConfigMapList{}
	err := r.client.List(ctx, entries, client.InNamespace(broker.DirectoryNamespace), client.MatchingLabelsSelector{Selector: broker.DirectorySelector})
	if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
		r.once("no directory", "this member may not read the member directory: it imports the records of every broker namespace, "+
			"and ranks other members' endpoints by the regions their own records claim; `kubectl mcs join` again grants it",
			"namespace", broker.DirectoryNamespace, "error", err.Error())
		return brokerScope{}, nil
	}
	if err != nil {
		return brokerScope{}, err
	}
	members, refused := broker.ReadDirectory(entries.Items)
	for _, why := range refused {
		r.once(why, "leaving out of the member directory what is invalid", "reason", why)
	}
	scope := brokerScope{members: map[string]bool{}, regions: regionsOf(members)}
	for _, m := range members {
		scope.members[m.Namespace] = true
		if m.Namespace == r.own || m.Records {
			continue
		}
		if !r.readable[m.Namespace] {
			ok, err := r.allowed(ctx, m.Namespace, legacyReads)
			if err != nil {
				return scope, err
			}
			if !ok {
				r.once("unreadable "+m.Namespace, "a member of the previous release is not readable by this member: its records are not imported here until `kubectl mcs join` runs again for either member",
					"member", m.ClusterID, "namespace", m.Namespace)
				continue
			}
			r.readable[m.Namespace] = true
		}
		scope.legacy = append(scope.legacy, m.Namespace)
	}
	slices.Sort(scope.legacy)
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

// allowed says whether this identity may watch every resource of reads in namespace ns ("": every namespace).
// Watch stands for the reads a cache makes: every role that grants it grants list too.
func (r *scopeReader) allowed(ctx context.Context, ns string, reads []authorizationv1.ResourceAttributes) (bool, error) {
	for _, res := range reads {
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

// errScopeChanged ends a run of the manager when the previous release's members this member reads in that layout
// changed (one was joined again with this release, or rolled back): the legacy cache is confined to their
// namespaces, so the next run starts one for the new scope. Members of this release joining or leaving end no run.
var errScopeChanged = errors.New("the previous release's members this member reads changed")

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

// scopeWatch follows the member directory: it ends the run once the scope differs from the one its legacy cache
// was built for, and passes the members and their regions on to the run's view and to regions. It runs on every
// replica, leader or not, since each holds the caches; the leader reconciles the services of each member that
// joined, left or changed region.
type scopeWatch struct {
	reader  *scopeReader
	scope   brokerScope
	view    *brokerView
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
		joined, left := changedMembers(w.scope.members, now.members)
		w.view.setMembers(now.members)
		w.scope.members = now.members
		changed := w.regions.set(now.regions)
		select {
		case <-w.elected:
		default:
			continue // a replica that does not lead reconciles nothing; once elected, its controller reconciles every service
		}
		for _, ns := range joined {
			w.reader.log.Info("a member joined", "namespace", ns)
		}
		for _, ns := range left {
			w.reader.log.Info("a member left the member directory: its exports are no longer imported", "namespace", ns)
		}
		for _, ns := range append(joined, left...) {
			if err := w.enqueue.namespace(ctx, ns); err != nil && ctx.Err() == nil {
				w.reader.log.Error(err, "listing a member's exports after it joined or left", "namespace", ns)
			}
		}
		for _, c := range changed {
			w.reader.log.Info("a member's region in the member directory changed", "member", c, "region", now.regions[c])
			if err := w.enqueue.cluster(ctx, c); err != nil && ctx.Err() == nil {
				w.reader.log.Error(err, "listing a member's exports after its region changed", "member", c)
			}
		}
	}
}

// changedMembers returns the namespaces listed in now and not in was, and in was and not in now, sorted; nil
// stands for every namespace, so a directory that appears or goes changes no member.
func changedMembers(was, now map[string]bool) (joined, left []string) {
	if was == nil || now == nil {
		return nil, nil
	}
	for ns := range now {
		if !was[ns] {
			joined = append(joined, ns)
		}
	}
	for ns := range was {
		if !now[ns] {
			left = append(left, ns)
		}
	}
	slices.Sort(joined)
	slices.Sort(left)
	return joined, left
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
