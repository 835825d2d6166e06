package brokercreds

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"vksfleet.dev/fleet/mcs/brokercred"
)

var (
	expiryGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "mcs_controller_broker_credential_expiry_timestamp_seconds",
		Help: "When the broker credential in use expires (Unix seconds); 0 for one without an expiry.",
	})
	renewalsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcs_controller_broker_credential_renewals_total",
		Help: "Renewals of the broker token by TokenRequest, written back to the broker kubeconfig's Secret or file, by result (success, failure).",
	}, []string{"result"})
	refusedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcs_controller_broker_credential_refused_total",
		Help: "Broker kubeconfigs the controller did not switch to, by reason: invalid (does not parse or carries no credential), " +
			"server_changed (another server URL: restart the controller to move to another broker).",
	}, []string{"reason"})
)

func init() {
	metrics.Registry.MustRegister(expiryGauge, renewalsTotal, refusedTotal)
	for _, r := range []string{"success", "failure"} {
		renewalsTotal.WithLabelValues(r)
	}
}

// errNoCredential is why the controller waits before its Source delivered anything.
var errNoCredential = errors.New("no valid broker credential yet")

// minTokenLifetime is the shortest lifetime a TokenRequest may ask for (the API server refuses less).
const minTokenLifetime = 10 * time.Minute

// maxRenewBackoff bounds the wait between failed renewals.
const maxRenewBackoff = time.Minute

// Keeper keeps the broker credential current: it takes every valid kubeconfig its Source delivers (the first one
// starts the controller, later ones are switched to under it), and Renew renews a ServiceAccount token before it
// expires by a TokenRequest whose result it writes back to the Source, whose delivery then switches to it, so
// that an operator's rotation and a renewal take one path. Renew runs on the elected leader only: replicas share
// a Secret, where a file is each process's own (run one replica with --broker-kubeconfig).
//
// A kubeconfig that names another server is refused, logged and counted, and fails /readyz (Check) until the
// Source holds the server in use again: another URL may be another broker with other data or none, which the
// controller meets at a start (a fresh view, withheld withdrawals until the members republish), not under
// running caches; and a mistyped URL should not move a member by itself. Restarting the controller takes it.
type Keeper struct {
	// Source is where the kubeconfig lives.
	Source Source
	// RenewBefore, when positive, renews a token that long before it expires instead of at 80% of its lifetime.
	RenewBefore time.Duration
	Log         logr.Logger

	startOnce sync.Once
	updates   chan update
	found     chan struct{} // closed once transport is set

	rescheduled chan struct{} // wakes Renew when the schedule changed

	mu        sync.Mutex
	transport *Transport
	renewAt   time.Time // when Renew renews next; zero: never
	waiting   error     // why there is no credential yet
	refused   error     // the last kubeconfig not switched to, while the source holds it
	failures  int
}

type update struct {
	kubeconfig []byte
	err        error
}

// Start reads the Source in the background until ctx ends.
func (k *Keeper) Start(ctx context.Context) {
	k.startOnce.Do(func() {
		k.prepare()
		go k.Source.Run(ctx, func(kubeconfig []byte, err error) {
			select {
			case k.updates <- update{kubeconfig, err}:
			case <-ctx.Done():
			}
		})
		go k.loop(ctx)
	})
}

// prepare makes the channels and state the loop and Renew share.
func (k *Keeper) prepare() {
	k.updates = make(chan update, 1)
	k.found = make(chan struct{})
	k.rescheduled = make(chan struct{}, 1)
	k.waiting = errNoCredential
}

// First waits until the Source held a valid kubeconfig and returns the transport the broker clients use. While
// it waits, Check says why.
func (k *Keeper) First(ctx context.Context) (*Transport, error) {
	select {
	case <-k.found:
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.transport, nil
	case <-ctx.Done():
		return nil, errors.Join(errNoCredential, ctx.Err())
	}
}

// ID names the credential in use (Credential.ID); "" before there is one.
func (k *Keeper) ID() string {
	k.mu.Lock()
	t := k.transport
	k.mu.Unlock()
	if t == nil {
		return ""
	}
	return t.Credential().ID()
}

// Check is a /readyz check: it fails while there is no credential, or while the Source holds a kubeconfig the
// controller refused.
func (k *Keeper) Check(*http.Request) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.transport == nil {
		return fmt.Errorf("waiting for broker credentials: %w", k.waiting)
	}
	return k.refused
}

func (k *Keeper) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-k.updates:
			k.take(u)
		}
	}
}

// Renew renews the token in use on its schedule until ctx ends. It runs on the elected leader alone (the
// controller's manager runs it): the other replicas read the same Secret, and switch to what the leader wrote.
func (k *Keeper) Renew(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		k.mu.Lock()
		at, due := k.renewAt, !k.renewAt.IsZero()
		k.mu.Unlock()
		timer.Stop()
		var fire <-chan time.Time
		if due {
			timer.Reset(time.Until(at))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-k.rescheduled:
		case <-fire:
			retry := time.Now().Add(k.renewNow(ctx))
			k.mu.Lock()
			// A switch meanwhile set the new credential's schedule: it stands.
			if k.renewAt.Equal(at) {
				k.renewAt = retry
			}
			k.mu.Unlock()
		}
	}
}

