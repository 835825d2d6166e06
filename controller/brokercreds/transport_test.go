package brokercreds

import (
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"vksfleet.dev/fleet/mcs/brokercred"
	"vksfleet.dev/fleet/mcs/brokercred/credtest"
)

// TestTransportSwitch checks what an operator who revokes the old token relies on: after Switch, requests carry
// the new token, and a long-running request of the old one (a watch) is cut rather than left open with it.
func TestTransportSwitch(t *testing.T) {
	seen := make(chan string, 10)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization")
		if r.URL.Path == "/watch" {
			w.(http.Flusher).Flush()
			<-r.Context().Done() // a watch: open until the client goes
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	parse := func(token string) *brokercred.Credential {
		c, err := brokercred.Parse(credtest.Kubeconfig(t, srv.URL, ca, &clientcmdapi.AuthInfo{Token: token}))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tr, err := NewTransport(parse("old"))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr}
	watch, err := c.Get(srv.URL + "/watch")
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Body.Close()
	if got := <-seen; got != "Bearer old" {
		t.Fatalf("before the switch the server saw %q", got)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(watch.Body)
		ended <- err
	}()
	if err := tr.Switch(parse("new")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the old credential's watch stayed open after the switch")
	}
	resp, err := c.Get(srv.URL + "/get")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := <-seen; got != "Bearer new" {
		t.Errorf("after the switch the server saw %q, want the new token", got)
	}
	if got := tr.Credential().Config.BearerToken; got != "new" {
		t.Errorf("Credential() has token %q", got)
	}

	other, err := brokercred.Parse(credtest.Kubeconfig(t, "https://elsewhere:6443", nil, &clientcmdapi.AuthInfo{Token: "x"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Switch(other); err == nil || !strings.Contains(err.Error(), "server changed") {
		t.Errorf("Switch to another server: error = %v", err)
	}
}
