package broker

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// Renew creates or renews the member's Lease on the broker, holding its cluster id, and says whether it had to
// create it: at a first start, or because the broker lost it.
func Renew(ctx context.Context, c client.Client, clusterID string, grace time.Duration, now time.Time) (created bool, err error) {
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: names.BrokerNamespace(clusterID), Name: names.LeaseName}
	err = c.Get(ctx, key, lease)
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: key.Namespace, Name: key.Name,
				Labels:      map[string]string{names.LabelManagedBy: names.ManagedBy},
				Annotations: map[string]string{names.AnnotationClusterID: clusterID},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(clusterID),
				LeaseDurationSeconds: ptr.To(int32(max(1, grace/time.Second))),
				AcquireTime:          &metav1.MicroTime{Time: now},
				RenewTime:            &metav1.MicroTime{Time: now},
			},
		}
		return true, c.Create(ctx, lease)
	}
	if err != nil {
		return false, err
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(max(1, grace/time.Second)))
	return false, c.Update(ctx, lease)
}

// Liveness decides which members are alive: those whose Lease was renewed within the grace. While this member
// cannot renew its own Lease the broker is unreachable and what it shows is stale, so decisions are frozen
// rather than withdrawing everyone's endpoints.
type Liveness struct {
	self  string
	grace time.Duration

	mu       sync.Mutex
	alive    map[string]bool
	healthy  bool
	observed chan struct{}
	once     sync.Once
}

// NewLiveness tracks liveness as seen by member self, which is always alive to itself.
func NewLiveness(self string, grace time.Duration) *Liveness {
	return &Liveness{self: self, grace: grace, alive: map[string]bool{}, healthy: true, observed: make(chan struct{})}
}

// Observed is closed once Observe has run: liveness is unknown before.
func (l *Liveness) Observed() <-chan struct{} { return l.observed }

// Alive says whether the member's endpoints should be imported. A member without a Lease is not alive.
func (l *Liveness) Alive(clusterID string) bool {
	if clusterID == l.self {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.alive[clusterID]
}

// SetHealthy records whether this member's last Lease renewal reached the broker.
func (l *Liveness) SetHealthy(ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.healthy = ok
}

// Healthy says whether this member's last Lease renewal reached the broker.
func (l *Liveness) Healthy() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.healthy
}

// Observe recomputes liveness from the members' Leases at time now and returns the members whose liveness
// changed. While unhealthy it changes nothing.
func (l *Liveness) Observe(leases []coordinationv1.Lease, now time.Time) []string {
	defer l.once.Do(func() { close(l.observed) })
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.healthy {
		return nil
	}
	next := map[string]bool{}
	for _, lease := range leases {
		id := ClusterOf(&lease)
		if id == "" || id == l.self || lease.Spec.RenewTime == nil {
			continue
		}
		next[id] = next[id] || now.Sub(lease.Spec.RenewTime.Time) <= l.grace
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
	l.alive = next
	return changed
}
