package broker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/mcs/clusterid"
	"vksfleet.dev/fleet/mcs/memberlease"
	"vksfleet.dev/fleet/mcs/names"
)

// EnsureNamespace creates the member's broker namespace if it is missing. It reads before it creates, so that a
// restart writes nothing.
func EnsureNamespace(ctx context.Context, c client.Client, clusterID string) error {
	err := c.Get(ctx, client.ObjectKey{Name: names.BrokerNamespace(clusterID)}, &corev1.Namespace{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:        names.BrokerNamespace(clusterID),
		Labels:      map[string]string{names.LabelManagedBy: names.ManagedBy},
		Annotations: map[string]string{names.AnnotationClusterID: clusterID},
	}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating broker namespace %s: %w", ns.Name, err)
	}
	return nil
}

// Renewer renews a member's Lease as one process. Its holder identity, unique to the process, tells this
// process's renewals from any other's: a second cluster that claims the same cluster id (one restored from
// another's etcd snapshot keeps its kube-system UID, and so the default id) renews the same Lease, and shows as
// changes this process did not make.
type Renewer struct {
	ClusterID string
	// Holder is this process's identity, written as the Lease's holderIdentity.
	Holder string
	// Credential, when set, names the broker credential in use, written as the names.AnnotationCredential
	// annotation at each renewal: it is read just before the write, which the credential it names sends.
	Credential func() string
	// Unreachable, when set, lists the members whose endpoints do not answer from this member, written as the
	// names.AnnotationUnreachable annotation at each renewal.
	Unreachable func() []string
	// ProbeAddresses, when set, lists the addresses of this member's controller replicas that the other members'
	// data-plane probes connect to, written as the names.AnnotationProbeAddresses annotation at each renewal.
	ProbeAddresses func() []string
	// Decisions, when set, returns what this process decided about the other members at now, written as the
	// names.AnnotationDecisions annotation at each renewal ("" for nothing). Resume, when set, is given that
	// annotation as each read of the Lease finds it until the process's first write, which overwrites it: a
	// restarted process, or the replica that takes the lead over, resumes from what the last leader decided.
	Decisions func(now time.Time) string
	Resume    func(decisions string, now time.Time)
	// Published, when set, says whether the process has published every export it had at its start, written as
	// the names.AnnotationRecordsPublished annotation at each renewal.
	Published func() bool

	written string // the resourceVersion of this process's last write; "" before its first
}

// Mirror returns a Renewer of the same process for the member's Lease in the previous release's layout, which
// that release's members read: the same holder and annotations but for the decisions, which the next process to
// lead reads back from the records' Lease. Its renewals tell nothing of other holders: that is the records'.
func (r *Renewer) Mirror() *Renewer {
	return &Renewer{ClusterID: r.ClusterID, Holder: r.Holder, Credential: r.Credential, Unreachable: r.Unreachable, ProbeAddresses: r.ProbeAddresses}
}

// Renew creates or renews the Lease at now, and says whether it had to create it (at a first start, or because
// the broker lost it) and whether another holder changed it since this process last wrote it (foreign). It reads
// before it writes, so that a renewal never undoes a change it did not see.
func (r *Renewer) Renew(ctx context.Context, c client.Client, grace time.Duration, now time.Time) (created, foreign bool, err error) {
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: names.BrokerNamespace(r.ClusterID), Name: names.LeaseName}
	err = c.Get(ctx, key, lease)
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: key.Namespace, Name: key.Name,
				Labels:      map[string]string{names.LabelManagedBy: names.ManagedBy},
				Annotations: map[string]string{names.AnnotationClusterID: r.ClusterID},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(r.Holder),
				LeaseDurationSeconds: ptr.To(memberlease.DurationSeconds(grace)),
				AcquireTime:          &metav1.MicroTime{Time: now},
				RenewTime:            &metav1.MicroTime{Time: now},
			},
		}
		r.annotate(lease, now)
		if err := c.Create(ctx, lease); err != nil {
			return true, false, err
		}
		r.written = lease.ResourceVersion
		return true, false, nil
	}
	if err != nil {
		return false, false, err
	}
	if r.written == "" && r.Resume != nil {
		if decisions, ok := lease.Annotations[names.AnnotationDecisions]; ok {
			r.Resume(decisions, now)
		}
	}
	foreign = r.written != "" && lease.ResourceVersion != r.written && ptr.Deref(lease.Spec.HolderIdentity, "") != r.Holder
	lease.Spec.HolderIdentity = ptr.To(r.Holder)
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
	lease.Spec.LeaseDurationSeconds = ptr.To(memberlease.DurationSeconds(grace))
	r.annotate(lease, now)
	if err := c.Update(ctx, lease); err != nil {
		return false, foreign, err
	}
	r.written = lease.ResourceVersion
	return false, foreign, nil
}

