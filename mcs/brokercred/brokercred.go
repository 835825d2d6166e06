// Package brokercred reads a member's broker credential, for the controller that keeps it current and for
// kubectl mcs that rotates it: it parses a broker kubeconfig (Parse), tells what a new one changes (Compare),
// reads a ServiceAccount token's lifetime and identity from its claims (ParseToken, RenewAt), names the
// credential in use without revealing it (ID), and replaces a kubeconfig's token (WithToken).
//
// Its functions are pure: they read no file and reach no server, so that every decision about a credential is
// table-tested.
package brokercred

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// SecretKey is the key of a member's broker Secret that holds the broker kubeconfig.
const SecretKey = "kubeconfig"

// Credential is one broker kubeconfig, parsed and checked.
type Credential struct {
	// Kubeconfig is the file's content, as read.
	Kubeconfig []byte
	// Config reaches the broker with this credential.
	Config *rest.Config
	// Claims are the token's claims when it is a JWT, else nil (a client certificate, or an opaque token).
	Claims *Claims
}

// Parse reads a broker kubeconfig and checks that it names a server (clientcmd checks that) and carries a
// credential. The error says
// what is missing, for the operator who wrote the file or Secret.
func Parse(kubeconfig []byte) (*Credential, error) {
	if len(bytes.TrimSpace(kubeconfig)) == 0 {
		return nil, errors.New("the broker kubeconfig is empty")
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("the broker kubeconfig does not parse: %w", err)
	}
	hasCert := len(cfg.CertData) > 0 || cfg.CertFile != ""
	if cfg.BearerToken == "" && cfg.BearerTokenFile == "" && !hasCert && cfg.ExecProvider == nil && cfg.AuthProvider == nil {
		return nil, errors.New("the broker kubeconfig's current context has no token, client certificate or credential plugin")
	}
	c := &Credential{Kubeconfig: kubeconfig, Config: cfg}
	if cfg.BearerToken != "" {
		if claims, err := ParseToken(cfg.BearerToken); err == nil {
			c.Claims = &claims
		}
	}
	return c, nil
}

// Change is what a new kubeconfig changes from the one in use.
type Change int

const (
	// Unchanged: the same server with the same credential; nothing to do.
	Unchanged Change = iota
	// Rotated: the same server, with another token, client certificate or CA bundle: the controller switches to
	// it under the running manager.
	Rotated
	// ServerChanged: another server URL. The controller refuses it (see Keeper): another URL may be another
	// broker, with other data, which is a restart's job, not a rotation's.
	ServerChanged
)

func (c Change) String() string {
	switch c {
	case Unchanged:
		return "unchanged"
	case Rotated:
		return "rotated"
	case ServerChanged:
		return "server changed"
	}
	return fmt.Sprintf("Change(%d)", int(c))
}

// Compare tells what next changes from cur. Only what reaches the server counts: a kubeconfig rewritten with
// other context names or in another layout, with the same server and credential, is Unchanged.
func Compare(cur, next *Credential) Change {
	a, b := cur.Config, next.Config
	switch {
	case a.Host != b.Host || a.APIPath != b.APIPath:
		return ServerChanged
	case a.BearerToken != b.BearerToken || a.BearerTokenFile != b.BearerTokenFile,
		a.Username != b.Username || a.Password != b.Password,
		!bytes.Equal(a.CertData, b.CertData) || !bytes.Equal(a.KeyData, b.KeyData),
		a.CertFile != b.CertFile || a.KeyFile != b.KeyFile,
		!bytes.Equal(a.CAData, b.CAData) || a.CAFile != b.CAFile,
		a.Insecure != b.Insecure || a.ServerName != b.ServerName,
		a.Impersonate.UserName != b.Impersonate.UserName,
		(a.ExecProvider == nil) != (b.ExecProvider == nil) || (a.AuthProvider == nil) != (b.AuthProvider == nil):
		return Rotated
	}
	return Unchanged
}

// Claims are what the controller reads from a ServiceAccount token: its lifetime and whose it is. They are read
// without checking the signature: the broker checks it, and the controller only schedules renewals by them.
type Claims struct {
	// IssuedAt and Expiry are the iat and exp claims; zero when absent.
	IssuedAt, Expiry time.Time
	// Namespace and ServiceAccount name the token's ServiceAccount (the kubernetes.io claim); empty for a token
	// that is not a ServiceAccount's.
	Namespace, ServiceAccount string
	// BoundSecret and BoundSecretUID name the Secret the token is bound to, if any: deleting that Secret revokes
	// the token, and a renewed token is bound to it too.
	BoundSecret, BoundSecretUID string
}

