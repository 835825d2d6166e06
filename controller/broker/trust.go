package broker

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/names"
)

// Trust decides whether the broker's view may be acted on with deletions. A broker that lost its data (a wiped
// etcd, a deleted and re-created CRD) shows every member's records gone at once, and the members republish only
// as each notices: until every live member has had the time to, an export missing from the view is no evidence
// that it went. So the view is trusted only once this member's own marks there, its Lease and its sentinel
// record, have stood uninterrupted for the settle time (a Lease grace: every live member renews within it); a
// start, a failed renewal, or a mark found missing interrupts. The settle is waived (Vouch) where a start finds
// positive evidence that nothing was lost: its marks already standing, or no import of its own to lose.
type Trust struct {
	settle time.Duration

	mu      sync.Mutex
	since   time.Time // start of the current uninterrupted run; zero while interrupted
	trusted bool
	vouched bool
}

// NewTrust returns a Trust, not trusted, that needs the marks to stand for settle.
func NewTrust(settle time.Duration) *Trust { return &Trust{settle: settle} }

// Observe records whether this member's marks stood on the broker at now, and says whether the view has just
// become trusted: the moment to reconcile whatever was held back.
func (t *Trust) Observe(intact bool, now time.Time) (regained bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !intact {
		// An interruption after trust loses the waiver; before it, it is the start itself (a Lease being created).
		t.vouched = t.vouched && !t.trusted
		t.since, t.trusted = time.Time{}, false
		return false
	}
	if t.since.IsZero() {
		t.since = now
	}
	if !t.trusted && (t.vouched || now.Sub(t.since) >= t.settle) {
		t.trusted = true
		return true
	}
	return false
}

// Vouch waives the settle time until the first interruption after trust: this run found its marks already on
// the broker when it started (the broker kept its data since this member last wrote), or it holds no import that
// an incomplete view could withdraw.
func (t *Trust) Vouch() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.vouched = true
}

// Trusted says whether deletions may follow from the broker's view.
func (t *Trust) Trusted() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.trusted
}

// SentinelName names the sentinel record in a member's broker namespace: a ServiceImport, so that whatever takes
// the records away takes it too. Record names always hold a dot, so it never names a service's record.
const SentinelName = "sentinel"

// Sentinel is the member's sentinel record. It has no service labels: no member maps it to a service.
func Sentinel(clusterID string) *mcsv1beta1.ServiceImport {
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: names.BrokerNamespace(clusterID), Name: SentinelName,
			Labels:      map[string]string{names.LabelManagedBy: names.ManagedBy},
			Annotations: map[string]string{names.AnnotationClusterID: clusterID},
		},
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless, Ports: []mcsv1beta1.ServicePort{}},
	}
}

// EnsureSentinel says whether the member's sentinel record is in the view (a cached reader) and, when it is not,
// creates it through c.
func EnsureSentinel(ctx context.Context, view client.Reader, c client.Client, clusterID string) (bool, error) {
	s := Sentinel(clusterID)
	err := view.Get(ctx, client.ObjectKeyFromObject(s), &mcsv1beta1.ServiceImport{})
	if !apierrors.IsNotFound(err) {
		return err == nil, err
	}
	if err := c.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
		return false, err
	}
	return false, nil
}
