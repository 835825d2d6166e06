package brokercreds

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"vksfleet.dev/fleet/mcs/brokercred"
	"vksfleet.dev/fleet/mcs/brokercred/credtest"
)

// fakeSource is a Source the test never runs: it calls take itself.
type fakeSource struct{}

func (fakeSource) Run(context.Context, func([]byte, error))    {}
func (fakeSource) Write(context.Context, []byte, []byte) error { return nil }
func (fakeSource) String() string                              { return "fake" }

// TestKeeper walks a Keeper through what its Source may deliver, and checks what the controller sees: when it
// may start, which credential it uses, whether it is ready and when it renews.
func TestKeeper(t *testing.T) {
	ctx := context.Background()
	k := &Keeper{Source: fakeSource{}, Log: logr.Discard()}
	k.prepare()
	now := time.Now()
	bound := func(secret string) []byte {
		return credtest.Kubeconfig(t, "https://broker:6443", nil, &clientcmdapi.AuthInfo{Token: credtest.JWT(t, credtest.SAClaims(now, time.Hour, secret))})
	}
	opaqueKubeconfig := credtest.Kubeconfig(t, "https://broker:6443", nil, &clientcmdapi.AuthInfo{Token: "opaque"})
	opaque, err := brokercred.Parse(opaqueKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name      string
		deliver   update
		wantID    string
		wantCheck string // "" for ready
		renews    bool
	}{
		{name: "missing", deliver: update{err: errors.New("secret mcs-system/broker-kubeconfig not found")}, wantCheck: "not found"},
		{name: "unparseable", deliver: update{kubeconfig: []byte("{{{")}, wantCheck: "does not parse"},
		{name: "valid", deliver: update{kubeconfig: bound("creds-1")}, wantID: "creds-1", renews: true},
		{name: "invalid later: the credential in use stays", deliver: update{kubeconfig: []byte("{{{")}, wantID: "creds-1", renews: true},
		{name: "deleted later: the credential in use stays", deliver: update{err: errors.New("deleted")}, wantID: "creds-1", renews: true},
		{name: "rotated", deliver: update{kubeconfig: bound("creds-2")}, wantID: "creds-2", renews: true},
		{name: "another server: refused", deliver: update{kubeconfig: credtest.Kubeconfig(t, "https://other:6443", nil, &clientcmdapi.AuthInfo{Token: "x"})},
			wantID: "creds-2", wantCheck: "restart the controller", renews: true},
		{name: "the server in use again", deliver: update{kubeconfig: bound("creds-2")}, wantID: "creds-2", renews: true},
		{name: "a client certificate that is no PEM: kept out", deliver: update{kubeconfig: credtest.Kubeconfig(t, "https://broker:6443", nil,
			&clientcmdapi.AuthInfo{ClientCertificateData: []byte("cert"), ClientKeyData: []byte("key")})}, wantID: "creds-2", renews: true},
		{name: "an opaque token: nothing to renew", deliver: update{kubeconfig: opaqueKubeconfig}, wantID: opaque.ID()},
	}
	for _, s := range steps {
		k.take(s.deliver)
		if got := k.ID(); got != s.wantID {
			t.Errorf("%s: ID = %q, want %q", s.name, got, s.wantID)
		}
		err := k.Check(nil)
		switch {
		case s.wantCheck == "" && err != nil:
			t.Errorf("%s: not ready: %v", s.name, err)
		case s.wantCheck != "" && (err == nil || !strings.Contains(err.Error(), s.wantCheck)):
			t.Errorf("%s: Check = %v, want an error containing %q", s.name, err, s.wantCheck)
		}
		k.mu.Lock()
		renews := !k.renewAt.IsZero()
		k.mu.Unlock()
		if renews != s.renews {
			t.Errorf("%s: renewal scheduled = %v, want %v", s.name, renews, s.renews)
		}
		if s.wantID != "" {
			if _, err := k.First(ctx); err != nil {
				t.Errorf("%s: First: %v", s.name, err)
			}
		}
	}
}