// annotate names the credential in use and the members unreachable from here on the Lease, with this process's
// decisions at now.
func (r *Renewer) annotate(lease *coordinationv1.Lease, now time.Time) {
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	if r.Credential != nil {
		if id := r.Credential(); id != "" {
			lease.Annotations[names.AnnotationCredential] = id
		}
	}
	if r.Unreachable != nil {
		if ids := r.Unreachable(); len(ids) > 0 {
			lease.Annotations[names.AnnotationUnreachable] = strings.Join(ids, ",")
		} else {
			delete(lease.Annotations, names.AnnotationUnreachable)
		}
	}
	if r.ProbeAddresses != nil {
		if addrs := r.ProbeAddresses(); len(addrs) > 0 {
			lease.Annotations[names.AnnotationProbeAddresses] = strings.Join(addrs, ",")
		} else {
			delete(lease.Annotations, names.AnnotationProbeAddresses)
		}
	}
	if r.Published != nil {
		if r.Published() {
			lease.Annotations[names.AnnotationRecordsPublished] = "true"
		} else {
			delete(lease.Annotations, names.AnnotationRecordsPublished)
		}
	}
	if r.Decisions != nil {
		if decisions := r.Decisions(now); decisions != "" {
			lease.Annotations[names.AnnotationDecisions] = decisions
		} else {
			delete(lease.Annotations, names.AnnotationDecisions)
		}
	}
}

// UnreachableFrom returns the members a broker Lease says are unreachable from its member: only valid cluster
// ids, since a member may write anything there.
func UnreachableFrom(lease *coordinationv1.Lease) []string {
	var ids []string
	for id := range strings.SplitSeq(lease.Annotations[names.AnnotationUnreachable], ",") {
		if clusterid.Validate(id) == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// Liveness decides which members are alive: those whose Lease this observer saw renewed within the grace, on
// its own clock, as the node lifecycle controller judges kubelets. Each member is judged by its own grace, the
// leaseDurationSeconds its controller writes (memberlease.GraceOf), since it renews by that grace: an observer with
// a shorter one would find it dead between renewals. The renewer's clock is read once, at the first look at a
// Lease, and only when its renew time is not ahead of the observer's: a renew time ahead (a renewer's clock running
// fast) proves nothing until it changes, or a dead member would be alive again for a grace at every observer's
// start. After the first look only a change of the renew time counts, and when it was seen, so that no clock skew
// withdraws a live member or keeps a dead one. While this member cannot renew its own Lease the broker is
// unreachable and what it shows is stale, so decisions are frozen rather than withdrawing everyone's endpoints, and
// every member alive then gets a fresh grace when the broker is back. A Liveness outlives the broker caches it
// observes (Reobserve): what it decided is about the members, not about a view of them. What it saw that the
// Leases cannot tell again (Memory) is handed to the next process's first look (Resume).
type Liveness struct {
	self  string
	grace time.Duration // of a Lease that records none

	mu       sync.Mutex
	seen     map[string]renewal
	alive    map[string]bool
	healthy  bool
	regained bool
	observed chan struct{}
	looked   bool // observed is closed
	// resumed is what a previous observer saw of members this one has not looked at yet, as of resumedAt (Resume).
	resumed   map[string]Renewal
	resumedAt time.Time
}

// renewal is a member's last renew time as written, when this observer saw it change, and the grace the member
// is judged by. A renew time ahead of the observer's clock at the first look is unconfirmed: seenAt is that look,
// and the member is not alive until the renew time changes.
type renewal struct {
	renewTime   time.Time
	seenAt      time.Time
	grace       time.Duration
	unconfirmed bool
}

// Renewal is what an observer saw of a member's Lease: its renew time as written, when the observer saw it change,
// on the observer's clock, and whether a renew time ahead of that clock at the observer's first look is still
// unconfirmed (it does not count until it changes).
type Renewal struct {
	RenewTime, SeenAt time.Time
	Unconfirmed       bool
}

// futureSlack is how far ahead of the observer's clock a renew time at the first look may be and still count, as
// seen now: clocks kept by NTP are far closer, and a member that died that recently would be alive for a grace to
// an observer that had watched it all along.
const futureSlack = time.Second

// NewLiveness tracks liveness as seen by member self, which is always alive to itself; grace is the grace of a
// Lease that records none (a controller's Lease always does).
func NewLiveness(self string, grace time.Duration) *Liveness {
	return &Liveness{self: self, grace: grace, seen: map[string]renewal{}, alive: map[string]bool{}, healthy: true,
		observed: make(chan struct{})}
}

// Observed is closed once Observe has run since the Liveness was made or Reobserve called: liveness is unknown
// before.
func (l *Liveness) Observed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.observed
}

// Reobserve opens Observed again until the next Observe: the Leases will come from another view (a new broker
// cache), which may hold members the last one did not, and whose first look decisions wait for. What was seen of
// every member is kept.
func (l *Liveness) Reobserve() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.looked {
		l.observed, l.looked = make(chan struct{}), false
	}
}