// take looks at what the Source delivered, and switches to it if it is valid; without a new credential the one
// in use keeps its renewal schedule.
func (k *Keeper) take(u update) {
	k.mu.Lock()
	defer k.mu.Unlock()
	cred, err := u.kubeconfig, u.err
	var next *brokercred.Credential
	if err == nil {
		if next, err = brokercred.Parse(cred); err != nil {
			refusedTotal.WithLabelValues("invalid").Inc()
			err = fmt.Errorf("%s: %w", k.Source, err)
		}
	}
	if err != nil {
		if k.transport == nil {
			if k.waiting == nil || k.waiting.Error() != err.Error() {
				k.Log.Info("waiting for broker credentials; not ready until they appear", "reason", err.Error())
			}
			k.waiting = err
			return
		}
		k.Log.Error(err, "the broker kubeconfig cannot be used; keeping the credential in use", "credential", k.transport.Credential().ID())
		return
	}
	if k.transport == nil {
		t, err := NewTransport(next)
		if err != nil {
			k.Log.Error(err, "the broker kubeconfig cannot be used", "source", k.Source.String())
			k.waiting = err
			return
		}
		k.transport, k.waiting = t, nil
		close(k.found)
		k.Log.Info("broker credentials found", "source", k.Source.String(), "server", next.Config.Host, "credential", next.ID(), "expiry", expiryOf(next))
		k.schedule(next)
		return
	}
	cur := k.transport.Credential()
	switch brokercred.Compare(cur, next) {
	case brokercred.Unchanged:
		k.refused = nil
		return
	case brokercred.ServerChanged:
		refusedTotal.WithLabelValues("server_changed").Inc()
		k.refused = fmt.Errorf("%s names the broker server %s, but the controller uses %s: restart the controller to move to another broker, "+
			"or put the server in use back", k.Source, next.Config.Host, cur.Config.Host)
		k.Log.Error(k.refused, "broker kubeconfig refused; keeping the credential in use", "credential", cur.ID())
		return
	}
	if err := k.transport.Switch(next); err != nil {
		k.Log.Error(err, "switching broker credentials; keeping the credential in use", "credential", cur.ID())
		return
	}
	k.refused, k.failures = nil, 0
	// A renewed token bound to the same Secret keeps its name: the expiry tells the two apart.
	k.Log.Info("switched broker credentials", "from", cur.ID(), "to", next.ID(), "expiry", expiryOf(next))
	k.schedule(next)
}

// expiryOf is when cred expires, for logs: "none" for a credential without an expiry.
func expiryOf(cred *brokercred.Credential) string {
	if cred.Claims == nil || cred.Claims.Expiry.IsZero() {
		return "none"
	}
	return cred.Claims.Expiry.UTC().Format(time.RFC3339)
}

// schedule records cred's expiry and when to renew it: never for a credential the controller cannot renew (no
// ServiceAccount token, or no expiry). k.mu is held.
func (k *Keeper) schedule(cred *brokercred.Credential) {
	c := cred.Claims
	if c == nil || c.Expiry.IsZero() {
		expiryGauge.Set(0)
	} else {
		expiryGauge.Set(float64(c.Expiry.Unix()))
	}
	k.renewAt = time.Time{}
	if c.Renewable() {
		k.renewAt = brokercred.RenewAt(c.IssuedAt, c.Expiry, k.RenewBefore, time.Now())
		k.Log.V(1).Info("broker token renewal scheduled", "at", k.renewAt, "expiry", c.Expiry)
	}
	select {
	case k.rescheduled <- struct{}{}:
	default: // Renew has a wake-up pending, and reads the schedule anew
	}
}

// renewNow renews the token in use and returns how long to wait before trying again: after a success, the
// Source's delivery of the new kubeconfig sets the next schedule well before that; after a failure, a growing
// backoff.
func (k *Keeper) renewNow(ctx context.Context) time.Duration {
	k.mu.Lock()
	t := k.transport
	k.mu.Unlock()
	cur := t.Credential()
	err := k.renewToken(ctx, t, cur)
	switch {
	case errors.Is(err, ErrReplaced):
		k.Log.Info("not writing the renewed broker token: the kubeconfig was replaced meanwhile, and is taken instead", "source", k.Source.String())
		return maxRenewBackoff
	case err != nil:
		renewalsTotal.WithLabelValues("failure").Inc()
		k.mu.Lock()
		k.failures++
		delay := min(maxRenewBackoff, time.Second<<min(k.failures, 6))
		k.mu.Unlock()
		k.Log.Error(err, "renewing the broker token; retrying", "in", delay, "expiry", cur.Claims.Expiry)
		return delay
	}
	renewalsTotal.WithLabelValues("success").Inc()
	k.Log.Info("renewed the broker token", "source", k.Source.String(), "credential", cur.ID())
	return maxRenewBackoff
}

// renewToken asks the broker for a new token of the ServiceAccount of cur's token, of the same lifetime and
// bound to the same Secret, and writes it back to the Source.
func (k *Keeper) renewToken(ctx context.Context, t *Transport, cur *brokercred.Credential) error {
	c := cur.Claims
	kube, err := kubernetes.NewForConfig(t.Config())
	if err != nil {
		return err
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(max(c.Lifetime(), minTokenLifetime) / time.Second)),
	}}
	if c.BoundSecret != "" {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{
			Kind: "Secret", APIVersion: "v1", Name: c.BoundSecret, UID: types.UID(c.BoundSecretUID),
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tok, err := kube.CoreV1().ServiceAccounts(c.Namespace).CreateToken(rctx, c.ServiceAccount, req, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("TokenRequest for ServiceAccount %s/%s on the broker (it needs create on serviceaccounts/token in its namespace): %w",
			c.Namespace, c.ServiceAccount, err)
	}
	next, err := brokercred.WithToken(cur.Kubeconfig, tok.Status.Token)
	if err != nil {
		return err
	}
	return k.Source.Write(rctx, cur.Kubeconfig, next)
}
