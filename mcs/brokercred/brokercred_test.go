package brokercred

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"vksfleet.dev/fleet/mcs/brokercred/credtest"
)

func TestParseToken(t *testing.T) {
	iat := time.Unix(1_700_000_000, 0)
	cases := []struct {
		name    string
		token   string
		want    Claims
		wantErr string
	}{
		{name: "bound to a Secret", token: credtest.JWT(t, credtest.SAClaims(iat, time.Hour, "creds-2")),
			want: Claims{IssuedAt: iat, Expiry: iat.Add(time.Hour), Namespace: "ns", ServiceAccount: "member-a", BoundSecret: "creds-2", BoundSecretUID: "secret-uid"}},
		{name: "unbound", token: credtest.JWT(t, credtest.SAClaims(iat, 10*time.Minute, "")),
			want: Claims{IssuedAt: iat, Expiry: iat.Add(10 * time.Minute), Namespace: "ns", ServiceAccount: "member-a"}},
		{name: "no expiry: a legacy Secret token", token: credtest.JWT(t, map[string]any{"kubernetes.io/serviceaccount/namespace": "ns"})},
		{name: "padded payload", token: strings.Replace(credtest.JWT(t, map[string]any{"exp": iat.Unix()}), ".c2ln", "==.c2ln", 1),
			want: Claims{Expiry: iat}},
		{name: "opaque token", token: "abcdef.0123456789abcdef", wantErr: "not a JWT"},
		{name: "payload not base64", token: "a.!!.c", wantErr: "not base64url"},
		{name: "payload not JSON", token: "a." + base64.RawURLEncoding.EncodeToString([]byte("[1]")) + ".c", wantErr: "not a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseToken(c.token)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	tok := credtest.JWT(t, credtest.SAClaims(time.Unix(1_700_000_000, 0), time.Hour, ""))
	cases := []struct {
		name       string
		kubeconfig []byte
		wantErr    string
		renewable  bool
	}{
		{name: "ServiceAccount token", kubeconfig: credtest.Kubeconfig(t, "https://broker:6443", nil, &clientcmdapi.AuthInfo{Token: tok}), renewable: true},
		{name: "client certificate", kubeconfig: credtest.Kubeconfig(t, "https://broker:6443", nil, &clientcmdapi.AuthInfo{ClientCertificateData: []byte("cert"), ClientKeyData: []byte("key")})},
		{name: "opaque token", kubeconfig: credtest.Kubeconfig(t, "https://broker:6443", nil, &clientcmdapi.AuthInfo{Token: "opaque"})},
		{name: "empty", kubeconfig: []byte(" \n"), wantErr: "empty"},
		{name: "not YAML", kubeconfig: []byte("{{{"), wantErr: "does not parse"},
		{name: "no credential", kubeconfig: credtest.Kubeconfig(t, "https://broker:6443", nil, &clientcmdapi.AuthInfo{}), wantErr: "no token, client certificate"},
		{name: "no server", kubeconfig: credtest.Kubeconfig(t, "", nil, &clientcmdapi.AuthInfo{Token: tok}), wantErr: "does not parse"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parse(c.kubeconfig)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r := got.Claims.Renewable(); r != c.renewable {
				t.Errorf("renewable = %v, want %v", r, c.renewable)
			}
		})
	}
}

func TestCompare(t *testing.T) {
	iat := time.Unix(1_700_000_000, 0)
	tok1, tok2 := credtest.JWT(t, credtest.SAClaims(iat, time.Hour, "")), credtest.JWT(t, credtest.SAClaims(iat.Add(time.Minute), time.Hour, ""))
	parse := func(b []byte) *Credential {
		c, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	base := parse(credtest.Kubeconfig(t, "https://broker:6443", []byte("ca-1"), &clientcmdapi.AuthInfo{Token: tok1}))
	// The same server and token under other names.
	renamed := clientcmdapi.NewConfig()
	renamed.Clusters["hub"] = &clientcmdapi.Cluster{Server: "https://broker:6443", CertificateAuthorityData: []byte("ca-1")}
	renamed.AuthInfos["me"] = &clientcmdapi.AuthInfo{Token: tok1}
	renamed.Contexts["x"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "me"}
	renamed.CurrentContext = "x"
	renamedBytes, err := clientcmd.Write(*renamed)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		next *Credential
		want Change
	}{
		{"same file", parse(base.Kubeconfig), Unchanged},
		{"same credential, other names", parse(renamedBytes), Unchanged},
		{"new token", parse(credtest.Kubeconfig(t, "https://broker:6443", []byte("ca-1"), &clientcmdapi.AuthInfo{Token: tok2})), Rotated},
		{"new CA bundle", parse(credtest.Kubeconfig(t, "https://broker:6443", []byte("ca-1\nca-2"), &clientcmdapi.AuthInfo{Token: tok1})), Rotated},
		{"client certificate instead", parse(credtest.Kubeconfig(t, "https://broker:6443", []byte("ca-1"), &clientcmdapi.AuthInfo{ClientCertificateData: []byte("c"), ClientKeyData: []byte("k")})), Rotated},
		{"other server", parse(credtest.Kubeconfig(t, "https://broker-2:6443", []byte("ca-1"), &clientcmdapi.AuthInfo{Token: tok2})), ServerChanged},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Compare(base, c.next); got != c.want {
				t.Errorf("Compare = %v, want %v", got, c.want)
			}
		})
	}
}