// Alive says whether the member's endpoints should be imported. A member without a Lease is not alive.
func (l *Liveness) Alive(clusterID string) bool {
	if clusterID == l.self {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.alive[clusterID]
}

// Member is what an observer knows of another member.
type Member struct {
	Alive bool
	// Age is how long ago the observer saw the member's Lease renewed, on its own clock; for a renew time ahead of
	// that clock at the first look and unchanged since, how long ago that look was.
	Age time.Duration
}

// Member returns what Members would say of member id at now, and whether its Lease was seen, without the others.
func (l *Liveness) Member(id string, now time.Time) (Member, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.seen[id]
	if !ok {
		return Member{}, false
	}
	return Member{Alive: l.alive[id], Age: now.Sub(r.seenAt)}, true
}

// Members returns every other member whose Lease the last Observe saw, at now.
func (l *Liveness) Members(now time.Time) map[string]Member {
	l.mu.Lock()
	defer l.mu.Unlock()
	members := make(map[string]Member, len(l.seen))
	for id, r := range l.seen {
		members[id] = Member{Alive: l.alive[id], Age: now.Sub(r.seenAt)}
	}
	return members
}

// Memory returns what this observer saw of the other members' Leases that a first look could not tell again from
// them: the renewals seen more than futureSlack off the renewer's clock (a clock running behind or ahead, a broker
// that was out of reach), unconfirmed ones, and, for members it has not looked at yet, what it was given to resume
// from. A first look at any other renewal finds about the same from its renew time, so that in a clusterset whose
// clocks agree there is nothing to remember.
func (l *Liveness) Memory() map[string]Renewal {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]Renewal{}
	for id, r := range l.seen {
		if r.unconfirmed || r.seenAt.Sub(r.renewTime).Abs() > futureSlack {
			out[id] = Renewal{RenewTime: r.renewTime, SeenAt: r.seenAt, Unconfirmed: r.unconfirmed}
		}
	}
	for id, r := range l.resumed {
		if _, ok := l.seen[id]; !ok {
			out[id] = r
		}
	}
	return out
}

// Resume gives the next first look at each member's Lease what a previous observer (the last process to lead this
// member) saw of it, as of at on this observer's clock, in place of the renewer's clock: a renew time the same as
// it saw counts from when it saw it, so that a restart neither revives a dead member for a grace nor kills a live
// one whose clock runs behind; another counts as renewed after at (resume). Members already looked at keep what
// this observer saw.
func (l *Liveness) Resume(seen map[string]Renewal, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resumed = map[string]Renewal{}
	for id, r := range seen {
		if _, ok := l.seen[id]; !ok && id != l.self {
			l.resumed[id] = r
		}
	}
	l.resumedAt = at
}