// ParseToken reads the claims of a JWT without verifying it.
func ParseToken(token string) (Claims, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return Claims{}, errors.New("the token is not a JWT (header.payload.signature)")
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return Claims{}, fmt.Errorf("the token's payload is not base64url: %w", err)
	}
	var raw struct {
		IssuedAt   *float64 `json:"iat"`
		Expiry     *float64 `json:"exp"`
		Kubernetes *struct {
			Namespace      string `json:"namespace"`
			ServiceAccount *struct {
				Name string `json:"name"`
			} `json:"serviceaccount"`
			Secret *struct {
				Name string `json:"name"`
				UID  string `json:"uid"`
			} `json:"secret"`
		} `json:"kubernetes.io"`
	}
	if err := json.Unmarshal(payload, &raw); err != nil {
		return Claims{}, fmt.Errorf("the token's payload is not a JSON object of claims: %w", err)
	}
	var c Claims
	if raw.IssuedAt != nil {
		c.IssuedAt = time.Unix(int64(*raw.IssuedAt), 0)
	}
	if raw.Expiry != nil {
		c.Expiry = time.Unix(int64(*raw.Expiry), 0)
	}
	if k := raw.Kubernetes; k != nil {
		c.Namespace = k.Namespace
		if k.ServiceAccount != nil {
			c.ServiceAccount = k.ServiceAccount.Name
		}
		if k.Secret != nil {
			c.BoundSecret, c.BoundSecretUID = k.Secret.Name, k.Secret.UID
		}
	}
	return c, nil
}

// Renewable says whether the controller can renew the token itself: a ServiceAccount token that expires.
func (c *Claims) Renewable() bool {
	return c != nil && c.Namespace != "" && c.ServiceAccount != "" && !c.Expiry.IsZero()
}

// Lifetime is how long the token was issued for: the lifetime a renewal asks for.
func (c *Claims) Lifetime() time.Duration {
	if c.IssuedAt.IsZero() || !c.Expiry.After(c.IssuedAt) {
		return 0
	}
	return c.Expiry.Sub(c.IssuedAt)
}

// urgent is the time left under which a token is renewed at once, whatever the schedule says.
const urgent = time.Minute

// RenewAt is when to renew a token issued at issued that expires at expiry: at 80% of its lifetime, or, when
// before is positive (--broker-token-renew-before) and shorter than the lifetime, that long before it expires;
// at once (now) when less than a minute is left or the time is past. Without an issue time the lifetime is
// counted from now. A before as long as the lifetime falls back to 80%: honoured, it would renew each new token
// at once, without end.
func RenewAt(issued, expiry time.Time, before time.Duration, now time.Time) time.Time {
	if issued.IsZero() || issued.After(expiry) {
		issued = now
	}
	life := expiry.Sub(issued)
	at := issued.Add(life * 4 / 5)
	if before > 0 && before < life {
		at = expiry.Add(-before)
	}
	if expiry.Sub(now) < urgent || at.Before(now) {
		return now
	}
	return at
}

// ID names the credential in use, as the broker Lease's mcs.vksfleet.dev/credential annotation shows it to an
// operator who waits for a rotation to take before revoking the old credential: the bound Secret's name when the
// token is bound to one, else the first 12 hex digits of the SHA-256 of the token, or of the client certificate
// without a token. The credential itself never appears.
func (c *Credential) ID() string {
	if c.Claims != nil && c.Claims.BoundSecret != "" {
		return c.Claims.BoundSecret
	}
	secret := []byte(c.Config.BearerToken)
	if len(secret) == 0 {
		secret = c.Config.CertData
	}
	if len(secret) == 0 {
		return ""
	}
	sum := sha256.Sum256(secret)
	return hex.EncodeToString(sum[:])[:12]
}

// WithToken returns kubeconfig with the token of its current context's user replaced, the rest as it was, for
// a renewal to write back where the kubeconfig came from.
func WithToken(kubeconfig []byte, token string) ([]byte, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("the broker kubeconfig does not parse: %w", err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return nil, fmt.Errorf("the broker kubeconfig has no current context %q", cfg.CurrentContext)
	}
	user, ok := cfg.AuthInfos[ctx.AuthInfo]
	if !ok {
		user = clientcmdapi.NewAuthInfo()
		cfg.AuthInfos[ctx.AuthInfo] = user
	}
	user.Token, user.TokenFile = token, ""
	return clientcmd.Write(*cfg)
}
