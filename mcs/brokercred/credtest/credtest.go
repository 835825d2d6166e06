// Package credtest makes broker credentials for tests of the packages that read them: unsigned ServiceAccount
// tokens with the claims a test needs, and kubeconfigs carrying them.
package credtest

import (
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// JWT makes an unsigned token with the claims given: nothing of ours checks a signature.
func JWT(t testing.TB, claims map[string]any) string {
	t.Helper()
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(payload) + ".c2ln"
}

// SAClaims are the claims of a ServiceAccount token of member-a in ns, issued at iat for life, bound to secret
// when it is not empty.
func SAClaims(iat time.Time, life time.Duration, secret string) map[string]any {
	k := map[string]any{"namespace": "ns", "serviceaccount": map[string]any{"name": "member-a", "uid": "sa-uid"}}
	if secret != "" {
		k["secret"] = map[string]any{"name": secret, "uid": "secret-uid"}
	}
	return map[string]any{"iat": iat.Unix(), "exp": iat.Add(life).Unix(), "kubernetes.io": k, "sub": "system:serviceaccount:ns:member-a"}
}

// Kubeconfig writes a kubeconfig for server, trusting ca, with the user given.
func Kubeconfig(t testing.TB, server string, ca []byte, user *clientcmdapi.AuthInfo) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["broker"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["member"] = user
	cfg.Contexts["broker"] = &clientcmdapi.Context{Cluster: "broker", AuthInfo: "member"}
	cfg.CurrentContext = "broker"
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