// SetHealthy records whether this member's last Lease renewal reached the broker.
func (l *Liveness) SetHealthy(ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.regained = l.regained || (ok && !l.healthy)
	l.healthy = ok
}

// Healthy says whether this member's last Lease renewal reached the broker.
func (l *Liveness) Healthy() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.healthy
}

// LeaseOf returns the cluster id a broker Lease speaks for, or "" when it speaks for none: only the Lease of the
// fixed name in the namespace of a valid id counts, since any member could write an annotation naming another.
func LeaseOf(lease *coordinationv1.Lease) string {
	id := ClusterOf(lease)
	if lease.Name != names.LeaseName || clusterid.Validate(id) != nil || lease.Namespace != names.BrokerNamespace(id) {
		return ""
	}
	return id
}

// Observe recomputes liveness from the members' Leases at time now, on this observer's clock, and returns the
// members whose liveness changed. While unhealthy it changes nothing.
func (l *Liveness) Observe(leases []coordinationv1.Lease, now time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.looked {
		defer close(l.observed)
		l.looked = true
	}
	if !l.healthy {
		return nil
	}
	if l.regained {
		// Renewals made while the broker was out of reach may not be in the cache yet. A member dead before is
		// not given a grace: a renewal it made would show as a change.
		for id, r := range l.seen {
			if l.alive[id] {
				r.seenAt = now
				l.seen[id] = r
			}
		}
		l.regained = false
	}
	seen := map[string]renewal{}
	for i := range leases {
		lease := &leases[i]
		id := LeaseOf(lease)
		if id == "" || id == l.self || lease.Spec.RenewTime == nil {
			continue
		}
		renewed := lease.Spec.RenewTime.Time
		r, known := l.seen[id]
		previous, resumed := l.resumed[id]
		switch {
		case !known && resumed:
			r = resume(previous, l.resumedAt, renewed, now)
		case !known:
			r = firstLook(renewed, now)
		case !r.renewTime.Equal(renewed):
			r = renewal{renewTime: renewed, seenAt: now}
		}
		r.grace = l.grace
		if lease.Spec.LeaseDurationSeconds != nil {
			r.grace = memberlease.GraceOf(lease)
		}
		seen[id] = r
	}
	next := map[string]bool{}
	for id, r := range seen {
		next[id] = !r.unconfirmed && memberlease.Fresh(now.Sub(r.seenAt), r.grace)
	}
	var changed []string
	for id, alive := range next {
		if l.alive[id] != alive {
			changed = append(changed, id)
		}
	}
	for id, alive := range l.alive {
		if _, ok := next[id]; !ok && alive {
			changed = append(changed, id)
		}
	}
	l.seen, l.alive, l.resumed = seen, next, nil
	return changed
}

// resume is what the first look at a member's Lease at now tells from the renew time it finds, given that a
// previous observer saw it as previous at at: the same renew time, what that observer saw; another, a renewal
// made since, no earlier than at (the previous observer's last look at the Leases was at most a tick before), and
// at its renew time if the renewer's clock puts it between at and now.
func resume(previous Renewal, at, renewed, now time.Time) renewal {
	if previous.RenewTime.Equal(renewed) {
		return renewal{renewTime: renewed, seenAt: minTime(previous.SeenAt, now), unconfirmed: previous.Unconfirmed}
	}
	seenAt := minTime(at, now)
	if renewed.After(seenAt) && !renewed.After(now) {
		seenAt = renewed
	}
	return renewal{renewTime: renewed, seenAt: seenAt}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// firstLook is what the first look at a member's Lease at now tells from the renew time it finds: when it was
// renewed, on the observer's clock, if it is not ahead of it.
func firstLook(renewed, now time.Time) renewal {
	if renewed.After(now.Add(futureSlack)) {
		return renewal{renewTime: renewed, seenAt: now, unconfirmed: true}
	}
	if renewed.Before(now) {
		return renewal{renewTime: renewed, seenAt: renewed}
	}
	return renewal{renewTime: renewed, seenAt: now}
}
