package install

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
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

// credentialPrefix starts the name of each Secret on the broker that a member's token is bound to: deleting it
// revokes the token (and the tokens the controller renews from it, which stay bound to it).
const credentialPrefix = "credential-"

// MemberServiceAccount is the member's ServiceAccount on the broker: build/deploy/member's "member" with the
// overlay's suffix, the cluster id.
func MemberServiceAccount(id string) string { return "member-" + id }

// mintCredential creates a Secret in the member's broker namespace and a token of the member's ServiceAccount
// bound to it, and returns the member's broker kubeconfig and the Secret's name.
func mintCredential(ctx context.Context, broker client.Client, info BrokerInfo, id string, expiration time.Duration) ([]byte, string, error) {
	anchor := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Namespace: names.BrokerNamespace(id), GenerateName: credentialPrefix,
		Labels: map[string]string{names.LabelManagedBy: "kubectl-mcs"},
	}}
	if err := broker.Create(ctx, anchor); err != nil {
		return nil, "", fmt.Errorf("creating the Secret the token is bound to: %w", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: anchor.Namespace, Name: MemberServiceAccount(id)}}
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