func TestRenewAt(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	cases := []struct {
		name           string
		issued, expiry time.Time
		before         time.Duration
		now            time.Time
		want           time.Time
	}{
		{"at 80% of an hour", t0, t0.Add(time.Hour), 0, t0, t0.Add(48 * time.Minute)},
		{"at 80% of ten minutes", t0, t0.Add(10 * time.Minute), 0, t0.Add(time.Minute), t0.Add(8 * time.Minute)},
		{"past 80%, over a minute left: at once", t0, t0.Add(10 * time.Minute), 0, t0.Add(9 * time.Minute), t0.Add(9 * time.Minute)},
		{"under a minute left: at once", t0, t0.Add(time.Hour), 0, t0.Add(59*time.Minute + 30*time.Second), t0.Add(59*time.Minute + 30*time.Second)},
		{"expired: at once", t0, t0.Add(time.Hour), 0, t0.Add(2 * time.Hour), t0.Add(2 * time.Hour)},
		{"renew-before", t0, t0.Add(10 * time.Minute), 9*time.Minute + 30*time.Second, t0, t0.Add(30 * time.Second)},
		{"renew-before as long as the lifetime: at 80%", t0, t0.Add(10 * time.Minute), 10 * time.Minute, t0, t0.Add(8 * time.Minute)},
		{"renew-before longer than the lifetime: at 80%", t0, t0.Add(10 * time.Minute), time.Hour, t0, t0.Add(8 * time.Minute)},
		{"no issue time: 80% from now", time.Time{}, t0.Add(10 * time.Minute), 0, t0, t0.Add(8 * time.Minute)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := RenewAt(c.issued, c.expiry, c.before, c.now); !got.Equal(c.want) {
				t.Errorf("RenewAt = %v, want %v", got, c.want)
			}
		})
	}
}

func TestID(t *testing.T) {
	iat := time.Unix(1_700_000_000, 0)
	unbound := credtest.JWT(t, credtest.SAClaims(iat, time.Hour, ""))
	hash := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:])[:12]
	}
	cases := []struct {
		name string
		user *clientcmdapi.AuthInfo
		want string
	}{
		{"bound to a Secret: its name", &clientcmdapi.AuthInfo{Token: credtest.JWT(t, credtest.SAClaims(iat, time.Hour, "member-a-creds-7"))}, "member-a-creds-7"},
		{"unbound: a hash of the token", &clientcmdapi.AuthInfo{Token: unbound}, hash(unbound)},
		{"opaque token: its hash", &clientcmdapi.AuthInfo{Token: "opaque"}, hash("opaque")},
		{"client certificate: its hash", &clientcmdapi.AuthInfo{ClientCertificateData: []byte("cert"), ClientKeyData: []byte("key")}, hash("cert")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cred, err := Parse(credtest.Kubeconfig(t, "https://broker:6443", nil, c.user))
			if err != nil {
				t.Fatal(err)
			}
			got := cred.ID()
			if got != c.want {
				t.Errorf("ID = %q, want %q", got, c.want)
			}
			if c.user.Token != "" && strings.Contains(c.user.Token, got) {
				t.Errorf("ID %q reveals part of the token", got)
			}
		})
	}
}

func TestWithToken(t *testing.T) {
	old := credtest.Kubeconfig(t, "https://broker:6443", []byte("ca"), &clientcmdapi.AuthInfo{Token: "old"})
	out, err := WithToken(old, "new")
	if err != nil {
		t.Fatal(err)
	}
	cred, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if cred.Config.BearerToken != "new" || cred.Config.Host != "https://broker:6443" || string(cred.Config.CAData) != "ca" {
		t.Errorf("WithToken kept server %q, CA %q and wrote token %q; want the server and CA kept, token \"new\"",
			cred.Config.Host, cred.Config.CAData, cred.Config.BearerToken)
	}
	if _, err := WithToken([]byte("current-context: missing\n"), "new"); err == nil || !strings.Contains(err.Error(), "no current context") {
		t.Errorf("WithToken without the current context: error = %v", err)
	}
}
