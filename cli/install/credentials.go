package install

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/mcs/brokercred"
	"vksfleet.dev/fleet/mcs/names"
)

// Where a member's controller finds its broker credentials, as build/deploy/controller names them.
const (
	controllerNamespace = "mcs-system"
	brokerSecret        = "broker-kubeconfig"
)

// A member's credential on the broker is one ServiceAccount and one Secret of the same name, credentialPrefix and
// a random suffix, in its broker namespace: its tokens are bound to the Secret, and deleting the ServiceAccount
// revokes every token of it, whoever asked for it. The broker's policy (build/deploy/broker/joiner-policy.yaml)
// holds both the joiner and the credential's own renewals to this, and its literals must stay these.
const (
	credentialPrefix = "credential-"
	// maxCredentialLifetime is the longest a credential's token may last.
	maxCredentialLifetime = 7 * 24 * time.Hour
	// minCredentialLifetime is the shortest TokenRequest the API server grants.
	minCredentialLifetime = 10 * time.Minute
)

// MemberServiceAccount is build/deploy/member's static ServiceAccount of the member, with the overlay's suffix,
// the cluster id: the identity of an operator who installs without kubectl mcs. Join and rotate give members
// credentials of their own instead.
func MemberServiceAccount(id string) string { return "member-" + id }

// checkLifetime says why a credential cannot last that long.
func checkLifetime(d time.Duration) error {
	if d < minCredentialLifetime || d > maxCredentialLifetime {
		return fmt.Errorf("a broker token lasts from %v to %v (the broker's policy refuses more), not %v: the controller renews it before it expires",
			minCredentialLifetime, maxCredentialLifetime, d)
	}
	return nil
}

// MintCredential gives the member id a new credential on the broker, as join and rotate do, with the joiner's
// token of info, and returns the member's broker kubeconfig and the credential's name.
func MintCredential(ctx context.Context, info BrokerInfo, id string, expiration time.Duration) ([]byte, string, error) {
	b, err := newClient(info.Config(), "broker")
	if err != nil {
		return nil, "", err
	}
	return mintCredential(ctx, b, info, id, expiration)
}

// mintCredential creates a credential in the member's broker namespace, its Secret first for its generated name,
// and a token of it bound to the Secret, and returns the member's broker kubeconfig and the credential's name.
// The ServiceAccount writes and reads as the member through the bindings to its namespace's group (grants.go).
func mintCredential(ctx context.Context, broker client.Client, info BrokerInfo, id string, expiration time.Duration) ([]byte, string, error) {
	if err := checkLifetime(expiration); err != nil {
		return nil, "", err
	}
	anchor := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: names.BrokerNamespace(id), GenerateName: credentialPrefix,
			Labels: map[string]string{names.LabelManagedBy: fieldOwner},
		},
		Type: corev1.SecretTypeOpaque,
	}
	if err := createCounted(ctx, broker, anchor); err != nil {
		return nil, "", fmt.Errorf("creating the Secret the token is bound to: %w", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: anchor.Namespace, Name: anchor.Name, Labels: anchor.Labels}}
	if err := broker.Create(ctx, sa); err != nil {
		return nil, "", fmt.Errorf("creating the credential's ServiceAccount: %w", err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(expiration / time.Second)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: anchor.Name, UID: anchor.UID},
	}}
	if err := broker.SubResource("token").Create(ctx, sa, req); err != nil {
		return nil, "", fmt.Errorf("requesting a token for %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	kubeconfig, err := MemberKubeconfig(info, req.Status.Token)
	return kubeconfig, anchor.Name, err
}

// createCounted creates o in a member's broker namespace, whose ResourceQuota counts it: in a namespace just made,
// quota admission refuses every such write until the broker's quota controller has computed the usage, which
// takes it moments.
func createCounted(ctx context.Context, c client.Client, o client.Object) error {
	var err error
	for range 50 {
		if err = c.Create(ctx, o); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "status unknown for quota") {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return err
}

// revokeCredential deletes a credential of the member's namespace ns: its ServiceAccount, which revokes all of
// its tokens, and the Secret they are bound to. A credential of an earlier release is the static ServiceAccount,
// bound to a credential-* Secret (join's, rotate's) or to one an administrator made, which the joiner may not
// delete: it revokes nothing more, and is left to them. It returns the Secret it deleted, if any.
func revokeCredential(ctx context.Context, b client.Client, ns, serviceAccount, secret string) (string, error) {
	objs := []client.Object{&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: serviceAccount}}}
	if strings.HasPrefix(secret, credentialPrefix) {
		objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret}})
	} else {
		secret = ""
	}
	for _, o := range objs {
		if err := b.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			return "", fmt.Errorf("deleting %T %s/%s: %w", o, ns, o.GetName(), err)
		}
	}
	return secret, nil
}

// MemberKubeconfig is the kubeconfig a member's controller reaches the broker with.
func MemberKubeconfig(info BrokerInfo, token string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["broker"] = &clientcmdapi.Cluster{Server: info.Server, CertificateAuthorityData: info.CertificateAuthorityData}
	cfg.AuthInfos["member"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["broker"] = &clientcmdapi.Context{Cluster: "broker", AuthInfo: "member"}
	cfg.CurrentContext = "broker"
	return clientcmd.Write(*cfg)
}

// usableCredential says why the member's current broker kubeconfig cannot be kept: another server or CA than
// the broker-info's, a token that expires within minLeft, or one the broker no longer accepts.
func usableCredential(ctx context.Context, kubeconfig []byte, info BrokerInfo, minLeft time.Duration) error {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return err
	}
	if cfg.Host != info.Server || string(cfg.CAData) != string(info.CertificateAuthorityData) {
		return fmt.Errorf("it reaches %s with another CA than the broker-info's", cfg.Host)
	}
	claims, err := brokercred.ParseToken(cfg.BearerToken)
	if err != nil {
		return err
	}
	if claims.Expiry.IsZero() {
		return fmt.Errorf("its token has no expiry")
	}
	if time.Until(claims.Expiry) < minLeft {
		return fmt.Errorf("its token expires at %s", claims.Expiry.UTC().Format(time.RFC3339))
	}
	c, err := newClient(cfg, "broker")
	if err != nil {
		return err
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return fmt.Errorf("the broker does not accept its token: %w", err)
	}
	return nil
}

// readMemberKubeconfig returns the member's broker kubeconfig, or nil when its Secret is absent.
func readMemberKubeconfig(ctx context.Context, member client.Client) ([]byte, error) {
	var s corev1.Secret
	err := member.Get(ctx, client.ObjectKey{Namespace: controllerNamespace, Name: brokerSecret}, &s)
	if client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	return s.Data[brokercred.SecretKey], nil
}

// writeMemberKubeconfig creates or replaces the member's broker Secret, in a namespace the member manifests
// then take over.
func writeMemberKubeconfig(ctx context.Context, member client.Client, kubeconfig []byte) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controllerNamespace}}
	if err := member.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: controllerNamespace, Name: brokerSecret}}
	err := member.Get(ctx, client.ObjectKeyFromObject(s), s)
	if client.IgnoreNotFound(err) != nil {
		return err
	}
	s.Data = map[string][]byte{brokercred.SecretKey: kubeconfig}
	if err != nil {
		return member.Create(ctx, s)
	}
	return member.Update(ctx, s)
}
