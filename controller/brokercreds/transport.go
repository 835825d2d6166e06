package brokercreds

import (
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"

	"vksfleet.dev/fleet/mcs/brokercred"
)

// Transport is the broker clients' http.RoundTripper: it sends each request with the credential switched in
// last. Every credential has a transport of its own, dialing through a connrotation.Dialer, and a switch closes
// the old one's connections, long-running watches included, so that their reflectors watch again with the new
// credential and no request carries the old one after the switch: an operator may revoke it at once.
type Transport struct {
	cur atomic.Pointer[inner]
}

// inner is one credential's transport.
type inner struct {
	cred   *brokercred.Credential
	rt     http.RoundTripper
	dialer *connrotation.Dialer
}

// NewTransport returns a Transport that sends with cred.
func NewTransport(cred *brokercred.Credential) (*Transport, error) {
	t := &Transport{}
	return t, t.Switch(cred)
}

// RoundTrip sends req with the credential in use.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.cur.Load().rt.RoundTrip(req)
}

// Credential is the credential in use.
func (t *Transport) Credential() *brokercred.Credential { return t.cur.Load().cred }

// Switch sends every request from now on with cred, and closes the connections of the credential it replaces.
// cred must reach the same server (Compare), since the clients built on Config keep its URL.
func (t *Transport) Switch(cred *brokercred.Credential) error {
	if old := t.cur.Load(); old != nil && brokercred.Compare(old.cred, cred) == brokercred.ServerChanged {
		return fmt.Errorf("the broker server changed from %s to %s: a credential switch keeps the server", old.cred.Config.Host, cred.Config.Host)
	}
	dialer := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	cfg := rest.CopyConfig(cred.Config)
	// Our own dialer also keeps client-go from sharing the TLS transport with any other client of the same
	// settings, whose connections CloseAll would not reach.
	cfg.Dial = dialer.DialContext
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return fmt.Errorf("building the broker transport: %w", err)
	}
	if old := t.cur.Swap(&inner{cred: cred, rt: rt, dialer: dialer}); old != nil {
		old.dialer.CloseAll()
	}
	return nil
}

// Config returns a client configuration of the broker that sends through t: the server of the credential in
// use, and no credential or TLS setting of its own, which client-go refuses beside a custom transport.
func (t *Transport) Config() *rest.Config {
	c := t.Credential().Config
	return &rest.Config{Host: c.Host, APIPath: c.APIPath, Transport: t, UserAgent: c.UserAgent}
}
